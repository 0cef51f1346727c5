package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// ResultHandler is a tool_result handler (SPEC §3, step 6): it sees the call and the result as the
// tool returned it and may return a patched result. It runs before output validation.
type ResultHandler func(ctx context.Context, call tool.Call, res tool.Result) tool.Result

// Config wires a Runner. Store, Models, Tools and Broker are required.
type Config struct {
	Store          Store
	Models         Models
	Tools          *tool.Registry
	Broker         *Broker
	CallHandlers   gate.Handlers   // tool_call handlers, in registration order
	ResultHandlers []ResultHandler // tool_result handlers, in registration order
	// ApprovalTimeout is how long an approval may wait (SPEC §3; default 15 minutes).
	ApprovalTimeout time.Duration
	Logger          *slog.Logger

	// Rules and modes (SPEC §14). CompileRules compiles the rules (nil: gate.ExactCompiler, which
	// takes only whole-tool rules such as "Approve for session" makes); cmd/web sets it to
	// rules.Compiler once package internal/rules is merged. ParseRule reads a rule's text form
	// for POST /api/rules and "Always allow…" (nil: only a bare tool name is understood; wire
	// rules.Parse). SuggestRule proposes the rule "Always allow…" shows (nil: the tool as a
	// whole; wire rules.Suggest). PolicyRules are the policy file's rules (read-only, in memory);
	// DefaultMode is a new session's mode (the policy file's defaultMode; "" is default).
	CompileRules gate.RuleCompiler
	ParseRule    gate.RuleParser
	SuggestRule  gate.RuleSuggester
	PolicyRules  []gate.Rule
	DefaultMode  gate.Mode

	// Instructions are the default instructions of a new session (SPEC §17: the New-session
	// form's "Instructions", pre-filled with them): the text of -system-prompt FILE, or ""
	// for BuiltinInstructions. WorkspaceVar in them becomes the session's workspace folder.
	Instructions string
	// ContextTokens is the context window the agent fits each request into, in tokens (SPEC
	// §17, -context-tokens); 0 means the model's own (ContextWindow), and no limit for a model
	// that does not say.
	ContextTokens int
	// Observer is told of runs, calls and decisions for metrics (SPEC §16); nil: nobody.
	Observer Observer
	// Replicas connects this server to the others sharing its database (SPEC §16): leases and
	// the event relay. nil (a SQLite file): this server is the only one.
	Replicas Replicas
	// KillOrphans ends what a call left running when its server died (SPEC §8: the record never
	// says "interrupted" of a command that goes on; issue 28). Recovery calls it for each call it
	// is about to record as "Interrupted by server restart", at start and when it takes a dead
	// replica's session over, with the session's and the call's ids: it kills the processes of
	// the call and of the calls nested in it, and returns once they are gone. An error is logged
	// and the call recorded all the same (it is never run again either way). nil: nothing is
	// killed. cmd/web wires orphans.Kill with its store's identity.
	KillOrphans func(ctx context.Context, sessionID, toolCallID string) error
}

// Runner runs agent sessions: at most one run per session, each with its own cancellable
// context kept here (never a request's context).
type Runner struct {
	cfg   Config
	gate  *gate.Gate
	log   *slog.Logger
	audit *auditLog // nested calls' automatic decisions, written in the background

	rules   *gate.Rulebook
	checker gate.Checker
	loadErr error    // the rulebook's first load, returned by Recover
	modes   sync.Map // session id → gate.Mode, as switched since start (SetMode)

	mu   sync.Mutex
	runs map[string]*run // by session id
	// remote is the live state of runs other replicas drive (Deliver).
	remote remoteRuns
	// deleting holds the sessions being deleted (DeleteSession): Send starts no run in them.
	deleting map[string]bool
	wg       sync.WaitGroup
}

