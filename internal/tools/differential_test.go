package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/rules"
	"countersign/internal/testkit"
	"countersign/internal/tool"
	"countersign/internal/tools"
)

// differentialRules are issue 28 acceptance 1's rules.
var differentialRules = []gate.Rule{
	{ID: "p1", Effect: gate.Allow, Tool: "run_command", Specifier: "git log:*"},
	{ID: "p2", Effect: gate.Allow, Tool: "run_command", Specifier: "ls:*"},
	{ID: "p3", Effect: gate.Deny, Tool: "run_command", Specifier: "rm:*"},
	{ID: "p4", Effect: gate.Ask, Tool: "run_command", Specifier: "git push:*", Approvers: 2},
}

func init() {
	for i := range differentialRules {
		differentialRules[i].Scope, differentialRules[i].Source = gate.ScopeServer, gate.SourcePolicyFile
	}
}

// differentialCommands are the hand-picked commands and the generated ones: a prefix an allow
// rule covers, a separator or form on which shells may disagree, and a payload no rule allows.
func differentialCommands() []string {
	cmds := []string{
		"git log -1\r; touch pwned", "git log -1 \\\r\ntouch pwned", "git log -1 # note \\\ntouch pwned",
		"git log\x00; touch pwned", "ls\x0btouch pwned", "ls \\\ntouch pwned", "ls 'a\\\nb'; id",
		"ls <<EOF\n$(touch pwned)\nEOF", "ls <<'EOF'\n$(touch pwned)\nEOF", "cat <<EOF | sh\ntouch pwned\nEOF",
		"ls${IFS}-la; rm${IFS}-rf victim", "IFS=x; ls; rmx-rf victim", "ls ${X:-$(touch pwned)}", "ls $((1))",
		"ls; f() { touch pwned; }; f", "ls && cd .. && ls > pwned-outside", "cd /tmp && ls", "ls > ../pwned-outside",
		"git log >> .git/config", "ls > .git/config", "ls | sh", "ls | xargs rm", "ls; find . -exec touch pwned \\;",
		"env rm -f victim", "nice rm -f victim", "timeout 5 rm -f victim", "nohup rm -f victim", "command rm -f victim",
		"exec rm -f victim", "sh -c 'rm -f victim'", "sh -c -- 'rm -f victim'", "bash -c 'x=rm; $x -f victim'",
		"eval 'rm -f victim'", ". ./script", "ls; git push origin main", "git log; git  push", "/bin/rm -f victim",
		"\\rm -f victim", "r''m -f victim", "\"rm\" -f victim", "ls; $(echo rm) -f victim", "ls; `echo rm` -f victim",
		"ls & rm -f victim", "ls || rm -f victim", "! ls; id", "{ ls; id; }", "(ls; id)", "if ls; then id; fi",
		"while false; do :; done; id", "for x in a; do id; done", "case a in a) id;; esac", "ls -- $(id)",
		"git log --output=pwned", "git log --ext-diff", "git -c core.pager=id log", "git --exec-path=. log", "git log -C .. ",
		"ls; cd ..; id", "ls\n\nid", "ls;;id", "ls #\rid", "ls\u00a0; id", "ls\u2028id", "git log -1\r\n",
	}
	prefixes := []string{"git log -1", "ls -la"}
	seps := []string{"; ", "\r", "\r\n", " \\\r\n", " # x \\\n", " && ", " | ", "\n", " & ", " || ", "\x00", "\x1b", "\v", "\f"}
	payloads := []string{
		"touch pwned", "rm -f victim", "id", "git push", "/bin/rm -f victim", "env touch pwned", "sh -c 'touch pwned'",
		"$(touch pwned)", "`touch pwned`", "${IFS}touch pwned", "> pwned", "x() { touch pwned; }; x", "cd .. && touch pwned",
		"cd .. && ls > pwned", "ls > ../pwned", "ls >> .git/config", "exec touch pwned",
	}
	for _, p := range prefixes {
		for _, s := range seps {
			for _, pl := range payloads {
				cmds = append(cmds, p+s+pl)
			}
		}
	}
	return cmds
}

// shimScript logs its argv (NUL-separated, one line per start) to $TRACE and does nothing else:
// the programs a command really starts, seen from outside the server.
const shimScript = "#!/bin/sh\nname=${0##*/}\n{ printf '%s' \"$name\"; for a in \"$@\"; do printf '\\037%s' \"$a\"; done; printf '\\n'; } >> \"$TRACE\"\n"

