package hooks

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"countersign/internal/apperr"
)

// FuzzParse feeds arbitrary bodies to Parse for every kind (SPEC §18 "Bad input": a body that is
// not the agent's shape is 400 / 404 / 413 with a reason — never an allow). Seeds: every recorded
// payload. Properties:
//
//   - no panic;
//   - an error is Invalid, TooLarge or NotFound (never Internal) with a message, and gives a zero
//     Event;
//   - an accepted body is one JSON object without an ambiguous key, its event is one the dialect
//     sends, with a session; a tool event has a tool name and an object input whose canonical form
//     and match key are computed without error;
//   - the only answer Parse's result leads to by itself is no verdict: encoding the zero Verdict
//     for the event never yields an allow (no permissionDecision or behavior "allow").
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"claude-code", "codex"} {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(dir, b)
		}
	}
	f.Add("claude-code", []byte(`{"hook_event_name":"PreToolUse","session_id":"s","tool_name":"Bash","tool_input":{"command":"ls","Command":"rm"},"tool_use_id":"t"}`))
	f.Add("codex", []byte(`{"hook_event_name":"PermissionRequest","session_id":"s","tool_name":"Bash","tool_input":[]}`))
	f.Add("gemini", []byte(`{}`))

	f.Fuzz(func(t *testing.T, kind string, body []byte) {
		ev, err := Parse(Kind(kind), body)
		if err != nil {
			switch apperr.CodeOf(err) {
			case apperr.Invalid, apperr.TooLarge, apperr.NotFound:
			default:
				t.Fatalf("code %s: %v", apperr.CodeOf(err), err)
			}
			if apperr.MessageOf(err) == "" {
				t.Fatalf("no message: %v", err)
			}
			if ev.Name != "" || ev.Raw != nil || ev.ToolInput != nil {
				t.Fatalf("an error with an event: %+v", ev)
			}
			return
		}
		if !json.Valid(ev.Raw) || ev.Raw[0] != '{' {
			t.Fatalf("accepted a body that is not one object: %q", body)
		}
		d := dialects[ev.Kind]
		if _, ok := d.events[ev.Name]; !ok || ev.SessionID == "" {
			t.Fatalf("accepted event %q session %q", ev.Name, ev.SessionID)
		}
		if ev.Name == PreToolUse || ev.Name == PermissionRequest || ev.Name == PostToolUse {
			if ev.ToolName == "" || len(ev.ToolInput) == 0 || ev.ToolInput[0] != '{' {
				t.Fatalf("a tool event without a tool: %+v", ev)
			}
			if _, err := CanonicalInput(ev.Kind, ev.ToolName, ev.ToolInput); err != nil {
				t.Fatalf("CanonicalInput of an accepted input: %v", err)
			}
		}
		if ev.Name == PreToolUse || ev.Name == PermissionRequest {
			if _, err := MatchKey(ev); err != nil {
				t.Fatalf("MatchKey of an accepted event: %v", err)
			}
		}
		a, err := Encode(ev.Kind, ev.Name, Verdict{})
		if err != nil {
			t.Fatalf("Encode(no verdict): %v", err)
		}
		if bytes.Contains(a.JSON, []byte(`allow`)) || a.Exit != 0 {
			t.Fatalf("no verdict spelled as %s exit %d", a.JSON, a.Exit)
		}
	})
}