// New returns a Runner.
func New(cfg Config) *Runner {
	if cfg.ApprovalTimeout <= 0 {
		cfg.ApprovalTimeout = 15 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Runner{cfg: cfg, log: cfg.Logger, runs: map[string]*run{}, deleting: map[string]bool{}, audit: newAuditLog(cfg.Store, cfg.Logger)}
	r.gate = gate.New(cfg.Store, cfg.ApprovalTimeout, r.approvalChanged)
	switch cfg.DefaultMode {
	case "":
		r.cfg.DefaultMode = gate.ModeDefault
	case gate.ModeDefault, gate.ModePlan, gate.ModeAcceptEdits:
	default:
		r.loadErr = apperr.Errorf(apperr.Invalid, "default mode must be default, plan or accept-edits, not %q", cfg.DefaultMode)
		r.cfg.DefaultMode = gate.ModePlan // fail closed until Recover refuses to start
	}
	r.rules = gate.NewRulebook(cfg.CompileRules, cfg.Store, cfg.PolicyRules)
	if err := r.rules.Load(context.Background()); err != nil && r.loadErr == nil {
		r.loadErr = err
	}
	if err := r.rules.Err(); err != nil {
		r.log.Warn("rules that do not compile are skipped", "err", err)
	}
	r.checker = gate.Checker{Handlers: cfg.CallHandlers, Rules: r.rules}
	return r
}

func (r *Runner) approvalChanged(a gate.Approval) {
	typ := ApprovalResolved
	switch {
	case a.Status == gate.Pending && len(a.Votes) > 0:
		typ = ApprovalUpdated // a vote counted, more needed (SPEC §15)
	case a.Status == gate.Pending:
		typ = ApprovalRequested
	}
	r.publish(Event{Type: typ, SessionID: a.SessionID, MessageID: a.MessageID,
		ToolCallID: a.ToolCallID, ParentToolCallID: a.ParentToolCallID, ToolName: a.ToolName, Approval: &a})
}

// ApprovalDeadline is when approval a times out if nobody decides it: its creation plus the
// approval timeout (SPEC §3). The gate counts from the same moment, across restarts too
// (gate.Attach).
func (r *Runner) ApprovalDeadline(a gate.Approval) time.Time {
	return a.CreatedAt.Add(r.cfg.ApprovalTimeout)
}

// Tools returns the registry the runner calls tools from.
func (r *Runner) Tools() *tool.Registry { return r.cfg.Tools }

// DefaultInstructions is the instructions a new session gets unless it is given others
// (Config.Instructions, else BuiltinInstructions), with WorkspaceVar not yet replaced: what
// the New-session form is pre-filled with.
func (r *Runner) DefaultInstructions() string {
	if r.cfg.Instructions != "" {
		return r.cfg.Instructions
	}
	return BuiltinInstructions
}

// NewSession is what a new session is made from (SPEC §12 POST /api/sessions, the New-session
// form). Instructions nil means DefaultInstructions; "" means none.
type NewSession struct {
	Title, Model, Workspace string
	Instructions            *string
}

// CreateSession is CreateSessionWith with the default instructions.
func (r *Runner) CreateSession(ctx context.Context, title, model, workspace string) (Session, error) {
	return r.CreateSessionWith(ctx, NewSession{Title: title, Model: model, Workspace: workspace})
}

// CreateSessionWith validates and stores a new idle session. The model must be one Models
// offers; the workspace must be an existing folder (it is made absolute); the instructions at
// most MaxInstructions bytes, their WorkspaceVar replaced by the workspace (apperr.Invalid
// otherwise).
func (r *Runner) CreateSessionWith(ctx context.Context, ns NewSession) (s Session, err error) {
	defer apperr.Wrap(&err, "CreateSession")
	title, model, workspace := ns.Title, ns.Model, ns.Workspace
	title = strings.TrimSpace(title)
	if title == "" {
		title = "Untitled session"
	}
	if err := checkTitle(title); err != nil {
		return Session{}, err
	}
	if _, err := r.cfg.Models.Model(model); err != nil {
		return Session{}, err
	}
	abs, err := filepath.Abs(strings.TrimSpace(workspace))
	if err != nil || strings.TrimSpace(workspace) == "" {
		return Session{}, apperr.Errorf(apperr.Invalid, "Workspace %q is not a valid folder path.", workspace)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return Session{}, apperr.Errorf(apperr.Invalid, "Workspace %q is not an existing folder.", abs)
	}
	instructions := r.DefaultInstructions()
	if ns.Instructions != nil {
		instructions = *ns.Instructions
	}
	if err := checkInstructions(instructions); err != nil {
		return Session{}, err
	}
	s = Session{ID: newID(), Title: title, Model: model, Workspace: abs, State: Idle, CreatedAt: time.Now().UTC(),
		Mode: r.cfg.DefaultMode, Instructions: ExpandInstructions(instructions, abs)}
	if err := r.cfg.Store.CreateSession(ctx, s); err != nil {
		return Session{}, err
	}
	return s, nil
}

// MaxTitle is the longest session title, in characters (runes, not bytes).
const MaxTitle = 200

// checkTitle refuses a title longer than MaxTitle characters (apperr.Invalid).
func checkTitle(title string) error {
	if utf8.RuneCountInString(title) > MaxTitle {
		return apperr.Errorf(apperr.Invalid, "Title is too long (at most %d characters).", MaxTitle)
	}
	return nil
}

// CheckTitle checks a new title as RenameSession does: trimmed, 1 to MaxTitle characters
// (apperr.Invalid otherwise).
func CheckTitle(title string) error {
	title = strings.TrimSpace(title)
	if title == "" {
		return apperr.Errorf(apperr.Invalid, "The title is empty; give the session a name.")
	}
	return checkTitle(title)
}

// RenameSession sets a session's title: trimmed, 1 to MaxTitle characters (apperr.Invalid
// otherwise), apperr.NotFound for an unknown session. Its viewers are told (session_updated).
func (r *Runner) RenameSession(ctx context.Context, sessionID, title string) (s Session, err error) {
	defer apperr.Wrap(&err, "RenameSession(%s)", sessionID)
	if err := CheckTitle(title); err != nil {
		return Session{}, err
	}
	title = strings.TrimSpace(title)
	if err := r.cfg.Store.SetSessionTitle(ctx, sessionID, title); err != nil {
		return Session{}, err
	}
	if s, err = r.cfg.Store.Session(ctx, sessionID); err != nil {
		return Session{}, err
	}
	r.publish(Event{Type: SessionUpdated, SessionID: sessionID, Session: &s})
	return s, nil
}

// SetInstructions replaces a session's instructions (SPEC §17), WorkspaceVar replaced by its
// workspace, and tells its viewers (session_updated). Instructions can change only until the
// session's first message: after it, apperr.Conflict, and nothing changes. apperr.Invalid for
// instructions over MaxInstructions bytes, apperr.NotFound for an unknown session.
func (r *Runner) SetInstructions(ctx context.Context, sessionID, instructions string) (s Session, err error) {
	defer apperr.Wrap(&err, "SetInstructions(%s)", sessionID)
	if err := checkInstructions(instructions); err != nil {
		return Session{}, err
	}
	if s, err = r.cfg.Store.Session(ctx, sessionID); err != nil {
		return Session{}, err
	}
	if err := r.cfg.Store.SetSessionInstructions(ctx, sessionID, ExpandInstructions(instructions, s.Workspace)); err != nil {
		return Session{}, err
	}
	if s, err = r.cfg.Store.Session(ctx, sessionID); err != nil {
		return Session{}, err
	}
	r.publish(Event{Type: SessionUpdated, SessionID: sessionID, Session: &s})
	return s, nil
}

// DeleteSession deletes a session with its transcript, approvals (the audit), grants and share
// links. It is refused with apperr.Conflict while the session has a run, running or parked on
// an approval: Stop it first (a run's calls may be executing, and a person may be deciding).
// apperr.NotFound for an unknown session. Its viewers are told (session_deleted), so their live
// connections close.
func (r *Runner) DeleteSession(ctx context.Context, sessionID string) (err error) {
	defer apperr.Wrap(&err, "DeleteSession(%s)", sessionID)
	sess, err := r.cfg.Store.Session(ctx, sessionID)
	if err != nil {
		return err
	}
	if r.cfg.Replicas != nil && sess.State.Active() && !r.Busy(sessionID) {
		// Another replica's run (SPEC §16): the same answer as for this one's, below.
		return apperr.Errorf(apperr.Conflict, "This session has a run in progress (or waiting for an approval); press Stop first, then delete it.")
	}
	// Marked under the lock that Send takes to start a run, so no run starts while the rows go.
	r.mu.Lock()
	if _, busy := r.runs[sessionID]; busy {
		r.mu.Unlock()
		return apperr.Errorf(apperr.Conflict, "This session has a run in progress (or waiting for an approval); press Stop first, then delete it.")
	}
	if r.deleting[sessionID] {
		r.mu.Unlock()
		return apperr.Errorf(apperr.Conflict, "This session is already being deleted.")
	}
	r.deleting[sessionID] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.deleting, sessionID)
		r.mu.Unlock()
	}()
	if err := r.cfg.Store.DeleteSession(ctx, sessionID); err != nil {
		return err
	}
	r.rules.ForgetSession(sessionID) // their rows went with the session
	r.modes.Delete(sessionID)
	r.publish(Event{Type: SessionDeleted, SessionID: sessionID})
	return nil
}

