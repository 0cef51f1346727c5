package hooks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"countersign/internal/apperr"
)

// The recorded sessions of ../shared/agents/recorded (copied to testdata/).
const (
	ccSession     = "6c833452-36d6-43d4-9f12-ccea2cc037c8"
	ccPrompt      = "354cf0c0-59bc-42b6-aa34-f09aa9eaa3de"
	ccMCPSession  = "0ca6b725-3577-4f86-adeb-7c79eff56d32"
	ccMCPPrompt   = "1b6b2a73-8d7b-4099-8932-9a2c4b24a060"
	ccAutoSession = "b90a144a-2485-4146-8a10-9c9daa24b9a2"
	ccCmdSession  = "3f596013-bd27-4c11-9d16-0201676f5cc6"
	ccCmdPrompt   = "61ef1d3b-04e0-4cd2-b6dc-7dad20c20eb9"
	ccDeferSess   = "514b1342-e99c-42a2-8637-11b515b7ae56"
	ccCwd         = "/home/dev/ext/proj-cc"
	cxSession     = "01a242d9-2934-7de3-9eb0-b3677d5a3071"
	cxTurn        = "01a242d9-29a9-7e00-b0f4-3a6b5d94c06d"
	cxCwd         = "/home/dev/ext/proj-codex"
	touchInput    = `{"command":"touch /home/dev/ext/proof-1","description":"make a proof file"}`
	touchCodex    = `{"command":"touch /home/dev/ext/proof-1"}`
)

