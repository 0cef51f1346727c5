package tools

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/tool"
)

// gateFake is a tool.Context whose Authorize records every action and refuses those refuse
// picks, as the gate would (a deny rule, a person's denial).
type gateFake struct {
	workspace string
	refuse    func(command, uncovered string) string // a reason to refuse, "" to allow

	mu    sync.Mutex
	asked []string // "command" or "command [uncovered: why]"
}

func (f *gateFake) ToolCallID() string { return "c1" }
func (f *gateFake) SessionID() string  { return "s1" }
func (f *gateFake) Workspace() string  { return f.workspace }
func (f *gateFake) ExecuteTool(context.Context, string, any) tool.Outcome {
	return tool.Outcome{IsError: true, Result: tool.ErrorResult("no nested calls")}
}
func (f *gateFake) Consent() tool.Consent { return tool.Consent{} }
func (f *gateFake) Authorize(_ context.Context, name string, arguments any, uncovered string) tool.Authorization {
	cmd := arguments.(map[string]string)["command"]
	f.mu.Lock()
	entry := cmd
	if uncovered != "" {
		entry += " [uncovered: " + uncovered + "]"
	}
	f.asked = append(f.asked, entry)
	f.mu.Unlock()
	if name != "run_command" {
		return tool.Authorization{Reason: "not run_command"}
	}
	if f.refuse != nil {
		if why := f.refuse(cmd, uncovered); why != "" {
			return tool.Authorization{Reason: why}
		}
	}
	return tool.Authorization{Allowed: true}
}

func (f *gateFake) actions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

// runIn runs command with run_command's Execute under tc.
func runIn(t *testing.T, tc *gateFake, command string) (tool.Result, RunCommandOutput, error) {
	t.Helper()
	tools := mustTools(t, Config{})
	args, _ := json.Marshal(map[string]string{"command": command})
	res, err := tools["run_command"].Execute(context.Background(), args, func(tool.Update) {}, tc)
	var out RunCommandOutput
	if err == nil && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
	}
	return res, out, err
}

func TestEveryProgramTheShellStartsIsPutToTheGateAsItRuns(t *testing.T) {
	ws := t.TempDir()
	tc := &gateFake{workspace: ws}
	_, out, err := runIn(t, tc, `f='a b'; ls "$f" 2>/dev/null; X=--stat; git --version >/dev/null $X 2>&1; printf '%s\n' done`)
	if err != nil {
		t.Fatal(err)
	}
	if out.Stdout != "done\n" {
		t.Errorf("stdout %q", out.Stdout)
	}
	// Builtins (printf) are the shell's own; programs are judged by their argv after expansion,
	// quoted so that the rules' parser reads back exactly those words.
	if got, want := tc.actions(), []string{"ls 'a b'", "git --version --stat"}; !slices.Equal(got, want) {
		t.Errorf("actions %q, want %q", got, want)
	}
}

func TestARefusedProgramStopsTheWholeCommand(t *testing.T) {
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, "victim"), 0o755); err != nil {
		t.Fatal(err)
	}
	tc := &gateFake{workspace: ws, refuse: func(cmd, _ string) string {
		if strings.HasPrefix(cmd, "rm ") {
			return "rule run_command(rm:*) denies the call"
		}
		return ""
	}}
	res, out, err := runIn(t, tc, "touch before; x=rm; $x -rf victim; touch after")
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || out.ExitCode != 126 || !strings.Contains(res.TextOf(), "Blocked: `rm -rf victim`: rule run_command(rm:*) denies the call") ||
		!strings.Contains(res.TextOf(), "Nothing after it ran") {
		t.Errorf("result %+v %q, want a blocked start naming the rule", out, res.TextOf())
	}
	for name, want := range map[string]bool{"before": true, "victim": true, "after": false} {
		if _, err := os.Stat(filepath.Join(ws, name)); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", name, err == nil, want)
		}
	}
}

