package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/tool"
)

// groupedSession runs one model call, p (tool parent), that makes 3 nested calls of twig (a
// session rule allows it) and then 1,000 of leaf (its annotations allow it; every 100th call
// fails), and returns the server and the session once the run has ended.
func groupedSession(t *testing.T) (*testServer, agent.Session) {
	t.Helper()
	obj := json.RawMessage(`{"type":"object"}`)
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	leaf := &tool.Tool{Name: "leaf", InputSchema: obj, Annotations: ro,
		Execute: func(_ context.Context, args json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			var in struct{ I int }
			_ = json.Unmarshal(args, &in)
			if in.I%100 == 0 {
				return tool.Result{Content: []tool.Content{tool.Text(fmt.Sprintf("leaf %d failed\nmore", in.I))}, IsError: true}, nil
			}
			return tool.Result{Content: []tool.Content{tool.Text("leaf ok")}}, nil
		}}
	twig := &tool.Tool{Name: "twig", InputSchema: obj, Annotations: ro,
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{Content: []tool.Content{tool.Text("twig ok")}}, nil
		}}
	parent := &tool.Tool{Name: "parent", InputSchema: obj, Annotations: ro,
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			for i := range 3 {
				tc.ExecuteTool(ctx, "twig", map[string]int{"i": i})
			}
			for i := range 1000 {
				tc.ExecuteTool(ctx, "leaf", map[string]int{"i": i})
			}
			return tool.Result{Content: []tool.Content{tool.Text("parent done")}}, nil
		}}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"p","name":"parent","arguments":{}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	ts := newTestServer(t, map[string]string{"grouped": script}, leaf, twig, parent)
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "grouped", "model": "faux:grouped"}, &sess)
	if st := ts.call(t, "POST", "/api/rules", map[string]any{"text": "twig", "effect": "allow", "scope": "session",
		"sessionId": sess.ID}, nil); st != http.StatusCreated {
		t.Fatalf("POST /api/rules = %d", st)
	}
	if st := ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil); st != http.StatusAccepted {
		t.Fatalf("send %d", st)
	}
	// Too many events for a socket viewer to keep up with: wait for the run itself.
	ts.runner.Wait()
	if s, err := ts.db.Session(context.Background(), sess.ID); err != nil || s.State != agent.Idle {
		t.Fatalf("after the run the session is %+v (%v), want idle", s, err)
	}
	return ts, sess
}

// auditRowOf is the audit page's row whose Tool cell names tool.
func auditRowOf(t *testing.T, page, toolName string) string {
	t.Helper()
	for _, row := range regexp.MustCompile(`(?s)<tr[^>]*>.*?</tr>`).FindAllString(page, -1) {
		if strings.Contains(row, `class="col-tool"><code>`+toolName+`</code>`) {
			return row
		}
	}
	t.Fatalf("no audit row for %s", toolName)
	return ""
}