// TestEveryRecordedPayloadParses: each hook payload the real agents sent (Claude Code 2.1.328's
// HTTP bodies and command stdin, Codex 0.169.0's command stdin and the same forwarded by curl)
// parses into the event with its fields: event name, session, turn, working directory, mode, tool
// name, input, tool_use_id, outcome, MCP server, prompt, reason. Every file in testdata/ has a case.
func TestEveryRecordedPayloadParses(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Event // Raw is not compared; ToolInput and ToolResponse are compared as JSON
	}{
		{"claude-code/http-PreToolUse.body.json", Event{Kind: ClaudeCode, Name: PreToolUse, SessionID: ccSession, PromptID: ccPrompt, Cwd: ccCwd, PermissionMode: "default",
			ToolName: "Bash", ToolInput: json.RawMessage(touchInput), ToolUseID: "toolu_fake_103"}},
		{"claude-code/http-PreToolUse-auto.body.json", Event{Kind: ClaudeCode, Name: PreToolUse, SessionID: ccAutoSession, PromptID: "517b9906-228b-4528-ab82-f80f5302a6c3", Cwd: ccCwd, PermissionMode: "auto",
			ToolName: "Bash", ToolInput: json.RawMessage(touchInput), ToolUseID: "toolu_fake_109"}},
		{"claude-code/http-PreToolUse-mcp.body.json", Event{Kind: ClaudeCode, Name: PreToolUse, SessionID: ccMCPSession, PromptID: ccMCPPrompt, Cwd: ccCwd, PermissionMode: "default",
			ToolName: "mcp__proofsrv__proof", ToolInput: json.RawMessage(`{"path":"/home/dev/ext/proof-1"}`), ToolUseID: "toolu_fake_3", MCPServer: &MCPServer{Name: "proofsrv", Source: "project"}}},
		{"claude-code/http-PermissionRequest.body.json", Event{Kind: ClaudeCode, Name: PermissionRequest, SessionID: ccSession, PromptID: ccPrompt, Cwd: ccCwd, PermissionMode: "default",
			ToolName: "Bash", ToolInput: json.RawMessage(touchInput)}},
		{"claude-code/http-PermissionRequest-mcp.body.json", Event{Kind: ClaudeCode, Name: PermissionRequest, SessionID: ccMCPSession, PromptID: ccMCPPrompt, Cwd: ccCwd, PermissionMode: "default",
			ToolName: "mcp__proofsrv__proof", ToolInput: json.RawMessage(`{"path":"/home/dev/ext/proof-1"}`), MCPServer: &MCPServer{Name: "proofsrv", Source: "project"}}},
		{"claude-code/http-PostToolUse.body.json", Event{Kind: ClaudeCode, Name: PostToolUse, SessionID: ccSession, PromptID: ccPrompt, Cwd: ccCwd, PermissionMode: "default",
			ToolName: "Bash", ToolInput: json.RawMessage(touchInput), ToolUseID: "toolu_fake_103",
			ToolResponse: json.RawMessage(`{"stdout":"","stderr":"","interrupted":false,"isImage":false,"noOutputExpected":true}`)}},
		{"claude-code/http-PostToolUse-mcp.body.json", Event{Kind: ClaudeCode, Name: PostToolUse, SessionID: ccMCPSession, PromptID: ccMCPPrompt, Cwd: ccCwd, PermissionMode: "default",
			ToolName: "mcp__proofsrv__proof", ToolInput: json.RawMessage(`{"path":"/home/dev/ext/proof-1"}`), ToolUseID: "toolu_fake_3",
			ToolResponse: json.RawMessage(`[{"type":"text","text":"created /home/dev/ext/proof-1"}]`), MCPServer: &MCPServer{Name: "proofsrv", Source: "project"}}},
		{"claude-code/http-PermissionDenied-auto.body.json", Event{Kind: ClaudeCode, Name: PermissionDenied, SessionID: ccAutoSession, PromptID: "517b9906-228b-4528-ab82-f80f5302a6c3", Cwd: ccCwd, PermissionMode: "auto",
			ToolName: "Bash", ToolInput: json.RawMessage(touchInput), ToolUseID: "toolu_fake_109", Reason: "Classifier unavailable"}},
		{"claude-code/http-UserPromptSubmit.body.json", Event{Kind: ClaudeCode, Name: UserPromptSubmit, SessionID: ccSession, PromptID: ccPrompt, Cwd: ccCwd, PermissionMode: "default",
			Prompt: "make the proof file"}},
		{"claude-code/http-Stop.body.json", Event{Kind: ClaudeCode, Name: Stop, SessionID: ccSession, PromptID: ccPrompt, Cwd: ccCwd, PermissionMode: "default",
			LastAssistantMessage: "done"}},
		{"claude-code/http-SessionEnd.body.json", Event{Kind: ClaudeCode, Name: SessionEnd, SessionID: ccSession, PromptID: ccPrompt, Cwd: ccCwd, Reason: "other"}},
		{"claude-code/command-PreToolUse.stdin.json", Event{Kind: ClaudeCode, Name: PreToolUse, SessionID: ccCmdSession, PromptID: ccCmdPrompt, Cwd: ccCwd, PermissionMode: "default",
			ToolName: "Bash", ToolInput: json.RawMessage(touchInput), ToolUseID: "toolu_fake_91"}},
		{"claude-code/command-PermissionRequest.stdin.json", Event{Kind: ClaudeCode, Name: PermissionRequest, SessionID: ccCmdSession, PromptID: ccCmdPrompt, Cwd: ccCwd, PermissionMode: "default",
			ToolName: "Bash", ToolInput: json.RawMessage(touchInput)}},

		{"codex/command-PreToolUse.stdin.json", Event{Kind: Codex, Name: PreToolUse, SessionID: cxSession, TurnID: cxTurn, Cwd: cxCwd, PermissionMode: "default", Model: "gpt-5.5",
			ToolName: "Bash", ToolInput: json.RawMessage(touchCodex), ToolUseID: "call_fake_27"}},
		{"codex/command-PermissionRequest.stdin.json", Event{Kind: Codex, Name: PermissionRequest, SessionID: cxSession, TurnID: cxTurn, Cwd: cxCwd, PermissionMode: "default", Model: "gpt-5.5",
			ToolName: "Bash", ToolInput: json.RawMessage(touchInput)}},
		{"codex/command-PermissionRequest-after-PreToolUse-updatedInput.stdin.json", Event{Kind: Codex, Name: PermissionRequest, SessionID: "01a242d7-56c9-76c1-992f-55e78c92e0ec", TurnID: "01a242d7-5771-7b01-8b40-15222184dd22", Cwd: cxCwd, PermissionMode: "default", Model: "gpt-5.5",
			ToolName: "Bash", ToolInput: json.RawMessage(`{"command":"touch /home/dev/ext/proof-edited","description":"make a proof file"}`)}},
		{"codex/command-PostToolUse.stdin.json", Event{Kind: Codex, Name: PostToolUse, SessionID: cxSession, TurnID: cxTurn, Cwd: cxCwd, PermissionMode: "default", Model: "gpt-5.5",
			ToolName: "Bash", ToolInput: json.RawMessage(touchCodex), ToolUseID: "call_fake_27", ToolResponse: json.RawMessage(`""`)}},
		{"codex/command-UserPromptSubmit.stdin.json", Event{Kind: Codex, Name: UserPromptSubmit, SessionID: cxSession, TurnID: cxTurn, Cwd: cxCwd, PermissionMode: "default", Model: "gpt-5.5",
			Prompt: "make the proof file"}},
		{"codex/command-Stop.stdin.json", Event{Kind: Codex, Name: Stop, SessionID: cxSession, TurnID: cxTurn, Cwd: cxCwd, PermissionMode: "default", Model: "gpt-5.5",
			LastAssistantMessage: "done"}},
		{"codex/command-SessionStart.stdin.json", Event{Kind: Codex, Name: SessionStart, SessionID: cxSession, Cwd: cxCwd, PermissionMode: "default", Model: "gpt-5.5", Source: "startup"}},
		{"codex/command-SessionEnd.stdin.json", Event{Kind: Codex, Name: SessionEnd, SessionID: cxSession, Cwd: cxCwd, Reason: "other"}},
		{"codex/command-PreModelRequest.stdin.json", Event{Kind: Codex, Name: PreModelRequest, SessionID: cxSession, TurnID: cxTurn, Cwd: cxCwd, Model: "gpt-5.5"}},
		{"codex/command-PostModelRequest.stdin.json", Event{Kind: Codex, Name: PostModelRequest, SessionID: cxSession, TurnID: cxTurn, Cwd: cxCwd, Model: "gpt-5.5"}},
		{"codex/http-via-curl-PreToolUse.body.json", Event{Kind: Codex, Name: PreToolUse, SessionID: "01a242d9-7b4b-7d71-9a7b-bb36e5b22891", TurnID: "01a242d9-7bac-7f41-9ae1-a7f8565a7055", Cwd: cxCwd, PermissionMode: "default", Model: "gpt-5.5",
			ToolName: "Bash", ToolInput: json.RawMessage(touchCodex), ToolUseID: "call_fake_29"}},
		{"codex/http-via-curl-PermissionRequest.body.json", Event{Kind: Codex, Name: PermissionRequest, SessionID: "01a242d9-7b4b-7d71-9a7b-bb36e5b22891", TurnID: "01a242d9-7bac-7f41-9ae1-a7f8565a7055", Cwd: cxCwd, PermissionMode: "default", Model: "gpt-5.5",
			ToolName: "Bash", ToolInput: json.RawMessage(touchInput)}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body := readTestdata(t, tc.file)
			got, err := Parse(tc.want.Kind, body)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !bytes.Equal(got.Raw, bytes.TrimSpace(body)) {
				t.Errorf("Raw is not the body as sent")
			}
			if !strings.HasPrefix(got.TranscriptPath, "/home/dev/ext/home-") {
				t.Errorf("TranscriptPath = %q", got.TranscriptPath)
			}
			assertEvent(t, got, tc.want)
		})
	}
}

