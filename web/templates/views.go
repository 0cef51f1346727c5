// Package templates holds Countersign's templ components and the view models they render. The
// same components render the first page and every live fragment pushed over the WebSocket.
package templates

import (
	"fmt"
	"strings"
	"time"

	"github.com/a-h/templ"

	"countersign/internal/tool"
)

// Page is what the layout needs besides the body.
type Page struct {
	Title string
	// Owner is true on the owner's pages (shows the owner navigation).
	Owner bool
	// Inbox is the owner's inbox badge (SPEC §15): the pending count, also in the tab title.
	Inbox BadgeView
	// BadgeURL, on an owner page without a socket of its own, is the small socket that keeps the
	// badge and the title live; "" where the page's socket carries them.
	BadgeURL string
	// Link, on a share link's pages, is that link's own navigation (issue 34): its session page,
	// its inbox with the pending count; nil elsewhere.
	Link *LinkNav
}

// LinkNav is a share link's navigation: the session it opens and its inbox (SPEC §15: an
// approver link's inbox is its own session's), with how many approvals wait there.
type LinkNav struct {
	SessionURL, InboxURL string
	Pending              int
}

// SessionsView is the session list with the New-session form.
type SessionsView struct {
	Sessions []SessionRow
	Models   []string
	// Form holds the values to pre-fill (the server's workspace, or what was submitted).
	Form  NewSessionForm
	Error string
	// Query is the search (?q=): Sessions holds only the sessions whose title contains it.
	Query string
}

// NewSessionForm is the New-session form's values. Instructions pre-fill the "Instructions"
// textbox (SPEC §17): the server's default instructions, or what was submitted.
type NewSessionForm struct {
	Title, Model, Workspace string
	Instructions            string
}

// SessionRow is one session in the list. State is idle, running or waiting (for approval);
// Pending counts its pending approvals.
type SessionRow struct {
	ID, Title, Model, Workspace, State string
	Pending                            int
	CreatedAt                          time.Time
}

// RunStateWord is a session's run state as the header and the list say it.
func RunStateWord(state string) string {
	if state == "waiting" {
		return "waiting for approval"
	}
	return state
}

// SessionView is the session page.
type SessionView struct {
	ID, Title, Model, Workspace string
	// State is the run state: idle, running, or waiting (for approval: the run is parked on a
	// person); Running is true for the last two (Stop is offered).
	State   string
	Running bool
	Items   []MessageView
	// CanSend: the viewer may send messages and stop runs (the owner).
	CanSend bool
	// LiveURL is the WebSocket path of the page's live updates.
	LiveURL string
	// StopURL, SendURL are the owner's form actions.
	SendURL, StopURL string
	// RenameURL, DeleteURL are where the owner's Rename and Delete post; "" hides them.
	RenameURL, DeleteURL string
	// Tools is the Tools panel; nil hides it.
	Tools *ToolsView
	// AuditURL is the audit page's address; "" hides the link.
	AuditURL string
	// Shares is the share-links panel; nil hides it.
	Shares *SharesView
	// Grants is the session grants panel (the owner's); nil hides it.
	Grants *GrantsView
	// Banner tells a reviewer how they see the session ("" for the owner).
	Banner string
	// Mode is the session's mode (SPEC §14); ModeURL is where the owner's Mode combobox posts
	// ("" shows the mode as text: a reviewer).
	Mode, ModeURL string
	// AllowAll are the allow rules for every tool ("*") that reach this session, as text; the
	// page says every call runs without a prompt while there is one.
	AllowAll []string
	// Instructions are the session's instructions (SPEC §17), with their editor while they
	// can change.
	Instructions InstructionsView
	// Usage is the session's token usage in words ("12,345 in · 678 out"); "" when no message
	// reported any.
	Usage string
	// Context is the context gauge (live: id context-gauge).
	Context ContextView
	// Agent is an agent session's provenance (SPEC §18); nil for Countersign's own sessions.
	Agent *AgentView
}

