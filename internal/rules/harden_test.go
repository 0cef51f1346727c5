package rules

import (
	"os"
	"path/filepath"
	"testing"

	"countersign/internal/gate"
)

// hardenWorkspace builds a real workspace for the redirect tests: the server's database in it
// (with a hard link and a symlink to it), the policy file in demo/, a symlink docs/out to a
// folder outside, and the protected list the server would give NewCompiler.
func hardenWorkspace(t *testing.T) (ws string, protected []string) {
	t.Helper()
	ws = t.TempDir()
	outside := t.TempDir()
	mk := func(rel, body string) {
		p := filepath.Join(ws, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("countersign.db", "db")
	mk("demo/policy.json", "{}")
	mk("docs/readme.md", "hi")
	link := func(target, rel string) {
		if err := os.Symlink(target, filepath.Join(ws, rel)); err != nil {
			t.Fatal(err)
		}
	}
	link(outside, "docs/out")
	link("../countersign.db", "docs/db-link")
	link(filepath.Join(outside, "new.txt"), "docs/dangling")
	link("docs", "docs-again")
	link("loop", "loop")
	if err := os.Link(filepath.Join(ws, "countersign.db"), filepath.Join(ws, "hard.db")); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(ws, "countersign.db")
	for _, s := range []string{"", "-wal", "-shm", "-journal", ".lock", ".share-key"} {
		protected = append(protected, db+s)
	}
	protected = append(protected, filepath.Join(ws, "demo/policy.json"))
	return ws, protected
}

func TestShellRedirectProtectedAndSymlinks(t *testing.T) {
	ws, protected := hardenWorkspace(t)
	set, err := NewCompiler(protected)([]gate.Rule{
		{Effect: gate.Allow, Tool: "run_command", Specifier: "git status", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "ls:*", Scope: gate.ScopeServer},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, cmd, want string }{
		{"inside plain file", "git status > status.txt", "allow"},
		{"inside existing folder", "ls > docs/list.txt", "allow"},
		{"inside through symlink to inside", "ls > docs-again/list.txt", "allow"},
		{"read inside", "ls < docs/readme.md", "allow"},
		{"dev null", "ls 2>/dev/null", "allow"},
		// 1. the server's own files
		{"append policy file", "git status >> demo/policy.json", "ask"},
		{"truncate database", "git status > countersign.db", "ask"},
		{"database absolute", "git status > " + ws + "/countersign.db", "ask"},
		{"database dotted", "git status > ./demo/../countersign.db", "ask"},
		{"wal not yet existing", "git status > countersign.db-wal", "ask"},
		{"shm", "ls 2> countersign.db-shm", "ask"},
		{"journal", "ls > countersign.db-journal", "ask"},
		{"lock", "ls > countersign.db.lock", "ask"},
		{"share key", "ls > countersign.db.share-key", "ask"},
		{"read share key", "ls < countersign.db.share-key", "ask"},
		{"symlink to database", "ls > docs/db-link", "ask"},
		{"hard link to database", "ls > hard.db", "ask"},
		{"read write database", "ls <> countersign.db", "ask"},
		{"clobber database", "ls >| countersign.db", "ask"},
		{"second command", "ls; git status > countersign.db", "ask"},
		// 2. symlinks that leave the workspace
		{"through symlinked folder", "ls > docs/out/x", "ask"},
		{"symlinked folder itself", "ls > docs/out", "ask"},
		{"dotdot after symlink", "ls > docs/out/../x", "ask"},
		{"dangling symlink", "ls > docs/dangling", "ask"},
		{"read through symlink", "ls < docs/out/x", "ask"},
		{"in subshell", "(ls > docs/out/x)", "ask"},
		{"symlink loop", "ls > loop", "ask"},
		{"through symlink loop", "ls > loop/x", "ask"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := commandCall(tc.cmd)
			c.Workspace = ws
			d := set.Evaluate(c)
			if got := outcome(d); got != tc.want {
				t.Fatalf("%q: got %s (%+v), want %s", tc.cmd, got, d, tc.want)
			}
		})
	}
}
