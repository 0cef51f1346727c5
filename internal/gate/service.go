package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/tool"
)

// Service owns a person's decision on a pending approval (SPEC §3, §14, §15), whoever asked:
// the agent's loop, a nested call, or an outside agent's call (SPEC §18) that has no loop at
// all. It decides (with the decider's rights, edited arguments validated again, several
// approvers' votes), remembers (the rules "Always allow…" and "Approve for session" make),
// releases the pending calls a new rule or mode now allows, switches modes, lists and revokes
// grants, and records each of these. One Service answers every such request, as crush's
// permission service does (charmbracelet/crush internal/permission/permission.go).
//
// It needs a few things it does not own, declared here as ports: the approvals and rules as
// stored (ServiceStore), a session's workspace and mode (Sessions), the tools that gave the
// calls their schemas (Tools), and a hook to tell other replicas that the rules changed. The
// waiting call is woken through its Gate, the one callback from a decision back to the call.
type Service struct {
	gate     *Gate
	store    ServiceStore
	sessions Sessions
	tools    Tools
	rules    *Rulebook
	log      *slog.Logger

	parse        RuleParser
	suggest      RuleSuggester
	defaultMode  Mode
	rulesChanged func()
	loadErr      error

	outside outsideWaits // outside calls held in this process (DecideOutside)
	// held is, for an outside call whose approval is stored but whose outside_calls row is not
	// yet, that row (approval id → OutsideCall; DecideOutside, OpenOutside): whether the agent
	// honours an edit, its deadline (HeldOutsideCall).
	held sync.Map
}

// ServiceStore is what the Service reads and writes: approvals (Store: the atomic first-wins
// update and the votes), the stored rules, and the pending approvals a change may release.
type ServiceStore interface {
	Store
	RuleStore
	// Approvals lists a session's approvals in creation order; status "" means every status.
	Approvals(ctx context.Context, sessionID string, status Status) ([]Approval, error)
	// PendingApprovals lists every session's pending approvals.
	PendingApprovals(ctx context.Context) ([]Approval, error)
}

// SessionInfo is what the gate needs of a session: its id, its workspace folder (absolute) and
// its mode as of now ("" for the default mode).
type SessionInfo struct {
	ID        string
	Workspace string
	Mode      Mode
	// Agent and Connection are, for an agent session (SPEC §18), its agent's kind and its
	// connection's id; "" for Countersign's own sessions.
	Agent, Connection string
}

// Sessions is the Service's port to the sessions whose calls it decides (the agent's sessions;
// an agent session of SPEC §18).
type Sessions interface {
	// Session returns session id's workspace and current mode; apperr.NotFound for an unknown id.
	Session(ctx context.Context, id string) (SessionInfo, error)
	// SetMode stores session id's mode, which its next call sees; apperr.NotFound for an
	// unknown id.
	SetMode(ctx context.Context, id string, mode Mode) error
	// Changed tells the session's viewers that its mode or its rules (its grants) changed. It
	// must not block.
	Changed(ctx context.Context, id string)
}

// Tools finds a tool by name: its inputSchema and input check for edited arguments, its
// preview of them. *tool.Registry is one.
type Tools interface {
	Lookup(name string) (*tool.Tool, bool)
}

// ServiceConfig wires a Service. Gate, Store, Sessions and Tools are required.
type ServiceConfig struct {
	Gate     *Gate
	Store    ServiceStore
	Sessions Sessions
	Tools    Tools
	// Compile compiles the rules (nil: ExactCompiler); Parse reads a rule's text form (nil: only
	// a bare tool name); Suggest proposes the rules "Always allow…" shows (nil: the tool as a
	// whole). Policy are the policy file's rules (read-only); DefaultMode is a session's mode
	// until one is set ("" is ModeDefault).
	Compile     RuleCompiler
	Parse       RuleParser
	Suggest     RuleSuggester
	Policy      []Rule
	DefaultMode Mode
	// RulesChanged is told after a rule is added or deleted here (the other replicas reload
	// theirs, SPEC §16); nil: nobody. It must not block.
	RulesChanged func()
	Logger       *slog.Logger
}