// Busy reports whether sessionID has a run in this process.
func (r *Runner) Busy(sessionID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.runs[sessionID]
	return ok
}

// Send stores a user message and starts a run (SPEC §2). It answers apperr.Conflict while the
// session already has a run, apperr.Invalid for an empty message, apperr.NotFound for an unknown
// session. The message is committed before Send returns; the run continues in the background.
func (r *Runner) Send(ctx context.Context, sessionID, text string) (err error) {
	defer apperr.Wrap(&err, "Send(%s)", sessionID)
	text = strings.TrimSpace(text)
	if text == "" {
		return apperr.Errorf(apperr.Invalid, "The message is empty.")
	}
	sess, err := r.cfg.Store.Session(ctx, sessionID)
	if err != nil {
		return err
	}
	model, err := r.cfg.Models.Model(sess.Model)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if _, busy := r.runs[sessionID]; busy {
		r.mu.Unlock()
		return apperr.Errorf(apperr.Conflict, "A run is already in progress in this session; wait for it to finish or press Stop.")
	}
	if r.deleting[sessionID] {
		r.mu.Unlock()
		return apperr.Errorf(apperr.NotFound, "session %s not found (it is being deleted)", sessionID)
	}
	runCtx, cancel := context.WithCancelCause(context.Background())
	rn := &run{r: r, session: sess, model: model, ctx: runCtx, cancel: cancel, lease: newID(), leased: time.Now()}
	r.runs[sessionID] = rn
	r.mu.Unlock()
	// Several replicas (SPEC §16): the run is this replica's only while it holds the session's
	// lease; another replica's run, running or parked, holds it.
	if ok, err := r.acquire(ctx, sessionID, rn.lease); err != nil || !ok {
		r.finishRun(rn)
		cancel(nil)
		if err != nil {
			return err
		}
		return apperr.Errorf(apperr.Conflict, "A run is already in progress in this session (on another server); wait for it to finish or press Stop.")
	}
	if r.cfg.Observer != nil {
		r.cfg.Observer.RunStarted()
	}

	msg := Message{ID: newID(), Role: User, Content: []Block{{Type: "text", Text: text}}, Timestamp: time.Now().UTC()}
	if _, err := r.cfg.Store.AppendEntry(ctx, sessionID, msg); err != nil {
		r.finishRun(rn)
		cancel(nil)
		r.releaseLease(sessionID, rn.lease)
		return err
	}
	r.publish(Event{Type: MessageEnd, SessionID: sessionID, MessageID: msg.ID, Message: &msg})
	if err := r.setState(ctx, sessionID, Running); err != nil {
		r.log.Error("set session state", "session", sessionID, "err", err)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		rn.loop()
		// Off the calls' hot path: the hits the run's calls counted go to the store.
		r.flushRuleHits()
	}()
	return nil
}