// AgentView is an agent session's provenance as its page shows it: the connection Countersign
// verified, then what the agent says of itself.
type AgentView struct {
	Kind, ConnectionID                       string
	SessionID, Cwd, PermissionMode, PromptID string
	TranscriptPath, Model, State             string
}

// InstructionsView is a session's instructions as its page shows them: folded at the top of
// the transcript, editable by the owner until the first message.
type InstructionsView struct {
	Text string
	// EditURL is where the editor posts; "" shows the instructions read-only (after the first
	// message, or to a reviewer).
	EditURL string
	// Rows is the editor's height in lines; Error the editor's refusal ("" when none); Saved
	// says they were just saved.
	Rows  int
	Error string
	Saved bool
	// Environment is the block Countersign adds to every request's system prompt after the
	// instructions, naming the workspace (agent.Environment); "" for an outside agent's session.
	Environment string
}

// Modes are the session modes in the Mode combobox's order (SPEC §14).
var Modes = []string{"default", "plan", "accept-edits"}

// MessageView is one transcript message: a user message, or an assistant message with its tool
// calls rendered as cards (their results are shown in the cards, not as separate messages).
type MessageView struct {
	// ContextUsed is, on an assistant message whose provider reported usage, how many tokens
	// of the context window the conversation takes after it: its request's input (cache
	// included) plus its output. 0 when none was reported.
	ContextUsed int64
	ID          string
	Role        string // user | assistant
	Text        string
	// HTML is the assistant's text as sanitised Markdown (SPEC §6); "" for user messages.
	HTML      string
	Error     string // an assistant message that ended in error or was stopped
	Streaming bool
	Cards     []CardView
	// Thinking is an assistant message's reasoning text, shown folded apart from the answer
	// (or a note when the provider keeps it encrypted).
	Thinking string
	// Usage is the message's token usage in words ("1,234 in · 56 out"; the page adds
	// "tokens"); "" when its provider reported none.
	Usage string
	// Shortened counts the earlier tool results shortened for the model in this message's
	// request (SPEC §17).
	Shortened int
	// Retry is, while the message streams, the wait before its request is tried again
	// ("retrying (429) in 2 s"); "" when none.
	Retry string
	// Waiting is set while the message streams and nothing of it has come yet: the page says
	// "waiting for the model · 12 s", WaitingMS being how long the model turn has run so far
	// (measured on the server's clock when the view was made; the page ticks it on).
	Waiting   bool
	WaitingMS int64
}

// DOMID is the element id of the message.
func (m MessageView) DOMID() string { return "m-" + m.ID }

// CardView is one tool call's card: the call, its approval, its progress and its result.
type CardView struct {
	DOMID            string
	ToolCallID       string
	ParentToolCallID string
	Name, Title      string
	ArgumentsJSON    string
	// CallView, when set, is the tool's own rendering of its call (a registered renderer);
	// otherwise the card shows the arguments as JSON.
	CallView templ.Component
	// State is one of: streaming (its arguments are still arriving; ArgumentsJSON holds them
	// as far as they came), waiting, approval, running, ok, error, denied, blocked, cancelled,
	// timed_out, violation, interrupted.
	State string
	// Hint says why a call in State waits, when the state word alone does not ("approved;
	// waiting for a replica to take over"); "" otherwise.
	Hint     string
	Approval *ApprovalView
	Update   *tool.Update
	Result   *ResultView
	Nested   []CardView
	// NestedIncomplete is set when the stored nestedCalls record was cut (SPEC §4).
	NestedIncomplete bool
	// Interrupted: a server restart interrupted the call; its nested calls were rebuilt from
	// the audit, without their results.
	Interrupted bool
	// DurationMs is the call's duration once it ended.
	DurationMs int64
	// Truncated is set on a nested call whose record entry was cut (arguments or result text,
	// SPEC §4 bounds).
	Truncated bool
}

