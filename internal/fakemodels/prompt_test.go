package fakemodels

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestFromPromptFollowsTheDirectivesOfEachRequest(t *testing.T) {
	s := FromPrompt()
	// Claude Code: a context message of its own, then the prompt; Bash offered.
	cc := `{"model":"m","stream":true,"tools":[{"name":"Read"},{"name":"Bash"}],"messages":[
		{"role":"user","content":[{"type":"text","text":"<system-reminder>context</system-reminder>"},{"type":"text","text":"please\nfake-bash: touch marker-1  "}]}]}`
	turn := s(Request{Body: []byte(cc)})
	if turn.ToolName != "Bash" || !strings.Contains(turn.ToolInput, `"command":"touch marker-1"`) {
		t.Fatalf("claude code turn = %+v", turn)
	}
	after := strings.Replace(cc, `]}]}`, `]},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"blocked: not today","is_error":true}]}]}`, 1)
	if turn := s(Request{Body: []byte(after)}); turn.Text != ResultPrefix+"blocked: not today" || turn.ToolName != "" {
		t.Fatalf("after the result = %+v", turn)
	}
	// No directive, or no Bash offered (a side request): text only.
	if turn := s(Request{Body: []byte(`{"messages":[{"role":"user","content":"hello"}],"tools":[{"name":"Bash"}]}`)}); turn.ToolName != "" {
		t.Fatalf("no directive = %+v", turn)
	}
	if turn := s(Request{Body: []byte(`{"messages":[{"role":"user","content":"fake-bash: ls"}]}`)}); turn.ToolName != "" {
		t.Fatalf("no tools = %+v", turn)
	}

	// Codex: exec_command with an escalation; its result; the guardian, which quotes the prompt
	// with "user: " before each line.
	cx := `{"model":"m","stream":true,"tools":[{"type":"function","name":"exec_command"}],"input":[
		{"type":"message","role":"developer","content":[{"type":"input_text","text":"fake-bash: not from here"}]},
		{"type":"message","role":"user","content":[{"type":"input_text","text":"go\nfake-bash: touch marker-2"}]}]}`
	turn = s(Request{Body: []byte(cx)})
	var in map[string]string
	if turn.ToolName != "exec_command" || json.Unmarshal([]byte(turn.ToolInput), &in) != nil || in["cmd"] != "touch marker-2" || in["sandbox_permissions"] != "require_escalated" {
		t.Fatalf("codex turn = %+v", turn)
	}
	out := strings.Replace(cx, `]}]}`, `]},{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"Exit code: 0"}]}`, 1)
	if turn := s(Request{Body: []byte(out)}); turn.Text != ResultPrefix+"Exit code: 0" {
		t.Fatalf("codex after = %+v", turn)
	}
	g := `{"model":"m","stream":true,"prompt_cache_key":"guardian:x","input":[{"type":"message","role":"user","content":[
		{"type":"input_text","text":"[1] Retained source order: 0\nuser: go\nuser: fake-guardian: allow\n\n"}]}]}`
	if turn := s(Request{Body: []byte(g)}); !strings.Contains(turn.Text, `"outcome":"allow"`) {
		t.Fatalf("guardian = %+v", turn)
	}
	if turn := s(Request{Body: []byte(strings.Replace(g, "fake-guardian: allow", "", 1))}); !strings.Contains(turn.Text, `"outcome":"deny"`) {
		t.Fatalf("guardian by default = %+v", turn)
	}
}

func TestFakeToolAsksForTheNamedToolWithItsInput(t *testing.T) {
	s := FromPrompt()
	body := `{"tools":[{"name":"mcp__countersign__stdio__echo"}],"messages":[{"role":"user","content":"go\nfake-tool: mcp__countersign__stdio__echo {\"text\":\"hi\"}"}]}`
	turn := s(Request{Body: []byte(body)})
	if turn.ToolName != "mcp__countersign__stdio__echo" || turn.ToolInput != `{"text":"hi"}` {
		t.Fatalf("turn %+v", turn)
	}
	if turn := s(Request{Body: []byte(strings.Replace(body, `"tools":[{"name":"mcp__countersign__stdio__echo"}]`, `"tools":[]`, 1))}); turn.ToolName != "" {
		t.Errorf("asked for a tool the request does not offer: %+v", turn)
	}
}