// Stop cancels the session's run, if any: the model stream, every running tool and every
// pending approval of the run. Cancelled calls get the error result "Run stopped by <who>".
func (r *Runner) Stop(ctx context.Context, sessionID, who string) error {
	if _, err := r.cfg.Store.Session(ctx, sessionID); err != nil {
		return err
	}
	r.mu.Lock()
	rn := r.runs[sessionID]
	r.mu.Unlock()
	if rn != nil {
		rn.cancel(&StoppedError{By: who})
	} else if r.cfg.Replicas != nil {
		r.cfg.Replicas.Stop(sessionID, who) // another replica may drive it
	}
	return nil
}

// StoppedError is the cancellation cause of a run stopped by a person (Stop) or by a graceful
// shutdown (Shutdown); its text is the error result cancelled calls get.
type StoppedError struct {
	By   string
	park bool // Shutdown: approvals of model-issued calls stay pending (gate.ErrParked)
}

// Unwrap is gate.ErrParked for a shutdown, so the gate leaves waiting approvals pending.
func (e *StoppedError) Unwrap() error {
	if e.park {
		return gate.ErrParked
	}
	return nil
}

func (e *StoppedError) Error() string { return "Run stopped by " + e.By }

// Decision is a person's answer to a pending approval (SPEC §3, §12 decision body).
type Decision struct {
	Decision string `json:"decision"` // approve | approve_session | remember | deny
	Reason   string `json:"reason,omitempty"`
	// Rule is, for "remember" ("Always allow…", SPEC §14), the rule to save: its text
	// ("run_command(git diff:*)"), more texts when one rule cannot cover the call, and the
	// scope (session or workspace). Its effect is allow.
	Rule      *RememberRule   `json:"rule,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"` // edited arguments, approve only
	// By is who decides and with what rights: gate.Owner(), or a reviewer through a share link.
	By gate.Decider `json:"-"`
}

