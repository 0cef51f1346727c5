package agent_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// TestAPausedReplicaThatComesBackWritesNothingAfterATakeOver (h21rev review; SPEC §8, §16):
// A is executing an approved call when it stalls longer than a lease lasts (a VM pause, a GC
// stall, SIGSTOP; reproduced live with kill -STOP on a replica). B takes the session over and
// ends the call "Interrupted by server restart", the session idle. Then A wakes up: its tool
// returns and A's run, which no longer holds the lease, still appends its result. The transcript
// ends with two results for the one call (the model would be sent a tool_result with no
// matching tool_use). Writes of a run whose lease is gone are not fenced.
func TestAPausedReplicaThatComesBackWritesNothingAfterATakeOver(t *testing.T) {
	var runs atomic.Int32
	block := make(chan struct{})
	shell := riskyTool("shell", &runs)
	inner := shell.Execute
	shell.Execute = func(ctx context.Context, args json.RawMessage, up func(tool.Update), tc tool.Context) (tool.Result, error) {
		runs.Add(1)
		<-block // A stalls while its tool runs
		return inner(ctx, args, up, tc)
	}
	x := newTwoReplicas(t, oneShellScript, shell)
	released := false
	t.Cleanup(func() {
		if !released {
			close(block)
		}
	})
	ctx := context.Background()
	if err := x.runner.Send(ctx, x.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := x.awaitB(agent.ApprovalRequested)
	if _, err := x.runner.Gate().Decide(ctx, x.sess.ID, asked.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	x.awaitB(agent.ToolExecutionStart)
	x.a.dead.Store(true) // A stalls: no renewals, nothing published
	runLeases(t, x.bRunner)
	for ev := x.awaitB(agent.SessionUpdated); ev.Session.State != agent.Idle; ev = x.awaitB(agent.SessionUpdated) {
	}
	if n := len(x.toolResults()); n != 1 {
		t.Fatalf("after B's take-over: %d tool results, want 1 (interrupted)", n)
	}
	// A wakes up: it renews again, and its stalled tool returns.
	x.a.dead.Store(false)
	runLeases(t, x.runner)
	released = true
	close(block)
	x.await(agent.AgentEnd)
	results := x.toolResults()
	if len(results) != 1 {
		var texts []string
		for _, r := range results {
			texts = append(texts, r.ToolCallID+": "+r.Result.Content[0].Text)
		}
		t.Fatalf("%d tool results for one call after A came back, want 1: %q", len(results), texts)
	}
}
