package hooks

import (
	"encoding/json"
	"strings"
	"testing"

	"countersign/internal/apperr"
)

// TestAnswersAreSpelledAsEachAgentHonoursThem: the exact bytes, exit status and standard error of
// allow, deny with a reason, allow with an edit and no verdict, per agent and per event
// (../shared/agents/README.md "Answers"; Claude Code Hooks reference; Codex Hooks).
func TestAnswersAreSpelledAsEachAgentHonoursThem(t *testing.T) {
	edit := json.RawMessage(`{"command":"touch /home/dev/ext/proof-edited", "description":"make a proof file"}`)
	allow := Verdict{Decision: Allow}
	deny := Verdict{Decision: Deny, Reason: "not on Fridays <ok> & \"quoted\""}
	edited := Verdict{Decision: Allow, UpdatedInput: edit}
	none := Verdict{}
	const editJSON = `{"command":"touch /home/dev/ext/proof-edited","description":"make a proof file"}`
	for _, tc := range []struct {
		name   string
		kind   Kind
		event  EventName
		v      Verdict
		json   string
		exit   int
		stderr string
	}{
		// Claude Code, HTTP hooks: the body of a 200; exit and stderr unused.
		{"cc PreToolUse allow", ClaudeCode, PreToolUse, allow, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}`, 0, ""},
		{"cc PreToolUse allow with a reason", ClaudeCode, PreToolUse, Verdict{Decision: Allow, Reason: "rule Bash(git status)"}, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"rule Bash(git status)"}}`, 0, ""},
		{"cc PreToolUse deny", ClaudeCode, PreToolUse, deny, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"not on Fridays <ok> & \"quoted\""}}`, 0, ""},
		{"cc PreToolUse deny without a reason", ClaudeCode, PreToolUse, Verdict{Decision: Deny}, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"Denied in Countersign"}}`, 0, ""},
		{"cc PreToolUse edit", ClaudeCode, PreToolUse, edited, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":` + editJSON + `}}`, 0, ""},
		{"cc PreToolUse no verdict", ClaudeCode, PreToolUse, none, `{}`, 0, ""},
		{"cc PermissionRequest allow", ClaudeCode, PermissionRequest, allow, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}`, 0, ""},
		{"cc PermissionRequest deny", ClaudeCode, PermissionRequest, deny, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"not on Fridays <ok> & \"quoted\""}}}`, 0, ""},
		{"cc PermissionRequest edit", ClaudeCode, PermissionRequest, edited, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow","updatedInput":` + editJSON + `}}}`, 0, ""},
		{"cc PermissionRequest no verdict", ClaudeCode, PermissionRequest, none, `{}`, 0, ""},
		{"cc PostToolUse", ClaudeCode, PostToolUse, none, `{}`, 0, ""},
		{"cc PermissionDenied", ClaudeCode, PermissionDenied, none, `{}`, 0, ""},
		{"cc UserPromptSubmit", ClaudeCode, UserPromptSubmit, none, `{}`, 0, ""},
		{"cc Stop", ClaudeCode, Stop, none, `{}`, 0, ""},
		{"cc SessionEnd", ClaudeCode, SessionEnd, none, `{}`, 0, ""},

		// Codex, command hooks: stdout, exit status, stderr.
		{"codex PreToolUse allow is no verdict", Codex, PreToolUse, allow, ``, 0, ""},
		{"codex PreToolUse deny", Codex, PreToolUse, deny, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"not on Fridays <ok> & \"quoted\""}}`, 2, deny.Reason},
		{"codex PreToolUse deny without a reason", Codex, PreToolUse, Verdict{Decision: Deny}, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"Denied in Countersign"}}`, 2, "Denied in Countersign"},
		{"codex PreToolUse edit", Codex, PreToolUse, edited, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":` + editJSON + `}}`, 0, ""},
		{"codex PreToolUse no verdict", Codex, PreToolUse, none, ``, 0, ""},
		{"codex PermissionRequest allow", Codex, PermissionRequest, allow, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}`, 0, ""},
		{"codex PermissionRequest allow drops an allow's reason", Codex, PermissionRequest, Verdict{Decision: Allow, Reason: "by rule"}, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}`, 0, ""},
		{"codex PermissionRequest deny", Codex, PermissionRequest, deny, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"not on Fridays <ok> & \"quoted\""}}}`, 2, deny.Reason},
		{"codex PermissionRequest no verdict", Codex, PermissionRequest, none, ``, 0, ""},
		{"codex PostToolUse", Codex, PostToolUse, none, ``, 0, ""},
		{"codex UserPromptSubmit", Codex, UserPromptSubmit, none, ``, 0, ""},
		{"codex Stop", Codex, Stop, none, ``, 0, ""},
		{"codex SessionStart", Codex, SessionStart, none, ``, 0, ""},
		{"codex SessionEnd", Codex, SessionEnd, none, ``, 0, ""},
		{"codex PreModelRequest", Codex, PreModelRequest, none, ``, 0, ""},
		{"codex PostModelRequest", Codex, PostModelRequest, none, ``, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Encode(tc.kind, tc.event, tc.v)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if string(a.JSON) != tc.json || a.Exit != tc.exit || a.Stderr != tc.stderr {
				t.Errorf("got  %s exit %d stderr %q\nwant %s exit %d stderr %q", a.JSON, a.Exit, a.Stderr, tc.json, tc.exit, tc.stderr)
			}
			if len(a.JSON) > 0 && !json.Valid(a.JSON) {
				t.Errorf("not JSON: %s", a.JSON)
			}
		})
	}
}

// TestCanEditAndAllowApproves: the table of what each agent honours, which the edit form and the
// gate read (SPEC §18: the edit form only where the agent honours an edit).
func TestCanEditAndAllowApproves(t *testing.T) {
	for _, tc := range []struct {
		kind                 Kind
		event                EventName
		canEdit, allowApprov bool
	}{
		{ClaudeCode, PreToolUse, true, true},
		{ClaudeCode, PermissionRequest, true, true},
		{ClaudeCode, PostToolUse, false, false},
		{Codex, PreToolUse, true, false},
		{Codex, PermissionRequest, false, true},
		{Codex, PostToolUse, false, false},
		{Gemini, PreToolUse, false, false},
		{"nope", PreToolUse, false, false},
	} {
		if got := CanEdit(tc.kind, tc.event); got != tc.canEdit {
			t.Errorf("CanEdit(%s, %s) = %v", tc.kind, tc.event, got)
		}
		if got := AllowApproves(tc.kind, tc.event); got != tc.allowApprov {
			t.Errorf("AllowApproves(%s, %s) = %v", tc.kind, tc.event, got)
		}
	}
}

// TestAnswersThatWouldBeIgnoredAreRefused: an edit where the agent would run the original, an
// edit that is not one unambiguous object, an edit on a deny, a decision on an event that takes
// none, an unknown event or kind — an error, never a silently different answer.
func TestAnswersThatWouldBeIgnoredAreRefused(t *testing.T) {
	obj := json.RawMessage(`{"command":"ls"}`)
	for _, tc := range []struct {
		name  string
		kind  Kind
		event EventName
		v     Verdict
		code  apperr.Code
		msg   string
	}{
		{"codex ignores an edit on PermissionRequest", Codex, PermissionRequest, Verdict{Decision: Allow, UpdatedInput: obj}, apperr.Invalid, "codex ignores updatedInput on PermissionRequest"},
		{"an edit on a deny", ClaudeCode, PreToolUse, Verdict{Decision: Deny, UpdatedInput: obj}, apperr.Invalid, "updatedInput goes with an allow, not with deny"},
		{"an edit without a decision", ClaudeCode, PreToolUse, Verdict{UpdatedInput: obj}, apperr.Invalid, "not with no verdict"},
		{"an edit that is an array", ClaudeCode, PreToolUse, Verdict{Decision: Allow, UpdatedInput: json.RawMessage(`["ls"]`)}, apperr.Invalid, "must be a JSON object"},
		{"an edit that is not JSON", ClaudeCode, PreToolUse, Verdict{Decision: Allow, UpdatedInput: json.RawMessage(`{"command":`)}, apperr.Invalid, "not valid JSON"},
		{"an edit with a repeated key", Codex, PreToolUse, Verdict{Decision: Allow, UpdatedInput: json.RawMessage(`{"command":"ls","COMMAND":"rm -rf /"}`)}, apperr.Invalid, "differ only in case"},
		{"allow on PostToolUse", ClaudeCode, PostToolUse, Verdict{Decision: Allow}, apperr.Invalid, "PostToolUse takes no decision"},
		{"deny on Stop", Codex, Stop, Verdict{Decision: Deny}, apperr.Invalid, "Stop takes no decision"},
		{"an unknown decision", ClaudeCode, PreToolUse, Verdict{Decision: 7}, apperr.Invalid, "unknown decision"},
		{"an event the agent does not send", ClaudeCode, PreModelRequest, Verdict{}, apperr.Invalid, "claude-code sends no PreModelRequest"},
		{"an unknown kind", "gpt", PreToolUse, Verdict{Decision: Allow}, apperr.NotFound, `unknown hook kind "gpt"`},
		{"a kind without a dialect yet", Cursor, PreToolUse, Verdict{Decision: Allow}, apperr.NotFound, "not supported yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Encode(tc.kind, tc.event, tc.v)
			if err == nil {
				t.Fatalf("Encode gave %s exit %d", a.JSON, a.Exit)
			}
			if apperr.CodeOf(err) != tc.code || !strings.Contains(apperr.MessageOf(err), tc.msg) {
				t.Errorf("err = %v, want %s containing %q", err, tc.code, tc.msg)
			}
			if a.JSON != nil || a.Exit != 0 {
				t.Errorf("an error still gave an answer: %+v", a)
			}
		})
	}
}
