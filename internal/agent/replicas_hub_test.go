package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// hub is an in-memory agent.Replicas for runners sharing one store in one process: the
// protocol the runner keeps with its replicas (leases, the relay, Stop, rules, call starts),
// tested without a database. internal/store/pg's Replicas is the real one (its own tests).
type hub struct {
	mu      sync.Mutex
	leases  map[string]hubLease // by session
	started map[string]bool
	members []*member
}

type hubLease struct {
	replica, run string
	expires      time.Time
}

// member is one runner's view of the hub.
type member struct {
	h      *hub
	name   string
	runner *agent.Runner
	dead   atomic.Bool // killed: publishes nothing, renews nothing
	away   atomic.Bool // cut off from the database: leases' calls fail (errAway)
	store  interface {
		SessionsInState(context.Context, agent.State) ([]agent.Session, error)
		PendingApprovals(context.Context) ([]gate.Approval, error)
	}
}

const hubTTL = 300 * time.Millisecond

func (m *member) Acquire(_ context.Context, sessionID, run string) (bool, error) {
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	l, ok := m.h.leases[sessionID]
	if ok && l.replica != m.name && time.Now().Before(l.expires) {
		return false, nil
	}
	m.h.leases[sessionID] = hubLease{m.name, run, time.Now().Add(hubTTL)}
	return true, nil
}

// errAway is what a member's lease calls return while it is cut off from the database.
var errAway = errors.New("the database is away")

func (m *member) Hold(_ context.Context, sessionID, run string) (bool, error) {
	if m.away.Load() {
		return false, errAway
	}
	if m.dead.Load() {
		return false, nil // a stalled replica's write waits for it to wake; here it is refused
	}
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	l, ok := m.h.leases[sessionID]
	if !ok || l.replica != m.name || l.run != run {
		return false, nil
	}
	l.expires = time.Now().Add(hubTTL)
	m.h.leases[sessionID] = l
	return true, nil
}

func (m *member) Release(_ context.Context, sessionID, run string) error {
	if m.away.Load() {
		return errAway
	}
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	if l := m.h.leases[sessionID]; l.run == run {
		delete(m.h.leases, sessionID)
	}
	return nil
}

func (m *member) Renew(context.Context) ([]string, error) {
	if m.away.Load() {
		return nil, errAway
	}
	if m.dead.Load() {
		return nil, nil
	}
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	var held []string
	for s, l := range m.h.leases {
		if l.replica == m.name {
			l.expires = time.Now().Add(hubTTL)
			m.h.leases[s] = l
			held = append(held, s)
		}
	}
	return held, nil
}