func TestShellStringsAndEnvAreSeenThroughAtRunTime(t *testing.T) {
	ws := t.TempDir()
	tc := &gateFake{workspace: ws, refuse: func(cmd, _ string) string {
		if strings.HasPrefix(cmd, "rm ") {
			return "denied"
		}
		return ""
	}}
	_, out, err := runIn(t, tc, `env -u HOME FOO=1 sh -c 'touch "$1-$FOO"' name arg; bash -c -- 'x=rm; $x -rf .'`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "arg-1")); err != nil {
		t.Errorf("the sh -c string did not run with its parameters and env's variable: %v (%+v)", err, out)
	}
	want := []string{
		`env -u HOME FOO=1 sh -c 'touch "$1-$FOO"' name arg`, `sh -c 'touch "$1-$FOO"' name arg`, "touch arg-1",
		"bash -c -- 'x=rm; $x -rf .'", "rm -rf .",
	}
	if got := tc.actions(); !slices.Equal(got, want) {
		t.Errorf("actions\n%q\nwant\n%q", got, want)
	}
	// The shells' options before or with -c are read too: -e stops at false; a variable
	// program inside bash -l -x -c is seen when it starts.
	tc.asked = nil
	if _, _, err := runIn(t, tc, `sh -ec 'false; touch not-reached' || bash -l -x -c 'y=rm; $y -f z'`); err != nil {
		t.Fatal(err)
	}
	want = []string{"sh -ec 'false; touch not-reached'", "bash -l -x -c 'y=rm; $y -f z'", "rm -f z"}
	if got := tc.actions(); !slices.Equal(got, want) {
		t.Errorf("actions\n%q\nwant\n%q", got, want)
	}
}

func TestWritesOutsideTheWorkspaceOrIntoGitAreActionsNoRuleCovers(t *testing.T) {
	parent := t.TempDir()
	ws := filepath.Join(parent, "ws")
	if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(ws, ".git"), filepath.Join(ws, "docs")); err != nil {
		t.Fatal(err)
	}
	tc := &gateFake{workspace: ws, refuse: func(_, uncovered string) string {
		if uncovered != "" {
			return "a person denied it"
		}
		return ""
	}}
	for _, c := range []struct{ command, file, want string }{
		{"echo x > inside", "inside", ""},
		{"cd .. && echo x > outside", "../outside", ": > '" + filepath.Join(parent, "outside") + "' [uncovered: the command writes " + filepath.Join(parent, "outside") + ", outside the workspace]"},
		{"echo x >> .git/config", ".git/config", "[uncovered: the command writes " + filepath.Join(ws, ".git/config") + ", one of git's own files (it is inside a .git folder"},
		{"echo x > docs/config", ".git/config", "one of git's own files (it is inside a .git folder"},
		{"mkdir -p bare/objects bare/refs && echo ref > bare/HEAD", "bare/HEAD", "one of git's own files"},
		{"cd .. && touch started-outside", "../started-outside", "cd '" + parent + "' && touch started-outside [uncovered: `touch started-outside` would start in " + parent + ", outside the workspace, which no rule covers]"},
	} {
		tc.asked = nil
		res, _, err := runIn(t, tc, c.command)
		if err != nil {
			t.Fatal(err)
		}
		_, statErr := os.Stat(filepath.Join(ws, c.file))
		if c.want == "" {
			if statErr != nil || res.IsError {
				t.Errorf("%s: %v %q", c.command, statErr, res.TextOf())
			}
			continue
		}
		if statErr == nil {
			t.Errorf("%s: %s was written", c.command, c.file)
		}
		if a := tc.actions(); len(a) == 0 || !strings.Contains(a[len(a)-1], c.want) {
			t.Errorf("%s: actions %q, want the last with %q", c.command, a, c.want)
		}
		if !res.IsError || !strings.Contains(res.TextOf(), "a person denied it") {
			t.Errorf("%s: result %q", c.command, res.TextOf())
		}
	}
}

func TestTheShellCannotReadTheServersOwnProcess(t *testing.T) {
	tc := &gateFake{workspace: t.TempDir()}
	for _, c := range []string{"cat < /proc/self/environ", "read x < /dev/stdin", "cat < /proc/thread-self/environ", "cat < /dev/fd/0"} {
		res, _, err := runIn(t, tc, c)
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(res.TextOf(), "the Countersign server's own process") {
			t.Errorf("%s: %q", c, res.TextOf())
		}
	}
}

func TestACommandThatDoesNotParseOrIsTooLongDoesNotRun(t *testing.T) {
	ws := t.TempDir()
	tc := &gateFake{workspace: ws}
	for _, c := range []string{"touch x; if then", "touch x; " + strings.Repeat("#", maxCommandBytes)} {
		_, _, err := runIn(t, tc, c)
		if err == nil {
			t.Errorf("%.30q ran", c)
		}
		if _, err := os.Stat(filepath.Join(ws, "x")); err == nil {
			t.Errorf("%.30q: x was written", c)
		}
	}
}

