// Package connections is Countersign's connections (SPEC §18): an agent people already run —
// Claude Code, Codex, Gemini CLI, Cursor, Copilot CLI, an MCP client, an agent of their own on the
// approval API — connected by the owner on the Agents page. A connection has a label, a kind and a
// bearer token: at least 128 random bits, shown once when it is made and stored only as a hash
// (Hash), so a copy of the database authenticates nobody. Authenticate looks a token up by its
// hash alone; the token is never compared, logged or shown again.
//
// The package owns the idea; the store (internal/store) keeps connections behind Store and the
// web package serves /agents and /api/connections.
package connections

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"countersign/internal/apperr"
	"countersign/internal/hooks"
)

// Kind is what a connection connects: an agent whose hooks post to /hooks/{kind} (the hook kinds,
// spelled as internal/hooks spells them), an MCP client of /mcp, or an agent on the approval API
// under /aap.
type Kind string

// The kinds (SPEC §18). The hook kinds are internal/hooks' kinds: one source of their strings.
const (
	ClaudeCode      = Kind(hooks.ClaudeCode) // "claude-code": Claude Code's HTTP hooks
	Codex           = Kind(hooks.Codex)      // "codex": Codex's command hooks, through countersign-hook
	Gemini          = Kind(hooks.Gemini)     // "gemini": Gemini CLI's command hooks
	Cursor          = Kind(hooks.Cursor)     // "cursor": Cursor's command hooks
	Copilot         = Kind(hooks.Copilot)    // "copilot": Copilot CLI's command hooks
	MCP        Kind = "mcp"                  // an MCP client of Countersign's gateway, /mcp
	API        Kind = "api"                  // an agent on the approval API (AAP), /aap
)

// Kinds lists every kind, in the order the Agents page offers them.
func Kinds() []Kind { return []Kind{ClaudeCode, Codex, Gemini, Cursor, Copilot, MCP, API} }

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool {
	for _, v := range Kinds() {
		if k == v {
			return true
		}
	}
	return false
}

// Hook is k's hook dialect (internal/hooks) and true for a hook kind; false for mcp and api.
func (k Kind) Hook() (hooks.Kind, bool) {
	switch k {
	case ClaudeCode, Codex, Gemini, Cursor, Copilot:
		return hooks.Kind(k), true
	}
	return "", false
}

// Title is k's name for people: "Claude Code", "Codex", "Gemini CLI", "Cursor", "Copilot CLI",
// "MCP client", "Approval API".
func (k Kind) Title() string {
	switch k {
	case ClaudeCode:
		return "Claude Code"
	case Codex:
		return "Codex"
	case Gemini:
		return "Gemini CLI"
	case Cursor:
		return "Cursor"
	case Copilot:
		return "Copilot CLI"
	case MCP:
		return "MCP client"
	case API:
		return "Approval API"
	}
	return string(k)
}

