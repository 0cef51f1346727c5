package agent_test

import (
	"context"
	"encoding/json"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// TestAnApprovalRecordsWhyItAsksAndTheSessionWaits: the gate stores why a call waits for a
// person with its approval (issue 16, item 5), and while it waits the session reads as waiting
// for approval, then running again once decided (item 3).
func TestAnApprovalRecordsWhyItAsksAndTheSessionWaits(t *testing.T) {
	obj := json.RawMessage(`{"type":"object"}`)
	ok := func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
		return tool.Result{Content: []tool.Content{tool.Text("done")}}, nil
	}
	// An untrusted MCP server's read-only tool: its annotations alone would let it run.
	remote := &tool.Tool{Name: "files__echo", InputSchema: obj, Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		AlwaysAsk: true, AskReason: "server files is not trusted", Execute: ok}
	plain := &tool.Tool{Name: "plain", InputSchema: obj, Execute: ok}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"r","name":"files__echo"},{"type":"toolCall","id":"p","name":"plain"}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	h := newHarness(t, script, nil, remote, plain)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := map[string]gate.Approval{}
	for len(asked) < 2 {
		a := h.await(agent.ApprovalRequested).Approval
		asked[a.ToolName] = *a
	}
	for name, want := range map[string]string{
		"files__echo": "server files is not trusted",
		"plain":       "it is not marked read-only, and destructiveHint defaults to true",
	} {
		stored, err := h.db.Approval(ctx, asked[name].ID)
		if err != nil {
			t.Fatal(err)
		}
		if asked[name].AskReason != want || stored.AskReason != want {
			t.Errorf("%s asks because %q (shown) / %q (stored), want %q", name, asked[name].AskReason, stored.AskReason, want)
		}
	}
	if s, _ := h.db.Session(ctx, h.sess.ID); s.State != agent.Waiting || s.PendingApprovals != 2 {
		t.Fatalf("while two prompts wait the session is %s with %d pending, want waiting with 2", s.State, s.PendingApprovals)
	}
	for _, a := range asked {
		if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, a.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
			t.Fatal(err)
		}
	}
	h.await(agent.AgentEnd)
	if s, _ := h.db.Session(ctx, h.sess.ID); s.State != agent.Idle || s.PendingApprovals != 0 {
		t.Fatalf("after the run the session is %s with %d pending, want idle with 0", s.State, s.PendingApprovals)
	}
	// Rules' records carry no reason to ask.
	as, _ := h.db.Approvals(ctx, h.sess.ID, "")
	for _, a := range as {
		if a.Automatic && a.AskReason != "" {
			t.Errorf("automatic record of %s has AskReason %q", a.ToolName, a.AskReason)
		}
	}
}
