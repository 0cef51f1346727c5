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
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, asked[1].ID, gate.Answer{Decision: "approve_session", By: gate.Owner()}); err != nil {
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
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); apperr.CodeOf(err) != apperr.Conflict {
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
		if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, byCall[d.call], gate.Answer{Decision: d.decision, Reason: "r-" + d.call, By: gate.Owner()}); err != nil {
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

// TestDecideKeepsAReviewerToTheirLinksRights: the runner refuses, with apperr.Forbidden and
// nothing changed, an edit from a decider without Rights.Edit and approve_session from one
// without Rights.Remember; within its rights the decision is recorded with the decider's name
// and link, and a session grant with them too; revoking the grant makes the next call ask.
func TestDecideKeepsAReviewerToTheirLinksRights(t *testing.T) {
	script := `{"steps":[
	  {"content":[{"type":"toolCall","id":"s1","name":"shell","arguments":{"command":"one"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"toolCall","id":"s2","name":"shell","arguments":{"command":"two"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"toolCall","id":"s3","name":"shell","arguments":{"command":"three"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"},
	  {"content":[{"type":"toolCall","id":"s4","name":"shell","arguments":{"command":"four"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	var shells atomic.Int32
	h := newHarness(t, script, nil, riskyTool("shell", &shells))
	ctx := context.Background()
	via := &gate.LinkRef{LinkID: "l1", Label: "Design review"}
	plain := gate.Decider{Name: "alice", Via: via}
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	first := h.await(agent.ApprovalRequested).Approval
	for _, d := range []gate.Answer{
		{Decision: "approve", Arguments: []byte(`{"command":"rm -rf /"}`), By: plain},
		{Decision: "deny", Arguments: []byte(`{"command":"x"}`), By: plain},
		{Decision: "approve_session", By: plain},
		{Decision: "approve_session", By: gate.Decider{Name: "alice", Via: via, Rights: gate.Rights{Edit: true}}},
	} {
		if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, first.ID, d); apperr.CodeOf(err) != apperr.Forbidden {
			t.Errorf("Decide(%s, arguments %s, rights %+v) = %v, want forbidden", d.Decision, d.Arguments, d.By.Rights, err)
		}
	}
	if a, _ := h.db.Approval(ctx, first.ID); a.Status != gate.Pending {
		t.Fatalf("after refused decisions the approval is %s", a.Status)
	}
	editor := gate.Decider{Name: "alice", Via: via, Rights: gate.Rights{Edit: true}}
	a, err := h.runner.Gate().Decide(ctx, h.sess.ID, first.ID, gate.Answer{Decision: "approve", Arguments: []byte(`{"command":"uno"}`), By: editor})
	if err != nil {
		t.Fatal(err)
	}
	if a.DecidedBy != "alice" || a.DecidedVia == nil || *a.DecidedVia != *via || string(a.EditedArguments) != `{"command":"uno"}` {
		t.Errorf("decided %+v via %+v: want alice through l1, edited", a, a.DecidedVia)
	}
	second := h.await(agent.ApprovalRequested).Approval
	rememberer := gate.Decider{Name: "bob", Via: &gate.LinkRef{LinkID: "l2", Label: "Ops"}, Rights: gate.Rights{Remember: true}}
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, second.ID, gate.Answer{Decision: "approve_session", By: rememberer}); err != nil {
		t.Fatal(err)
	}
	if end := h.await(agent.AgentEnd); end.Error != "" {
		t.Fatalf("run error %q", end.Error)
	}
	if got := shells.Load(); got != 3 {
		t.Fatalf("shell ran %d times, want 3 (the third let through by bob's grant)", got)
	}
	grants, err := h.runner.Gate().Grants(ctx, h.sess.ID)
	if err != nil || len(grants) != 1 || grants[0].GrantedBy != "bob" || grants[0].GrantedVia == nil || grants[0].GrantedVia.LinkID != "l2" {
		t.Fatalf("grants %+v (%v): want bob's through l2", grants, err)
	}
	if err := h.runner.Gate().RevokeGrant(ctx, h.sess.ID, "shell"); err != nil {
		t.Fatal(err)
	}
	if err := h.runner.Gate().RevokeGrant(ctx, h.sess.ID, "shell"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("revoking twice = %v, want not found", err)
	}
	if err := h.runner.Send(ctx, h.sess.ID, "again"); err != nil {
		t.Fatal(err)
	}
	if ev := h.await(agent.ApprovalRequested); ev.Approval.ToolCallID != "s4" {
		t.Fatalf("after revoke asked %s, want s4", ev.Approval.ToolCallID)
	}
}