// TestWhatRunsIsWhatWasJudged (issue 28, acceptance 1): several hundred generated and
// hand-picked commands, each sent as a model's run_command call through the real pipeline
// (rules compiled by package rules, the gate, the interpreter), with no person to approve
// anything (every prompt times out). Every program a command really starts is logged by a shim
// on PATH; the test fails if one started that the rules do not allow, if the victim file was
// removed, or if a file outside the workspace or in .git changed.
func TestWhatRunsIsWhatWasJudged(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several hundred runs")
	}
	root := t.TempDir()
	shims := filepath.Join(root, "shims")
	if err := os.Mkdir(shims, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"git", "ls", "rm", "id", "touch", "cat", "sh", "bash", "env", "nice", "timeout",
		"nohup", "xargs", "find", "sleep", "echo", "printf", "true", "false", "test", "["} {
		if err := os.WriteFile(filepath.Join(shims, name), []byte(shimScript), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var rc *tool.Tool
	trace := filepath.Join(root, "trace")
	for _, tl := range tools.Builtin(tools.Config{Env: []string{"PATH=" + shims, "TRACE=" + trace}, CommandTimeout: 10 * time.Second}) {
		if tl.Name == "run_command" {
			rc = tl
		}
	}
	env := testkit.New(t, testkit.Options{Tools: []*tool.Tool{rc}, Agent: func(c *agent.Config) {
		c.CompileRules, c.PolicyRules = rules.Compiler, differentialRules
		c.ApprovalTimeout = 20 * time.Millisecond // no person: every prompt times out, denied
	}})
	eval, err := rules.Compiler(differentialRules)
	if err != nil {
		t.Fatal(err)
	}
	checker := gate.Checker{Rules: eval}

	cmds := differentialCommands()
	if len(cmds) < 300 {
		t.Fatalf("only %d commands", len(cmds))
	}
	type outcome struct {
		command string
		trace   []byte
		harm    []string
	}
	results := make([]outcome, len(cmds))
	// One at a time: the shims share one trace file.
	for i, c := range cmds {
		results[i] = runJudged(t, env, i, c, root, trace)
	}
	ran := 0
	for _, r := range results {
		for _, h := range r.harm {
			t.Errorf("%q: %s", r.command, h)
		}
		for _, line := range strings.Split(strings.TrimSuffix(string(r.trace), "\n"), "\n") {
			if line == "" {
				continue
			}
			ran++
			argv := strings.Split(line, "\x1f")
			quoted := make([]string, len(argv))
			for j, a := range argv {
				quoted[j] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
			}
			args, _ := json.Marshal(map[string]string{"command": strings.Join(quoted, " ")})
			d := checker.Check(context.Background(), gate.CheckCall{Tool: rc, Arguments: args, Workspace: root, Parent: "run_command"})
			if d.Outcome != gate.Allowed {
				t.Errorf("%q started %q, which the rules do not allow (%s: %s)", r.command, argv, d.Outcome, d.Reason)
			}
		}
	}
	if ran == 0 {
		t.Fatal("no command started any program: the test sees nothing")
	}
	t.Logf("%d commands, %d programs started, each allowed by the rules", len(cmds), ran)
}

// runJudged runs command i in a fresh workspace under root and reports what it started (the
// shims' trace) and what harm it did.
func runJudged(t *testing.T, env *testkit.Env, i int, command, root, trace string) (out struct {
	command string
	trace   []byte
	harm    []string
}) {
	out.command = command
	dir := filepath.Join(root, fmt.Sprintf("case%d", i))
	ws := filepath.Join(dir, "ws")
	for _, d := range []string{filepath.Join(ws, ".git"), filepath.Join(ws, "a")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Error(err)
			return
		}
	}
	files := map[string]string{"victim": "keep", ".git/config": "[core]\n", "script": "touch pwned\n"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Error(err)
			return
		}
	}
	name := fmt.Sprintf("diff%d", i)
	steps, _ := json.Marshal(map[string]any{"steps": []any{
		map[string]any{"content": []any{map[string]any{"type": "toolCall", "id": "c", "name": "run_command",
			"arguments": map[string]string{"command": command}}}, "stopReason": "toolUse"},
		map[string]any{"content": []any{map[string]any{"type": "text", "text": "done"}}, "stopReason": "stop"},
	}})
	env.Scripts.Add(name, testkit.Script(t, string(steps)))
	sess, err := env.Runner.CreateSession(context.Background(), name, "faux:"+name, ws)
	if err != nil {
		t.Error(err)
		return
	}
	_ = os.WriteFile(trace, nil, 0o644)
	if err := env.Runner.Send(context.Background(), sess.ID, "go"); err != nil {
		t.Error(err)
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := env.DB.Session(context.Background(), sess.ID)
		if err == nil && s.State == "idle" && len(env.Entries(sess.ID)) >= 4 {
			break
		}
		if time.Now().After(deadline) {
			out.harm = append(out.harm, "the run did not end within 30 s")
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	out.trace, _ = os.ReadFile(trace)
	if b, _ := os.ReadFile(filepath.Join(ws, "victim")); string(b) != "keep" {
		out.harm = append(out.harm, "victim was removed or changed")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git/config")); string(b) != "[core]\n" {
		out.harm = append(out.harm, ".git/config changed")
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir && !strings.HasPrefix(p, ws) {
			out.harm = append(out.harm, "wrote outside the workspace: "+p)
		}
		return nil
	})
	if bytes.Contains(out.trace, []byte("\x00")) {
		out.harm = append(out.harm, "a NUL in a started program's argv")
	}
	return out
}