// TestRunCommandStillRunsWhatPeopleRun (issue 28, acceptance 6): in the interpreter, the shapes
// people and models write keep working as /bin/sh ran them.
func TestRunCommandStillRunsWhatPeopleRun(t *testing.T) {
	ws := t.TempDir()
	files := map[string]string{
		"a.txt": "alpha\nbeta\n", "b.txt": "gamma\n",
		"go.mod":       "module example.com/m\n\ngo 1.22\n",
		"m_test.go":    "package m\n\nimport \"testing\"\n\nfunc TestOK(t *testing.T) {}\n",
		"package.json": `{"name":"m","version":"1.0.0","scripts":{"test":"echo npm-test-ran && node -e \"process.exit(0)\""}}`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ command, want string }{
		{"cat a.txt | grep -c a | tr -d ' '", "2\n"},
		{"cat <<EOF | wc -l | tr -d ' '\none\ntwo\nEOF", "2\n"},
		{"mkdir -p out && cd out && touch x && ls", "x\n"},
		{"ls *.txt", "a.txt\nb.txt\n"},
		{`echo "$(ls *.txt | wc -l | tr -d ' ') files"`, "2 files\n"},
		{"false || echo recovered; true && echo chained", "recovered\nchained\n"},
		{"for f in a b; do printf '%s-' \"$f\"; done; echo", "a-b-\n"},
		{"f() { echo in-function \"$1\"; }; f x", "in-function x\n"},
		{"x=$((2 + 3)); echo $x ${HOME:+home}", "5 home\n"},
		{"if [ -f a.txt ]; then echo yes; fi; case b in a) echo a;; b) echo b;; esac", "yes\nb\n"},
		{"(cd out && pwd) | sed 's|.*/||'; pwd | sed 's|.*/||'", "out\n" + filepath.Base(ws) + "\n"},
		{"echo err >&2; echo out 2>&1", "out\n"},
		{"sleep 0.01 & wait; echo waited", "waited\n"},
		{"exec echo replaced", "replaced\n"},
		{"set -e; false; echo not-reached", ""},
		{"echo hi > o.txt; cat < o.txt; echo more >> o.txt; wc -l < o.txt | tr -d ' '", "hi\n2\n"},
		{"bash -c 'echo $((1+1)) ${0}' name", "2 name\n"},
		{"go test ./... 2>&1 | grep -c '^ok' ", "1\n"},
	}
	if _, err := exec.LookPath("npm"); err == nil {
		cases = append(cases, struct{ command, want string }{"npm test --silent", "npm-test-ran\n"})
	}
	for _, c := range cases {
		res, out, err := runIn(t, &gateFake{workspace: ws}, c.command)
		if err != nil || res.IsError || out.Stdout != c.want {
			t.Errorf("%q: stdout %q (exit %d, stderr %q, err %v), want %q", c.command, out.Stdout, out.ExitCode, out.Stderr, err, c.want)
		}
	}
}

func TestKillNeverTargetsTheServer(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for args, want := range map[string]bool{
		"kill " + self: true, "kill -9 " + self: true, "kill -s KILL " + self: true, "kill -- -1": true,
		"kill -9 -1": true, "kill -TERM -- " + self: true,
		"kill -9 0" + self: true, "kill -0 +" + self: true, "kill -9 " + firstThread(): true,
		"kill -1 12345": false, "kill 12345": false, "kill -9 12345 54321": false, "kill -l": false,
	} {
		if got := signalsServer(strings.Fields(args)); got != want {
			t.Errorf("%s: %v, want %v", args, got, want)
		}
	}
}

// firstThread is the id of one of this process's threads other than the main one ("" if none).
func firstThread() string {
	entries, _ := os.ReadDir("/proc/self/task")
	for _, e := range entries {
		if e.Name() != strconv.Itoa(os.Getpid()) {
			return e.Name()
		}
	}
	return strconv.Itoa(os.Getpid())
}