// ApprovalView is an approval as its call's card shows it.
type ApprovalView struct {
	// Outcome is the resolved approval in one line ("denied by Ada: not now").
	Outcome    string
	ID         string
	Status     string // pending | approved | denied | timed_out | cancelled
	StatusWord string
	DecidedBy  string
	// Quiet: the annotation default let the call through; the card says nothing of it (the
	// audit lists it).
	Quiet            bool
	Reason           string
	Scope            string
	Automatic        bool
	Edited           bool
	RequestedBy      string
	ParentToolCallID string
	ToolName         string
	ToolTitle        string
	Hints            []tool.Hint
	ArgumentsJSON    string
	// DecideURL is where the decision form posts; "" when the viewer may not decide.
	DecideURL string
	// VotesText is the votes line of an approval that needs several approvers (SPEC §15):
	// "1 of 2 approvals — approved by alice" (gate.Approval.VotesText); "" otherwise.
	VotesText string
	// CanEdit, CanRemember: the decider may edit the arguments (the Edit button), approve for
	// the session and make rules (the "Approve for session" and "Always allow…" buttons).
	CanEdit, CanRemember bool
	// SessionScopeOnly: the decider is a share link, which remembers for its own session only
	// ("Always allow…" offers no workspace scope).
	SessionScopeOnly bool
	// SuggestedRules pre-fill "Always allow…" (CanRemember only): the narrowest rules that
	// together cover the call, as text ("run_command(git diff:*)"); several when one rule cannot
	// cover a command line (`echo hi && ls -1`), one box each.
	SuggestedRules []string
	// SessionGrantRules and SessionGrantWholeTool say what "Approve for session" lets run
	// without a prompt in this session (gate.Service.SessionGrant): the narrowed rules, or every
	// call of the tool; neither: this call only.
	SessionGrantRules     []string
	SessionGrantWholeTool bool
	// AskReason says why the call waits for a person, after "asks because" (stored with the
	// approval: "server files is not trusted").
	AskReason string
	// AgentNote is, on an outside agent's pending call (SPEC §18), "The agent stopped waiting…"
	// once its hook's deadline passed; "" otherwise.
	AgentNote string
	// ViaAPI: the outside agent asked through the approval API (SPEC §18 Door 3), not its hooks.
	// AgentSays is its request's agent_reasoning (a claim of the agent's, shown as such) and
	// ContextJSON its context, as sent; "" when there are none.
	ViaAPI bool
	// ViaMCP: an MCP client asked through the gateway (/mcp, SPEC §18 Door 2), not hooks.
	ViaMCP bool
	// AgentCwd is, for an outside agent's call, the working directory its event reported
	// (gate.OutsideCall.Cwd): where its command runs; "" when none was reported.
	AgentCwd    string
	AgentSays   string
	ContextJSON string
	// Deadline is when a pending approval times out (its createdAt plus the server's approval
	// timeout) or, AgentDeadline, when the outside agent stops waiting for it; zero once it is
	// resolved.
	Deadline time.Time
	// AgentDeadline says Deadline is when the outside agent stops waiting (SPEC §18, its
	// hook's timeout): the card says "the agent stops waiting in 1:25".
	AgentDeadline bool
	// PreviewURL, when set, is where the Edit form posts the edited arguments to see the call
	// as they would run it (its tool's call view: a diff, the exact command); "" for tools
	// shown as plain JSON.
	PreviewURL string
	// FileEdit: Edit shows the arguments {path, content} as a Path field and the content as
	// text, EditRows lines high; the JSON stays one click away.
	FileEdit bool
	EditRows int
	// Where is where the call acts: "workspace /srv/app" (the session's folder); "" when unknown.
	Where string
	// RuleText and RuleNote name the rule that made the call ask and its note ("prod deploys
	// need two people"); "" when no rule asked (the annotations did: AskReason says why).
	RuleText, RuleNote string
	// Reviewers are who must decide, in words: "alice, bob" (the rule's reviewers) or "" for
	// anyone who may decide the session. LinksSent names the approver links the session has
	// ("alice (release A)"), so the decider knows who else was asked.
	Reviewers string
	LinksSent []string
	// MyVote is, on an approval that needs several approvers, the viewer's own vote so far
	// ("You approved this call"): the prompt shows it in place of the buttons. "" before
	// they voted.
	MyVote string
}

