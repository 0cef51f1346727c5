package rules

import (
	"context"
	"encoding/json"
	"testing"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// The prompt says which part the rule did not cover (issue 28): the simple commands no allow
// rule covers, with the rules that covered the rest, or the rule that named the words and why
// it still does not cover them.
func TestShellNoteNamesWhatNoRuleCovers(t *testing.T) {
	set := mustCompile(t, []gate.Rule{
		{Effect: gate.Allow, Tool: "run_command", Specifier: "git diff:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "go test:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "ls:*", Scope: gate.ScopeServer},
	})
	cases := []struct{ cmd, note string }{
		{"git diff && touch x", "`touch x` is not covered by run_command(git diff:*)"},
		{"ls; git diff; touch x; id", "`touch x` is not covered by run_command(git diff:*) or run_command(ls:*); `id` is not covered by run_command(git diff:*) or run_command(ls:*)"},
		{"go test -toolexec ./evil ./...", "`go test -toolexec ./evil ./...` is not covered by run_command(go test:*): -toolexec runs programs or writes files"},
		{"git diff && go test -exec=x", "`go test -exec=x` is not covered by run_command(go test:*): -exec runs programs or writes files"},
		{"git diff $(id)", "the command has a command substitution, which no rule allows"},
		{"git diff > /etc/x", "the command has a redirection outside the workspace (/etc/x), which no rule allows"},
		{"touch x", ""},
		{"git diff", ""},
	}
	for _, tc := range cases {
		d := set.Evaluate(commandCall(tc.cmd))
		if d.Note != tc.note {
			t.Errorf("%q: note %q, want %q", tc.cmd, d.Note, tc.note)
		}
	}
	// Through the gate: the prompt's reason.
	d := gate.Checker{Rules: set}.Check(context.Background(), gate.CheckCall{SessionID: "s1", Workspace: testWorkspace,
		Tool: &tool.Tool{Name: "run_command"}, Arguments: json.RawMessage(`{"command":"git diff && touch x"}`)})
	if d.Outcome != gate.Asked || d.Reason != "`touch x` is not covered by run_command(git diff:*)" {
		t.Fatalf("the gate: %s %q", d.Outcome, d.Reason)
	}
}
