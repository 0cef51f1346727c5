package agent_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
)

// relayed is agent.Replicas that records what the runner relays and leases everything.
type relayed struct {
	mu     sync.Mutex
	events []agent.Event
	ended  chan struct{} // closed when agent_end is relayed
	once   sync.Once
}

func (r *relayed) Acquire(context.Context, string, string) (bool, error) { return true, nil }
func (r *relayed) Release(context.Context, string, string) error         { return nil }
func (r *relayed) Renew(context.Context) ([]string, error)               { return nil, nil }
func (r *relayed) Orphans(context.Context) ([]string, error)             { return nil, nil }
func (r *relayed) Stop(string, string)                                   {}
func (r *relayed) RulesChanged()                                         {}

func (r *relayed) Publish(ev agent.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	if ev.Type == agent.AgentEnd {
		r.once.Do(func() { close(r.ended) })
	}
}

// eventNames names each event by its type and ids, sorted: publishing to the broker and to the
// replicas are two steps, so two goroutines' events may interleave differently in the two.
func eventNames(evs []agent.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%s %s %s", ev.Type, ev.MessageID, ev.ToolCallID)
	}
	slices.Sort(out)
	return out
}

// TestEveryEventGoesToTheOtherReplicas (SPEC §16, issue 21): every event of a run — the run's
// own (agent_start, turns, messages and their updates, tool calls) as well as the runner's
// (the user's message, approvals, session updates, agent_end) — is handed to Replicas.Publish,
// so another replica's viewers see the run as this one's do.
func TestEveryEventGoesToTheOtherReplicas(t *testing.T) {
	var peeks, shells atomic.Int32
	rel := &relayed{ended: make(chan struct{})}
	h := newHarnessWith(t, approveScript, agent.Config{Replicas: rel}, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	var local []agent.Event
	collect := func(typ agent.EventType) agent.Event {
		t.Helper()
		for {
			select {
			case ev := <-h.events.C:
				local = append(local, *ev)
				if ev.Type == typ {
					return *ev
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s within 10 s", typ)
			}
		}
	}
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	ev := collect(agent.ApprovalRequested)
	if _, err := h.runner.Decide(ctx, h.sess.ID, ev.Approval.ID, agent.Decision{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	collect(agent.AgentEnd)
	select {
	case <-rel.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("agent_end was never relayed")
	}
	rel.mu.Lock()
	got := eventNames(rel.events)
	rel.mu.Unlock()
	want := eventNames(local)
	if !slices.Equal(got, want) {
		t.Fatalf("relayed %d events:\n%q\nthe broker published %d:\n%q", len(got), got, len(want), want)
	}
	for _, typ := range []agent.EventType{agent.AgentStart, agent.TurnStart, agent.MessageStart, agent.ToolExecutionStart, agent.ToolExecutionEnd, agent.TurnEnd} {
		if !slices.ContainsFunc(rel.events, func(ev agent.Event) bool { return ev.Type == typ }) {
			t.Errorf("no %s relayed", typ)
		}
	}
}
