package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/tool"
)

// auditOutcomes maps each row of an audit page to its Outcome cell: call id → outcome word.
func auditOutcomes(t *testing.T, html string) map[string]string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr[^>]*>\s*<td[^>]*>.*?</td><td[^>]*><code>[^<]*</code>[^<]*(?:<span class="call-count".*?</span></span>)?</td><td[^>]*><code>([^<]*)</code>.*?class="audit-outcome [^"]*"[^>]*>([^<]*)</span>`)
	out := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(html, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// TestAuditShowsEachGatedCallsOutcome: the audit's Outcome column says what the stored result
// says — ok, error (isError), not run (denied), violation (outputSchema) — for model-issued calls
// from their transcript entry and for nested ones from the parent's nestedCalls record; the
// filters (decision, by, tool, outcome) narrow the rows server side, a value they do not know is
// refused with 400 naming the values they take; times are UTC until the browser's script makes
// them local (issue 16, item 6).
func TestAuditShowsEachGatedCallsOutcome(t *testing.T) {
	obj := json.RawMessage(`{"type":"object"}`)
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	text := func(s string, isError bool) tool.Result {
		return tool.Result{Content: []tool.Content{tool.Text(s)}, IsError: isError}
	}
	peek := &tool.Tool{Name: "peek", InputSchema: obj, Annotations: ro,
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return text("peeked", false), nil
		}}
	broken := &tool.Tool{Name: "broken", InputSchema: obj, Annotations: ro,
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return text("it broke\nsecond line", true), nil
		}}
	liar := &tool.Tool{Name: "liar", InputSchema: obj, Annotations: ro,
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{Content: []tool.Content{tool.Text("n is many")}, StructuredContent: json.RawMessage(`{"n":"many"}`)}, nil
		}}
	parent := &tool.Tool{Name: "parent", InputSchema: obj, Annotations: ro,
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			for _, name := range []string{"peek", "broken", "liar", "shell"} {
				tc.ExecuteTool(ctx, name, map[string]any{"command": "nested"})
			}
			return text("parent done", false), nil
		}}
	script := `{"steps":[{"content":[
	    {"type":"toolCall","id":"p","name":"parent","arguments":{}},
	    {"type":"toolCall","id":"s1","name":"shell","arguments":{"command":"top"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	ts := newTestServer(t, map[string]string{"audit": script}, peek, broken, liar, parent)
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "audit", "model": "faux:audit"}, &sess)
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot") // subscribed: the approvals come as events, not in a later snapshot
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	for range 2 {
		a := next(t, events, "approval_requested")["approval"].(map[string]any)
		decision := map[string]string{"decision": "approve"}
		if a["toolCallId"] == "p/4" {
			decision = map[string]string{"decision": "deny", "reason": "not nested"}
		}
		if st := ts.call(t, "POST", "/api/approvals/"+a["id"].(string)+"/decision", decision, nil); st != http.StatusOK {
			t.Fatalf("deciding %v: %d", a["toolCallId"], st)
		}
	}
	next(t, events, "agent_end")

	audit := "/sessions/" + sess.ID + "/audit"
	st, page := ts.do(t, "GET", audit, "", "", nil)
	if st != http.StatusOK {
		t.Fatalf("audit %d", st)
	}
	want := map[string]string{"p": "ok", "s1": "ok", "p/1": "ok", "p/2": "error", "p/3": "violation", "p/4": "not run"}
	got := auditOutcomes(t, page)
	for id, w := range want {
		if got[id] != w {
			t.Errorf("outcome of %s = %q, want %q (all: %v)", id, got[id], w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d rows, want a row per gated call (%d): %v", len(got), len(want), got)
	}
	if !strings.Contains(page, `title="it broke"`) {
		t.Error("the error's first line is not in its outcome's tooltip")
	}
	// Without JavaScript the times read in UTC, with the UTC value in the tooltip too.
	if !regexp.MustCompile(`<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC" data-localtime><span>\d{4}-\d\d-\d\d</span> <span>\d\d:\d\d:\d\d UTC</span></time>`).MatchString(page) {
		t.Error("no <time> with its UTC value in datetime, title and text")
	}

	for _, tc := range []struct {
		query string
		rows  []string
	}{
		{"?tool=shell", []string{"s1", "p/4"}},
		{"?decision=denied", []string{"p/4"}},
		{"?by=automatic", []string{"p", "p/1", "p/2", "p/3"}},
		{"?by=person", []string{"s1", "p/4"}},
		{"?outcome=not-run", []string{"p/4"}},
		{"?outcome=violation&tool=liar", []string{"p/3"}},
		{"?decision=approved&by=person&tool=shell", []string{"s1"}},
		{"?tool=nothing-by-that-name", nil},
	} {
		t.Run(tc.query, func(t *testing.T) {
			st, page := ts.do(t, "GET", audit+tc.query, "", "", nil)
			if st != http.StatusOK {
				t.Fatalf("status %d", st)
			}
			got := auditOutcomes(t, page)
			if len(got) != len(tc.rows) {
				t.Errorf("rows %v, want %v", got, tc.rows)
			}
			for _, id := range tc.rows {
				if _, ok := got[id]; !ok {
					t.Errorf("row %s missing: %v", id, got)
				}
			}
			if !strings.Contains(page, "Clear filters") {
				t.Error("a filtered page offers no way back")
			}
		})
	}
	st, page = ts.do(t, "GET", audit+"?decision=maybe&tool=shell", "", "", nil)
	if st != http.StatusBadRequest || !strings.Contains(page, `role="alert"`) ||
		!strings.Contains(page, "decision &#34;maybe&#34; is not one of pending, approved, denied, timed_out, cancelled") {
		t.Errorf("an unknown decision: status %d, want 400 naming the values:\n%.400s", st, page)
	}
	if got := auditOutcomes(t, page); len(got) != 2 {
		t.Errorf("with an unknown decision the other filters still apply: rows %v, want s1 and p/4", got)
	}
}
