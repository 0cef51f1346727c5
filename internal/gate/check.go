package gate

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"countersign/internal/tool"
)

// The gating order of SPEC §3 step 4 and §14, in one place: tool_call handlers, then rules (deny,
// ask, allow), then the session's mode, then the annotation default. "Why did this call not ask?"
// is answered here, for model-issued and nested calls alike; the pipeline (internal/agent) looks
// the tool up and validates the arguments first (steps 1–2), then calls Checker.Check once.

// Outcome is what the gate decided for a call.
type Outcome string

// The outcomes.
const (
	Allowed Outcome = "allowed" // the call runs without a prompt
	Blocked Outcome = "blocked" // the call does not run; the model gets Decision.Reason
	Asked   Outcome = "ask"     // a person must decide: the pipeline opens an approval
)

// DecisionSource says what decided a call (SPEC §14 "The audit names … the rule, the mode or the
// annotation default"). Code compares these typed values, never DecidedBy's words.
type DecisionSource string

// The sources of a decision. The JSON values are stable: the audit and the JSON API's approvals
// carry them as "decisionSource".
const (
	FromHandler     DecisionSource = "handler"            // a tool_call handler blocked the call
	FromRule        DecisionSource = "rule"               // a rule (Decision.Rule) decided
	FromMode        DecisionSource = "mode"               // the session's mode decided
	FromAnnotations DecisionSource = "annotation default" // SPEC §3's default from the annotations
	FromPerson      DecisionSource = "person"             // a person decided a prompt
	// FromAction: the call is an action inside a running call that no rule may cover
	// (CheckCall.Uncovered: a write outside the workspace, a program started outside it); it
	// asks, and no later rule or mode releases it.
	FromAction DecisionSource = "action"
)

// Words is the source as the audit shows it: "tool_call handler", "rule", "mode", "annotation
// default", "person".
func (s DecisionSource) Words() string {
	if s == FromHandler {
		return "tool_call handler"
	}
	return string(s)
}

// ByRule and ByMode are DecidedBy's words when a rule or the session's mode decided a call
// automatically (see Decision.Record; ByGrant stays for "Approve for session" rules).
const (
	ByRule = "rule"
	ByMode = "mode"
)

// PlanReason is the reason a call gets when plan mode denies it (SPEC §14).
const PlanReason = "Plan mode: read-only"

// CheckCall is what the gate sees of a call that passed lookup and validation (SPEC §3 steps 1–2).
type CheckCall struct {
	SessionID        string
	ToolCallID       string
	ParentToolCallID string
	Parent           string // the parent tool's name for a nested call, "" for a model-issued one
	Tool             *tool.Tool
	Arguments        json.RawMessage
	Workspace        string
	Mode             Mode // "" counts as ModeDefault
	// Uncovered, when not "", says why no allow rule, grant, mode or annotation default may
	// allow this call: it is an action found inside a running call that reaches beyond what any
	// rule can cover (a program started outside the workspace, a file written outside it or into
	// the repository's own files; SPEC §14 "Checked where it happens"). Handlers, deny and ask
	// rules still apply; then the call asks with this reason.
	Uncovered string
	// Outside says the call is an outside agent's (SPEC §18; Service.DecideOutside): the rules
	// read its tool's arguments as that agent writes them (RuleCall.Outside).
	Outside bool
	// Cwd is, for an outside call, the agent's working directory as the event that asked
	// reports it ("" when it does not): RuleCall.Cwd. CwdUnknown says the call's cwd is not
	// known here (RuleCall.CwdUnknown).
	Cwd        string
	CwdUnknown bool
	// Agent and Connection are an agent session's agent kind and connection id (RuleCall's).
	Agent, Connection string
}

// Decision is what Checker.Check decided, with what the audit needs to name the decider.
type Decision struct {
	Outcome Outcome
	Source  DecisionSource
	// Rule is the rule that decided (Source FromRule); nil otherwise.
	Rule *Rule
	// Also are the other rules that allowed the call with Rule (RuleDecision.Also).
	Also []*Rule
	Mode Mode
	// Reason is, for Blocked, the model's error text (a handler's reason, a deny rule's reason,
	// PlanReason); for Asked, why the call waits (AskReason's text or the ask rule's reason);
	// for Allowed, a sentence for the audit.
	Reason string
}

// RuleCounter is a RuleEvaluator that counts the hits of the rules whose decisions stood
// (Rulebook).
type RuleCounter interface {
	Hit(r *Rule)
}

// Checker decides calls: Handlers run first, then Rules (nil: no rules), then the mode and the
// annotation default. When Rules is also a RuleCounter, every rule that decided a call gets a
// hit (Decision.Rule and Decision.Also: each rule that allowed a part of a chained command). It holds no state of its own; Rules is read on every call (a Rulebook
// swaps its rules atomically, so a change applies to the next call).
type Checker struct {
	Handlers Handlers
	Rules    RuleEvaluator
}

