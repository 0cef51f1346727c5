package rules

import (
	"errors"
	"strings"
	"testing"

	"countersign/internal/gate"
)

// A rule must read as it is written (issue 28, acceptance 10): a rule text holding an invisible
// or bidirectional character is refused with the position of that character.
func TestRuleTextWithHiddenCharactersIsRefusedWithItsPosition(t *testing.T) {
	cases := []struct {
		name, text string
		col        int
		msg        string
	}{
		{"right-to-left override in the specifier", "run_command(git l\u202eog:*)", 18, "U+202E is an invisible or bidirectional character (byte 18)"},
		{"isolate in a path", "write_file(docs/\u2066**)", 17, "U+2066"},
		{"zero-width space in the tool", "read\u200b_file", 5, "U+200B"},
		{"no-break space between words", "run_command(git\u00a0log:*)", 16, "U+00A0"},
		{"carriage return", "run_command(git log:*)\r", 23, "U+000D"},
		{"tag character after a multi-byte letter", "write_file(é\U000E0041/**)", 14, "U+E0041"},
		{"a byte that is not UTF-8", "run_command(git \xff:*)", 17, "not UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse(tc.text)
			var se *SyntaxError
			if !errors.As(err, &se) || se.Col != tc.col || !strings.Contains(se.Msg, tc.msg) {
				t.Fatalf("Parse(%q) = %v, want a syntax error at column %d saying %q", tc.text, err, tc.col, tc.msg)
			}
			// The same text saved through the API (Check splits the text form).
			if _, err := Check(gate.Rule{Effect: gate.Allow, Tool: tc.text, Scope: gate.ScopeServer}); err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Check(%q) = %v, want it refused", tc.text, err)
			}
		})
	}
	// A specifier, tool or `when` given as separate fields is checked the same way.
	for _, r := range []gate.Rule{
		{Effect: gate.Deny, Tool: "run_command", Specifier: "rm\u200b:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "pay__*", When: "args.amount < 100 \u202e&& false", Scope: gate.ScopeServer},
	} {
		if _, err := Check(r); err == nil || !strings.Contains(err.Error(), "invisible or bidirectional") || !strings.Contains(err.Error(), "column ") {
			t.Fatalf("Check(%+v) = %v, want it refused with the column", r, err)
		}
	}
	if _, _, err := Parse("run_command(git log -n\t1:*)"); err != nil {
		t.Fatalf("a tab is visible: %v", err)
	}
}

func TestPolicyFileRuleWithHiddenCharacterNamesItsLineAndColumn(t *testing.T) {
	p := writePolicy(t, "{\"permissions\": {\n  \"allow\": [\"run_command(git l\u202eog:*)\"]}}\n")
	_, err := LoadPolicyFile(p)
	// line 2: the text starts at column 14; the override is its 18th character.
	if err == nil || !strings.Contains(err.Error(), p+":2:31:") || !strings.Contains(err.Error(), "U+202E") {
		t.Fatalf("LoadPolicyFile: %v", err)
	}
}