// NewService returns a Service and loads the stored rules. A load that failed, or a default mode
// that is none of the three, is kept for Err (the server refuses to start: a rule skipped could
// be a deny); meanwhile sessions without a mode are in plan mode (fail closed).
func NewService(cfg ServiceConfig) *Service {
	s := &Service{gate: cfg.Gate, store: cfg.Store, sessions: cfg.Sessions, tools: cfg.Tools, log: cfg.Logger,
		parse: cfg.Parse, suggest: cfg.Suggest, defaultMode: cfg.DefaultMode, rulesChanged: cfg.RulesChanged}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.rulesChanged == nil {
		s.rulesChanged = func() {}
	}
	switch cfg.DefaultMode {
	case "":
		s.defaultMode = ModeDefault
	case ModeDefault, ModePlan, ModeAcceptEdits:
	default:
		s.loadErr = apperr.Errorf(apperr.Invalid, "default mode must be default, plan or accept-edits, not %q", cfg.DefaultMode)
		s.defaultMode = ModePlan // fail closed until the server refuses to start
	}
	s.rules = NewRulebook(cfg.Compile, cfg.Store, cfg.Policy)
	if err := s.rules.Load(context.Background()); err != nil && s.loadErr == nil {
		s.loadErr = err
	}
	if err := s.rules.Err(); err != nil {
		s.log.Warn("rules that do not compile are skipped", "err", err)
	}
	return s
}

// Err is why the Service cannot be trusted to decide (the rules could not be read, or the
// default mode is unknown), or nil.
func (s *Service) Err() error { return s.loadErr }

// DefaultMode is a session's mode until one is set (ModePlan when the configured one is unknown).
func (s *Service) DefaultMode() Mode { return s.defaultMode }

// Rulebook is the rules the calls are checked against (Checker.Rules).
func (s *Service) Rulebook() *Rulebook { return s.rules }

// Answer is a person's answer to a pending approval (SPEC §3, §12 decision body).
type Answer struct {
	Decision string `json:"decision"` // approve | approve_session | remember | deny
	Reason   string `json:"reason,omitempty"`
	// Rule is, for "remember" ("Always allow…", SPEC §14), the rule to save: its text
	// ("run_command(git diff:*)"), more texts when one rule cannot cover the call, and the
	// scope (session or workspace). Its effect is allow.
	Rule      *RememberRule   `json:"rule,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"` // edited arguments, approve only
	// By is who decides and with what rights: Owner(), or a reviewer through a share link.
	By Decider `json:"-"`
}

// RememberRule is the rule a "remember" answer saves (SPEC §14 "Always allow…"): Text, and
// Texts when one rule cannot cover the call ("Always allow…" on `echo hi && ls -1` suggests
// run_command(echo hi:*) and run_command(ls:*)); every text is a rule, all with Scope, saved
// together or not at all. Empty texts are skipped.
type RememberRule struct {
	Text  string    `json:"text"`            // "run_command(git diff:*)"
	Texts []string  `json:"texts,omitempty"` // more rules saved with it
	Scope RuleScope `json:"scope"`           // session or workspace
}

// texts are the rule texts to save, in order, without the empty ones.
func (rr *RememberRule) texts() []string {
	var out []string
	for _, t := range append([]string{rr.Text}, rr.Texts...) {
		if strings.TrimSpace(t) != "" {
			out = append(out, t)
		}
	}
	return out
}

// maxRememberRules bounds how many rules one "remember" answer saves.
const maxRememberRules = 16

// ResolvedError is the apperr.Conflict a decision on an approval already resolved gets ("This
// approval was already resolved: approved by alice."); Approval is the approval as it ended, so
// the caller shows the outcome without reading it again.
type ResolvedError struct {
	Approval Approval
	err      *apperr.Error
}

func alreadyResolved(a Approval) *ResolvedError {
	return &ResolvedError{Approval: a, err: apperr.Errorf(apperr.Conflict, "This approval was already resolved: %s.", a.Outcome())}
}

func (e *ResolvedError) Error() string { return e.err.Error() }