// ResultView is a tool result as a card shows it.
type ResultView struct {
	// Custom, when set, is the tool's own rendering of the result (a registered renderer),
	// shown above the generic structuredContent view.
	Custom  templ.Component
	IsError bool
	Text    string
	// Head is the first lines of a long Text ("" when Text is short); Lines its line count.
	Head           string
	Lines          int
	StructuredJSON string
	// DownloadURL downloads the stored result's text whole (the owner's pages); "" for none.
	DownloadURL string
	// Diff: Text is a unified diff (git_diff's result), coloured by line.
	Diff      bool
	Violation *ViolationView
	// Interrupted, when set, is what the page says of a call a server restart interrupted
	// ("The server restarted while run_command was running; it was not re-run …"), shown
	// instead of Text, which is what the model was told.
	Interrupted string
}

// ViolationView is a contract violation (SPEC §1 rule 3): the violations and what the tool
// actually returned.
type ViolationView struct {
	Violations     []tool.Violation
	OriginalText   string
	OriginalJSON   string
	OriginalImages int
}

// ToolRow is one tool in the Tools panel.
type ToolRow struct {
	Name, Title, Description, Exposure, Source string
	Active                                     bool
	Hints                                      []tool.Hint
	// Asks: a call of this tool waits for a person (the policy of SPEC §3, or an untrusted
	// source).
	Asks bool
}

// ToolsView is the Tools panel of a session: tools grouped by source (built-in first, then
// each MCP server with its state).
type ToolsView struct {
	URL     string // where changes post; "" when the viewer may not change them
	Groups  []ToolGroup
	Ignored []string
}

// ToolGroup is one source's tools in the Tools panel.
type ToolGroup struct {
	Name, Kind   string
	State, Error string // "" for built-in; starting, up or down for a server
	Trusted      bool
	Warnings     []string
	Tools        []ToolRow
}

// AuditView is a session's audit page: a row per gated call the filters select, or per group of
// nested calls that rules allowed the same way (issue 19: a grouped row, "×1,000").
type AuditView struct {
	Title, BackURL string
	// URL is the page's own address, where the filter form sends its query.
	URL  string
	Rows []AuditRow
	// Total counts the session's gated calls before filtering, Shown the calls Rows stand for
	// (a grouped row counts each of its calls).
	Total, Shown int
	Filter       AuditFilter
	// The filters' choices: decisions (approval statuses), deciders (automatic, a person), the
	// tools the session's gated calls name, outcomes.
	Decisions, Deciders, Outcomes []Option
	Tools                         []string
	// Error names a filter value that was refused ("" when none).
	Error string
	// Deliveries are the webhook events about the session's approvals (SPEC §15), oldest first.
	Deliveries []DeliveryRow
}

// DeliveryRow is one webhook event for one receiver, as the audit page lists it.
type DeliveryRow struct {
	ID, Event, ToolName, ToolCallID string
	// Receiver is the recipient's name and the receiver's host ("alice · hooks.example.com").
	Receiver string
	// State says where the delivery stands: "delivered", "retrying at 12:00:05 UTC", "gave up
	// after 8 attempts"; StateClass is its CSS word: delivered, retrying or failed.
	State, StateClass string
	Attempts          []AttemptRow
}

// AttemptRow is one attempt at a delivery: when, "HTTP 500" or the error, and how long it took.
type AttemptRow struct {
	At               time.Time
	Result, Duration string
}

// DecisionView is a decision link's page (SPEC §15): the whole prompt of a pending approval for
// its recipient, or, once the link is dead, why.
type DecisionView struct {
	SessionTitle string
	// Recipient is who deciding here is recorded as.
	Recipient string
	// Card is the call with its prompt (Card.Approval, posting to the link); nil when the link
	// can no longer decide.
	Card *CardView
	// Message says why the link cannot decide: "This link was already used: approved by alice at
	// 12:01:02 UTC."
	Message string
}

