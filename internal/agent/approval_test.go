package agent_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

func TestApproveForSessionReleasesPendingAndLaterCalls(t *testing.T) {
	script := `{"steps":[
	  {"content":[
	    {"type":"toolCall","id":"s1","name":"shell","arguments":{"command":"one"}},
	    {"type":"toolCall","id":"s2","name":"shell","arguments":{"command":"two"}},
	    {"type":"toolCall","id":"s3","name":"shell","arguments":{"command":"three"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"toolCall","id":"s4","name":"shell","arguments":{"command":"four"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	var shells atomic.Int32
	h := newHarness(t, script, nil, riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	var asked []gate.Approval
	for len(asked) < 3 {
		asked = append(asked, *h.await(agent.ApprovalRequested).Approval)
	}
	// Decide the second one "for session".
	if _, err := h.runner.Decide(ctx, h.sess.ID, asked[1].ID, agent.Decision{Decision: "approve_session", By: "owner"}); err != nil {
		t.Fatal(err)
	}
	if end := h.await(agent.AgentEnd); end.Error != "" {
		t.Fatalf("run error %q", end.Error)
	}
	if got := shells.Load(); got != 4 {
		t.Fatalf("shell ran %d times, want 4 (three released, one granted)", got)
	}
	as, err := h.db.Approvals(ctx, h.sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	human, automatic := 0, 0
	for _, a := range as {
		if a.Status != gate.Approved {
			t.Errorf("approval %s is %s", a.ToolCallID, a.Status)
		}
		if a.Automatic {
			automatic++
			if a.DerivedFrom != asked[1].ID || a.DecidedBy != "session grant" {
				t.Errorf("automatic decision %+v does not point at the human one %s", a, asked[1].ID)
			}
		} else {
			human++
			if a.Scope != gate.Session || a.DecidedBy != "owner" {
				t.Errorf("human decision %+v, want scope session by owner", a)
			}
		}
	}
	if human != 1 || automatic != 3 {
		t.Errorf("%d human and %d automatic decisions, want 1 and 3", human, automatic)
	}
}

func TestApprovalTimeoutIsNotADenial(t *testing.T) {
	var peeks, shells atomic.Int32
	h := newHarnessWith(t, approveScript, agent.Config{ApprovalTimeout: 300 * time.Millisecond},
		readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	ev := h.await(agent.ApprovalRequested)
	resolved := h.await(agent.ApprovalResolved)
	if resolved.Approval.Status != gate.TimedOut {
		t.Fatalf("resolved as %s, want timed_out", resolved.Approval.Status)
	}
	h.await(agent.AgentEnd)
	if _, err := h.runner.Decide(ctx, h.sess.ID, ev.Approval.ID, agent.Decision{Decision: "approve", By: "owner"}); apperr.CodeOf(err) != apperr.Conflict {
		t.Fatalf("late approve: %v, want conflict", err)
	}
	res := h.toolResults()[1].Result
	if !res.IsError || !strings.Contains(res.TextOf(), "Approval timed out") {
		t.Errorf("result %q, want the timeout error", res.TextOf())
	}
	if shells.Load() != 0 {
		t.Error("a timed-out call ran")
	}
}

func TestParallelCallsPairWithTheirDecisions(t *testing.T) {
	script := `{"steps":[
	  {"content":[
	    {"type":"toolCall","id":"w1","name":"shell","arguments":{"command":"1"}},
	    {"type":"toolCall","id":"w2","name":"shell","arguments":{"command":"2"}},
	    {"type":"toolCall","id":"w3","name":"shell","arguments":{"command":"3"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	var shells atomic.Int32
	h := newHarness(t, script, nil, riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	byCall := map[string]string{}
	for len(byCall) < 3 {
		a := h.await(agent.ApprovalRequested).Approval
		byCall[a.ToolCallID] = a.ID
	}
	for _, d := range []struct{ call, decision string }{{"w3", "approve"}, {"w1", "deny"}, {"w2", "approve"}} {
		if _, err := h.runner.Decide(ctx, h.sess.ID, byCall[d.call], agent.Decision{Decision: d.decision, Reason: "r-" + d.call, By: "owner"}); err != nil {
			t.Fatal(err)
		}
	}
	h.await(agent.AgentEnd)
	rs := h.toolResults()
	want := []struct{ id, text string }{{"w1", "Denied by owner: r-w1"}, {"w2", `ran {"command":"2"}`}, {"w3", `ran {"command":"3"}`}}
	for i, w := range want {
		if rs[i].ToolCallID != w.id || rs[i].Result.TextOf() != w.text {
			t.Errorf("result %d = %s %q, want %s %q (stored in the model's order)", i, rs[i].ToolCallID, rs[i].Result.TextOf(), w.id, w.text)
		}
	}
}
