package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// TestADrainLetsTheExecutingCallFinishAndStartsNothingNew (issue 33, -drain-timeout): Drain
// waits for the call executing, whose result is stored; meanwhile no run starts, and a call
// approved during the drain does not start: Shutdown then stops it, unrun.
func TestADrainLetsTheExecutingCallFinishAndStartsNothingNew(t *testing.T) {
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	peek := &tool.Tool{Name: "peek", InputSchema: objectSchema, Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			close(started)
			<-release
			return tool.Result{Content: []tool.Content{tool.Text("peeked to the end")}}, nil
		}}
	var shells atomic.Int32
	h := newHarness(t, approveScript, nil, peek, riskyTool("shell", &shells))
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	<-started
	drained := make(chan error, 1)
	go func() { drained <- h.runner.Drain(ctx) }()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with a call executing", err)
	case <-time.After(50 * time.Millisecond):
	}
	other, err := h.runner.CreateSession(ctx, "other", h.sess.Model, h.sess.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.runner.Send(ctx, other.ID, "go"); apperr.CodeOf(err) != apperr.Conflict || !strings.Contains(apperr.MessageOf(err), "shutting down") {
		t.Errorf("Send while draining = %v, want a conflict saying the server is shutting down", err)
	}
	close(release)
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("Drain = %v once the call finished", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return after the executing call finished")
	}

	asked := h.await(agent.ApprovalRequested).Approval
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, asked.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	h.await(agent.ApprovalResolved)
	h.runner.Shutdown("server shutdown")
	h.await(agent.AgentEnd)
	if n := shells.Load(); n != 0 {
		t.Errorf("the call approved during the drain ran %d times, want none", n)
	}
	var results []string
	for _, e := range h.entries() {
		if e.Message.Role == agent.ToolResult {
			results = append(results, e.Message.Result.TextOf())
		}
	}
	if len(results) != 2 || results[0] != "peeked to the end" || !strings.Contains(results[1], "Run stopped by server shutdown") {
		t.Errorf("results stored: %q, want the finished call's and the unstarted one stopped", results)
	}
}