// TestAuditShowsAGroupedRowPerParentToolAndDecision (issue 19): the 1,000 leaf calls are one row
// "×1,000" (read "1,000 calls"), with the first call's id and the first and last decision times;
// its outcome is the calls' together; the 3 twig calls a rule allowed are another; the counts
// above the table add up calls, not rows.
func TestAuditShowsAGroupedRowPerParentToolAndDecision(t *testing.T) {
	ts, sess := groupedSession(t)
	audit := "/sessions/" + sess.ID + "/audit"
	st, page := ts.do(t, "GET", audit, "", "", nil)
	if st != http.StatusOK {
		t.Fatalf("audit %d", st)
	}
	if n := strings.Count(page, `class="col-tool"`); n != 3 {
		t.Errorf("%d rows, want 3: p, the twig group and the leaf group", n)
	}
	if !strings.Contains(page, "1,004 gated calls.") {
		t.Error(`the page does not count "1,004 gated calls."`)
	}
	leaf := auditRowOf(t, page, "leaf")
	for _, want := range []string{
		`<span aria-hidden="true">×1,000</span><span class="visually-hidden">1,000 calls</span>`,
		`<code>p/4</code>`, `first of 1,000`,
		`<span class="note">first</span>`, `<span class="note">last</span>`,
		`title="3 of the 253 kept of 1,000 calls failed: leaf 0 failed"`, `>error</span>`,
		`(automatic)`, `decided by annotation default`, `the first call's:`,
	} {
		if !strings.Contains(leaf, want) {
			t.Errorf("the leaf row lacks %q:\n%s", want, leaf)
		}
	}
	if n := strings.Count(regexp.MustCompile(`(?s)class="col-decided">.*?</td>`).FindString(leaf), "<time "); n != 2 {
		t.Errorf("the leaf row's Decided cell has %d times, want the first and the last", n)
	}
	twig := auditRowOf(t, page, "twig")
	for _, want := range []string{`×3`, `3 calls`, `<code>p/1</code>`, `>ok</span>`, `decided by rule`} {
		if !strings.Contains(twig, want) {
			t.Errorf("the twig row lacks %q:\n%s", want, twig)
		}
	}
	if own := auditRowOf(t, page, "parent"); strings.Contains(own, "call-count") || strings.Contains(own, `class="note">last`) {
		t.Errorf("the model's own call shows as a group:\n%s", own)
	}

	st, page = ts.do(t, "GET", audit+"?tool=leaf", "", "", nil)
	if st != http.StatusOK || !strings.Contains(page, "Showing 1,000 of 1,004 gated calls.") {
		t.Errorf("filtered to leaf: status %d, want the count of calls shown", st)
	}
}

// TestAPIApprovalsCarryCountAndLastAt (issue 19; SPEC §12): the JSON API lists a grouped record
// with count and lastAt; summed, the counts account for every gated call.
func TestAPIApprovalsCarryCountAndLastAt(t *testing.T) {
	ts, sess := groupedSession(t)
	var out struct {
		Approvals []map[string]any `json:"approvals"`
	}
	if st := ts.call(t, "GET", "/api/sessions/"+sess.ID+"/approvals", nil, &out); st != http.StatusOK {
		t.Fatalf("approvals %d", st)
	}
	calls := 0
	byTool := map[string]map[string]any{}
	for _, a := range out.Approvals {
		byTool[a["toolName"].(string)] = a
		if n, ok := a["count"].(float64); ok {
			calls += int(n)
		} else {
			calls++
		}
	}
	if len(out.Approvals) != 3 || calls != 1004 {
		t.Fatalf("%d approvals standing for %d calls, want 3 for 1,004", len(out.Approvals), calls)
	}
	if _, ok := byTool["parent"]["count"]; ok {
		t.Errorf("the model's own call has a count: %v", byTool["parent"])
	}
	if _, ok := byTool["parent"]["lastAt"]; ok {
		t.Errorf("the model's own call has a lastAt: %v", byTool["parent"])
	}
	for name, want := range map[string]float64{"leaf": 1000, "twig": 3} {
		a := byTool[name]
		decided, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(a["decidedAt"]))
		last, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(a["lastAt"]))
		if a["count"] != want || err1 != nil || err2 != nil || last.Before(decided) || a["toolCallId"] == "" {
			t.Errorf("%s: %v, want count %v and a lastAt not before decidedAt", name, a, want)
		}
	}
}

// TestReloadedNestedCardsShowTheirGroupsDecision: after a reload, every kept nested call of a
// group shows the decision its live card showed (the group's record names only the first call;
// the others find it by their nestedCalls entry's approvalId).
func TestReloadedNestedCardsShowTheirGroupsDecision(t *testing.T) {
	ts, sess := groupedSession(t)
	st, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	if st != http.StatusOK {
		t.Fatalf("session page %d", st)
	}
	outcome := regexp.MustCompile(`<p class="approval-outcome outcome-approved" role="status">([^<]*)</p>`)
	for _, id := range []string{"p/1", "p/2", "p/3"} {
		card := regexp.MustCompile(`(?s)data-tool-call-id="` + id + `".*?</article>`).FindString(page)
		m := outcome.FindStringSubmatch(card)
		if m == nil || !strings.Contains(m[1], "approved automatically") || !strings.Contains(m[1], "twig") {
			t.Errorf("reloaded card %s shows no decision of rule twig: %q", id, m)
		}
	}
}