// Connection is a connection as stored: no token, only its hash (TokenHash, never serialised).
// LastUsedAt is the last time its token authenticated a request (to the minute: Authenticate
// writes it at most once a minute); RevokedAt, once set, stays the first revocation's time.
type Connection struct {
	ID         string     `json:"id"`
	Label      string     `json:"label"`
	Kind       Kind       `json:"kind"`
	TokenHash  string     `json:"-"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
	RevokedAt  *time.Time `json:"revokedAt,omitempty"`
}

// Revoked reports whether the connection was revoked.
func (c Connection) Revoked() bool { return c.RevokedAt != nil }

// MaxLabel is the longest label, in characters (runes).
const MaxLabel = 200

// CheckLabel returns label trimmed of surrounding white space, or apperr.Invalid for a label that
// is empty, longer than MaxLabel characters, not UTF-8 or holds control characters.
func CheckLabel(label string) (string, error) {
	label = strings.TrimSpace(label)
	switch {
	case label == "":
		return "", apperr.Errorf(apperr.Invalid, "Give the connection a label (for example \"alice's laptop\").")
	case !utf8.ValidString(label):
		return "", apperr.Errorf(apperr.Invalid, "The label is not valid UTF-8.")
	case utf8.RuneCountInString(label) > MaxLabel:
		return "", apperr.Errorf(apperr.Invalid, "The label is too long (at most %d characters).", MaxLabel)
	case strings.IndexFunc(label, unicode.IsControl) >= 0:
		return "", apperr.Errorf(apperr.Invalid, "The label holds a control character.")
	}
	return label, nil
}

// CheckKind returns kind as a Kind, or apperr.Invalid naming the kinds for an unknown one.
func CheckKind(kind string) (Kind, error) {
	if k := Kind(kind); k.Valid() {
		return k, nil
	}
	names := make([]string, 0, len(Kinds()))
	for _, k := range Kinds() {
		names = append(names, string(k))
	}
	return "", apperr.Errorf(apperr.Invalid, "Unknown kind %q: use one of %s.", kind, strings.Join(names, ", "))
}

// TokenPrefix starts every connection token, so that secret scanners (and people) recognise one.
const TokenPrefix = "cs_agent_"

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewToken returns a new connection token: TokenPrefix and 160 random bits from crypto/rand in
// lower-case base32 (a–z, 2–7: nothing a URL, a header or a shell quotes), 41 characters.
func NewToken() string {
	b := make([]byte, 20)
	rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return TokenPrefix + strings.ToLower(b32.EncodeToString(b))
}

// Hash is what the store keeps of a token: hex SHA-256, as share.Hash.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// Last4 is the end of a token that may be shown after it was created: its last four characters.
func Last4(token string) string {
	if len(token) < 4 {
		return ""
	}
	return token[len(token)-4:]
}

// maxToken bounds what Authenticate hashes: a longer bearer value is no token of ours.
const maxToken = 128

// Store keeps connections (internal/store implements it). Connection, ConnectionByTokenHash and
// RevokeConnection answer apperr.NotFound for an unknown connection.
type Store interface {
	CreateConnection(ctx context.Context, c Connection) error
	Connection(ctx context.Context, id string) (Connection, error)
	ConnectionByTokenHash(ctx context.Context, hash string) (Connection, error)
	Connections(ctx context.Context) ([]Connection, error)
	RevokeConnection(ctx context.Context, id string, at time.Time) (Connection, error)
	TouchConnection(ctx context.Context, id string, at time.Time) error
}

// Service creates, lists, revokes and authenticates connections.
type Service struct {
	store Store
	now   func() time.Time

	mu      sync.Mutex
	touched map[string]time.Time // connection id → last use written, to write it at most once a minute
	// known caches Authenticate's lookups by token hash (issue 35: a hook's token is looked up
	// on every agent call): a connection read at most CacheTTL ago. Revoke and Forget drop
	// entries at once; the TTL bounds how long another replica's revocation can go unheard
	// when its message (Forget) is lost.
	known map[string]cached
	gen   uint64 // counts Forget calls: a lookup caches what it read only if none came between
	// revoked, when set (OnRevoke), is told each connection Revoke revoked.
	revoked func(id string)
}

// OnRevoke has f told the id of each connection Revoke revokes, after the store has it (the web
// layer tells the other replicas to Forget it). Set it before the service is used.
func (s *Service) OnRevoke(f func(id string)) { s.revoked = f }

// cached is a connection as Authenticate read it, and when.
type cached struct {
	c  Connection
	at time.Time
}

// CacheTTL is how long Authenticate trusts a connection it read by its token hash before reading
// it again (a revocation made on another replica whose message did not arrive takes effect
// within it; one made here, or heard through Forget, at once).
const CacheTTL = 2 * time.Second

// maxKnown bounds the cache of Authenticate: past it, the cache is emptied (a flood of distinct
// live tokens is not a case to serve from memory).
const maxKnown = 4096

// NewService returns a service over store.
func NewService(store Store) *Service {
	return &Service{store: store, now: time.Now, touched: map[string]time.Time{}, known: map[string]cached{}}
}

// Forget drops what Authenticate cached of connection id ("" for every connection): another
// replica revoked it (SPEC §16: the web layer hears it through its peers).
func (s *Service) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	for h, k := range s.known {
		if id == "" || k.c.ID == id {
			delete(s.known, h)
		}
	}
}

// SetClock replaces the service's clock (tests).
func (s *Service) SetClock(now func() time.Time) { s.now = now }

// Create makes a connection labelled label of kind, and returns it with its token: the only time
// the token exists outside the agent's machine. Errors: apperr.Invalid for a bad label or kind.
func (s *Service) Create(ctx context.Context, label string, kind Kind) (c Connection, token string, err error) {
	defer apperr.Wrap(&err, "connections.Create")
	if label, err = CheckLabel(label); err != nil {
		return Connection{}, "", err
	}
	if kind, err = CheckKind(string(kind)); err != nil {
		return Connection{}, "", err
	}
	token = NewToken()
	c = Connection{ID: strings.ToLower(rand.Text()[:16]), Label: label, Kind: kind, TokenHash: Hash(token),
		CreatedAt: s.now().UTC()}
	if err := s.store.CreateConnection(ctx, c); err != nil {
		return Connection{}, "", err
	}
	return c, token, nil
}

// List lists the connections, newest first, revoked ones included.
func (s *Service) List(ctx context.Context) ([]Connection, error) {
	return s.store.Connections(ctx)
}

// Get returns connection id, or apperr.NotFound.
func (s *Service) Get(ctx context.Context, id string) (Connection, error) {
	return s.store.Connection(ctx, id)
}

// Revoke revokes connection id (its next request is 401) and returns it; revoking twice keeps
// the first time. apperr.NotFound for an unknown id.
func (s *Service) Revoke(ctx context.Context, id string) (Connection, error) {
	// Forgotten before and after the write: a lookup racing the revocation cannot keep the
	// connection it read before it.
	s.Forget(id)
	c, err := s.store.RevokeConnection(ctx, id, s.now().UTC())
	s.Forget(id)
	if err == nil {
		s.mu.Lock()
		delete(s.touched, id)
		s.mu.Unlock()
		if s.revoked != nil {
			s.revoked(id)
		}
	}
	return c, err
}

// Authenticate returns the live connection whose token is token, for a request through the door
// of kind (a hook kind, mcp or api). Errors are apperr.Unauthorized with a message that says why
// and is safe to log and to answer (it never holds the token): no token, not a connection token,
// unknown token, connection revoked, connection of another kind. The token is looked up by its
// hash only, never compared. A use is recorded (LastUsedAt) at most once a minute per connection,
// to spare the write path; a failure to record it does not fail the request.
func (s *Service) Authenticate(ctx context.Context, token string, kind Kind) (Connection, error) {
	switch {
	case token == "":
		return Connection{}, apperr.Errorf(apperr.Unauthorized, "No connection token: send Authorization: Bearer <token> (COUNTERSIGN_AGENT_TOKEN).")
	case len(token) > maxToken || !strings.HasPrefix(token, TokenPrefix):
		return Connection{}, apperr.Errorf(apperr.Unauthorized, "Not a connection token (they start with %s).", TokenPrefix)
	}
	c, err := s.lookup(ctx, Hash(token))
	if apperr.CodeOf(err) == apperr.NotFound {
		return Connection{}, apperr.Errorf(apperr.Unauthorized, "Unknown connection token.")
	}
	if err != nil {
		return Connection{}, err
	}
	if c.RevokedAt != nil {
		return Connection{}, apperr.Errorf(apperr.Unauthorized, "Connection %s (%s) was revoked.", c.ID, c.Label)
	}
	if c.Kind != kind {
		return Connection{}, apperr.Errorf(apperr.Unauthorized, "Connection %s is for %s, not %s.", c.ID, c.Kind, kind)
	}
	now := s.now().UTC()
	s.mu.Lock()
	last, ok := s.touched[c.ID]
	if !ok && c.LastUsedAt != nil {
		last, ok = *c.LastUsedAt, true
	}
	due := !ok || now.Sub(last) >= time.Minute
	if due {
		s.touched[c.ID] = now
	}
	s.mu.Unlock()
	if due {
		if err := s.store.TouchConnection(ctx, c.ID, now); err == nil {
			c.LastUsedAt = &now
		}
	}
	return c, nil
}

// lookup is the connection whose token hash is hash: from the cache when read less than CacheTTL
// ago, else from the store (and cached when live; an unknown or revoked token is read every
// time). A revocation during the read is not cached over: Revoke forgets after its write, and an
// entry read before it is dropped then.
func (s *Service) lookup(ctx context.Context, hash string) (Connection, error) {
	now := s.now()
	s.mu.Lock()
	k, ok := s.known[hash]
	gen := s.gen
	s.mu.Unlock()
	if ok && now.Sub(k.at) < CacheTTL && now.Sub(k.at) >= 0 {
		return k.c, nil
	}
	c, err := s.store.ConnectionByTokenHash(ctx, hash)
	if err != nil || c.RevokedAt != nil {
		return c, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return c, nil // a revocation came during the read: not cached
	}
	if len(s.known) >= maxKnown {
		clear(s.known)
	}
	s.known[hash] = cached{c: c, at: now}
	return c, nil
}
