package agent_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
)

// TestALoneServersLeaseLoopParksNothing (issue 29): a runner without Replicas has the
// SingleServer, and its lease loop (cmd/web runs it on a SQLite file too) renews its own runs'
// leases and finds no orphan: a run parked on an approval past the loop's grace (two rounds) is
// still this server's, and the call runs once approved, once.
func TestALoneServersLeaseLoopParksNothing(t *testing.T) {
	var runs atomic.Int32
	h := newHarness(t, oneShellScript, nil, riskyTool("shell", &runs))
	ctx := context.Background()
	runLeases(t, h.runner)
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := h.await(agent.ApprovalRequested)
	time.Sleep(2*agent.LeaseEvery + 500*time.Millisecond) // the loop's grace for a new lease, and more
	if !h.runner.Busy(h.sess.ID) {
		t.Fatal("the parked run is gone: the lease loop took it for lost")
	}
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, asked.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	if end := h.await(agent.AgentEnd); end.Error != "" {
		t.Fatalf("the run ended with %q", end.Error)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
}