// Check decides c, in the order of SPEC §14:
//
//  1. tool_call handlers: the first block → Blocked (FromHandler);
//  2. a deny rule → Blocked; an ask rule → Asked (FromRule);
//  3. plan mode: a tool whose effective annotations are not readOnlyHint: true → Blocked with
//     PlanReason (FromMode). An allow rule does NOT override plan: read-only means read-only;
//  4. an allow rule → Allowed (FromRule). It also releases a tool that always asks (an untrusted
//     MCP server's, tool.AlwaysAsk): a person made the rule, naming the tool. Not for a write of
//     a tool marked tool.WritesFiles whose path, as the tool will open it, leaves the workspace
//     or lands in git's or Countersign's own files (unguardedWrite: .git/, .countersign, a
//     folder laid out or completed as a git repository, a file named HEAD): that write goes on
//     to 5 and 6, which ask;
//  5. accept-edits mode: a tool marked tool.WritesFiles (its path was already checked inside the
//     workspace by its InputCheck) → Allowed (FromMode), unless it always asks; a write
//     unguardedWrite refuses, or to .gitattributes or .gitmodules → Asked (FromMode);
//  6. a write unguardedWrite refuses → Asked (FromAnnotations, its reason); else the annotation
//     default (NeedsApproval, AskReason): Allowed or Asked (FromAnnotations); when it asks and
//     the rules left a RuleDecision.Note (what they did not cover), the note is the reason.
func (ck Checker) Check(ctx context.Context, c CheckCall) Decision {
	d := ck.check(ctx, c)
	if d.Source == FromRule && d.Rule != nil {
		if h, ok := ck.Rules.(RuleCounter); ok {
			d.CountHits(h)
		}
	}
	return d
}

// CountHits counts a hit, on h, for each rule that decided d (Rule and Also).
func (d Decision) CountHits(h RuleCounter) {
	h.Hit(d.Rule)
	for _, r := range d.Also {
		h.Hit(r)
	}
}

func (ck Checker) check(ctx context.Context, c CheckCall) Decision {
	t := c.Tool
	mode := c.Mode
	if mode == "" {
		mode = ModeDefault
	}
	if v := ck.Handlers.Check(ctx, CallEvent{SessionID: c.SessionID, ToolName: t.Name, ToolCallID: c.ToolCallID,
		ParentToolCallID: c.ParentToolCallID, Input: c.Arguments, Annotations: t.Annotations}); v.Block {
		return Decision{Outcome: Blocked, Source: FromHandler, Mode: mode, Reason: v.Reason}
	}
	var rd RuleDecision
	if ck.Rules != nil {
		rd = ck.Rules.Evaluate(RuleCall{Tool: t.Name, Arguments: c.Arguments, Annotations: t.Annotations,
			Parent: c.Parent, SessionID: c.SessionID, Workspace: c.Workspace, Mode: mode, Outside: c.Outside, Cwd: c.Cwd, CwdUnknown: c.CwdUnknown, Agent: c.Agent, Connection: c.Connection})
	}
	switch rd.Effect {
	case Deny:
		return Decision{Outcome: Blocked, Source: FromRule, Rule: rd.Rule, Mode: mode, Reason: ruleReason(rd, "denies the call")}
	case Ask:
		return Decision{Outcome: Asked, Source: FromRule, Rule: rd.Rule, Mode: mode, Reason: ruleReason(rd, "asks")}
	}
	if c.Uncovered != "" {
		return Decision{Outcome: Asked, Source: FromAction, Mode: mode, Reason: c.Uncovered}
	}
	readOnly := t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint
	if mode == ModePlan && !readOnly {
		return Decision{Outcome: Blocked, Source: FromMode, Mode: mode, Reason: PlanReason}
	}
	// A file write's path is judged where the tool will open it: one in git's own files (or
	// outside, or unreadable) matches no allow rule and no mode (SPEC §14 "Paths as they
	// resolve"); it falls through to the annotation default, which asks, saying why.
	guard := ""
	if t.WritesFiles {
		guard = unguardedWrite(c.Arguments, c.Workspace)
	}
	if rd.Effect == Allow && guard == "" {
		return Decision{Outcome: Allowed, Source: FromRule, Rule: rd.Rule, Also: rd.Also, Mode: mode, Reason: ruleReason(rd, "allows the call")}
	}
	if mode == ModeAcceptEdits && t.WritesFiles && !t.AlwaysAsk {
		why := guard
		if why == "" {
			why = acceptEditsExcluded(c.Arguments, c.Workspace)
		}
		if why == "" {
			return Decision{Outcome: Allowed, Source: FromMode, Mode: mode, Reason: "accept-edits mode allows writing files in the workspace"}
		}
		return Decision{Outcome: Asked, Source: FromMode, Mode: mode, Reason: why}
	}
	if guard != "" {
		return Decision{Outcome: Asked, Source: FromAnnotations, Mode: mode, Reason: guard}
	}
	if why := AskReason(t); why != "" {
		if rd.Note != "" && !t.AlwaysAsk {
			// The rules looked at the call and say what they did not cover (SPEC §14): more
			// use to the person than the annotation default.
			why = rd.Note
		}
		return Decision{Outcome: Asked, Source: FromAnnotations, Mode: mode, Reason: why}
	}
	return Decision{Outcome: Allowed, Source: FromAnnotations, Mode: mode, Reason: "annotations allow it without approval"}
}