// Decide applies a decision to approval id of sessionID. An approval of another session is
// apperr.NotFound, like an unknown one; an already resolved one apperr.Conflict. A decider
// without the right is refused with apperr.Forbidden (SPEC §7): arguments (edited, whatever the
// decision) need Rights.Edit, approve_session needs Rights.Remember; nothing changes then.
// Edited arguments are validated against the tool's inputSchema again (apperr.Invalid listing
// every violation). The decision is bound to the stored approval: nothing else of the call
// changes. It is recorded with d.By's name and link.
func (r *Runner) Decide(ctx context.Context, sessionID, id string, d Decision) (a gate.Approval, err error) {
	defer apperr.Wrap(&err, "Decide(%s)", id)
	a, err = r.cfg.Store.Approval(ctx, id)
	if err != nil {
		return gate.Approval{}, err
	}
	if a.SessionID != sessionID {
		return gate.Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if a.Status != gate.Pending {
		return gate.Approval{}, alreadyResolved(a)
	}
	res := gate.Resolution{DecidedBy: d.By.Name, DecidedVia: d.By.Via, Reason: strings.TrimSpace(d.Reason), Scope: gate.Once}
	switch d.Decision {
	case "approve":
		res.Status = gate.Approved
	case "approve_session", "remember":
		res.Status, res.Scope = gate.Approved, gate.Session
	case "deny":
		res.Status = gate.Denied
	default:
		return gate.Approval{}, apperr.Errorf(apperr.Invalid, "decision must be approve, approve_session, remember or deny, not %q", d.Decision)
	}
	if a.DecisionSource == gate.FromAction && (res.Scope != gate.Once || len(d.Arguments) > 0) {
		// An action inside a running call that no rule may cover (a write outside the
		// workspace…): it is approved or denied as it is; a grant or a rule made from it would
		// allow far more than it, and an edit would approve an action the call does not take.
		return gate.Approval{}, apperr.Errorf(apperr.Invalid, "this approval is for an action inside call %s that no rule can cover: approve or deny it as it is (no edit, no session grant, no rule)", a.ParentToolCallID)
	}
	res.Source = gate.FromPerson
	by := d.By
	res.Decider = &by
	if err := d.By.Permit(res.Scope, len(d.Arguments) > 0); err != nil {
		return gate.Approval{}, err
	}
	// Several approvers (SPEC §15): who may decide, and that each of them answers the call as
	// asked, checked before a rule is saved; the gate checks again and counts the vote.
	if err := a.MayDecide(d.By); err != nil {
		return gate.Approval{}, err
	}
	if a.Quorum() && (res.Scope == gate.Session || len(d.Arguments) > 0) {
		return gate.Approval{}, apperr.Errorf(apperr.Invalid,
			"This call needs %d approvals: each person approves or denies it as asked (no edits, no approving for the session).", a.Approvers)
	}
	// "remember" and "Approve for session" save a rule (SPEC §14). It is checked before anything
	// changes (a rule the compiler refuses decides nothing) and stored before the decision, so
	// the calls the run makes once this one is approved already see it; it is taken back if
	// another decision won. Pending calls it allows are released after the decision.
	var remember []gate.Rule
	switch d.Decision {
	case "remember":
		rls, err := r.rememberRules(ctx, a, d)
		if err != nil {
			return gate.Approval{}, err
		}
		for i := range rls {
			rls[i].FromApproval = a.ID
		}
		remember = rls
	case "approve_session":
		if rl, ok := r.sessionRule(a, d.By); ok {
			remember = []gate.Rule{rl}
		}
	}
	if len(d.Arguments) > 0 && res.Status == gate.Approved {
		edited, err := r.validateEdit(ctx, a, d.Arguments)
		if err != nil {
			return gate.Approval{}, err
		}
		res.EditedArguments = edited
	}
	// takeBack deletes the rules this decision saved (it lost, or a later rule was refused).
	takeBack := func(saved []gate.Rule) {
		for _, rl := range saved {
			if _, derr := r.rules.Delete(context.WithoutCancel(ctx), rl.ID); derr != nil {
				r.log.Error("take back the rule of a decision that lost", "rule", rl.ID, "err", derr)
			}
		}
		r.rulesChanged()
		r.grantsChanged(ctx, sessionID)
	}
	if remember != nil {
		saved := make([]gate.Rule, 0, len(remember))
		for _, rl := range remember {
			rl, err := r.addRule(ctx, rl)
			if err != nil {
				takeBack(saved)
				return gate.Approval{}, err
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
	a, err = r.gate.Decide(ctx, id, res)
	if err != nil && remember != nil {
		takeBack(remember)
	}
	if apperr.CodeOf(err) == apperr.Conflict {
		// Another decision won between the check above and the store's atomic update: the
		// same answer as when it had won before.
		if won, rerr := r.cfg.Store.Approval(ctx, id); rerr == nil {
			return gate.Approval{}, alreadyResolved(won)
		}
	}
	if err != nil {
		return gate.Approval{}, err
	}
	if remember != nil {
		return a, r.releaseReached(ctx, remember[0]) // one scope for all of them
	}
	if a.Status == gate.Approved && a.Scope == gate.Session {
		// The session had a grant for the tool already: release what it allows.
		return a, r.releaseReached(ctx, gate.Rule{Scope: gate.ScopeSession, SessionID: a.SessionID})
	}
	return a, nil
}

// CheckEdit checks edited arguments for sessionID's pending approval id as an approval by `by`
// with them would (the right to edit, the tool's inputSchema, then its InputCheck) without
// deciding or storing anything: the prompt's live preview of an edit (issue 16, item 8). It
// returns the approval, also with an apperr.Invalid error, which lists what an approval with
// these arguments would be refused for. Other errors: apperr.NotFound (unknown, or another
// session's), apperr.Conflict (already resolved), apperr.Forbidden (no right to edit).
func (r *Runner) CheckEdit(ctx context.Context, sessionID, id string, by gate.Decider, args json.RawMessage) (a gate.Approval, err error) {
	a, err = r.cfg.Store.Approval(ctx, id)
	if err != nil {
		return gate.Approval{}, err
	}
	if a.SessionID != sessionID {
		return gate.Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if a.Status != gate.Pending {
		return gate.Approval{}, alreadyResolved(a)
	}
	if err := by.Permit(gate.Once, true); err != nil {
		return gate.Approval{}, err
	}
	if _, err := r.validateEdit(ctx, a, args); err != nil {
		return a, err
	}
	a.Preview = r.editPreview(ctx, a, args)
	return a, nil
}

// editPreview is the preview an edit of a's arguments is shown against: the one stored with a
// while the edit keeps its "path" (the same "before", not the file as it is now), else the
// tool's preview of the edited arguments, computed now and not stored (a file tool whose edit
// names another file; issue 19; a command's edit, which may run other scripts: issue 28). args
// passed validateEdit.
func (r *Runner) editPreview(ctx context.Context, a gate.Approval, args json.RawMessage) *tool.Preview {
	var in struct {
		Path string `json:"path"`
	}
	if a.Preview != nil && a.Preview.Path != "" && json.Unmarshal(args, &in) == nil && in.Path == a.Preview.Path {
		return a.Preview
	}
	t, ok := r.cfg.Tools.Lookup(a.ToolName)
	if !ok || t.Preview == nil {
		return a.Preview
	}
	s, err := r.cfg.Store.Session(ctx, a.SessionID)
	if err != nil {
		return a.Preview
	}
	return toolPreview(ctx, t, args, s.Workspace)
}

// alreadyResolved is the apperr.Conflict a decision on a resolved approval gets; it says how it
// ended and who decided ("This approval was already resolved: approved by alice.").
func alreadyResolved(a gate.Approval) error {
	return apperr.Errorf(apperr.Conflict, "This approval was already resolved: %s.", a.Outcome())
}

// validateEdit checks edited arguments against the tool's inputSchema, then its InputCheck (with
// the session's workspace); identical arguments are not an edit (nil). Errors: apperr.Invalid
// naming each violation.
func (r *Runner) validateEdit(ctx context.Context, a gate.Approval, raw json.RawMessage) (json.RawMessage, error) {
	t, ok := r.cfg.Tools.Lookup(a.ToolName)
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
		s, err := r.cfg.Store.Session(ctx, a.SessionID)
		if err != nil {
			return nil, err
		}
		if vs := t.CheckInput(raw, s.Workspace); len(vs) > 0 {
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

// Wait blocks until every run has ended (used by graceful shutdown after Shutdown), then writes
// the rules' hits counted since the last run ended.
func (r *Runner) Wait() {
	r.wg.Wait()
	r.flushRuleHits()
}

// Shutdown stops every run for a graceful exit. Calls that were executing end with the error
// result "Run stopped by <who>"; a model-issued call waiting for a person stays parked, its
// approval pending and its run left for the next process's Recover (SPEC §8), as a killed
// process would have left it. Nested calls' approvals are cancelled with their parent.
func (r *Runner) Shutdown(who string) {
	r.mu.Lock()
	for _, rn := range r.runs {
		rn.cancel(&StoppedError{By: who, park: true})
	}
	r.mu.Unlock()
}

func (r *Runner) finishRun(rn *run) {
	r.mu.Lock()
	if r.runs[rn.session.ID] == rn {
		delete(r.runs, rn.session.ID)
	}
	r.mu.Unlock()
}

func (r *Runner) setState(ctx context.Context, sessionID string, st State) error {
	if err := r.cfg.Store.SetSessionState(ctx, sessionID, st); err != nil {
		return err
	}
	s, err := r.cfg.Store.Session(ctx, sessionID)
	if err != nil {
		return err
	}
	r.publish(Event{Type: SessionUpdated, SessionID: sessionID, Session: &s})
	return nil
}

// SetActiveTools changes a session's active tool set (SPEC §1). Unknown and hidden names are
// ignored and returned in ignored. The next model request declares the new set.
func (r *Runner) SetActiveTools(ctx context.Context, sessionID string, names []string) (active, ignored []string, err error) {
	defer apperr.Wrap(&err, "SetActiveTools(%s)", sessionID)
	if _, err := r.cfg.Store.Session(ctx, sessionID); err != nil {
		return nil, nil, err
	}
	active = []string{}
	for _, n := range names {
		t, ok := r.cfg.Tools.Lookup(n)
		if !ok || !tool.Activatable(t) {
			ignored = append(ignored, n)
			continue
		}
		if !slices.Contains(active, n) {
			active = append(active, n)
		}
	}
	slices.Sort(active)
	if err := r.cfg.Store.SetActiveTools(ctx, sessionID, active); err != nil {
		return nil, nil, err
	}
	// A run in progress reads the session again before its next model request.
	r.mu.Lock()
	if rn := r.runs[sessionID]; rn != nil {
		rn.sessionChanged.Store(true)
	}
	r.mu.Unlock()
	s, err := r.cfg.Store.Session(ctx, sessionID)
	if err == nil {
		r.publish(Event{Type: SessionUpdated, SessionID: sessionID, Session: &s})
	}
	return active, ignored, nil
}

// ActiveTools returns the session's active set: its stored one, or the registry's default.
func (r *Runner) ActiveTools(s Session) []string {
	if s.ActiveTools != nil {
		return s.ActiveTools
	}
	return r.cfg.Tools.DefaultActive()
}

// publish updates the live snapshot of the event's run, if any, then broadcasts the event.
func (r *Runner) publish(ev Event) {
	r.mu.Lock()
	rn := r.runs[ev.SessionID]
	r.mu.Unlock()
	if rn != nil {
		rn.live.apply(ev)
	}
	r.broadcast(ev)
}

// broadcast sends ev to this server's subscribers and, with replicas, to the other replicas'
// (SPEC §16): the one way out of every published event.
func (r *Runner) broadcast(ev Event) {
	r.cfg.Broker.Publish(ev)
	if r.cfg.Replicas != nil {
		r.cfg.Replicas.Publish(ev)
	}
}

func newID() string { return strings.ToLower(rand.Text()[:16]) }

// ActiveRuns counts the sessions with a run: streaming, executing, or parked on an approval.
func (r *Runner) ActiveRuns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}
