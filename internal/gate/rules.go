package gate

import (
	"encoding/json"
	"time"

	"countersign/internal/tool"
)

// Rules and modes (SPEC §14): the shared vocabulary of the rules engine (which compiles rules and
// matches calls against them) and of the call pipeline (which asks the engine once per call,
// after the tool_call handlers and before the session's mode and the annotation default).

// Effect is what a rule does to a call it matches.
type Effect string

// The effects, from the most restrictive: when several rules match, deny beats ask beats allow,
// whatever their scopes.
const (
	Deny  Effect = "deny"
	Ask   Effect = "ask"
	Allow Effect = "allow"
)

// RuleScope is how far a rule reaches.
type RuleScope string

// The scopes.
const (
	ScopeSession   RuleScope = "session"   // one session (RuleCall.SessionID)
	ScopeWorkspace RuleScope = "workspace" // every session on one workspace folder
	ScopeServer    RuleScope = "server"    // every session of the server
)

// RuleSource is where a rule came from.
type RuleSource string

// The sources.
const (
	SourcePrompt     RuleSource = "prompt"      // "Always allow…" or "Approve for session" on a prompt
	SourceAPI        RuleSource = "api"         // POST /api/rules
	SourcePolicyFile RuleSource = "policy-file" // the -policy file: read-only, kept in memory
)

// Mode is a session's mode (SPEC §14).
type Mode string

// The modes. There is no mode that skips every prompt.
const (
	ModeDefault     Mode = "default"      // rules, then the annotation default
	ModePlan        Mode = "plan"         // read-only: a call not marked readOnlyHint is denied
	ModeAcceptEdits Mode = "accept-edits" // file tools writing inside the workspace are allowed
)

// Rule is a rule as stored and listed: its text form is Tool with Specifier in parentheses
// ("run_command(git diff:*)", "write_file(docs/**)", "github__create_issue(repo=acme/*)",
// "read_file", "files__*"), plus an optional CEL condition When over args, tool, annotations,
// parent and session.
type Rule struct {
	ID        string     `json:"id"`
	Effect    Effect     `json:"effect"`
	Tool      string     `json:"tool"`                // a tool name or a glob of names ("files__*", "*")
	Specifier string     `json:"specifier,omitempty"` // what stands in the parentheses, "" for none
	When      string     `json:"when,omitempty"`      // a CEL expression, "" for none
	Scope     RuleScope  `json:"scope"`
	SessionID string     `json:"sessionId,omitempty"` // ScopeSession: the session
	Workspace string     `json:"workspace,omitempty"` // ScopeWorkspace: the workspace folder
	Source    RuleSource `json:"source"`
	CreatedBy string     `json:"createdBy"` // the owner, a reviewer's name, or the policy file
	// CreatedVia is the share link a reviewer made it through (canRemember); nil otherwise.
	CreatedVia *LinkRef   `json:"createdVia,omitempty"`
	CreatedAt  time.Time  `json:"createdAt"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	Note       string     `json:"note,omitempty"`
	Hits       int64      `json:"hits"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
	// FromApproval is, for a rule made from a prompt, the approval whose decision made it
	// ("Approve for session", "Always allow…"); "" otherwise.
	FromApproval string `json:"fromApproval,omitempty"`
	// Approvers (ask rules only; ≥ MinApprovers) is how many distinct people must approve a
	// call the rule asks about; 0 for one person. Reviewers (ask rules only) are the only
	// names that may decide it ("owner" for the owner); empty for anyone (SPEC §15).
	Approvers int      `json:"approvers,omitempty"`
	Reviewers []string `json:"reviewers,omitempty"`
	// Pos is where a policy file's rule stands ("file:line:col"), for its errors; "" otherwise.
	Pos string `json:"-"`
}

// ReadOnly reports whether r cannot be deleted from the Rules page or the API (the policy
// file's rules).
func (r Rule) ReadOnly() bool { return r.Source == SourcePolicyFile }

// RuleCall is what rules see of a call (SPEC §14 `when` variables): the tool's name, its
// validated arguments, its effective annotations, the parent tool's name for a nested call ("" for
// a model-issued one), and the session.
type RuleCall struct {
	Tool        string
	Arguments   json.RawMessage
	Annotations tool.Annotations
	Parent      string
	SessionID   string
	Workspace   string
	Mode        Mode
	// Outside says the call is an outside agent's (SPEC §18): its file tools name their path
	// `file_path` (Claude Code's Edit, Write, Read), judged lexically against Workspace (the
	// agent's cwd, which may not exist here), and Bash's `command` is judged by the text
	// judge of run_command.
	Outside bool
	// Cwd is, for an outside call, the agent's working directory as its event reports it: a
	// relative `file_path` is opened from there, which may not be Workspace (the agent changed
	// directory), so it is judged as joined to Cwd. "" when the event reports none (relative
	// paths are then Workspace's).
	Cwd string
	// CwdUnknown says the cwd an outside agent reported when it asked is not known here (a hook
	// agent's pending call judged again, Service.Release, whose outside call is not found): a
	// relative path then matches no allow rule.
	CwdUnknown bool
	// Agent and Connection are, for an agent session's call, the agent's kind ("claude-code")
	// and the connection's id; "" otherwise. A rule is limited to them by its `when`
	// (session.agent, session.connection).
	Agent, Connection string
}

// RuleDecision is what the rules decided for a call: the zero value when no rule matched (the
// mode and the annotation default decide then). Rule is the rule that decided (for a command
// allowed by several allow rules, the first); Reason says why in words, e.g. "rule
// run_command(rm:*) denies rm -rf /" or "the `when` of rule X exceeded its cost limit, so the
// call asks".
type RuleDecision struct {
	Effect Effect
	// Rule is the deciding rule; it may point at the evaluator's own copy, so it is read only.
	Rule *Rule
	// Also are, for an allow, the other rules that allowed the call with Rule (a command line
	// whose simple commands are covered by different rules: `git status && git log`), in rule
	// order; each gets a hit too. Read only, as Rule.
	Also   []*Rule
	Reason string
	// Note, when no rule decided (Effect ""), says why the rules did not allow the call although
	// they looked at it, for the prompt instead of the annotation default's reason: the part of
	// a command line no allow rule covers ("`touch x` is not covered by run_command(git diff:*)"),
	// or a command no rule can allow ("the command holds U+000D … which shells read
	// differently"). "" when there is nothing to say.
	Note string
}

// RuleEvaluator decides calls by rules. Implementations are safe for concurrent use; Evaluate
// never fails: a rule it cannot evaluate makes the call ask (fail closed), with the reason.
type RuleEvaluator interface {
	Evaluate(c RuleCall) RuleDecision
}

// RuleCompiler compiles rules (the policy file's and the stored ones) into one evaluator, once,
// when they are loaded or change; package internal/rules provides the real one (rules.Compile).
// An error names the first rule that does not compile ("rule <text>: <reason>"); a stored rule
// that no longer compiles must not stop the others from applying, so implementations skip it
// and report it in the error while still returning a usable evaluator.
type RuleCompiler func(rules []Rule) (RuleEvaluator, error)

// RuleSuggester proposes the narrowest rules that together cover a call, for "Always allow…"
// (SPEC §14: run_command(<program and subcommand>:*) per simple command, the exact command for
// interpreters and shells, write_file(<folder>/**), or the tool with its exact arguments as
// key=value): one rule, or several for a command line whose simple commands one rule cannot
// cover (`echo hi && ls -1`). Effect is Allow; Scope, Source and CreatedBy are left for the
// caller.
type RuleSuggester func(c RuleCall) []Rule
