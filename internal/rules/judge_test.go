package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"countersign/internal/gate"
)

// issue28Rules are the rules of issue 28's acceptance 1.
func issue28Rules() []gate.Rule {
	return []gate.Rule{
		{ID: "a1", Effect: gate.Allow, Tool: "run_command", Specifier: "git log:*", Scope: gate.ScopeServer},
		{ID: "a2", Effect: gate.Allow, Tool: "run_command", Specifier: "ls:*", Scope: gate.ScopeServer},
		{ID: "d1", Effect: gate.Deny, Tool: "run_command", Specifier: "rm:*", Scope: gate.ScopeServer},
		{ID: "q1", Effect: gate.Ask, Tool: "run_command", Specifier: "git push:*", Scope: gate.ScopeServer, Approvers: 2},
	}
}

// Text the shells may read differently never matches allow (SPEC §14 "One parse, one
// program"): before issue 28 these ran id or touch under `allow git log:*` without a prompt.
func TestShellTextShellsReadDifferentlyNeverAllows(t *testing.T) {
	set := mustCompile(t, issue28Rules())
	cases := []struct {
		name, cmd, want, note string
	}{
		{"carriage return ends nothing for dash", "git log\r; id", "ask", "U+000D (a carriage return) at byte 8"},
		{"carriage return inside a word", "git log -1\rid", "ask", "U+000D"},
		{"carriage return before rm is still denied", "git log\r; rm x", "deny", ""},
		{"CR-LF line ends", "git log\r\nid\r\n", "ask", "U+000D"},
		{"backslash before CR-LF", "git log \\\r\nid", "ask", "U+000D"},
		{"NUL", "git log\x00; id", "ask", "U+0000 (NUL)"},
		{"other C0 control", "git log \x01; id", "ask", "U+0001"},
		{"vertical tab", "git log\v-1", "ask", "U+000B"},
		{"form feed", "git log\f-1", "ask", "U+000C"},
		{"escape", "git log \x1b[2J", "ask", "U+001B"},
		{"DEL", "git log \x7f", "ask", "U+007F"},
		{"C1 next line", "git log \u0085id", "ask", "U+0085"},
		{"comment ending in a backslash", "git log # note \\\nid", "ask", "a comment ends in a backslash"},
		{"comment ending in a backslash, then an allowed command", "git log # x\\\nls", "ask", "a comment ends in a backslash"},
		{"dollar single quote", "git log $'\\x2d-output=x'", "ask", "read the command differently"},
		{"dollar double quote", `git log $"x"`, "ask", "read the command differently"},
		{"bash brace expansion", "git log {--output=/tmp/x,-1}", "ask", "expands the braces"},
		{"brace sequence", "ls {1..3}", "ask", "expands the braces"},
		{"brace expansion hides rm from dash's reading", "{rm,-rf,x}", "deny", ""},
		{"ampersand redirection", "git log &> out", "ask", "does not parse as POSIX shell"},
		{"time keyword", "time git log", "ask", "read the command differently"},
		{"declare", "declare x; git log", "ask", "read the command differently"},
		{"double brackets", "[[ -f x ]] && git log", "ask", "read the command differently"},
		{"old arithmetic", "git log $[1]", "ask", "read the command differently"},
		{"over 1 MiB", "git log " + strings.Repeat("a", 1<<20), "ask", "more than the 1 MiB"},
		{"parse error", "git log (", "ask", "does not parse as POSIX shell"},
		{"plain text still allowed", "git log -1 && ls -la # fine", "allow", ""},
		{"tab is fine", "git log\t-1", "allow", ""},
		{"escaped brace is literal", `ls \{a,b}`, "allow", ""},
		{"quoted brace is literal", `ls '{a,b}'`, "allow", ""},
		{"braces without a comma are literal", "git log HEAD@{1}", "allow", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := set.Evaluate(commandCall(tc.cmd))
			if got := outcome(d); got != tc.want {
				t.Fatalf("%q: got %s (%+v), want %s", tc.cmd, got, d, tc.want)
			}
			if tc.note != "" && !strings.Contains(d.Note, tc.note) {
				t.Fatalf("%q: note %q, want it to say %q", tc.cmd, d.Note, tc.note)
			}
		})
	}
}

