package mcp

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// TestSessionCallsMCPTools is SPEC §13 through a real session: the model calls tools of a stdio
// server and of a streamable HTTP server; an untrusted server's read-only tool still asks, the
// same tool from a trusted server does not; results, structuredContent included, reach the
// transcript; an isError result with mismatched data keeps the server's text.
func TestSessionCallsMCPTools(t *testing.T) {
	hs := newHTTPServer(t)
	cfg := Config{Servers: []ServerConfig{
		{Name: "files", Command: stdioServerBin, Env: map[string]string{"MCPGODEBUG": "hintomitempty=1"}},
		{Name: "local", Command: stdioServerBin, Trusted: true, Env: map[string]string{"MCPGODEBUG": "hintomitempty=1"}},
		{Name: "remote", URL: hs.URL, Headers: map[string]string{"Authorization": httpToken}, Trusted: true},
	}}
	m, _ := newTestManager(t, cfg)
	ctx := context.Background()
	script := `{"steps":[
	  {"content":[
	    {"type":"toolCall","id":"a","name":"files__echo","arguments":{"text":"untrusted"}},
	    {"type":"toolCall","id":"b","name":"local__echo","arguments":{"text":"trusted"}},
	    {"type":"toolCall","id":"c","name":"remote__add","arguments":{"a":2,"b":3}},
	    {"type":"toolCall","id":"d","name":"local__fail_with_data","arguments":{}},
	    {"type":"toolCall","id":"e","name":"local__bad_output","arguments":{}}
	  ],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`
	env := testkit.New(t, testkit.Options{Scripts: map[string]string{"mcp": script}})
	if _, err := m.RegisterTools(env.Tools); err != nil {
		t.Fatal(err)
	}
	r, db := env.Runner, env.DB
	sess := env.Session("mcp", "faux:mcp")
	sub := env.Broker.Subscribe(sess.ID)
	if err := r.Send(ctx, sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	var asked []string
	timeout := time.After(20 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-sub.C:
			switch ev.Type {
			case agent.ApprovalRequested:
				asked = append(asked, ev.ToolName)
				if _, err := r.Gate().Decide(ctx, sess.ID, ev.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
					t.Fatal(err)
				}
			case agent.AgentEnd:
				done = true
			}
		case <-timeout:
			t.Fatal("the run did not end")
		}
	}
	slices.Sort(asked)
	// files__echo is read-only but untrusted: it asks. local__echo is the same tool, trusted: it
	// does not. remote__add is destructive: it asks. fail_with_data and bad_output: see below.
	if !slices.Contains(asked, "files__echo") || slices.Contains(asked, "local__echo") || !slices.Contains(asked, "remote__add") {
		t.Errorf("approvals asked for %v", asked)
	}
	es, _ := db.Entries(ctx, sess.ID)
	results := map[string]*tool.Result{}
	for _, e := range es {
		if e.Message.Role == agent.ToolResult {
			results[e.Message.ToolCallID] = e.Message.Result
		}
	}
	check := func(id, wantText, wantData string, wantError bool) {
		t.Helper()
		res := results[id]
		if res == nil {
			t.Fatalf("no result for %s", id)
		}
		if res.IsError != wantError || !strings.Contains(res.TextOf(), wantText) {
			t.Errorf("%s: isError %v text %q; want %v and %q", id, res.IsError, res.TextOf(), wantError, wantText)
		}
		if wantData != "" {
			var got, want any
			_ = json.Unmarshal(res.StructuredContent, &got)
			_ = json.Unmarshal([]byte(wantData), &want)
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			if string(gb) != string(wb) {
				t.Errorf("%s: structuredContent %s, want %s", id, res.StructuredContent, wantData)
			}
		}
	}
	check("a", "echo: untrusted", `{"echo":"untrusted"}`, false)
	check("b", "echo: trusted", `{"echo":"trusted"}`, false)
	check("c", "5", `{"sum":5}`, false)
	// An isError result is never validated: the server's own text, not a validation error.
	if res := results["d"]; res == nil || !res.IsError || strings.Contains(res.TextOf(), "violates its outputSchema") || res.ContractViolation != nil {
		t.Errorf("fail_with_data: %+v", res)
	}
	// A success that breaks the outputSchema is a contract violation (SPEC §1 rule 3).
	if res := results["e"]; res == nil || !res.IsError || res.ContractViolation == nil {
		t.Errorf("bad_output: %+v", res)
	}
}
