package agent

import (
	"context"
	"crypto/rand"
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

	// Rules and modes (SPEC §14), handed to the runner's gate.Service (Runner.Gate).
	// CompileRules compiles the rules (nil: gate.ExactCompiler, which takes only whole-tool
	// rules such as "Approve for session" makes); cmd/web sets it to
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
	// the event relay (relay.Relay). nil (a SQLite file): this server is the only one, and New
	// uses a SingleServer.
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
	// outside is the queue of outside calls' records written after their answer (QueueAgentCall).
	outside *outsideLog
	// deleted are told of every session DeleteSession deleted (OnSessionDeleted); under mu.
	deleted []func(sessionID string)

	// gs owns a person's decisions, rules, modes and grants (SPEC §14, §15); rules is its
	// rulebook, which the calls are checked against, and sessions its port to this runner's
	// sessions.
	gs       *gate.Service
	rules    *gate.Rulebook
	sessions gateSessions
	checker  gate.Checker
	loadErr  error    // the rulebook's first load, returned by Recover
	modes    sync.Map // session id → gate.Mode, as switched since start (gate.Service.SetMode)

	mu   sync.Mutex
	runs map[string]*run // by session id
	// replica is this server's side of the replicas sharing its database (leases, what the
	// relay delivers); remote is the live state of runs other replicas drive (Replica.Deliver).
	replica *Replica
	remote  remoteRuns
	// deleting holds the sessions being deleted (DeleteSession): Send starts no run in them.
	deleting map[string]bool
	wg       sync.WaitGroup
	// draining is set by Drain: Send starts no run and no model-issued call starts executing.
	// executing counts the model-issued calls executing; idle, made by a Drain that waits, is
	// closed when executing comes down to zero.
	draining  bool
	executing int
	idle      chan struct{}
}