// TestGlobsCannotExhaustTheServer: a glob expands inside the server; one that would read more
// than maxGlobEntries folder entries fails, saying so, and the command that holds it does not
// run; the command's later globs are not expanded (left as written).
func TestGlobsCannotExhaustTheServer(t *testing.T) {
	ws := t.TempDir()
	for i := range 20 {
		for j := range 20 {
			for k := range 20 {
				if err := os.MkdirAll(filepath.Join(ws, "t", strconv.Itoa(i), strconv.Itoa(j), strconv.Itoa(k)), 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	_, out, err := runIn(t, &gateFake{workspace: ws}, "echo t/1/1/* | wc -w; echo t/*/../*/../*/*/* | wc -c; echo t/1/1/*")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.ReplaceAll(out.Stdout, " ", ""), "20\n0\nt/1/1/*\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if !strings.Contains(out.Stderr, "globs read more than 200000 folder entries") {
		t.Errorf("stderr %q does not say why the glob failed", out.Stderr)
	}
}

// TestBackgroundJobsEndWithTheCommand: a background loop of builtins (a goroutine of the
// interpreter, no process of its own) stops when the command ends, as /bin/sh's job did.
func TestBackgroundJobsEndWithTheCommand(t *testing.T) {
	ws := t.TempDir()
	_, out, err := runIn(t, &gateFake{workspace: ws}, "(while :; do echo x >> bg.txt; done) & while [ ! -s bg.txt ]; do :; done; echo started")
	if err != nil || out.Stdout != "started\n" {
		t.Fatalf("%+v %v", out, err)
	}
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(ws, "bg.txt"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	first := size()
	time.Sleep(200 * time.Millisecond)
	if later := size(); later != first {
		t.Errorf("bg.txt grew from %d to %d bytes after the command ended", first, later)
	}
}

// TestTheInterpretersTemporaryFolderCannotBeNamed: mvdan.cc/sh opens a path in its temporary
// folder named sh-interp-* without the open handler; its folder is one that cannot exist, so a
// link named like that in /tmp or in $TMPDIR is judged like any other path, and the programs a
// command starts still get the TMPDIR they had.
func TestTheInterpretersTemporaryFolderCannotBeNamed(t *testing.T) {
	ws := t.TempDir()
	link := filepath.Join(os.TempDir(), "sh-interp-countersign-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Symlink("/proc/self/environ", link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	for _, c := range []string{
		"cat < " + link,
		"ln -s /proc/self/environ sh-interp-e; TMPDIR=$PWD sh -c 'cat < \"$PWD/sh-interp-e\"'",
	} {
		res, _, err := runIn(t, &gateFake{workspace: ws}, c)
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(res.TextOf(), "the Countersign server's own process") {
			t.Errorf("%s: %.80q…, want refused", c, res.TextOf())
		}
	}
	t.Setenv("TMPDIR", ws)
	_, out, err := runIn(t, &gateFake{workspace: ws}, "printenv TMPDIR")
	if err != nil || out.Stdout != ws+"\n" {
		t.Errorf("a program got TMPDIR %q (%v), want %q", out.Stdout, err, ws)
	}
}

// TestShellsTheInterpreterDoesNotSeeThroughAreUncovered: a shell started as a program (standard
// input, a script, behind nohup or xargs) runs commands no rule sees: it is an action no rule may
// cover, even under one that allows every command.
func TestShellsTheInterpreterDoesNotSeeThroughAreUncovered(t *testing.T) {
	ws := t.TempDir()
	for _, c := range []string{"echo 'rm x' | sh", "echo 'rm x' > s.sh; sh s.sh", "nohup sh -c 'rm x'", "echo x | xargs -I{} bash -c {}", "env -S 'sh -c \"rm x\"'"} {
		tc := &gateFake{workspace: ws, refuse: func(_, uncovered string) string {
			if uncovered != "" {
				return "asked: " + uncovered
			}
			return ""
		}}
		res, _, err := runIn(t, tc, c)
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(res.TextOf(), "which would run commands no rule can see") {
			t.Errorf("%s: %q (actions %q), want uncovered", c, res.TextOf(), tc.actions())
		}
	}
}

// TestATimeoutEndsAProgramThatLeftTheGroup: a program that made its own session (setsid) is
// killed at the timeout too, and the command ends then.
func TestATimeoutEndsAProgramThatLeftTheGroup(t *testing.T) {
	tools := mustTools(t, Config{})
	args, _ := json.Marshal(map[string]any{"command": "setsid sleep 30; echo after", "timeoutMs": 300})
	start := time.Now()
	res, err := tools["run_command"].Execute(context.Background(), args, func(tool.Update) {}, &gateFake{workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.TextOf(), "timed out") {
		t.Errorf("%q, want a timeout", res.TextOf())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the command took %v: the setsid program kept it waiting", d)
	}
}

// TestScriptsWithoutAShebangCannotRecurseWithoutEnd: a script the kernel will not execute runs
// in the interpreter, in the server; one that calls itself stops at maxUnwrap levels instead of
// growing the server's stack until the timeout.
func TestScriptsWithoutAShebangCannotRecurseWithoutEnd(t *testing.T) {
	ws := t.TempDir()
	_, out, err := runIn(t, &gateFake{workspace: ws}, "printf 'echo level\\n./self\\n' > self; chmod +x self; ./self")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.Stdout, "level"); n != maxUnwrap || !strings.Contains(out.Stderr, "call each other more than") {
		t.Errorf("%d levels (stderr %q), want %d and a clear stop", n, out.Stderr, maxUnwrap)
	}
}
