package agent_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
)

// TestARecoveredApprovalKeepsItsStoredDeadline (SPEC §16, issue 33): a parked approval that
// another process takes over (a restart, or a replica's takeover: both go through Recover) times
// out at the deadline stored when it opened, whatever the taker's -approval-timeout.
func TestARecoveredApprovalKeepsItsStoredDeadline(t *testing.T) {
	ctx := context.Background()
	t.Run("the taker's shorter timeout does not end it early", func(t *testing.T) {
		var peeks, shells atomic.Int32
		h := newHarnessWith(t, approveScript, agent.Config{ApprovalTimeout: time.Hour}, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
		if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
			t.Fatal(err)
		}
		asked := h.await(agent.ApprovalRequested).Approval
		if asked.ExpiresAt == nil || !asked.ExpiresAt.Equal(asked.CreatedAt.Add(time.Hour)) {
			t.Fatalf("the approval's deadline = %v, want its creation %v + 1h", asked.ExpiresAt, asked.CreatedAt)
		}
		h.runner.Shutdown("server shutdown")
		h.runner.Wait()
		_, db2, sub := h.restartWith(t, func(c *agent.Config) { c.ApprovalTimeout = 20 * time.Millisecond }, approveScript,
			readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
		for quiet := time.After(300 * time.Millisecond); quiet != nil; { // fifteen of the taker's timeouts
			select {
			case ev := <-sub.C:
				if ev != nil && ev.Type == agent.ApprovalResolved {
					t.Fatalf("the taken-over approval was resolved: %+v", ev.Approval)
				}
			case <-quiet:
				quiet = nil
			}
		}
		if a, err := db2.Approval(ctx, asked.ID); err != nil || a.Status != gate.Pending {
			t.Errorf("after the taker's timeout the approval is %s (%v), want still pending", a.Status, err)
		}
	})
	t.Run("the taker's longer timeout does not extend it", func(t *testing.T) {
		var peeks, shells atomic.Int32
		h := newHarnessWith(t, approveScript, agent.Config{ApprovalTimeout: 200 * time.Millisecond}, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
		if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
			t.Fatal(err)
		}
		asked := h.await(agent.ApprovalRequested).Approval
		h.runner.Shutdown("server shutdown")
		h.runner.Wait()
		_, _, sub := h.restartWith(t, func(c *agent.Config) { c.ApprovalTimeout = time.Hour }, approveScript,
			readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
		ev := awaitOn(t, sub, agent.ApprovalResolved)
		if ev.Approval.ID != asked.ID || ev.Approval.Status != gate.TimedOut || ev.Approval.Reason != "no decision within 200ms" {
			t.Errorf("resolved %s %s %q, want %s timed out: no decision within 200ms", ev.Approval.ID, ev.Approval.Status, ev.Approval.Reason, asked.ID)
		}
	})
}
