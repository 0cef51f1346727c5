package web_test

import (
	"context"
	"encoding/json"
	"html"
	"slices"
	"strings"
	"sync"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/rules"
	"countersign/internal/tool"
)

// recordingTool is a tool with no annotations (so every call asks) that records the value of
// its argument key on each run.
func recordingTool(name, key string, ran *[]string, mu *sync.Mutex) *tool.Tool {
	return &tool.Tool{Name: name,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"` + key + `":{"type":"string"}},"required":["` + key + `"]}`),
		Execute: func(_ context.Context, args json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			var in map[string]any
			_ = json.Unmarshal(args, &in)
			mu.Lock()
			*ran = append(*ran, in[key].(string))
			mu.Unlock()
			return tool.Result{Content: []tool.Content{tool.Text("ok")}}, nil
		}}
}

// TestApproveForSessionSavesTheNarrowedRuleNeverTheWholeTool (issue 34, acceptance 4; SPEC §3):
// "Approve for session" on a tool whose arguments carry the risk saves, for the session, the
// narrowed rule "Always allow…" suggests: after `touch a.txt` a later `touch b.txt` runs without
// asking but `curl …` still asks; on an MCP meta-tool called with name=gmail_send_message it
// does not cover name=drive_share_file_publicly.
func TestApproveForSessionSavesTheNarrowedRuleNeverTheWholeTool(t *testing.T) {
	var mu sync.Mutex
	var ran []string
	script := func(tool, key, first, second, third string) string {
		call := func(id, v string) string {
			return `{"type":"toolCall","id":"` + id + `","name":"` + tool + `","arguments":{"` + key + `":"` + v + `"}}`
		}
		return `{"steps":[
  {"content":[` + call("c1", first) + `],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"First done."}],"stopReason":"stop"},
  {"content":[` + call("c2", second) + `,` + call("c3", third) + `],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"Done."}],"stopReason":"stop"}]}`
	}
	ts := newTestServerAgent(t, map[string]string{
		"touch": script("run_command", "command", "touch a.txt", "touch b.txt", "curl https://example.com/x"),
		"mcp":   script("composio_execute", "name", "gmail_send_message", "gmail_send_message", "drive_share_file_publicly"),
	}, nil, func(c *agent.Config) {
		c.CompileRules, c.ParseRule, c.SuggestRule = rules.Compiler, rules.Parse, rules.Suggest
	}, recordingTool("run_command", "command", &ran, &mu), recordingTool("composio_execute", "name", &ran, &mu))

	for _, tt := range []struct {
		script, first, covered, asks, rule string
	}{
		{"touch", "touch a.txt", "touch b.txt", "curl https://example.com/x", "run_command(touch:*)"},
		{"mcp", "gmail_send_message", "gmail_send_message", "drive_share_file_publicly", "composio_execute(name=gmail_send_message)"},
	} {
		t.Run(tt.script, func(t *testing.T) {
			mu.Lock()
			ran = nil
			mu.Unlock()
			var sess agent.Session
			ts.call(t, "POST", "/api/sessions", map[string]string{"title": tt.script, "model": "faux:" + tt.script}, &sess)
			events := ts.events(t, sess.ID)
			next(t, events, "snapshot")
			ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
			a := next(t, events, "approval_requested")["approval"].(map[string]any)
			// The prompt says, before the person chooses it, what the button will allow.
			_, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
			note := page[strings.Index(page, `data-testid="session-grant">`)+1:]
			note = strings.Join(strings.Fields(note[:strings.Index(note, "</p>")]), " ")
			if want := `Approve for session allows, in this session: <code>` + html.EscapeString(tt.rule) + `</code>`; !strings.HasSuffix(note, want) {
				t.Errorf("the prompt says %q, want %q", note, want)
			}
			if st := ts.call(t, "POST", "/api/approvals/"+a["id"].(string)+"/decision", map[string]any{"decision": "approve_session"}, nil); st != 200 {
				t.Fatalf("approve_session = %d", st)
			}
			next(t, events, "agent_end")

			ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "again"}, nil)
			b := next(t, events, "approval_requested")["approval"].(map[string]any)
			if b["toolCallId"] != "c3" {
				t.Fatalf("the second turn asked for %v (%v), want only c3 (%s)", b["toolCallId"], b["arguments"], tt.asks)
			}
			if st := ts.call(t, "POST", "/api/approvals/"+b["id"].(string)+"/decision", map[string]any{"decision": "deny", "reason": "no"}, nil); st != 200 {
				t.Fatalf("deny = %d", st)
			}
			next(t, events, "agent_end")
			mu.Lock()
			got := slices.Clone(ran)
			mu.Unlock()
			if want := []string{tt.first, tt.covered}; !slices.Equal(got, want) {
				t.Errorf("ran %q, want %q (the session rule covers the second, not %q)", got, want, tt.asks)
			}
			var list struct{ Rules []listedRule }
			ts.call(t, "GET", "/api/rules", nil, &list)
			var texts []string
			for _, rl := range list.Rules {
				if rl.SessionID == sess.ID {
					texts = append(texts, rl.Text)
				}
			}
			if !slices.Equal(texts, []string{tt.rule}) {
				t.Errorf("the session's rules %q, want the narrowed %q", texts, tt.rule)
			}
		})
	}
}

// TestApproveForSessionWithAnEditNarrowsToTheEditedCall: "Approve for session" with edited
// arguments approves the edited call, so the session rule it saves is narrowed from the edited
// arguments, never from the ones the model asked for: a person who turned `rm -rf /tmp/x` into
// `touch a.txt` gets `run_command(touch:*)`, not a rule that lets the next `rm …` through.
func TestApproveForSessionWithAnEditNarrowsToTheEditedCall(t *testing.T) {
	var mu sync.Mutex
	var ran []string
	call := func(id, v string) string {
		return `{"type":"toolCall","id":"` + id + `","name":"run_command","arguments":{"command":"` + v + `"}}`
	}
	script := `{"steps":[
  {"content":[` + call("c1", "rm -rf /tmp/x") + `],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"First done."}],"stopReason":"stop"},
  {"content":[` + call("c2", "rm -rf /tmp/y") + `],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"Done."}],"stopReason":"stop"}]}`
	ts := newTestServerAgent(t, map[string]string{"edit": script}, nil, func(c *agent.Config) {
		c.CompileRules, c.ParseRule, c.SuggestRule = rules.Compiler, rules.Parse, rules.Suggest
	}, recordingTool("run_command", "command", &ran, &mu))

	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "edit", "model": "faux:edit"}, &sess)
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	a := next(t, events, "approval_requested")["approval"].(map[string]any)
	if st := ts.call(t, "POST", "/api/approvals/"+a["id"].(string)+"/decision", map[string]any{"decision": "approve_session",
		"arguments": map[string]string{"command": "touch a.txt"}}, nil); st != 200 {
		t.Fatalf("approve_session with an edit = %d", st)
	}
	next(t, events, "agent_end")
	var list struct{ Rules []listedRule }
	ts.call(t, "GET", "/api/rules", nil, &list)
	var texts []string
	for _, rl := range list.Rules {
		if rl.SessionID == sess.ID {
			texts = append(texts, rl.Text)
		}
	}
	if want := []string{"run_command(touch:*)"}; !slices.Equal(texts, want) {
		t.Errorf("the session's rules %q, want %q: narrowed from the edited call, which is the one approved", texts, want)
	}

	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "again"}, nil)
	b := next(t, events, "approval_requested")["approval"].(map[string]any)
	if b["toolCallId"] != "c2" {
		t.Fatalf("asked for %v, want c2", b["toolCallId"])
	}
	if st := ts.call(t, "POST", "/api/approvals/"+b["id"].(string)+"/decision", map[string]any{"decision": "deny", "reason": "no"}, nil); st != 200 {
		t.Fatalf("deny = %d", st)
	}
	next(t, events, "agent_end")
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"touch a.txt"}; !slices.Equal(ran, want) {
		t.Errorf("ran %q, want %q", ran, want)
	}
}