// Unwrap is the apperr.Conflict.
func (e *ResolvedError) Unwrap() error { return e.err }

// AnySession, as Decide's sessionID, finds the approval in whichever session it is: for the
// owner's JSON API, which names the approval alone. It is no session id a caller could be handed
// by mistake: an empty sessionID (a reviewer's link that lost its session…) finds nothing.
const AnySession = "\x00any session"

// Decide applies a person's answer to approval id of sessionID (AnySession: whichever session
// it is in). An approval of another session is
// apperr.NotFound, like an unknown one; an already resolved one a *ResolvedError
// (apperr.Conflict). A decider without the right is refused with apperr.Forbidden (SPEC §7):
// arguments (edited, whatever the decision) need Rights.Edit, approve_session and remember need
// Rights.Remember; a decider the approval's reviewers leave out is refused too (SPEC §15);
// nothing changes then. Edited arguments are validated against the tool's inputSchema and input
// check again (apperr.Invalid listing every violation). The decision is bound to the stored
// approval: nothing else of the call changes. It is recorded with ans.By's name and link.
//
// The approval is read once before the atomic write, and the rights are checked once; a
// decision that loses the race reads it once more, to say who won. "remember" and "Approve for
// session" save their rules before the decision (the calls the run makes once it is approved
// already see them; they are taken back if another decision won), then release the pending
// calls the rules allow.
func (s *Service) Decide(ctx context.Context, sessionID, id string, ans Answer) (a Approval, err error) {
	defer apperr.Wrap(&err, "Decide(%s)", id)
	a, err = s.store.Approval(ctx, id)
	if err != nil {
		return Approval{}, err
	}
	if sessionID != AnySession && a.SessionID != sessionID {
		return Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if a.Status != Pending {
		return Approval{}, alreadyResolved(a)
	}
	if a.RequestedBy == RequestedByAgent {
		if ended, ok := s.pastAAPDeadline(ctx, a); ok {
			return Approval{}, alreadyResolved(ended) // SPEC §18 Door 3: never approved after it expired
		}
	}
	res := Resolution{DecidedBy: ans.By.Name, DecidedVia: ans.By.Via, Reason: strings.TrimSpace(ans.Reason), Scope: Once}
	switch ans.Decision {
	case "approve":
		res.Status = Approved
	case "approve_session", "remember":
		res.Status, res.Scope = Approved, Session
	case "deny":
		res.Status = Denied
	default:
		return Approval{}, apperr.Errorf(apperr.Invalid, "decision must be approve, approve_session, remember or deny, not %q", ans.Decision)
	}
	if a.DecisionSource == FromAction && (res.Scope != Once || len(ans.Arguments) > 0) {
		// An action inside a running call that no rule may cover (a write outside the
		// workspace…): it is approved or denied as it is; a grant or a rule made from it would
		// allow far more than it, and an edit would approve an action the call does not take.
		return Approval{}, apperr.Errorf(apperr.Invalid, "this approval is for an action inside call %s that no rule can cover: approve or deny it as it is (no edit, no session grant, no rule)", a.ParentToolCallID)
	}
	res.Source = FromPerson
	by := ans.By
	res.Decider = &by
	// The rights, once: what this decider may do (edit, remember), and (several approvers, SPEC
	// §15) whether they may decide this call at all and answer it as asked. Checked before a
	// rule is saved; the gate below counts the vote without checking again.
	if err := ans.By.Permit(res.Scope, len(ans.Arguments) > 0); err != nil {
		return Approval{}, err
	}
	if err := a.MayDecide(ans.By); err != nil {
		return Approval{}, err
	}
	if a.Quorum() && (res.Scope == Session || len(ans.Arguments) > 0) {
		return Approval{}, apperr.Errorf(apperr.Invalid,
			"This call needs %d approvals: each person approves or denies it as asked (no edits, no approving for the session).", a.Approvers)
	}
	// "remember" and "Approve for session" save a rule (SPEC §14). It is checked before anything
	// changes (a rule the compiler refuses decides nothing) and stored before the decision.
	var remember []Rule
	switch ans.Decision {
	case "remember":
		rls, err := s.rememberRules(ctx, a, ans)
		if err != nil {
			return Approval{}, err
		}
		for i := range rls {
			rls[i].FromApproval = a.ID
		}
		remember = rls
	}
	if len(ans.Arguments) > 0 && a.RequestedBy == RequestedByAgent && !s.outsideEditable(ctx, a) {
		// SPEC §18: the edit is offered only where the agent honours it (Codex ignores
		// updatedInput on PermissionRequest and would run the original).
		return Approval{}, apperr.Errorf(apperr.Invalid, "This agent does not apply an edited input here: approve or deny the call as it is.")
	}
	if len(ans.Arguments) > 0 && res.Status == Approved {
		edited, err := s.validateEdit(ctx, a, ans.Arguments)
		if err != nil {
			return Approval{}, err
		}
		res.EditedArguments = edited
	}
	if ans.Decision == "approve_session" {
		// The rules stand for the call approved: the edited one when the person edited it,
		// never the arguments they edited away.
		approved := a
		if len(res.EditedArguments) > 0 {
			approved.Arguments = res.EditedArguments
		}
		rls, covered := s.sessionRules(approved, ans.By)
		if len(rls) > 0 {
			remember = rls
		}
		if !covered {
			res.Scope = Once // no rule can stand for this call: it alone is approved
		}
	}
	// takeBack deletes the rules this decision saved (it lost, or a later rule was refused).
	takeBack := func(saved []Rule) {
		for _, rl := range saved {
			if _, derr := s.rules.Delete(context.WithoutCancel(ctx), rl.ID); derr != nil {
				s.log.Error("take back the rule of a decision that lost", "rule", rl.ID, "err", derr)
			}
		}
		s.rulesChanged()
		s.sessions.Changed(ctx, a.SessionID)
	}
	if remember != nil {
		saved := make([]Rule, 0, len(remember))
		for _, rl := range remember {
			rl, err := s.addRule(ctx, rl)
			if err != nil {
				takeBack(saved)
				return Approval{}, err
			}
			saved = append(saved, rl)
		}
		remember = saved
		// The decision names the rule it saved (the first; all their texts) and says how far
		// it reaches (a workspace rule reaches further than "this session").
		texts := make([]string, len(saved))
		for i, rl := range saved {
			texts[i] = rl.Text()
		}
		res.RuleID, res.RuleText, res.RuleSource, res.RuleScope = saved[0].ID, strings.Join(texts, " and "), saved[0].Source, saved[0].Scope
	}
	a, err = s.gate.decideRead(ctx, a, res)
	if err != nil && remember != nil {
		takeBack(remember)
	}
	if apperr.CodeOf(err) == apperr.Conflict {
		// Another decision won between the read above and the store's atomic update: the
		// same answer as when it had won before.
		// A conflict on an approval still pending is not a lost race but the store's own
		// refusal (a second, different vote of one person: "one vote per person"): say that.
		if won, rerr := s.store.Approval(ctx, id); rerr == nil && won.Status != Pending {
			return Approval{}, alreadyResolved(won)
		}
	}
	if err != nil {
		return Approval{}, err
	}
	if remember != nil {
		return a, s.releaseReached(ctx, remember[0]) // one scope for all of them
	}
	if a.Status == Approved && a.Scope == Session {
		// The session had a grant for the tool already: release what it allows.
		return a, s.releaseReached(ctx, Rule{Scope: ScopeSession, SessionID: a.SessionID})
	}
	return a, nil
}

// CheckEdit checks edited arguments for sessionID's pending approval id as an approval by `by`
// with them would (the right to edit, the tool's inputSchema, then its input check) without
// deciding or storing anything: the prompt's live preview of an edit (issue 16, item 8). It
// returns the approval, also with an apperr.Invalid error, which lists what an approval with
// these arguments would be refused for; its Preview is the edit's. Other errors:
// apperr.NotFound (unknown, or another session's), apperr.Conflict (already resolved),
// apperr.Forbidden (no right to edit).
func (s *Service) CheckEdit(ctx context.Context, sessionID, id string, by Decider, args json.RawMessage) (a Approval, err error) {
	a, err = s.store.Approval(ctx, id)
	if err != nil {
		return Approval{}, err
	}
	if a.SessionID != sessionID {
		return Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if a.Status != Pending {
		return Approval{}, alreadyResolved(a)
	}
	if err := by.Permit(Once, true); err != nil {
		return Approval{}, err
	}
	if _, err := s.validateEdit(ctx, a, args); err != nil {
		return a, err
	}
	a.Preview = s.editPreview(ctx, a, args)
	return a, nil
}

// editPreview is the preview an edit of a's arguments is shown against: the one stored with a
// while the edit keeps its "path" (the same "before", not the file as it is now), else the
// tool's preview of the edited arguments, computed now and not stored (a file tool whose edit
// names another file; issue 19; a command's edit, which may run other scripts: issue 28). args
// passed validateEdit.
func (s *Service) editPreview(ctx context.Context, a Approval, args json.RawMessage) *tool.Preview {
	var in struct {
		Path string `json:"path"`
	}
	if a.Preview != nil && a.Preview.Path != "" && json.Unmarshal(args, &in) == nil && in.Path == a.Preview.Path {
		return a.Preview
	}
	t, ok := s.lookup(ctx, a)
	if !ok || t.Preview == nil {
		return a.Preview
	}
	sess, err := s.sessions.Session(ctx, a.SessionID)
	if err != nil {
		return a.Preview
	}
	return Preview(ctx, t, args, sess.Workspace)
}

// Preview is t's preview of a call with args in workspace (tool.Tool.Preview); nil when the tool
// has none or cannot make one.
func Preview(ctx context.Context, t *tool.Tool, args json.RawMessage, workspace string) *tool.Preview {
	if t.Preview == nil {
		return nil
	}
	p, err := t.Preview(ctx, args, workspace)
	if err != nil {
		return nil
	}
	return p
}

// validateEdit checks edited arguments against the tool's inputSchema, then its InputCheck (with
// the session's workspace); identical arguments are not an edit (nil). Errors: apperr.Invalid
// naming each violation.
func (s *Service) validateEdit(ctx context.Context, a Approval, raw json.RawMessage) (json.RawMessage, error) {
	t, ok := s.lookup(ctx, a)
	if !ok {
		return nil, apperr.Errorf(apperr.Invalid, "tool %s is no longer registered", a.ToolName)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, apperr.Errorf(apperr.Invalid, "Arguments are not valid JSON: %v", err)
	}
	if vs := t.ValidateInput(raw); len(vs) > 0 {
		lines := make([]string, len(vs))
		for i, v := range vs {
			lines[i] = v.String()
		}
		return nil, apperr.Errorf(apperr.Invalid, "Arguments do not match the tool's inputSchema:\n%s", strings.Join(lines, "\n"))
	}
	// The tool's own check too (a file tool's path must stay in the workspace), as for the
	// model's arguments: an edit the call would refuse is refused in the form.
	if t.InputCheck != nil {
		sess, err := s.sessions.Session(ctx, a.SessionID)
		if err != nil {
			return nil, err
		}
		if vs := t.CheckInput(raw, sess.Workspace); len(vs) > 0 {
			lines := make([]string, len(vs))
			for i, v := range vs {
				lines[i] = v.String()
			}
			return nil, apperr.Errorf(apperr.Invalid, "Arguments are refused by the tool:\n%s", strings.Join(lines, "\n"))
		}
	}
	// Compact, and without HTML escaping: the audit shows the edit as the decider wrote it.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	compact := json.RawMessage(bytes.TrimSpace(buf.Bytes()))
	var orig any
	_ = json.Unmarshal(a.Arguments, &orig)
	if o, _ := json.Marshal(orig); string(o) == string(compact) {
		return nil, nil
	}
	return compact, nil
}

// Deadline is when approval a times out if nobody decides it: its stored deadline, fixed when it
// opened as its creation plus the approval timeout (SPEC §3, §16). The gate counts to the same
// moment, across restarts and takeovers too (Gate.Attach).
func (s *Service) Deadline(a Approval) time.Time { return s.gate.Deadline(a) }
