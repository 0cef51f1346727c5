package gate

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestATakeoverKeepsTheApprovalsStoredDeadline (SPEC §16, issue 33): an approval is stored with
// its absolute deadline when it opens, and a gate that attaches to it later — another replica
// taking the session over, with another -approval-timeout — times it out at that deadline, not
// at its own timeout counted from the approval's creation: neither later nor earlier.
func TestATakeoverKeepsTheApprovalsStoredDeadline(t *testing.T) {
	ctx := context.Background()
	open := func(timeout time.Duration) (*memStore, Approval) {
		t.Helper()
		st := &memStore{m: map[string]Approval{}}
		tk, err := New(st, timeout, func(Approval) {}).Open(ctx, Approval{SessionID: "s1", ToolName: "run_command"})
		if err != nil {
			t.Fatal(err)
		}
		stored, _ := st.Approval(ctx, tk.Approval.ID)
		if stored.ExpiresAt == nil || !stored.ExpiresAt.Equal(stored.CreatedAt.Add(timeout)) {
			t.Fatalf("stored deadline = %v, want creation %v + %v", stored.ExpiresAt, stored.CreatedAt, timeout)
		}
		return st, stored
	}

	t.Run("a longer timeout on the taker does not extend it", func(t *testing.T) {
		st, a := open(100 * time.Millisecond)
		taker := New(st, time.Hour, func(Approval) {})
		start := time.Now()
		got := taker.Attach(a).Wait(ctx)
		if got.Status != TimedOut || !strings.Contains(got.Reason, "no decision within 100ms") {
			t.Errorf("after the takeover: %s %q, want timed out within 100ms", got.Status, got.Reason)
		}
		if waited := time.Since(start); waited > 10*time.Second {
			t.Errorf("waited %v for a 100ms deadline", waited)
		}
		if d := taker.Deadline(a); !d.Equal(*a.ExpiresAt) {
			t.Errorf("the taker's Deadline = %v, want the stored %v", d, *a.ExpiresAt)
		}
	})
	t.Run("a shorter timeout on the taker does not shorten it", func(t *testing.T) {
		st, a := open(time.Hour)
		taker := New(st, time.Millisecond, func(Approval) {})
		tk := taker.Attach(a)
		if tk.timeout < 59*time.Minute {
			t.Errorf("the taker waits %v, want the stored deadline's hour", tk.timeout)
		}
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if got := tk.Wait(ctx); got.Status == TimedOut {
			t.Errorf("timed out on the taker's 1ms: %q", got.Reason)
		}
	})
	t.Run("an approval stored without a deadline counts from its creation", func(t *testing.T) {
		st, a := open(time.Hour)
		a.ExpiresAt = nil
		if d := New(st, time.Minute, func(Approval) {}).Deadline(a); !d.Equal(a.CreatedAt.Add(time.Minute)) {
			t.Errorf("Deadline = %v, want creation + the gate's minute", d)
		}
	})
}
