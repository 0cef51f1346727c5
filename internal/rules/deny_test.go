package rules

import (
	"testing"

	"countersign/internal/gate"
)

// Deny rules under a tool-wide allow (issue 28): option clusters and spellings, $IFS, shell
// strings and wrappers with their own options must not dodge them.
func TestShellDenySeesThroughSpellingsAndWrappers(t *testing.T) {
	set := mustCompile(t, []gate.Rule{
		{Effect: gate.Allow, Tool: "run_command", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "run_command", Specifier: "rm -rf:*", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "run_command", Specifier: "git push --force:*", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "run_command", Specifier: "git reset:*", Scope: gate.ScopeServer},
	})
	deny := []string{
		"rm -rf /", "rm -fr /", "rm -r -f x", "rm -f -r x", "rm -Rf x", "rm -fR x", "rm --recursive --force x",
		"rm --rec --for x", "rm --force -R x", "rm x -rf", "rm -rfv x", "rm -v -r x -f", "/bin/rm -fr x", `r''m -fr x`,
		"rm${IFS}-rf /", "rm$IFS-rf x", "rm${IFS}-fr${IFS}x",
		"env sh -c 'rm -rf x'", "sh -c -- 'rm -rf x'", "sh -c -e 'rm -fr x'", "sh -ec 'rm -rf x'", "bash -o pipefail -c 'rm -rf x'",
		"bash --norc -c 'rm -rf x'", "sh -c 'sh -c \"rm -fr x\"'",
		"chrt 1 rm -rf x", "chrt -f 99 rm -rf x", "taskset 1 rm -rf x", "taskset -c 0 rm -fr x", "nice -n 5 rm -rf x",
		"nice -5 rm -fr x", "ionice -c 3 rm -rf x", "timeout 5 rm -rf x", "timeout -s KILL 5 rm -fr x", "stdbuf -oL rm -rf x",
		"setpriv --reuid=1000 rm -rf x", "setpriv --reuid 1000 rm -rf x", "unshare -r rm -rf x", "systemd-run --user rm -rf x",
		"nohup rm -rf x &", "sudo -u root rm -rf x", "env -i PATH=/bin rm -rf x", "xargs rm -rf < list", "find . -exec rm -rf {} +",
		"su -c 'rm -rf x'", "su root -c 'rm -fr x'", "env -S 'rm -rf x'", "env --split-string='rm -rf x'", "watch 'rm -rf x'",
		"watch -n 1 rm -fr x", "flock /tmp/l -c 'rm -rf x'", "script -qc 'rm -rf x' /dev/null", "busybox rm -rf x",
		"eval 'rm -rf x'", "nice env sh -c 'timeout 1 rm -fr x'", "exec rm -rf x", "command rm -rf x", "time rm -rf x",
		"ls && rm -fr x", "ls | xargs -I{} rm -fr {}", "bash <<'EOF'\nrm -rf x\nEOF", "sh <<EOF\nrm -fr x\nEOF",
		"git push --force", "git push -f", "git push origin main --force", "git --no-pager push -f", "git -C d push --force",
		"git -c x=y push -f", "git reset --hard", "git --no-pager reset", "git -C d reset", "git -c a=b reset HEAD~",
		"nice bash <<'EOF'\nrm -rf x\nEOF", "trap 'rm -rf x' EXIT", "alias ls='rm -fr x'", "complete -C 'rm -rf x' ls", "mapfile -C 'rm -rf x' -c 1 a < f",
		// long options that carry a command string, abbreviated (getopt_long)
		"env --split='rm -rf x'", "env --sp 'rm -rf x'", "su --comm='rm -rf x'", "su root --comm 'rm -rf x'",
		"flock /tmp/l --comm 'rm -rf x'", "script -q --comm 'rm -rf x' /dev/null", "runuser -u x --comm='rm -rf x'",
	}
	allow := []string{
		"$IFS", "${IFS}${IFS}", "$IFS x", // no words at all, or no program: nothing to deny (it once panicked)
		"rm -r x", "rm -f x", "rm x", "rm -- -rf", "git push", "git push origin main", "git log -f", "git status",
		"nice -n 5 ls", "sh -c 'rm -r x'", "echo rm -rf x", "git log --grep reset",
	}
	for _, cmd := range deny {
		if got := outcome(set.Evaluate(commandCall(cmd))); got != "deny" {
			t.Errorf("%q: %s, want deny", cmd, got)
		}
	}
	for _, cmd := range allow {
		if got := outcome(set.Evaluate(commandCall(cmd))); got != "allow" {
			t.Errorf("%q: %s, want allow", cmd, got)
		}
	}
}

// An exact rule may name a wrapper, a shell or an interpreter: it matches exactly that command,
// unless the program reads its code from standard input here (SPEC §14: a here-document feeding
// a shell never matches allow). Prefix rules on wrappers are refused (TestCheck).
func TestShellExactRulesOnWrappersAndInterpreters(t *testing.T) {
	set := mustCompile(t, []gate.Rule{
		{Effect: gate.Allow, Tool: "run_command", Specifier: "sh -c 'git log -1'", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "nice -n 5 make", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "nice -n 5 python3", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "python3 job.py", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "bash", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "ls:*", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "run_command", Specifier: "rm:*", Scope: gate.ScopeServer},
	})
	cases := []struct{ cmd, want string }{
		{"sh -c 'git log -1'", "allow"},
		{"sh -c 'git log -2'", "ask"},
		{"nice -n 5 make", "allow"},
		{"nice -n 5 make install", "ask"},
		{"python3 job.py", "allow"},
		{"python3 job.py < input", "ask"},
		{"ls | python3 job.py", "ask"},
		{"python3 job.py <<EOF\nimport os\nEOF", "ask"},
		{"{ python3 job.py; } < input", "ask"},
		{"bash", "allow"}, // reads the terminal, or nothing
		{"bash < script.sh", "ask"},
		{"ls | bash", "ask"},
		{"bash <<'EOF'\nls\nEOF", "ask"},
		{"bash <<'EOF'\nrm x\nEOF", "deny"},
		{"ls | sh -c 'git log -1'", "ask"},
		{"nice -n 5 make < Makefile", "allow"}, // make reads no program from stdin
		{"nice -n 5 python3 < x", "ask"},
	}
	for _, tc := range cases {
		if got := outcome(set.Evaluate(commandCall(tc.cmd))); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.cmd, got, tc.want)
		}
	}
}