// AuditFilter is what the audit's filter form selects; "" selects everything. Decision is an
// approval status, By "automatic" or "person", Tool a tool name, Outcome an outcome's query value
// ("ok", "error", "not-run", "violation", …).
type AuditFilter struct {
	Decision, By, Tool, Outcome string
}

// Filtered reports whether any filter is set.
func (f AuditFilter) Filtered() bool { return f != AuditFilter{} }

// Option is one choice of a select: the value sent and the label shown.
type Option struct {
	Value, Label string
}

// AuditRow is one gated call's decision and outcome, or a group's (Count > 1): the nested calls
// of one parent call that rules allowed the same way (issue 19); then ToolCallID, Arguments,
// AskedAt and DecidedAt are the first call's, and the outcome is the calls' together.
type AuditRow struct {
	// AskedAt is when the call was gated; DecidedAt when it was decided (nil while pending).
	AskedAt   time.Time
	DecidedAt *time.Time
	// Count is how many calls the row stands for: more than 1 on a grouped row; LastAt is then
	// when the last of them was decided (else nil).
	Count                             int
	LastAt                            *time.Time
	ToolName, ToolCallID, RequestedBy string
	Status, StatusWord, DecidedBy     string
	Automatic, Edited                 bool
	Scope, Reason                     string
	// AskReason is why the call waited for a person ("server files is not trusted").
	AskReason string
	// DecidedFrom names, in words, what made an automatic decision (SPEC §14 audit): "rule
	// write_file(secrets/**) (api, id r-1)", "plan mode", "annotation default", "tool_call
	// handler"; "" for a person's decision and for records older than rules.
	DecidedFrom string
	// RuleText, RuleID, RuleSource name the rule that made an automatic decision, or that a
	// person's decision saved ("Always allow…"); RuleURL is its row on the Rules page. "" when
	// no rule is involved.
	RuleText, RuleID, RuleSource, RuleURL string
	Arguments, EditedArguments            string
	// Outcome is what became of the call: ok, error, not run, violation, pending, running or
	// unknown; OutcomeDetail the first line of its error text, if any.
	Outcome, OutcomeDetail string
	// LinkID, LinkLabel name the share link a reviewer decided through ("" for the owner and
	// for rules).
	LinkID, LinkLabel string
	// Approvers is how many distinct people the call needed (SPEC §15; 0 for one); Votes are
	// their answers, one line each, in the order they came.
	Approvers int
	Votes     []AuditVote
}

// AuditVote is one person's vote on a call that needed several approvers (SPEC §15).
type AuditVote struct {
	Decision          string // approved | denied
	By, Reason        string
	LinkID, LinkLabel string
	At                time.Time
}

// GrantsView is the owner's list of a session's grants ("Approve for session", SPEC §3), each
// with a Revoke button (live: id grants-panel).
type GrantsView struct {
	Grants []GrantRow
}

// GrantRow is one session grant: the tool, who granted it (and through which link), when, and
// where its Revoke button posts.
type GrantRow struct {
	ToolName, GrantedBy, LinkID, LinkLabel string
	RevokeURL                              string
	// CreatedAt is when it was granted, shown in the viewer's time zone (LocalTime).
	CreatedAt time.Time
}

// SharesView is the owner's share-links panel (SPEC §6, §7).
type SharesView struct {
	CreateURL string
	Links     []ShareRow
	Error     string
	// Form is what the create form shows: what was typed when it was refused (Error), else
	// the defaults.
	Form ShareForm
}

// ShareForm is the share panel's create form's values.
type ShareForm struct {
	Role, Label, ExpiresIn string
	CanEdit, CanRemember   bool
	// For is the person an approver link is made for (SPEC §15), "" for none.
	For string
}

// ShareRow is one share link in the panel.
type ShareRow struct {
	ID, URL, Role, Label      string
	For                       string // the person an approver link was made for; "" for none
	CanEdit, CanRemember      bool
	Expires, LastUsed, Status string // Status: active, expired or revoked
	RevokeURL                 string
}