// TestDeferredAndResumedPreToolUse: the hook requests of Claude Code's deferral (`defer-*`):
// the first PreToolUse has prompt_id, the one `claude -p --resume` sends has none and the same
// tool_use_id; the answers Countersign recorded then (defer, allow with a reason) are what
// Encode spells for an allow with that reason; the run's result line is not a hook event.
func TestDeferredAndResumedPreToolUse(t *testing.T) {
	type line struct {
		Raw    string `json:"raw"`
		Answer *struct {
			Status int             `json:"status"`
			Body   json.RawMessage `json:"body"`
		} `json:"answer"`
	}
	read := func(file string) line {
		t.Helper()
		sc := bufio.NewScanner(bytes.NewReader(readTestdata(t, file)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			if l.Raw != "" {
				return l
			}
		}
		t.Fatalf("%s: no request", file)
		return line{}
	}
	first, resume := read("claude-code/defer-first-hook-requests.jsonl"), read("claude-code/defer-resume-hook-requests.jsonl")
	a, err := Parse(ClaudeCode, []byte(first.Raw))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(ClaudeCode, []byte(resume.Raw))
	if err != nil {
		t.Fatal(err)
	}
	base := Event{Kind: ClaudeCode, Name: PreToolUse, SessionID: ccDeferSess, Cwd: ccCwd, PermissionMode: "default",
		ToolName: "Bash", ToolInput: json.RawMessage(touchInput), ToolUseID: "toolu_fake_113"}
	wantFirst := base
	wantFirst.PromptID = "788e7a07-2063-430c-a18b-7df80bff7946"
	assertEvent(t, a, wantFirst)
	assertEvent(t, b, base)

	ans, err := Encode(ClaudeCode, PreToolUse, Verdict{Decision: Allow, Reason: "countersigned"})
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, ans.JSON, resume.Answer.Body)

	_, err = Parse(ClaudeCode, readTestdata(t, "claude-code/defer-result-line.json"))
	if apperr.CodeOf(err) != apperr.Invalid || !strings.Contains(apperr.MessageOf(err), "no hook_event_name") {
		t.Errorf("the result line: err = %v, want invalid: no hook_event_name", err)
	}
}