// ruleReason is the rule decision's reason, or "rule <text> <verb>" when the evaluator gave none.
func ruleReason(rd RuleDecision, verb string) string {
	if rd.Reason != "" {
		return rd.Reason
	}
	if rd.Rule == nil {
		return "a rule " + verb
	}
	return "rule " + rd.Rule.Text() + " " + verb
}

// Pattern is the rule's text form as a prompt's "Rule" box and rules.Parse read it (SPEC §14):
// Tool, then Specifier in parentheses when there is one ("run_command(git diff:*)",
// "read_file"). The specifier is kept as stored (its escapes are part of it), so
// rules.Parse(r.Pattern()) gives back Tool and Specifier; rules.Text is this.
func (r Rule) Pattern() string {
	if r.Specifier == "" {
		return r.Tool
	}
	return r.Tool + "(" + r.Specifier + ")"
}

// Text is the rule as pages, the audit and logs show it: Pattern, then its people when it
// needs several or names reviewers (QuorumText: " approvers=2 reviewers=alice,bob"), then
// " when <When>" when there is a condition ("pay__*(…) when args.amount >= 1000").
func (r Rule) Text() string {
	t := r.Pattern() + r.QuorumText()
	if r.When != "" {
		return t + " when " + r.When
	}
	return t
}

// QuorumText is the text form of a rule's people (SPEC §15), as rules.ParseQuorum reads it: "
// approvers=N" when N ≥ 2, then " reviewers=a,b" when reviewers are named; "" for neither.
func (r Rule) QuorumText() string {
	s := ""
	if r.Approvers >= MinApprovers {
		s += " approvers=" + strconv.Itoa(r.Approvers)
	}
	if len(r.Reviewers) > 0 {
		s += " reviewers=" + strings.Join(r.Reviewers, ",")
	}
	return s
}

// GrantShaped reports whether r is what "Approve for session" makes (SPEC §3, §14): a session
// allow rule for a whole tool, made from a prompt. Its decisions keep the words of a session
// grant ("approved for this session by <who>").
func (r Rule) GrantShaped() bool {
	return r.Effect == Allow && r.Scope == ScopeSession && r.Source == SourcePrompt &&
		r.Specifier == "" && r.When == "" && r.ExpiresAt == nil
}

// Record stamps d on a, the call's approval as the pipeline built it, for the audit: the status
// (Approved or Denied; a pending one for Asked), who decided in words (DecidedBy: ByHandler,
// ByRule — ByGrant for a grant-shaped rule —, ByMode, ByPolicy), the reason, and the decision's
// source, rule (id, text, source) and mode.
func (d Decision) Record(a Approval) Approval {
	a.DecisionSource, a.Mode = d.Source, d.Mode
	if d.Rule != nil {
		a.RuleID, a.RuleText, a.RuleSource = d.Rule.ID, d.Rule.Text(), d.Rule.Source
	}
	switch d.Outcome {
	case Asked:
		a.Status, a.AskReason = Pending, d.Reason
		if d.Rule != nil && d.Rule.Effect == Ask {
			a.Approvers, a.Reviewers = d.Rule.Approvers, d.Rule.Reviewers
		}
		return a
	case Blocked:
		a.Status = Denied
	default:
		a.Status = Approved
	}
	a.Reason = d.Reason
	switch d.Source {
	case FromHandler:
		a.DecidedBy = ByHandler
	case FromMode:
		a.DecidedBy = ByMode
	case FromAnnotations:
		a.DecidedBy = ByPolicy
	case FromRule:
		a.DecidedBy = ByRule
		if d.Rule != nil && d.Rule.GrantShaped() {
			a.DecidedBy, a.Scope, a.DerivedFrom = ByGrant, Session, d.Rule.FromApproval
			a.Reason = "approved for this session by " + d.Rule.CreatedBy
		}
	}
	return a
}
