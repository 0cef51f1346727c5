package templates

import "time"

// AgentsView is the Agents page (SPEC §18, /agents): the Connect form, the connection just made
// (its token and snippet, this once) and every connection.
type AgentsView struct {
	Form AgentForm
	// Error is the Connect form's refusal; "" when none.
	Error string
	// Kinds are the form's kind choices.
	Kinds []Option
	// New is the connection this answer made, with its token; nil on every other answer (a
	// reload shows no token).
	New  *NewConnection
	Rows []ConnectionRow
	// BaseURL is the address the snippets point agents at.
	BaseURL string
}

// AgentForm is what the Connect form holds.
type AgentForm struct {
	Label, Kind string
}

// NewConnection is a connection just made: its token (shown this once) and the snippet to paste
// (connections.Snippet's fields).
type NewConnection struct {
	ID, Label, KindTitle string
	// Token is the connection's token; Last4 its last four characters.
	Token, Last4 string
	// Where the snippet goes, its format ("json", "toml", "text"), the snippet (which names the
	// token's variable, never the token), the export line (which holds the token), what the
	// agent does when Countersign is unreachable, whether the snippet was run against the real
	// agent here, and further notes.
	Where, Format, Text, Export, Unreachable string
	Verified                                 bool
	Notes                                    []string
}

// ConnectionRow is one connection as the list shows it.
type ConnectionRow struct {
	ID, Label, Kind, KindTitle string
	CreatedAt                  time.Time
	LastUsedAt, RevokedAt      *time.Time
	// LastUsed is LastUsedAt for people ("5 min ago"); "" for never.
	LastUsed string
	// RevokeURL is the row's Revoke form's action; "" once revoked.
	RevokeURL string
	// Just: the connection this answer made.
	Just bool
}