// TestTestdataIsCovered: every file copied from the recordings is used by a test above.
func TestTestdataIsCovered(t *testing.T) {
	src, err := os.ReadFile("hooks_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"claude-code", "codex"} {
		entries, err := os.ReadDir(filepath.Join("testdata", dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !bytes.Contains(src, []byte(`"`+dir+"/"+e.Name()+`"`)) {
				t.Errorf("testdata/%s/%s is not fed to Parse", dir, e.Name())
			}
		}
	}
}

// TestBadBodiesAreRefused: a body that is not the agent's shape is an error with the right code
// and a message naming what is wrong — never an Event.
func TestBadBodiesAreRefused(t *testing.T) {
	pre := string(readTestdata(t, "claude-code/http-PreToolUse.body.json"))
	replace := func(old, new string) string {
		if !strings.Contains(pre, old) {
			t.Fatalf("%q not in the body", old)
		}
		return strings.Replace(pre, old, new, 1)
	}
	for _, tc := range []struct {
		name string
		kind Kind
		body string
		code apperr.Code
		msg  string
	}{
		{"unknown kind", "claud", pre, apperr.NotFound, `unknown hook kind "claud"`},
		{"a kind without a dialect yet", Gemini, pre, apperr.NotFound, `"gemini" is not supported yet`},
		{"empty", ClaudeCode, "", apperr.Invalid, "not valid JSON"},
		{"not JSON", ClaudeCode, "hello", apperr.Invalid, "not valid JSON"},
		{"truncated", ClaudeCode, pre[:len(pre)-2], apperr.Invalid, "not valid JSON"},
		{"trailing garbage", ClaudeCode, pre + "x", apperr.Invalid, "not valid JSON"},
		{"an array", ClaudeCode, "[" + pre + "]", apperr.Invalid, "not a JSON object"},
		{"a string", ClaudeCode, `"PreToolUse"`, apperr.Invalid, "not a JSON object"},
		{"too large", ClaudeCode, replace(`"make a proof file"`, `"`+strings.Repeat("a", MaxBodyBytes)+`"`), apperr.TooLarge, "over the limit"},
		{"no event name", ClaudeCode, replace(`"hook_event_name":"PreToolUse",`, ""), apperr.Invalid, "no hook_event_name"},
		{"unknown event", ClaudeCode, replace(`"PreToolUse"`, `"PreToolUze"`), apperr.Invalid, `"PreToolUze" is not an event claude-code sends`},
		{"event name in another case", ClaudeCode, replace(`"PreToolUse"`, `"pretooluse"`), apperr.Invalid, "is not an event"},
		{"an event of the other agent", ClaudeCode, replace(`"PreToolUse"`, `"PreModelRequest"`), apperr.Invalid, "is not an event claude-code sends"},
		{"event name not a string", ClaudeCode, replace(`"PreToolUse"`, `7`), apperr.Invalid, "hook_event_name must be a string"},
		{"no session", ClaudeCode, replace(`"session_id":"`+ccSession+`",`, ""), apperr.Invalid, "PreToolUse event without session_id"},
		{"empty session", ClaudeCode, replace(`"session_id":"`+ccSession+`"`, `"session_id":""`), apperr.Invalid, "empty session_id"},
		{"null session", ClaudeCode, replace(`"session_id":"`+ccSession+`"`, `"session_id":null`), apperr.Invalid, "without session_id"},
		{"session not a string", ClaudeCode, replace(`"session_id":"`+ccSession+`"`, `"session_id":{"id":1}`), apperr.Invalid, "session_id must be a string"},
		{"no tool_name", ClaudeCode, replace(`"tool_name":"Bash",`, ""), apperr.Invalid, "without tool_name"},
		{"empty tool_name", ClaudeCode, replace(`"tool_name":"Bash"`, `"tool_name":""`), apperr.Invalid, "empty tool_name"},
		{"no tool_input", ClaudeCode, replace(`"tool_input":`+touchInput+`,`, ""), apperr.Invalid, "without tool_input"},
		{"tool_input a string", ClaudeCode, replace(`"tool_input":`+touchInput, `"tool_input":"touch x"`), apperr.Invalid, "tool_input must be a JSON object"},
		{"tool_input an array", ClaudeCode, replace(`"tool_input":`+touchInput, `"tool_input":[`+touchInput+`]`), apperr.Invalid, "tool_input must be a JSON object"},
		{"no tool_use_id on PreToolUse", ClaudeCode, replace(`,"tool_use_id":"toolu_fake_103"`, ""), apperr.Invalid, "without tool_use_id"},
		{"tool_use_id a number", ClaudeCode, replace(`"tool_use_id":"toolu_fake_103"`, `"tool_use_id":103`), apperr.Invalid, "tool_use_id must be a string"},
		{"duplicate key in tool_input", ClaudeCode, replace(`"command":"touch /home/dev/ext/proof-1"`, `"command":"true","command":"touch /home/dev/ext/proof-1"`), apperr.Invalid, `/tool_input/command: the key "command" appears twice`},
		{"case-variant key in tool_input", ClaudeCode, replace(`"command":"touch /home/dev/ext/proof-1"`, `"command":"true","Command":"touch /home/dev/ext/proof-1"`), apperr.Invalid, `"command" and "Command" differ only in case`},
		{"duplicate top-level key", ClaudeCode, replace(`"tool_name":"Bash"`, `"tool_name":"Read","tool_name":"Bash"`), apperr.Invalid, `the key "tool_name" appears twice`},
		{"case-variant top-level key", ClaudeCode, replace(`"tool_name":"Bash"`, `"Tool_Name":"Read","tool_name":"Bash"`), apperr.Invalid, `differ only in case`},
		{"escaped duplicate", ClaudeCode, replace(`"tool_name":"Bash"`, `"tool_name":"Read","tool_n\u0061me":"Bash"`), apperr.Invalid, `appears twice`},
		{"a field only in another case", ClaudeCode, replace(`"tool_name":"Bash"`, `"TOOL_NAME":"Bash"`), apperr.Invalid, "without tool_name"},
		{"stop_hook_active not a boolean", ClaudeCode, strings.Replace(string(readTestdata(t, "claude-code/http-Stop.body.json")), `"stop_hook_active":false`, `"stop_hook_active":"no"`, 1), apperr.Invalid, "stop_hook_active must be true or false"},
		{"UserPromptSubmit without prompt", ClaudeCode, strings.Replace(string(readTestdata(t, "claude-code/http-UserPromptSubmit.body.json")), `,"prompt":"make the proof file"`, "", 1), apperr.Invalid, "without prompt"},
		{"PostToolUse without tool_response", ClaudeCode, strings.Replace(string(readTestdata(t, "claude-code/http-PostToolUse.body.json")), `"tool_response":`, `"tool_responses":`, 1), apperr.Invalid, "without tool_response"},
		{"mcp_server not an object", ClaudeCode, strings.Replace(string(readTestdata(t, "claude-code/http-PreToolUse-mcp.body.json")), `"mcp_server":{"name":"proofsrv","source":"project"}`, `"mcp_server":"proofsrv"`, 1), apperr.Invalid, "mcp_server must be a JSON object"},
		{"mcp_server name not a string", ClaudeCode, strings.Replace(string(readTestdata(t, "claude-code/http-PreToolUse-mcp.body.json")), `"name":"proofsrv"`, `"name":1`, 1), apperr.Invalid, "mcp_server: name must be a string"},
		{"codex PreToolUse without tool_use_id", Codex, strings.Replace(string(readTestdata(t, "codex/command-PreToolUse.stdin.json")), `,"tool_use_id":"call_fake_27"`, "", 1), apperr.Invalid, "without tool_use_id"},
		{"codex has no PermissionDenied", Codex, string(readTestdata(t, "claude-code/http-PermissionDenied-auto.body.json")), apperr.Invalid, `"PermissionDenied" is not an event codex sends`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Parse(tc.kind, []byte(tc.body))
			if err == nil {
				t.Fatalf("Parse accepted it: %v", ev)
			}
			if got := apperr.CodeOf(err); got != tc.code {
				t.Errorf("code = %s, want %s (%v)", got, tc.code, err)
			}
			if got := apperr.MessageOf(err); !strings.Contains(got, tc.msg) {
				t.Errorf("message = %q, want it to contain %q", got, tc.msg)
			}
			if ev.Name != "" || ev.SessionID != "" || ev.ToolInput != nil {
				t.Errorf("a refused body still gave an event: %+v", ev)
			}
		})
	}
}

