package rules

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// pathsWorkspace is a real workspace for issue 28's path cases: a repository's .git/config, a
// symlink docs/link to it, secrets/k, a folder bare/ laid out as a git repository, a folder
// half/ with objects/ and refs/ but no HEAD, and the server's database.
func pathsWorkspace(t *testing.T) (ws string, protected []string) {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{".git/config", "docs/readme.md", "secrets/k", "bare/HEAD", "bare/objects/.keep",
		"bare/refs/.keep", "half/objects/.keep", "half/refs/.keep", "cs.db"} {
		p := filepath.Join(ws, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"docs/link": "../.git/config", "docs/bare": "../bare", "docs/db": "../cs.db"} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	return ws, []string{filepath.Join(ws, "cs.db")}
}

// TestPathSpecifiersJudgeWhereTheToolOpens (issue 28, SPEC §14 "Paths as they resolve"): a
// deny on secrets/** is not dodged through the workspace's own name or a symlink; an allow on
// docs/** does not reach .git/config through a symlink, a repository laid out in the workspace,
// the write that completes one, a HEAD or the server's own files; reads are judged as reads.
func TestPathSpecifiersJudgeWhereTheToolOpens(t *testing.T) {
	ws, protected := pathsWorkspace(t)
	base := filepath.Base(ws)
	if err := os.Symlink("../secrets", filepath.Join(ws, "docs", "s")); err != nil {
		t.Fatal(err)
	}
	eval, err := NewCompiler(protected)([]gate.Rule{
		{Effect: gate.Deny, Tool: "read_file", Specifier: "secrets/**", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "read_file", Specifier: "**", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "write_file", Specifier: "docs/**", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "write_file", Specifier: "/*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "write_file", Specifier: "half/**", Scope: gate.ScopeServer},
		{Effect: gate.Ask, Tool: "write_file", Specifier: ".github/**", Scope: gate.ScopeServer},
	})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	for _, tc := range []struct {
		name, tool, path, want string
	}{
		{"a plain read", "read_file", "docs/readme.md", "allow"},
		{"the deny as written", "read_file", "secrets/k", "deny"},
		{"the deny through the workspace's own name", "read_file", "../" + base + "/secrets/k", "deny"},
		{"the deny through an absolute path", "read_file", ws + "/docs/../secrets/k", "deny"},
		{"the deny through a symlink", "read_file", "docs/s/k", "deny"},
		{"a read of .git/config matches no allow", "read_file", "docs/link", "ask"},
		{"a read in a laid-out repository matches no allow", "read_file", "bare/HEAD", "ask"},
		{"a plain write", "write_file", "docs/new.md", "allow"},
		{"a write through a symlink to .git/config", "write_file", "docs/link", "ask"},
		{"a write through a symlink into a repository", "write_file", "docs/bare/config", "ask"},
		{"a write of .git/config as written", "write_file", "docs/../.git/config", "ask"},
		{"a write to the server's database through a symlink", "write_file", "docs/db", "ask"},
		{"a write of HEAD at the root", "write_file", "HEAD", "ask"},
		{"a write of HEAD in docs", "write_file", "docs/HEAD", "ask"},
		{"a write of config at a plain root", "write_file", "config", "allow"},
		{"a write completing a repository in half/", "write_file", "half/HEAD", "ask"},
		{"a write beside an incomplete layout", "write_file", "half/refs/heads/main", "allow"},
		{"an ask through the workspace's own name", "write_file", "../" + base + "/.github/workflows/x.yml", "ask"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, _ := json.Marshal(map[string]string{"path": tc.path, "content": "x"})
			c := gate.RuleCall{Tool: tc.tool, Arguments: args, SessionID: "s1", Workspace: ws, Mode: gate.ModeDefault}
			if tc.tool == "read_file" {
				c.Annotations = tool.Annotations{ReadOnlyHint: &yes}
			}
			d := eval.Evaluate(c)
			if got := outcome(d); got != tc.want {
				t.Fatalf("%s %s: got %s (%+v), want %s", tc.tool, tc.path, got, d, tc.want)
			}
		})
	}
}

// TestRedirectionsIntoGitsOwnFilesAsk (issue 28): under `allow run_command(git log:*)`, a
// redirection into .git/, a repository laid out in the workspace, one it would complete, or a
// HEAD never matches allow; a plain redirection does, also through the workspace's own name.
func TestRedirectionsIntoGitsOwnFilesAsk(t *testing.T) {
	ws, protected := pathsWorkspace(t)
	base := filepath.Base(ws)
	eval, err := NewCompiler(protected)([]gate.Rule{
		{Effect: gate.Allow, Tool: "run_command", Specifier: "git log:*", Scope: gate.ScopeServer},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, cmd, want string }{
		{"plain", "git log -1 > log.txt", "allow"},
		{"through the workspace's own name", "git log -1 > ../" + base + "/log.txt", "allow"},
		{"append to .git/config", "git log -1 >> .git/config", "ask"},
		{"then git status", "git log -1 >> .git/config && git status", "ask"},
		{"through a symlink to .git/config", "git log -1 >> docs/link", "ask"},
		{"into a laid-out repository", "git log -1 > bare/config", "ask"},
		{"completing a repository", "git log -1 > half/HEAD", "ask"},
		{"a HEAD anywhere", "git log -1 > docs/HEAD", "ask"},
		{"reading .git/config", "git log -1 < .git/config", "ask"},
		{"the server's database through a symlink", "git log -1 > docs/db", "ask"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := commandCall(tc.cmd)
			c.Workspace = ws
			if got := outcome(eval.Evaluate(c)); got != tc.want {
				t.Fatalf("%q: got %s, want %s", tc.cmd, got, tc.want)
			}
		})
	}
}

// TestAnAskRuleWinsOverAcceptEditsWhateverThePath (issue 28): with `ask write_file(.github/**)`
// in accept-edits mode, a write into .github asks by the rule however its path is written —
// through the workspace's own name, a symlink to the folder, an absolute path through another
// name of the workspace — while a plain write elsewhere is allowed by the mode.
func TestAnAskRuleWinsOverAcceptEditsWhateverThePath(t *testing.T) {
	ws, _ := pathsWorkspace(t)
	if err := os.Mkdir(filepath.Join(ws, ".github"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".github", filepath.Join(ws, "gh")); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(t.TempDir(), "alias")
	if err := os.Symlink(ws, alias); err != nil {
		t.Fatal(err)
	}
	eval, err := Compile([]gate.Rule{{Effect: gate.Ask, Tool: "write_file", Specifier: ".github/**", Scope: gate.ScopeServer}})
	if err != nil {
		t.Fatal(err)
	}
	write := &tool.Tool{Name: "write_file", WritesFiles: true, Annotations: tool.Annotations{DestructiveHint: tool.Bool(true)}}
	for p, want := range map[string]gate.DecisionSource{
		".github/workflows/ci.yml":                              gate.FromRule,
		"../" + filepath.Base(ws) + "/.github/workflows/ci.yml": gate.FromRule,
		"gh/workflows/ci.yml":                                   gate.FromRule,
		alias + "/.github/workflows/ci.yml":                     gate.FromRule,
		"docs/../.github/x":                                     gate.FromRule,
		"docs/notes.md":                                         gate.FromMode,
	} {
		args, _ := json.Marshal(map[string]string{"path": p, "content": "x"})
		d := gate.Checker{Rules: eval}.Check(context.Background(), gate.CheckCall{SessionID: "s", Tool: write,
			Arguments: args, Workspace: ws, Mode: gate.ModeAcceptEdits})
		wantOutcome := gate.Asked
		if want == gate.FromMode {
			wantOutcome = gate.Allowed
		}
		if d.Outcome != wantOutcome || d.Source != want {
			t.Errorf("%s: %s from %s (%s), want %s from %s", p, d.Outcome, d.Source, d.Reason, wantOutcome, want)
		}
	}
}
