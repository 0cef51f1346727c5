package agent

import "testing"

// TestBrokerCountsItsSubscribers (issue 35): Publish skips everything while nobody subscribes
// at all, so the count must follow subscriptions exactly, an Unsubscribe called twice included:
// a subscriber is never skipped, and nobody left means a count of 0.
func TestBrokerCountsItsSubscribers(t *testing.T) {
	b := NewBroker()
	a, all := b.Subscribe("s"), b.SubscribeApprovals()
	b.Unsubscribe(all)
	b.Unsubscribe(all)
	b.Publish(Event{Type: AgentStart, SessionID: "s"})
	if ev := <-a.C; ev == nil || ev.Type != AgentStart {
		t.Fatalf("the session's subscriber got %v, want agent_start", ev)
	}
	b.Unsubscribe(a)
	b.Unsubscribe(a)
	if n := b.subscribers.Load(); n != 0 {
		t.Fatalf("%d subscribers counted with none left", n)
	}
	b.Publish(Event{Type: AgentStart, SessionID: "s"}) // nobody: nothing to do
	c := b.Subscribe("s")
	b.Publish(Event{Type: ApprovalRequested, SessionID: "s"})
	if ev := <-c.C; ev == nil || ev.Type != ApprovalRequested {
		t.Fatalf("a later subscriber got %v, want approval_requested", ev)
	}
	if n := b.subscribers.Load(); n != 1 {
		t.Errorf("%d subscribers counted, want 1", n)
	}
}