// TestUnknownFieldsAreKept: fields an agent adds in a later version neither fail the parse nor
// get lost: they stay in Raw. A null optional field is absent.
func TestUnknownFieldsAreKept(t *testing.T) {
	body := strings.Replace(string(readTestdata(t, "claude-code/http-PreToolUse.body.json")), `"cwd":`, `"agent_version":"9.9.9","sandbox":{"on":true},"prompt_id_v2":null,"cwd":`, 1)
	body = strings.Replace(body, `"prompt_id":"`+ccPrompt+`"`, `"prompt_id":null`, 1)
	ev, err := Parse(ClaudeCode, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(ev.Raw, []byte(`"agent_version":"9.9.9"`)) {
		t.Errorf("Raw lost the unknown field")
	}
	if ev.PromptID != "" || ev.ToolUseID != "toolu_fake_103" {
		t.Errorf("PromptID %q ToolUseID %q", ev.PromptID, ev.ToolUseID)
	}
}

// TestMatchKeyPairsPermissionRequestWithItsPreToolUse: the recorded PreToolUse and
// PermissionRequest of one call share a key (Claude Code: the same input; Codex: its
// PermissionRequest adds tool_input.description), whatever the members' order and spacing; a
// call in another session or turn, of another tool or with another input, does not.
func TestMatchKeyPairsPermissionRequestWithItsPreToolUse(t *testing.T) {
	key := func(kind Kind, body string) string {
		t.Helper()
		ev, err := Parse(kind, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		k, err := MatchKey(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(k, "sha256:") || len(k) != len("sha256:")+64 {
			t.Fatalf("key %q", k)
		}
		return k
	}
	file := func(name string) string { return string(readTestdata(t, name)) }
	pairs := [][2]string{
		{"claude-code/http-PreToolUse.body.json", "claude-code/http-PermissionRequest.body.json"},
		{"claude-code/http-PreToolUse-mcp.body.json", "claude-code/http-PermissionRequest-mcp.body.json"},
		{"claude-code/command-PreToolUse.stdin.json", "claude-code/command-PermissionRequest.stdin.json"},
		{"codex/command-PreToolUse.stdin.json", "codex/command-PermissionRequest.stdin.json"},
		{"codex/http-via-curl-PreToolUse.body.json", "codex/http-via-curl-PermissionRequest.body.json"},
	}
	for _, p := range pairs {
		kind := ClaudeCode
		if strings.HasPrefix(p[0], "codex/") {
			kind = Codex
		}
		if a, b := key(kind, file(p[0])), key(kind, file(p[1])); a != b {
			t.Errorf("%s and %s: keys differ", p[0], p[1])
		}
	}

	pre := file("claude-code/http-PreToolUse.body.json")
	base := key(ClaudeCode, pre)
	reordered := strings.Replace(pre, touchInput, ` { "description" : "make a proof file", "command" : "touch /home/dev/ext/proof-1" } `, 1)
	if key(ClaudeCode, reordered) != base {
		t.Errorf("the order or spacing of tool_input's members changed the key")
	}
	for name, body := range map[string]string{
		"another session": strings.Replace(pre, ccSession, "other-session", 1),
		"another turn":    strings.Replace(pre, ccPrompt, "other-prompt", 1),
		"no turn":         strings.Replace(pre, `"prompt_id":"`+ccPrompt+`",`, "", 1),
		"another tool":    strings.Replace(pre, `"tool_name":"Bash"`, `"tool_name":"Bash2"`, 1),
		"another input":   strings.Replace(pre, "proof-1", "proof-2", 1),
		"description":     strings.Replace(pre, "make a proof file", "make another", 1),
	} {
		if key(ClaudeCode, body) == base {
			t.Errorf("%s: same key", name)
		}
	}
	// The edited command Codex's PermissionRequest sees after a PreToolUse updatedInput is another
	// input: it matches a PreToolUse of the edited command, not the original.
	edited := file("codex/command-PermissionRequest-after-PreToolUse-updatedInput.stdin.json")
	orig := strings.NewReplacer("01a242d7-56c9-76c1-992f-55e78c92e0ec", "s", "01a242d7-5771-7b01-8b40-15222184dd22", "t").Replace(edited)
	if key(Codex, orig) == key(Codex, strings.Replace(orig, "proof-edited", "proof-1", 1)) {
		t.Errorf("the edited and the original command share a key")
	}
	// Keyed by the edited input, a Codex PreToolUse finds the PermissionRequest that follows its
	// edit (recorded after a PreToolUse updatedInput).
	afterEdit, err := Parse(Codex, []byte(edited))
	if err != nil {
		t.Fatal(err)
	}
	preEv, err := Parse(Codex, []byte(strings.NewReplacer(cxSession, afterEdit.SessionID, cxTurn, afterEdit.TurnID).Replace(file("codex/command-PreToolUse.stdin.json"))))
	if err != nil {
		t.Fatal(err)
	}
	wantKey, _ := MatchKey(afterEdit)
	if k, _ := MatchKey(preEv); k == wantKey {
		t.Errorf("the original input matches the edited PermissionRequest")
	}
	preEv.ToolInput = json.RawMessage(`{"command":"touch /home/dev/ext/proof-edited"}`)
	if k, _ := MatchKey(preEv); k != wantKey {
		t.Errorf("the PreToolUse keyed by its edit does not match the PermissionRequest after it")
	}
	// Only Codex's Bash drops description.
	mcp := strings.NewReplacer(`"tool_name":"Bash"`, `"tool_name":"mcp__s__t"`).Replace(file("codex/command-PermissionRequest.stdin.json"))
	if key(Codex, mcp) == key(Codex, strings.Replace(mcp, `,"description":"make a proof file"`, "", 1)) {
		t.Errorf("description was dropped from an MCP tool's input")
	}

	ev, err := Parse(ClaudeCode, readTestdata(t, "claude-code/http-PostToolUse.body.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := MatchKey(ev); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("MatchKey(PostToolUse): err = %v, want invalid", err)
	}
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assertEvent compares got with want, ToolInput and ToolResponse as JSON, Raw not at all.
func assertEvent(t *testing.T, got, want Event) {
	t.Helper()
	if want.ToolInput != nil || got.ToolInput != nil {
		assertSameJSON(t, got.ToolInput, want.ToolInput)
	}
	if want.ToolResponse != nil || got.ToolResponse != nil {
		assertSameJSON(t, got.ToolResponse, want.ToolResponse)
	}
	if (got.MCPServer == nil) != (want.MCPServer == nil) || (got.MCPServer != nil && *got.MCPServer != *want.MCPServer) {
		t.Errorf("MCPServer = %+v, want %+v", got.MCPServer, want.MCPServer)
	}
	got.ToolInput, want.ToolInput, got.ToolResponse, want.ToolResponse = nil, nil, nil, nil
	got.MCPServer, want.MCPServer, got.Raw, got.TranscriptPath = nil, nil, nil, ""
	if !equalEvents(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func equalEvents(a, b Event) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func assertSameJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got %q: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want %q: %v", want, err)
	}
	gj, _ := json.Marshal(g)
	wj, _ := json.Marshal(w)
	if !bytes.Equal(gj, wj) {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
