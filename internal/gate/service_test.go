package gate_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/store/fixture"
	"countersign/internal/store/sqlite"
	"countersign/internal/tool"
)

// serviceKit is a gate.Service with no agent.Runner at all — the shape an agent session of SPEC
// §18 has: a real store, a tool registry, and the Service's ports played by the test (the
// sessions' workspace and mode; who was told a session or the rules changed). The agent package
// is imported only for the store's session row.
type serviceKit struct {
	db    *sqlite.DB
	g     *gate.Gate
	svc   *gate.Service
	mu    sync.Mutex
	modes map[string]gate.Mode
	// changed are the sessions whose viewers were told; rulesChanged counts the rule changes
	// the other replicas were told of.
	changed      []string
	rulesChanged int
}

func (k *serviceKit) Session(ctx context.Context, id string) (gate.SessionInfo, error) {
	s, err := k.db.Session(ctx, id)
	if err != nil {
		return gate.SessionInfo{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return gate.SessionInfo{ID: s.ID, Workspace: s.Workspace, Mode: k.modes[id]}, nil
}

func (k *serviceKit) SetMode(ctx context.Context, id string, m gate.Mode) error {
	if err := k.db.SetSessionMode(ctx, id, m); err != nil {
		return err
	}
	k.mu.Lock()
	k.modes[id] = m
	k.mu.Unlock()
	return nil
}

func (k *serviceKit) Changed(_ context.Context, id string) {
	k.mu.Lock()
	k.changed = append(k.changed, id)
	k.mu.Unlock()
}

// newServiceKit opens a store with session s1 and a Service over it that knows two tools: run
// ({"command": string}, required) and write ({"path": string}).
func newServiceKit(t *testing.T) *serviceKit {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ws := t.TempDir()
	sess := fixture.Session("s1", time.Now()) // the store's fixture: the gate's tests need no agent types
	sess.Workspace = ws
	if err := db.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	tools := tool.NewRegistry()
	noop := func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
		return tool.Result{}, nil
	}
	for _, tl := range []*tool.Tool{
		{Name: "run", InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`), Execute: noop},
		{Name: "write", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`), Execute: noop},
	} {
		if err := tools.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	k := &serviceKit{db: db, modes: map[string]gate.Mode{}}
	k.g = gate.New(db, time.Hour, nil)
	k.svc = gate.NewService(gate.ServiceConfig{Gate: k.g, Store: db, Sessions: k, Tools: tools,
		RulesChanged: func() { k.mu.Lock(); k.rulesChanged++; k.mu.Unlock() }})
	if err := k.svc.Err(); err != nil {
		t.Fatal(err)
	}
	return k
}

// ask opens a pending approval of a call of toolName with args in s1, as the loop (or an outside
// agent's door) would, and returns its ticket.
func (k *serviceKit) ask(t *testing.T, callID, toolName, args string, approvers int, reviewers ...string) *gate.Ticket {
	t.Helper()
	tk, err := k.g.Open(context.Background(), gate.Approval{SessionID: "s1", ToolCallID: callID, ToolName: toolName,
		Arguments: json.RawMessage(args), RequestedBy: "model", Approvers: approvers, Reviewers: reviewers})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// woken is the decision the waiting call got, or fails when it got none within a second.
func woken(t *testing.T, tk *gate.Ticket) gate.Approval {
	t.Helper()
	ctx, cancel := context.WithTimeoutCause(context.Background(), time.Second, gate.ErrParked)
	defer cancel()
	a := tk.Wait(ctx)
	if a.Status == gate.Pending {
		t.Fatalf("the waiting call of %s was not woken", tk.Approval.ID)
	}
	return a
}

func TestAServiceDecidesApprovalsWithoutARunner(t *testing.T) {
	ctx := context.Background()

	t.Run("the first decision wins; the loser is told who won and the call wakes once", func(t *testing.T) {
		k := newServiceKit(t)
		tk := k.ask(t, "c1", "run", `{"command":"ls"}`, 0)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := "approve"
				if i%2 == 1 {
					d = "deny"
				}
				_, errs[i] = k.svc.Decide(ctx, "s1", tk.Approval.ID, gate.Answer{Decision: d, By: gate.Owner()})
			}()
		}
		wg.Wait()
		got := woken(t, tk)
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
				continue
			}
			var re *gate.ResolvedError
			if !errors.As(err, &re) || apperr.CodeOf(err) != apperr.Conflict {
				t.Fatalf("a losing decision: got %v, want a *gate.ResolvedError (conflict)", err)
			}
			if want := "This approval was already resolved: " + got.Outcome() + "."; apperr.MessageOf(err) != want {
				t.Errorf("loser's message = %q, want %q", apperr.MessageOf(err), want)
			}
			if re.Approval.Status != got.Status {
				t.Errorf("the loser was told %s, the call got %s", re.Approval.Status, got.Status)
			}
		}
		if wins != 1 {
			t.Fatalf("%d decisions won, want exactly 1", wins)
		}
		if stored, _ := k.db.Approval(ctx, tk.Approval.ID); stored.Status != got.Status || stored.DecidedBy != gate.ByOwner {
			t.Errorf("stored %s by %q, the call got %s", stored.Status, stored.DecidedBy, got.Status)
		}
		// Another session's approval is not found there, like an unknown one.
		if _, err := k.svc.Decide(ctx, "other", tk.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("decide from another session: got %v, want not found", err)
		}
	})

	t.Run("only AnySession finds an approval in whichever session; an empty session id finds none", func(t *testing.T) {
		k := newServiceKit(t)
		tk := k.ask(t, "c1", "run", `{"command":"git push"}`, 0)
		if _, err := k.svc.Decide(ctx, "", tk.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("decide with an empty session id: got %v, want not found", err)
		}
		a, err := k.svc.Decide(ctx, gate.AnySession, tk.Approval.ID, gate.Answer{Decision: "deny", By: gate.Owner()})
		if err != nil || a.Status != gate.Denied {
			t.Fatalf("decide in any session: %v, %s", err, a.Status)
		}
		if got := woken(t, tk); got.Status != gate.Denied {
			t.Fatalf("the call woke %s, want denied", got.Status)
		}
	})

	t.Run("several approvers vote; each counts once; the last one needed wakes the call", func(t *testing.T) {
		k := newServiceKit(t)
		tk := k.ask(t, "c1", "run", `{"command":"git push"}`, 2, "alice", "bob")
		alice, bob, carol := named("alice"), named("bob"), named("carol")
		decide := func(by gate.Decider, d string) (gate.Approval, error) {
			return k.svc.Decide(ctx, "s1", tk.Approval.ID, gate.Answer{Decision: d, By: by})
		}
		a, err := decide(alice, "approve")
		if err != nil || a.Status != gate.Pending || a.VotesText() != "1 of 2 approvals — approved by alice" {
			t.Fatalf("alice's vote: %v, %s %q", err, a.Status, a.VotesText())
		}
		if a, err = decide(alice, "approve"); err != nil || a.Approvals() != 1 {
			t.Fatalf("alice again: %v, %d approvals, want counted once", err, a.Approvals())
		}
		if _, err = decide(alice, "deny"); apperr.CodeOf(err) != apperr.Conflict || apperr.MessageOf(err) != "alice already approved this call: one vote per person." {
			t.Fatalf("alice changing her vote: got %q (%v), want the store's one-vote-per-person conflict", apperr.MessageOf(err), err)
		}
		if _, err = decide(carol, "approve"); apperr.CodeOf(err) != apperr.Forbidden || !strings.Contains(err.Error(), "not a listed reviewer") {
			t.Fatalf("carol: got %v, want forbidden (not a listed reviewer)", err)
		}
		if _, err = k.svc.Decide(ctx, "s1", tk.Approval.ID, gate.Answer{Decision: "approve_session", By: bob}); apperr.CodeOf(err) != apperr.Forbidden {
			t.Fatalf("bob for the session without the right: got %v, want forbidden", err)
		}
		bob.Rights.Remember = true
		if _, err = k.svc.Decide(ctx, "s1", tk.Approval.ID, gate.Answer{Decision: "approve_session", By: bob}); apperr.CodeOf(err) != apperr.Invalid ||
			!strings.Contains(err.Error(), "needs 2 approvals") {
			t.Fatalf("bob for the session: got %v, want invalid (each person approves as asked)", err)
		}
		if a, err = decide(bob, "approve"); err != nil || a.Status != gate.Approved {
			t.Fatalf("bob's vote: %v, %s", err, a.Status)
		}
		if got := woken(t, tk); got.Status != gate.Approved || got.Outcome() != "approved by alice and bob" {
			t.Errorf("the call got %s (%s), want approved by alice and bob", got.Status, got.Outcome())
		}
	})

	t.Run("edited arguments are validated again, need the right, and are what is approved", func(t *testing.T) {
		k := newServiceKit(t)
		tk := k.ask(t, "c1", "run", `{"command":"rm -rf /"}`, 0)
		edit := func(by gate.Decider, args string) (gate.Approval, error) {
			return k.svc.Decide(ctx, "s1", tk.Approval.ID, gate.Answer{Decision: "approve", Arguments: json.RawMessage(args), By: by})
		}
		if _, err := edit(named("alice"), `{"command":"ls"}`); apperr.CodeOf(err) != apperr.Forbidden {
			t.Fatalf("an edit without the right: got %v, want forbidden", err)
		}
		if _, err := edit(gate.Owner(), `{"command":5}`); apperr.CodeOf(err) != apperr.Invalid ||
			!strings.Contains(err.Error(), "Arguments do not match the tool's inputSchema") {
			t.Fatalf("an edit against the schema: got %v, want invalid naming the schema", err)
		}
		if a, err := k.svc.CheckEdit(ctx, "s1", tk.Approval.ID, gate.Owner(), json.RawMessage(`{}`)); apperr.CodeOf(err) != apperr.Invalid || a.ID != tk.Approval.ID {
			t.Fatalf("CheckEdit of an edit without command: got %v, want invalid with the approval", err)
		}
		if stored, _ := k.db.Approval(ctx, tk.Approval.ID); stored.Status != gate.Pending {
			t.Fatalf("refused edits changed the approval: %s", stored.Status)
		}
		a, err := edit(gate.Owner(), `{"command": "ls"}`)
		if err != nil || string(a.EditedArguments) != `{"command":"ls"}` {
			t.Fatalf("a valid edit: %v, edited %s", err, a.EditedArguments)
		}
		if got := woken(t, tk); string(got.EffectiveArguments()) != `{"command":"ls"}` {
			t.Errorf("the call runs with %s, want the edit", got.EffectiveArguments())
		}
	})

	t.Run("Always allow… saves a rule, approves the call and releases the pending calls it covers", func(t *testing.T) {
		k := newServiceKit(t)
		first := k.ask(t, "c1", "run", `{"command":"ls"}`, 0)
		second := k.ask(t, "c2", "run", `{"command":"pwd"}`, 0)
		other := k.ask(t, "c3", "write", `{"path":"a"}`, 0)
		a, err := k.svc.Decide(ctx, "s1", first.Approval.ID, gate.Answer{Decision: "remember",
			Rule: &gate.RememberRule{Text: "run", Scope: gate.ScopeSession}, By: gate.Owner()})
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != gate.Approved || a.DecidedBy != gate.ByOwner || a.RuleText != "run" || a.RuleScope != gate.ScopeSession {
			t.Errorf("the decision: %s by %s, rule %q (%s); want approved by owner naming rule run (session)", a.Status, a.DecidedBy, a.RuleText, a.RuleScope)
		}
		if got := woken(t, first); got.Status != gate.Approved {
			t.Errorf("the decided call got %s", got.Status)
		}
		released := woken(t, second)
		// A session rule for a whole tool is a session grant ("Approve for session" makes the same).
		if released.Status != gate.Approved || !released.Automatic || released.DecidedBy != gate.ByGrant || released.RuleID != a.RuleID {
			t.Errorf("the other run call: %s automatic=%v by %q rule %q; want approved automatically by the saved rule %s",
				released.Status, released.Automatic, released.DecidedBy, released.RuleID, a.RuleID)
		}
		if stored, _ := k.db.Approval(ctx, other.Approval.ID); stored.Status != gate.Pending {
			t.Errorf("a call the rule does not cover was %s, want still pending", stored.Status)
		}
		rules := k.svc.Rules()
		if len(rules) != 1 || rules[0].Tool != "run" || rules[0].SessionID != "s1" || rules[0].FromApproval != first.Approval.ID || rules[0].Hits != 1 {
			t.Errorf("rules = %+v, want one session rule for run from the decided approval, hit once (the release)", rules)
		}
		k.mu.Lock()
		changed, told := k.changed, k.rulesChanged
		k.mu.Unlock()
		if told != 1 || len(changed) != 1 || changed[0] != "s1" {
			t.Errorf("told the replicas %d times and the viewers of %v; want once, and s1", told, changed)
		}
	})

	t.Run("a mode switch is stored and never denies a pending call", func(t *testing.T) {
		k := newServiceKit(t)
		tk := k.ask(t, "c1", "run", `{"command":"ls"}`, 0)
		if err := k.svc.SetMode(ctx, "s1", "yolo"); apperr.CodeOf(err) != apperr.Invalid {
			t.Fatalf("an unknown mode: got %v, want invalid", err)
		}
		if err := k.svc.SetMode(ctx, "s1", gate.ModePlan); err != nil {
			t.Fatal(err)
		}
		if s, _ := k.db.Session(ctx, "s1"); s.Mode != gate.ModePlan {
			t.Errorf("stored mode %q, want plan", s.Mode)
		}
		// Plan mode denies later calls, never a pending one retroactively.
		if stored, _ := k.db.Approval(ctx, tk.Approval.ID); stored.Status != gate.Pending {
			t.Errorf("plan mode resolved a pending call: %s", stored.Status)
		}
	})

	t.Run("a decision reads the approval once before the write, and once more when it lost", func(t *testing.T) {
		k := newServiceKit(t)
		cs := &countingStore{DB: k.db}
		g := gate.New(cs, time.Hour, nil)
		svc := gate.NewService(gate.ServiceConfig{Gate: g, Store: cs, Sessions: k, Tools: tool.NewRegistry()})
		open := func(call string) gate.Approval {
			tk, err := g.Open(ctx, gate.Approval{SessionID: "s1", ToolCallID: call, ToolName: "run", Arguments: json.RawMessage(`{}`), RequestedBy: "model"})
			if err != nil {
				t.Fatal(err)
			}
			return tk.Approval
		}
		a := open("c1")
		if _, err := svc.Decide(ctx, "s1", a.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
			t.Fatal(err)
		}
		if cs.reads != 1 {
			t.Errorf("a decision read the approval %d times, want 1", cs.reads)
		}
		// Another decision lands between the read and the write.
		b := open("c2")
		cs.reads, cs.after = 0, func() {
			if _, err := k.db.ResolveApproval(ctx, b.ID, gate.Resolution{Status: gate.Denied, DecidedBy: "bob", At: time.Now()}); err != nil {
				t.Error(err)
			}
		}
		_, err := svc.Decide(ctx, "s1", b.ID, gate.Answer{Decision: "approve", By: gate.Owner()})
		if re, ok := errors.AsType[*gate.ResolvedError](err); !ok || re.Approval.DecidedBy != "bob" {
			t.Fatalf("the lost decision: got %v, want a *gate.ResolvedError naming bob", err)
		}
		if apperr.MessageOf(err) != "This approval was already resolved: denied by bob." {
			t.Errorf("message = %q", apperr.MessageOf(err))
		}
		if cs.reads != 2 {
			t.Errorf("a lost decision read the approval %d times, want 2", cs.reads)
		}
	})
}

