package agent

import (
	"testing"

	"countersign/internal/gate"
)

// TestSubscribeApprovalsGetsEveryApprovalEventOfEverySession: the inbox's one socket per page
// (SPEC §15) hears every session's approval events — any type named approval_*, also one added
// later — and nothing else; the session's own subscribers still get theirs; a dropped or
// unsubscribed approvals subscriber's channel is closed.
func TestSubscribeApprovalsGetsEveryApprovalEventOfEverySession(t *testing.T) {
	b := NewBroker()
	all := b.SubscribeApprovals()
	one := b.Subscribe("s1")
	a := &gate.Approval{ID: "a1", Status: gate.Pending}
	evs := []Event{
		{Type: ApprovalRequested, SessionID: "s1", Approval: a},
		{Type: MessageStart, SessionID: "s1"},
		{Type: ApprovalRequested, SessionID: "s2", Approval: a},
		{Type: EventType("approval_updated"), SessionID: "s3", Approval: a},
		{Type: ToolExecutionStart, SessionID: "s2"},
		{Type: ApprovalResolved, SessionID: "s2", Approval: a},
	}
	for _, ev := range evs {
		b.Publish(ev)
	}
	tests := []struct {
		name string
		sub  *Subscription
		want []string
	}{
		{"every session's approval events", all, []string{"approval_requested/s1", "approval_requested/s2", "approval_updated/s3", "approval_resolved/s2"}},
		{"a session's subscriber still gets its own", one, []string{"approval_requested/s1", "message_start/s1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for range len(tt.want) {
				ev := <-tt.sub.C
				got = append(got, string(ev.Type)+"/"+ev.SessionID)
			}
			select {
			case ev := <-tt.sub.C:
				t.Errorf("one more event %s/%s", ev.Type, ev.SessionID)
			default:
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("got %q, want %q", got, tt.want)
					break
				}
			}
		})
	}
	t.Run("a subscriber that falls behind is dropped", func(t *testing.T) {
		slow := b.SubscribeApprovals()
		for range subscriberBuffer + 1 {
			b.Publish(Event{Type: ApprovalRequested, SessionID: "s9", Approval: a})
		}
		n := 0
		for range slow.C {
			n++
		}
		if n != subscriberBuffer {
			t.Errorf("read %d events before the close, want %d", n, subscriberBuffer)
		}
	})
	b.Unsubscribe(all)
	b.Unsubscribe(all) // twice is safe
	for range all.C {  // the slow case's events, then the close
	}
	b.Publish(Event{Type: ApprovalRequested, SessionID: "s1", Approval: a}) // no panic on a closed channel
}
