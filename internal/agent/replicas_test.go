package agent_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/testkit"
)

// publishedReplicas is an agent.Replicas that holds every lease and records what the runner
// hands the other replicas.
type publishedReplicas struct {
	mu     sync.Mutex
	events []agent.Event
}

func (p *publishedReplicas) Acquire(context.Context, string, string) (bool, error) { return true, nil }
func (p *publishedReplicas) Release(context.Context, string, string) error         { return nil }
func (p *publishedReplicas) Hold(context.Context, string, string) (bool, error)    { return true, nil }
func (p *publishedReplicas) Renew(context.Context) ([]string, error)               { return nil, nil }
func (p *publishedReplicas) Orphans(context.Context) ([]string, error)             { return nil, nil }
func (p *publishedReplicas) Stop(string, string)                                   {}
func (p *publishedReplicas) RulesChanged()                                         {}
func (p *publishedReplicas) MarkStarted(context.Context, string) error             { return nil }
func (p *publishedReplicas) Started(context.Context, []string) (map[string]bool, error) {
	return nil, nil
}
func (p *publishedReplicas) Publish(ev agent.Event) {
	p.mu.Lock()
	p.events = append(p.events, ev)
	p.mu.Unlock()
}

// TestEveryEventARunPublishesGoesToTheOtherReplicas (SPEC §16): the other replicas get every
// event this replica's viewers get, in the same order — the run's own (agent_start, the
// assistant's message, tool_execution_*) as well as the runner's — so a page served by another
// replica shows the run as it happens.
func TestEveryEventARunPublishesGoesToTheOtherReplicas(t *testing.T) {
	var peeks atomic.Int32
	reps := &publishedReplicas{}
	h := newHarnessWith(t, `{"steps": [
  {"content": [{"type": "text", "text": "Reading."},
               {"type": "toolCall", "id": "c1", "name": "peek", "arguments": {"path": "README.md"}}], "stopReason": "toolUse"},
  {"content": [{"type": "text", "text": "Done."}], "stopReason": "stop"}
]}`, agent.Config{Replicas: reps}, readOnlyTool("peek", &peeks))
	if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	var local []agent.Event
	testkit.Await(t, h.events, agent.AgentEnd, 0, &local)

	types := func(evs []agent.Event) []agent.EventType {
		var out []agent.EventType
		for _, ev := range evs {
			out = append(out, ev.Type)
		}
		return out
	}
	// The replicas' copy of an event is handed over just after the local viewers' (one publish,
	// two sinks): wait for the last one to arrive there too.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		reps.mu.Lock()
		n := len(reps.events)
		reps.mu.Unlock()
		if n >= len(local) || time.Now().After(deadline) {
			break
		}
	}
	reps.mu.Lock()
	defer reps.mu.Unlock()
	got, want := types(reps.events), types(local)
	if !slices.Equal(got, want) {
		t.Fatalf("the other replicas got\n%v\nwant what the local viewers got\n%v", got, want)
	}
	for _, typ := range []agent.EventType{agent.AgentStart, agent.MessageStart, agent.MessageEnd, agent.ToolExecutionStart, agent.ToolExecutionEnd} {
		if !slices.Contains(got, typ) {
			t.Errorf("no %s among the events the other replicas got", typ)
		}
	}
}