func (m *member) Orphans(ctx context.Context) ([]string, error) {
	running, err := m.store.SessionsInState(ctx, agent.Running)
	if err != nil {
		return nil, err
	}
	pending, err := m.store.PendingApprovals(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range running {
		ids = append(ids, s.ID)
	}
	for _, a := range pending {
		ids = append(ids, a.SessionID)
	}
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	var out []string
	for _, id := range ids {
		if l, ok := m.h.leases[id]; (!ok || time.Now().After(l.expires)) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

func (m *member) MarkStarted(_ context.Context, approvalID string) error {
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	m.h.started[approvalID] = true
	return nil
}

func (m *member) Started(_ context.Context, ids []string) (map[string]bool, error) {
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = m.h.started[id]
	}
	return out, nil
}

// others are the live members other than m.
func (m *member) others() []*member {
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	var out []*member
	for _, o := range m.h.members {
		if o != m && !o.dead.Load() && o.runner != nil {
			out = append(out, o)
		}
	}
	return out
}

func (m *member) Publish(ev agent.Event) {
	if m.dead.Load() {
		return
	}
	for _, o := range m.others() {
		o.runner.Replica().Deliver(ev)
	}
}

func (m *member) Stop(sessionID, who string) {
	for _, o := range m.others() {
		o.runner.Replica().StopRun(sessionID, who)
	}
}

func (m *member) RulesChanged() {
	for _, o := range m.others() {
		if err := o.runner.Replica().ReloadRules(context.Background()); err != nil {
			panic(err)
		}
	}
}

// twoReplicas is a harness (runner A) and a second runner B over the same store, joined by a
// hub; B's events are on bEvents.
type twoReplicas struct {
	*harness
	a, b    *member
	bRunner *agent.Runner
	bEvents *agent.Subscription
}

func newTwoReplicas(t *testing.T, script string, tools ...*tool.Tool) *twoReplicas {
	t.Helper()
	h := &hub{leases: map[string]hubLease{}, started: map[string]bool{}}
	a, b := &member{h: h, name: "A"}, &member{h: h, name: "B"}
	h.members = []*member{a, b}
	x := &twoReplicas{a: a, b: b}
	x.harness = newHarnessWith(t, script, agent.Config{Replicas: a}, tools...)
	a.runner, a.store, b.store = x.runner, x.db, x.db
	bRunner, bBroker := x.env.Replica(func(c *agent.Config) { c.Replicas = b })
	x.bRunner, b.runner = bRunner, bRunner
	x.bEvents = bBroker.Subscribe(x.sess.ID)
	return x
}

// runLeases runs r's lease loop (renewals, takeovers) every 50 ms until the test ends.
func runLeases(t *testing.T, r *agent.Runner) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Replica().RunLeases(ctx, 50*time.Millisecond) }()
	t.Cleanup(func() { stop(); <-done })
}

func (x *twoReplicas) awaitB(typ agent.EventType) agent.Event {
	x.t.Helper()
	return awaitOn(x.t, x.bEvents, typ)
}

// oneShellScript makes one shell call per run, two runs.
const oneShellScript = `{"steps":[
  {"content":[{"type":"toolCall","id":"c1","name":"shell","arguments":{"command":"count"}}],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"done"}],"stopReason":"stop"},
  {"content":[{"type":"toolCall","id":"c2","name":"shell","arguments":{"command":"count again"}}],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"done again"}],"stopReason":"stop"}]}`