// The note says why even when no run_command rule looked at the command (issue 28, acceptance
// 10): a command over 1 MiB or one the parser rejects asks with a clear reason.
func TestShellUnreadableCommandAsksWithItsReasonWithoutRules(t *testing.T) {
	set := mustCompile(t, []gate.Rule{{Effect: gate.Allow, Tool: "read_file", Scope: gate.ScopeServer}})
	for cmd, want := range map[string]string{
		"git log '":                            "does not parse as POSIX shell",
		strings.Repeat("x", maxCommandBytes+1): "more than the 1 MiB the rules read",
		"git log\rid":                          "U+000D",
		"ls -la":                               "",
		"git log $(id)":                        "", // readable: the annotation default's reason stands
		"echo \"unterminated\nline":            "does not parse",
		"git log # x \\\n" + strings.Repeat("y", 10): "comment ends in a backslash",
	} {
		d := set.Evaluate(commandCall(cmd))
		if d.Effect != "" || (want == "" && d.Note != "") || !strings.Contains(d.Note, want) {
			t.Errorf("%.40q: %+v, want no effect and a note saying %q", cmd, d, want)
		}
	}
}

// A rule for every command ("Approve for session", `run_command`, `*`) still never allows text
// shells may read differently or that the judge does not read: the call asks, saying why.
func TestShellToolWideAllowNeverAllowsUnreadableText(t *testing.T) {
	for _, rl := range []gate.Rule{
		{Effect: gate.Allow, Tool: "run_command", Scope: gate.ScopeSession, SessionID: "s1"},
		{Effect: gate.Allow, Tool: "*", Scope: gate.ScopeServer},
	} {
		set := mustCompile(t, []gate.Rule{rl})
		for _, cmd := range []string{"git log\rid", "git log # x\\\nid", "ls '", strings.Repeat("x", maxCommandBytes+1), "ls {a,b}"} {
			d := set.Evaluate(commandCall(cmd))
			if d.Effect != "" || d.Note == "" {
				t.Errorf("%s: %.30q: %+v, want no effect and a note", Text(rl), cmd, d)
			}
		}
		for _, cmd := range []string{"git log && id", "rm -rf x", "ls $(id)"} {
			if d := set.Evaluate(commandCall(cmd)); d.Effect != gate.Allow {
				t.Errorf("%s: %q: %+v, want allowed (the rule trusts every readable command)", Text(rl), cmd, d)
			}
		}
	}
}

// A change of directory (issue 28: `cd .. && echo x > f` wrote outside the workspace under
// `cd:*` and `echo:*`): the judge places redirections and relative programs from the
// workspace, so a line that changes directory has neither, and follows only a change it can
// place (a literal ./, ../ or absolute folder inside the workspace: a bare name may go
// through CDPATH in an outside agent's shell).
func TestShellChangeOfDirectory(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "sub", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	set := mustCompile(t, []gate.Rule{
		{Effect: gate.Allow, Tool: "run_command", Specifier: "cd:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "pushd:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "popd", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "echo:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "ls:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "./x", Scope: gate.ScopeServer},
	})
	cases := []struct{ cmd, want string }{
		{"cd .. && echo x > f", "ask"},
		{"cd ./sub && echo x > f", "ask"},
		{"echo x > f; cd ./sub", "ask"},
		{"cd ./sub && ls", "allow"},
		{"cd ./sub/deeper && ls -la", "allow"},
		{"cd ./sub/deeper && cd .. && ls", "ask"}, // each change is placed from the workspace
		{"(cd ./sub && ls) && ls", "allow"},
		{"cd " + ws + "/sub && ls", "allow"},
		{"cd sub && ls", "ask"}, // CDPATH
		{"cd / && ls", "ask"},
		{"cd .. && ls", "ask"},
		{"cd ./out && ls", "ask"}, // a symlink out of the workspace
		{"cd && ls", "ask"},
		{"cd - && ls", "ask"},
		{`cd "$D" && ls`, "ask"},
		{"cd ~ && ls", "ask"},
		{"pushd ./sub && ls", "allow"},
		{"popd && ls", "ask"},
		{"cd ./sub && ./x", "ask"},
		{"./x", "allow"},
		{"echo x > f", "allow"},
		{"cd ./sub && ls 2>/dev/null >&2", "allow"},
	}
	for _, tc := range cases {
		c := commandCall(tc.cmd)
		c.Workspace = ws
		if got := outcome(set.Evaluate(c)); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.cmd, got, tc.want)
		}
	}
}