// NamePage asks a reviewer for the display name recorded with their decisions.
type NamePage struct {
	Action, Title, Role, Error string
}

// RulesView is the Rules page (SPEC §14): every rule, the policy file's first, and the form that
// adds one.
type RulesView struct {
	Rows []RuleRow
	// CompileError names the rules the compiler refused (they are skipped); "" when none.
	CompileError string
	// Scopes are the add form's scope choices: every session, each known workspace folder, each
	// session by title.
	Scopes []Option
	Form   RuleForm
	// Error is the add form's refusal (the parser's or compiler's message); "" when none.
	Error string
}

// RuleForm is what the add-rule form holds: the rule's text, effect, scope choice and note.
type RuleForm struct {
	Text, Effect, Scope, Note string
	// Approvers (a number, "" for one person) and Reviewers (names, comma-separated) as typed
	// (SPEC §15; ask rules only).
	Approvers, Reviewers string
	// When is the rule's CEL condition as typed ("" for none).
	When string
	// Confirm, when set, asks before saving an allow of every call of a tool or of every tool
	// (issue 34), naming what it would release.
	Confirm *RuleConfirm
}

// RuleConfirm is what saving a whole-tool allow would release now: Pending calls waiting in the
// sessions SessionIDs (Titles names them).
type RuleConfirm struct {
	// Key is what "Save anyway" confirms (the rule's text and scope): the form's confirm field.
	Key         string
	Rule, Scope string
	Pending     int
	SessionIDs  []string
	Titles      map[string]string
}

// ConfirmText is the confirmation's sentence: "run_command (workspace) allows every call of
// the tool without a prompt. Saving it lets 2 pending calls run now, in “a”, “b”."
func (c RuleConfirm) ConfirmText() string {
	what := "every call of " + c.Rule
	if c.Rule == "*" {
		what = "every call of every tool"
	}
	s := fmt.Sprintf("%s (%s) allows %s without a prompt. ", c.Rule, c.Scope, what)
	if c.Pending == 0 {
		return s + "No pending call waits for it now."
	}
	var names []string
	for _, id := range c.SessionIDs {
		t := c.Titles[id]
		if t == "" {
			t = id
		}
		names = append(names, "“"+t+"”")
	}
	calls := "calls"
	if c.Pending == 1 {
		calls = "call"
	}
	return s + fmt.Sprintf("Saving it lets up to %d pending %s run now, in %s.", c.Pending, calls, strings.Join(names, ", "))
}

// RuleRow is one rule on the Rules page. Text is gate.Rule.Text ("run_command(git diff:*)", with
// " when …" when it has a condition). Scope is session, workspace or server; ScopeDetail the
// session's title (ScopeURL its page) or the workspace folder. CreatedBy is the owner, a
// reviewer (LinkID, LinkLabel: the link they made it through) or the policy file. ReadOnly rows
// (the policy file's) have no DeleteURL.
type RuleRow struct {
	ID, Text, Effect, Note           string
	Scope, ScopeDetail, ScopeURL     string
	Source, CreatedBy                string
	LinkID, LinkLabel                string
	Hits                             int64
	CreatedAt, LastUsedAt, ExpiresAt *time.Time
	ReadOnly                         bool
	DeleteURL                        string
	// AllowsEverything: an allow rule for every tool with no specifier or condition — every
	// call it reaches runs without a prompt (SPEC §14 "the page says so").
	AllowsEverything bool
}

// rememberBoxes are the "Rule" boxes of "Always allow…": one per suggested rule, at least one.
func rememberBoxes(suggested []string) []string {
	if len(suggested) == 0 {
		return []string{""}
	}
	return suggested
}