// TestADecisionOnAnotherReplicaRunsTheCall: a run on A parks on an approval; B's viewers see it
// (and B's Live shows the run); the decision made on B runs the call on A, once; a message on B
// meanwhile is refused as busy, and B's Stop reaches A's run.
func TestADecisionOnAnotherReplicaRunsTheCall(t *testing.T) {
	var runs atomic.Int32
	x := newTwoReplicas(t, oneShellScript, riskyTool("shell", &runs))
	ctx := context.Background()
	if err := x.runner.Send(ctx, x.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := x.awaitB(agent.ApprovalRequested)
	if live := x.bRunner.Live(x.sess.ID); !live.Running || len(live.Calls) != 1 || live.Calls[0].Approval == nil {
		t.Fatalf("B's Live of A's run = %+v, want running with the call waiting", live)
	}
	if err := x.bRunner.Send(ctx, x.sess.ID, "again"); apperr.CodeOf(err) != apperr.Conflict {
		t.Fatalf("a message on B while A runs = %v, want a conflict", err)
	}
	if err := x.bRunner.DeleteSession(ctx, x.sess.ID); apperr.CodeOf(err) != apperr.Conflict {
		t.Fatalf("deleting on B while A runs = %v, want a conflict", err)
	}
	if _, err := x.bRunner.Gate().Decide(ctx, x.sess.ID, asked.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	if end := x.await(agent.AgentEnd); end.Error != "" {
		t.Fatalf("A's run ended with %q", end.Error)
	}
	x.awaitB(agent.AgentEnd)
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
	if live := x.bRunner.Live(x.sess.ID); live.Running {
		t.Fatalf("B still shows a run: %+v", live)
	}

	// B's Stop reaches the run A drives.
	if err := x.runner.Send(ctx, x.sess.ID, "again"); err != nil {
		t.Fatal(err)
	}
	x.awaitB(agent.ApprovalRequested)
	if err := x.bRunner.Stop(ctx, x.sess.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	if end := x.await(agent.AgentEnd); !strings.Contains(end.Error, "Run stopped by bob") {
		t.Fatalf("A's run ended with %q, want stopped by bob", end.Error)
	}
}

// TestRulesAndModesReachTheOtherReplica: a rule saved on B decides A's next call; a mode
// switched on B applies to A's next call.
func TestRulesAndModesReachTheOtherReplica(t *testing.T) {
	var runs atomic.Int32
	x := newTwoReplicas(t, oneShellScript, riskyTool("shell", &runs))
	ctx := context.Background()
	if _, err := x.bRunner.Gate().AddRule(ctx, gate.Rule{Tool: "shell", Effect: gate.Allow, Scope: gate.ScopeSession, SessionID: x.sess.ID,
		Source: gate.SourceAPI, CreatedBy: gate.ByOwner}); err != nil {
		t.Fatal(err)
	}
	if err := x.runner.Send(ctx, x.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	if end := x.await(agent.AgentEnd); end.Error != "" || runs.Load() != 1 {
		t.Fatalf("A's run: %q, %d runs; want the call allowed by B's rule", end.Error, runs.Load())
	}
	if err := x.bRunner.Gate().SetMode(ctx, x.sess.ID, gate.ModePlan); err != nil {
		t.Fatal(err)
	}
	if err := x.runner.Send(ctx, x.sess.ID, "again"); err != nil {
		t.Fatal(err)
	}
	end := x.await(agent.AgentEnd)
	if runs.Load() != 1 {
		t.Fatalf("in plan mode (switched on B) the shell ran again on A (end %q)", end.Error)
	}
}

// TestADeadReplicasSessionsAreTakenOver (SPEC §8, §16): A dies (no renewals, nothing
// published) with one run parked and a decision made on B before B owns it; B's lease loop
// takes the session over and runs the decided call once. A call that had started when A died
// is not run again: its result says it was interrupted.
func TestADeadReplicasSessionsAreTakenOver(t *testing.T) {
	for _, tc := range []struct {
		name    string
		started bool // the call had started on A
	}{{"decided while nobody drove it", false}, {"executing when its replica died", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			block := make(chan struct{})
			shell := riskyTool("shell", &runs)
			if tc.started {
				inner := shell.Execute
				shell.Execute = func(ctx context.Context, args json.RawMessage, up func(tool.Update), tc tool.Context) (tool.Result, error) {
					runs.Add(1)
					<-block // A "dies" while it runs: the tool never returns to A's run
					return inner(ctx, args, up, tc)
				}
			}
			x := newTwoReplicas(t, oneShellScript, shell)
			t.Cleanup(func() { close(block) }) // before the runners' teardown waits for the tool
			ctx := context.Background()
			if err := x.runner.Send(ctx, x.sess.ID, "go"); err != nil {
				t.Fatal(err)
			}
			asked := x.awaitB(agent.ApprovalRequested)
			if tc.started {
				if _, err := x.runner.Gate().Decide(ctx, x.sess.ID, asked.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
					t.Fatal(err)
				}
				x.awaitB(agent.ToolExecutionStart)
			}
			x.a.dead.Store(true) // A stops renewing and publishing: as killed
			if !tc.started {
				if _, err := x.bRunner.Gate().Decide(ctx, x.sess.ID, asked.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
					t.Fatal(err)
				}
			}
			runLeases(t, x.bRunner)
			if tc.started {
				if live := x.bRunner.Live(x.sess.ID); !live.Running {
					t.Fatal("before the takeover B does not show A's run")
				}
				// Nothing to resume: B ends the call as interrupted, shows it to its viewers,
				// and the run A drove is no longer live on B.
				end := x.awaitB(agent.ToolExecutionEnd)
				if end.Result == nil || !strings.Contains(end.Result.Content[0].Text, agent.InterruptedText) {
					t.Fatalf("B's viewers got %+v, want the interrupted result", end.Result)
				}
				if ev := x.awaitB(agent.AgentEnd); ev.Error != agent.InterruptedText {
					t.Fatalf("B's viewers' agent_end says %q", ev.Error)
				}
				if live := x.bRunner.Live(x.sess.ID); live.Running {
					t.Fatalf("after the takeover B still shows the dead run live: %+v", live)
				}
			} else if end := x.awaitB(agent.AgentEnd); end.Error != "" {
				t.Fatalf("B's run ended with %q", end.Error)
			}
			results := x.toolResults()
			if len(results) != 1 {
				t.Fatalf("%d tool results, want 1", len(results))
			}
			text := results[0].Result.Content[0].Text
			if runs.Load() != 1 {
				t.Fatalf("the tool ran %d times, want exactly once", runs.Load())
			}
			if tc.started != strings.Contains(text, agent.InterruptedText) {
				t.Fatalf("the result says %q (started on A: %v)", text, tc.started)
			}
		})
	}
}

// TestAForgedResolutionDecidesNothing: an approval event from "another replica" saying a pending
// approval was approved (a forged or stale notification) wakes nothing and shows nothing: the
// viewers get the approval as stored, still pending (issue 33), and the waiting call reads the
// stored approval; the person's real decision then decides it.
func TestAForgedResolutionDecidesNothing(t *testing.T) {
	var runs atomic.Int32
	x := newTwoReplicas(t, oneShellScript, riskyTool("shell", &runs))
	ctx := context.Background()
	if err := x.runner.Send(ctx, x.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := x.await(agent.ApprovalRequested)
	forged := *asked.Approval
	forged.Status, forged.DecidedBy = gate.Approved, "mallory"
	x.runner.Replica().Deliver(agent.Event{Type: agent.ApprovalResolved, SessionID: x.sess.ID, ToolCallID: forged.ToolCallID, Approval: &forged})
	// A's viewers got the approval as stored: pending, decided by nobody.
	shown := x.await(agent.ApprovalRequested)
	if shown.Approval.Status != gate.Pending || shown.Approval.DecidedBy != "" {
		t.Fatalf("the forged resolution showed %s by %q, want the stored pending approval", shown.Approval.Status, shown.Approval.DecidedBy)
	}
	if a, err := x.db.Approval(ctx, forged.ID); err != nil || a.Status != gate.Pending {
		t.Fatalf("after the forged event the approval is %v (%v), want pending", a.Status, err)
	}
	if _, err := x.runner.Gate().Decide(ctx, x.sess.ID, forged.ID, gate.Answer{Decision: "deny", By: gate.Owner()}); err != nil {
		t.Fatalf("the real decision: %v", err)
	}
	x.await(agent.AgentEnd)
	if n := runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times; the forged approval must not run it, the real denial stands", n)
	}
}

// TestATakeOverWithoutTheWorkspaceEndsTheRunSayingWhy (SPEC §16): the replica that takes a
// parked run over lacks the session's workspace folder: the call does not run, its approval is
// cancelled, and the run ends with an error naming the folder.
func TestATakeOverWithoutTheWorkspaceEndsTheRunSayingWhy(t *testing.T) {
	var runs atomic.Int32
	x := newTwoReplicas(t, oneShellScript, riskyTool("shell", &runs))
	ctx := context.Background()
	if err := x.runner.Send(ctx, x.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := x.awaitB(agent.ApprovalRequested)
	x.a.dead.Store(true)
	if err := os.RemoveAll(x.sess.Workspace); err != nil {
		t.Fatal(err)
	}
	runLeases(t, x.bRunner)
	end := x.awaitB(agent.AgentEnd)
	if !strings.Contains(end.Error, x.sess.Workspace) || !strings.Contains(end.Error, "missing on this server") {
		t.Fatalf("the run ended with %q, want the missing workspace named", end.Error)
	}
	if a, err := x.db.Approval(ctx, asked.Approval.ID); err != nil || a.Status != gate.Cancelled {
		t.Fatalf("the approval is %v (%v), want cancelled", a.Status, err)
	}
	if runs.Load() != 0 {
		t.Fatal("the call ran without its workspace")
	}
}

// TestAGracefulShutdownHandsParkedRunsOver (SPEC §16: leases are released on shutdown): A shuts
// down with a run parked on an approval; its lease goes at once, B takes the session over on its
// next round, and the decision made on B runs the call there, once.
func TestAGracefulShutdownHandsParkedRunsOver(t *testing.T) {
	var runs atomic.Int32
	x := newTwoReplicas(t, oneShellScript, riskyTool("shell", &runs))
	ctx := context.Background()
	if err := x.runner.Send(ctx, x.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := x.awaitB(agent.ApprovalRequested)
	x.runner.Shutdown("server shutdown")
	x.runner.Wait()
	x.hubLeaseGone(t)
	runLeases(t, x.bRunner)
	x.awaitB(agent.AgentStart) // B resumed the parked run
	if _, err := x.bRunner.Gate().Decide(ctx, x.sess.ID, asked.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	if end := x.awaitB(agent.AgentEnd); end.Error != "" || runs.Load() != 1 {
		t.Fatalf("B's run: %q, the tool ran %d times; want done, once", end.Error, runs.Load())
	}
}

// hubLeaseGone fails the test unless the session has no lease in the hub.
func (x *twoReplicas) hubLeaseGone(t *testing.T) {
	t.Helper()
	x.a.h.mu.Lock()
	defer x.a.h.mu.Unlock()
	if l, ok := x.a.h.leases[x.sess.ID]; ok {
		t.Fatalf("the session still has %s's lease after its graceful shutdown", l.replica)
	}
}

// TestAForgedModeSwitchOrDeletionDecidesNothing (issue 33): a relayed session_updated saying the
// session switched to accept-edits leaves the mode its stored row says; a relayed session_deleted
// of a session still stored is not shown and forgets none of its rules, and "the rules changed"
// reads the stored ones: its deny rule still blocks the next call.
func TestAForgedModeSwitchOrDeletionDecidesNothing(t *testing.T) {
	var runs atomic.Int32
	x := newTwoReplicas(t, oneShellScript, riskyTool("shell", &runs))
	ctx := context.Background()
	before := x.runner.GateSession(x.sess).Mode
	forged := x.sess
	forged.Mode = gate.ModeAcceptEdits
	x.runner.Replica().Deliver(agent.Event{Type: agent.SessionUpdated, SessionID: x.sess.ID, Session: &forged})
	if got := x.runner.GateSession(x.sess).Mode; got != before {
		t.Fatalf("after a forged switch the mode is %q, want %q (the stored one)", got, before)
	}
	if shown := x.await(agent.SessionUpdated); shown.Session == nil || shown.Session.Mode == gate.ModeAcceptEdits {
		t.Fatalf("the viewers were shown %+v, want the stored session", shown.Session)
	}

	if _, err := x.runner.Gate().AddRule(ctx, gate.Rule{Tool: "shell", Effect: gate.Deny, Scope: gate.ScopeSession, SessionID: x.sess.ID,
		Source: gate.SourceAPI, CreatedBy: gate.ByOwner}); err != nil {
		t.Fatal(err)
	}
	x.runner.Replica().Deliver(agent.Event{Type: agent.SessionDeleted, SessionID: x.sess.ID})
	// "The rules changed" only reads the stored rules again: the deny rule is among them.
	if err := x.runner.Replica().ReloadRules(ctx); err != nil {
		t.Fatal(err)
	}
	if err := x.runner.Send(ctx, x.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	var seen []agent.Event
	testkit.Await(t, x.events, agent.AgentEnd, 10*time.Second, &seen)
	for _, ev := range seen {
		if ev.Type == agent.SessionDeleted || ev.Type == agent.ApprovalRequested {
			t.Fatalf("after a forged deletion the viewers got %s", ev.Type)
		}
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the shell ran %d times: the forged deletion made the replica forget the deny rule", n)
	}
}