// New returns a Runner.
func New(cfg Config) *Runner {
	if cfg.ApprovalTimeout <= 0 {
		cfg.ApprovalTimeout = 15 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Replicas == nil {
		cfg.Replicas = &SingleServer{}
	}
	r := &Runner{cfg: cfg, log: cfg.Logger, runs: map[string]*run{}, deleting: map[string]bool{}, audit: newAuditLog(cfg.Store, cfg.Logger)}
	r.outside = newOutsideLog(cfg.Logger.Error)
	r.replica = newReplica(r, cfg.Replicas)
	if _, alone := cfg.Replicas.(*SingleServer); !alone {
		r.audit.hold = cfg.Replicas.Hold // nested calls' audit rows are fenced as entries are
	}
	r.sessions = gateSessions{r}
	r.gate = gate.New(cfg.Store, cfg.ApprovalTimeout, r.sessions.approvalChanged)
	r.gs = gate.NewService(gate.ServiceConfig{Gate: r.gate, Store: cfg.Store, Sessions: r.sessions, Tools: cfg.Tools,
		Compile: cfg.CompileRules, Parse: cfg.ParseRule, Suggest: cfg.SuggestRule, Policy: cfg.PolicyRules,
		DefaultMode: cfg.DefaultMode, RulesChanged: cfg.Replicas.RulesChanged, Logger: cfg.Logger})
	r.cfg.DefaultMode, r.loadErr = r.gs.DefaultMode(), r.gs.Err()
	r.rules = r.gs.Rulebook()
	r.checker = gate.Checker{Handlers: cfg.CallHandlers, Rules: r.rules}
	return r
}

// Gate is the service that owns a person's decisions on this runner's approvals, with the rules,
// modes and grants (SPEC §14, §15).
func (r *Runner) Gate() *gate.Service { return r.gs }

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
	if r.replica.drivenElsewhere(sess) {
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
	// Its records queued before now are stored, then deleted with it.
	if err := r.outside.flushSession(ctx, sessionID); err != nil {
		return err
	}
	if err := r.cfg.Store.DeleteSession(ctx, sessionID); err != nil {
		return err
	}
	r.rules.ForgetSession(sessionID) // their rows went with the session
	r.modes.Delete(sessionID)
	r.tellDeleted(sessionID)
	r.publish(Event{Type: SessionDeleted, SessionID: sessionID})
	return nil
}

// tellDeleted tells OnSessionDeleted's funcs that session sessionID's rows are gone (deleted
// here, or on another replica: Replica.Deliver).
func (r *Runner) tellDeleted(sessionID string) {
	r.mu.Lock()
	told := r.deleted
	r.mu.Unlock()
	for _, fn := range told {
		fn(sessionID)
	}
}

// OnSessionDeleted adds fn, told the id of every session DeleteSession deletes, once its rows
// are gone, here or on another replica (its relayed deletion, Replica.Deliver): a cache of
// sessions (the MCP gateway's) forgets it, so the next call makes a new one.
func (r *Runner) OnSessionDeleted(fn func(sessionID string)) {
	r.mu.Lock()
	r.deleted = append(r.deleted, fn)
	r.mu.Unlock()
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
	if sess.IsAgent() {
		// SPEC §18: an agent session has no message box; its agent runs elsewhere.
		return apperr.Errorf(apperr.Invalid, "This is an agent session: its prompts come from the agent (%s), not from Countersign.", sess.Agent.Kind)
	}
	model, err := r.cfg.Models.Model(sess.Model)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if r.draining {
		r.mu.Unlock()
		return apperr.Errorf(apperr.Conflict, "This server is shutting down; send the message again in a moment.")
	}
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
	if ok, err := r.replica.acquire(ctx, sessionID, rn.lease); err != nil || !ok {
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
		r.replica.release(sessionID, rn.lease)
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
		r.gs.FlushRuleHits()
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
	} else {
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

// Wait blocks until every run has ended (used by graceful shutdown after Shutdown), then writes
// the rules' hits counted since the last run ended and the outside calls' records still queued
// (QueueAgentCall).
func (r *Runner) Wait() {
	r.wg.Wait()
	r.outside.flush()
	r.gs.FlushRuleHits()
}

// Drain begins a graceful exit (-drain-timeout, issue 33): from now on Send starts no run and
// no model-issued call starts executing (one approved meanwhile waits for Shutdown, which stops
// it), while the calls already executing go on. Drain returns nil once none is executing, or
// ctx's error when ctx ends first; Shutdown then stops what is left. Pages, decisions and
// stored results are not affected: a call that finishes during the drain has its result stored.
func (r *Runner) Drain(ctx context.Context) error {
	r.mu.Lock()
	r.draining = true
	var idle chan struct{}
	if r.executing > 0 {
		if r.idle == nil {
			r.idle = make(chan struct{})
		}
		idle = r.idle
	}
	r.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// beginExecuting counts a model-issued call that starts executing (Drain); false while draining,
// when the call must not start.
func (r *Runner) beginExecuting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return false
	}
	r.executing++
	return true
}

// endExecuting counts a call begun by beginExecuting out, waking a waiting Drain at zero.
func (r *Runner) endExecuting() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.executing--
	if r.executing == 0 && r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
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

// broadcast sends ev to this server's subscribers and to the other replicas' (SPEC §16): the one
// way out of every published event.
func (r *Runner) broadcast(ev Event) {
	r.cfg.Broker.Publish(ev)
	r.cfg.Replicas.Publish(ev)
}

func newID() string { return strings.ToLower(rand.Text()[:16]) }

// ActiveRuns counts the sessions with a run: streaming, executing, or parked on an approval.
func (r *Runner) ActiveRuns() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

// ContextWindow is the context window, in tokens, the runner fits a request for the model named
// model into (SPEC §17): Config.ContextTokens, or the model's own ContextWindow(); 0 when
// neither is known (the page then shows the tokens used only).
func (r *Runner) ContextWindow(model string) int {
	if r.cfg.ContextTokens > 0 {
		return r.cfg.ContextTokens
	}
	m, err := r.cfg.Models.Model(model)
	if err != nil {
		return 0
	}
	if cw, ok := m.(ContextWindow); ok {
		return max(cw.ContextWindow(), 0)
	}
	return 0
}