// hintsSummary is the folded annotations line of a prompt: the hints that are on, and how many
// of the four were defaulted ("Annotations: destructiveHint, openWorldHint · 3 defaulted").
func hintsSummary(hints []tool.Hint) string {
	var on []string
	defaulted := 0
	for _, h := range hints {
		if h.Value {
			on = append(on, h.Name)
		}
		if h.Defaulted {
			defaulted++
		}
	}
	s := "Annotations: "
	if len(on) == 0 {
		s += "none set"
	} else {
		s += strings.Join(on, ", ")
	}
	if defaulted > 0 {
		s += fmt.Sprintf(" · %d defaulted", defaulted)
	}
	return s
}

// OutputView is a tool's output as a card shows it, folded when long (issue 34): the first
// FoldLines lines, "show all N lines", and a link to download the stored output. One component
// (Output) draws every tool's output: a generic result's text, run_command's stdout and stderr.
type OutputView struct {
	// Label is the output's accessible name ("stdout"); "" for none. Class is an extra class.
	Label, Class string
	Text         string
	// Head is the start of a long Text ("" when Text is short); Lines is Text's line count.
	Head  string
	Lines int
	// DownloadURL, when set, downloads the stored output whole.
	DownloadURL string
	// Diff: Text is a unified diff (git_diff's), its added and removed lines coloured as a
	// write_file diff's are.
	Diff bool
}

// DiffLine is one line of a unified diff as Output colours it: Class is diff-add, diff-del,
// diff-hunk, diff-file or "".
type DiffLine struct{ Class, Text string }

// diffLines splits a unified diff's text into lines with their colour classes.
func diffLines(text string) []DiffLine {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	out := make([]DiffLine, len(lines))
	for i, l := range lines {
		c := ""
		switch {
		case strings.HasPrefix(l, "+++ "), strings.HasPrefix(l, "--- "), strings.HasPrefix(l, "diff --git "):
			c = "diff-file"
		case strings.HasPrefix(l, "@@"):
			c = "diff-hunk"
		case strings.HasPrefix(l, "+"):
			c = "diff-add"
		case strings.HasPrefix(l, "-"):
			c = "diff-del"
		}
		out[i] = DiffLine{Class: c, Text: l}
	}
	return out
}

// Fold is text as an OutputView: folded when it is longer than FoldLines lines or FoldBytes.
func Fold(label, class, text, downloadURL string) OutputView {
	o := OutputView{Label: label, Class: class, Text: text, DownloadURL: downloadURL}
	o.Head, o.Lines = FoldHead(text)
	return o
}

// FoldLines and FoldBytes are how much of a long output a card shows before "show all".
const (
	FoldLines = 20
	FoldBytes = 4 << 10
)

// FoldHead returns the first FoldLines lines of text (at most FoldBytes, cut at a character)
// when text is longer, "" otherwise, and text's line count.
func FoldHead(text string) (string, int) {
	lines := strings.Count(text, "\n") + 1
	if strings.HasSuffix(text, "\n") {
		lines--
	}
	if lines <= FoldLines && len(text) <= FoldBytes {
		return "", lines
	}
	i, seen := 0, 0
	for seen < FoldLines {
		j := strings.IndexByte(text[i:], '\n')
		if j < 0 {
			i = len(text)
			break
		}
		i += j + 1
		seen++
	}
	h := text[:i]
	if len(h) > FoldBytes {
		h = tool.CutUTF8(h, FoldBytes)
	}
	return strings.TrimSuffix(h, "\n"), lines
}

// ContextView is the context gauge (issue 34): how full the model's context window is, from the
// last usage the provider reported. Used and Window are tokens; Window 0 when unknown (the
// gauge then says the tokens used only); Used 0 when nothing was reported yet.
type ContextView struct {
	Used, Window int64
}

// Text is the gauge in words: "1,540 of 32,768 tokens (5%)", "1,540 tokens (window unknown)",
// or "none reported yet".
func (c ContextView) Text() string {
	switch {
	case c.Used <= 0:
		return "none reported yet"
	case c.Window <= 0:
		return Thousands(int(c.Used)) + " tokens (window unknown)"
	}
	return fmt.Sprintf("%s of %s tokens (%d%%)", Thousands(int(c.Used)), Thousands(int(c.Window)), c.Used*100/c.Window)
}
