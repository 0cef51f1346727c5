package rules

import (
	"testing"

	"countersign/internal/gate"
)

func TestShellAllowRefusesWritingOptions(t *testing.T) {
	set := mustCompile(t, []gate.Rule{
		{Effect: gate.Allow, Tool: "run_command", Specifier: "git log:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "git diff:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "git status", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "find:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "tar:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "git grep:*", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "run_command", Specifier: "git push:*", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "run_command", Specifier: "git log --output=/etc/passwd", Scope: gate.ScopeServer},
	})
	cases := []struct{ name, cmd, want string }{
		{"log plain", "git log -1", "allow"},
		{"log oneline", "git log --oneline --stat -5", "allow"},
		{"diff no ext diff", "git diff --no-ext-diff --cached", "allow"},
		{"status exact", "git status", "allow"},
		{"find name", "find . -name '*.go' -type f", "allow"},
		{"tar list", "tar -tzf a.tgz", "allow"},
		{"output joined", "git log --output=/tmp/x -1", "ask"},
		{"output separate", "git log --output /tmp/x -1", "ask"},
		{"diff output", "git diff --output=/tmp/x", "ask"},
		{"output abbreviated", "git log --outp=/tmp/x", "ask"},
		{"output quoted", `git log "--output=/tmp/x"`, "ask"},
		{"output split quotes", `git log --out''put=/tmp/x`, "ask"},
		{"output from parameter", "git log --out$X", "ask"},
		{"option from parameter", "git log $OPT", "ask"},
		{"option from glob", "git log *", "ask"},
		{"ext diff", "git diff --ext-diff", "ask"},
		{"textconv", "git log -p --textconv", "ask"},
		{"git dir", "git log --git-dir=/elsewhere/.git", "ask"},
		{"work tree", "git diff --work-tree=/", "ask"},
		{"exec path", "git log --exec-path=/tmp", "ask"},
		{"config env", "git log --config-env=core.pager=X", "ask"},
		{"pager", "git log --pager=sh", "ask"},
		{"upload pack", "git log --upload-pack=x", "ask"},
		{"receive pack", "git log --receive-pack=x", "ask"},
		{"open files in pager", "git grep --open-files-in-pager=sh x", "ask"},
		{"find exec", `find . -exec rm {} \;`, "ask"},
		{"find execdir", `find . -execdir sh {} \;`, "ask"},
		{"find ok", `find . -ok rm {} \;`, "ask"},
		{"find okdir", `find . -okdir rm {} \;`, "ask"},
		{"find delete", "find . -delete", "ask"},
		{"find fprint", "find . -fprint /tmp/x", "ask"},
		{"find fprint0", "find . -fprint0 /tmp/x", "ask"},
		{"find fprintf", "find . -fprintf /tmp/x %p", "ask"},
		{"find fls", "find . -fls /tmp/x", "ask"},
		{"tar to command", "tar -xf a.tar --to-command=sh", "ask"},
		{"tar compress program", "tar -cf a.tar --use-compress-program=sh .", "ask"},
		{"tar checkpoint action", "tar -cf a.tar --checkpoint-action=exec=sh .", "ask"},
		{"tar abbreviated", "tar -xf a.tar --to-com=sh", "ask"},
		{"exact with extra option", "git status --output=x", "ask"},
		{"deny unchanged", "git push --exec=x", "deny"},
		{"deny rule naming the option", "git log --output=/etc/passwd", "deny"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := set.Evaluate(commandCall(tc.cmd))
			if got := outcome(d); got != tc.want {
				t.Fatalf("%q: got %s (%+v), want %s", tc.cmd, got, d, tc.want)
			}
		})
	}
}