// countingStore counts the reads of an approval; after, when set, runs once after the first.
type countingStore struct {
	*sqlite.DB
	reads int
	after func()
}

func (c *countingStore) Approval(ctx context.Context, id string) (gate.Approval, error) {
	c.reads++
	a, err := c.DB.Approval(ctx, id)
	if c.after != nil {
		after := c.after
		c.after = nil
		after()
	}
	return a, err
}

// TestApproveForSessionNeverSavesAToolPatternFromATypedName: "Approve for session" saves a rule
// for the tool the call names, and a rule's tool is a pattern. An outside agent names its own
// tools (a hook's tool_name), so one named `*` or `B?sh` would turn the approval of one call
// into a session rule for every tool, or for another tool, unseen. Such a name is approved once.
func TestApproveForSessionNeverSavesAToolPatternFromATypedName(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"*", "mcp__evil__*", "B?sh", "[B]ash", `mcp\_x`} {
		t.Run(name, func(t *testing.T) {
			k := newServiceKit(t)
			tk := k.ask(t, "c1", name, `{"x":"y"}`, 0)
			a, err := k.svc.Decide(ctx, "s1", tk.Approval.ID, gate.Answer{Decision: "approve_session", By: gate.Owner()})
			if err != nil || a.Status != gate.Approved {
				t.Fatalf("approve_session: %v, %s", err, a.Status)
			}
			for _, rl := range k.svc.Rules() {
				if rl.SessionID == "s1" {
					t.Errorf("approving a call of %q for the session saved rule %q (tool pattern %q)", name, rl.Text(), rl.Tool)
				}
			}
			if a.Scope != gate.Once {
				t.Errorf("the decision's scope is %s, want once: no rule stands for it", a.Scope)
			}
		})
	}
}
