package rules

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"mvdan.cc/sh/v3/syntax"

	"countersign/internal/gate"
)

// The differential check of issue 28 (acceptance 1): the text judge against real shells. A
// command the judge ALLOWS under issue28Rules (`allow git log:*`, `allow ls:*`, `deny rm:*`,
// `ask git push:* approvers=2`) is run by /bin/dash -c and /bin/bash -c under strace, in a
// scratch workspace, with PATH set to a folder of shims (symbolic links to /bin/true); it must
// start only programs the judge allows (each started program, its path in the shim folder and
// its argv quoted again, is judged by the same rules: `/bin/id`, `id`, `git push`, `rm` or an
// option that runs programs fail), never change directory, and write no file but the
// redirection targets the judge saw (and the shells' own here-document files under TMPDIR).
//
// When the tests run as root, the shells run as uid 65534 (nobody), so that a judge bug can
// harm only the scratch folders; strace also fails every unlink, rename and truncate (it still
// records them). Without /bin/dash, /bin/bash or /usr/bin/strace the tests skip.

const (
	diffDash, diffBash, diffStrace = "/bin/dash", "/bin/bash", "/usr/bin/strace"
	diffNobody                     = 65534
	diffTimeout                    = 3 * time.Second
)

// diffShims are the programs the shim folder offers (each /bin/true): the allowed ones and the
// ones an attack would start.
var diffShims = []string{"git", "ls", "rm", "id", "touch", "cat", "sh", "bash", "dash", "env", "nice", "timeout",
	"xargs", "find", "python3", "node", "make", "go", "sed", "awk", "tar", "chrt", "taskset", "ionice", "stdbuf",
	"setpriv", "unshare", "systemd-run", "sudo", "nohup", "grep", "head", "tail", "wc", "sort", "curl", "wget",
	"cp", "mv", "mkdir", "ln", "chmod", "kill", "sleep", "date", "echo", "printf", "test", "true", "false", "x", "f"}

// diffRig is one scratch root: the shim folder and a folder per run.
type diffRig struct {
	root, shims string
	set         *Set
	asNobody    bool
	n           atomic.Int64
}

// newDiffRig makes the scratch root (removed when tb ends), or skips tb when a shell or strace
// is missing.
func newDiffRig(tb testing.TB) *diffRig {
	tb.Helper()
	for _, p := range []string{diffDash, diffBash, diffStrace} {
		if _, err := os.Stat(p); err != nil {
			tb.Skipf("the differential check needs %s: %v", p, err)
		}
	}
	root, err := os.MkdirTemp("", "cs-differential-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(root) })
	r := &diffRig{root: root, shims: filepath.Join(root, "shims"), set: mustCompile(tb, issue28Rules()), asNobody: os.Geteuid() == 0}
	if err := os.Mkdir(r.shims, 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, n := range diffShims {
		if err := os.Symlink("/bin/true", filepath.Join(r.shims, n)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		tb.Fatal(err)
	}
	// strace as nobody must be able to probe it
	if r.asNobody {
		probe := exec.Command(diffStrace, "-qq", "-e", "trace=none", "/bin/true")
		probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: diffNobody, Gid: diffNobody}}
		if out, err := probe.CombinedOutput(); err != nil {
			tb.Skipf("strace as uid %d does not run here: %v: %s", diffNobody, err, out)
		}
	}
	return r
}

// judged is what the judge decided of a command in a workspace.
func (r *diffRig) judge(cmd, ws string) gate.RuleDecision {
	args, _ := json.Marshal(map[string]string{"command": cmd})
	return r.set.Evaluate(gate.RuleCall{Tool: CommandTool, Arguments: args, SessionID: "s1", Workspace: ws, Mode: gate.ModeDefault})
}

// check judges cmd and, when the judge allows it, runs it under each shell and returns what went
// wrong ("" when nothing did, or when the judge does not allow it). ran says whether it ran.
func (r *diffRig) check(cmd string, shells ...string) (problems string, ran bool) {
	// The command as the tool receives it (JSON turns invalid UTF-8 into U+FFFD).
	var in struct{ Command string }
	raw, _ := json.Marshal(map[string]string{"command": cmd})
	_ = json.Unmarshal(raw, &in)
	cmd = in.Command
	var out []string
	for _, sh := range shells {
		dir := filepath.Join(r.root, fmt.Sprintf("run-%d", r.n.Add(1)))
		ws, tmp := filepath.Join(dir, "ws"), filepath.Join(dir, "tmp")
		for _, d := range []string{ws, tmp, filepath.Join(ws, "sub"), filepath.Join(dir, "trace")} {
			if err := os.MkdirAll(d, 0o777); err != nil {
				return err.Error(), false
			}
		}
		for _, f := range []string{"x", "list", "sub/y"} {
			if err := os.WriteFile(filepath.Join(ws, f), []byte("x\n"), 0o666); err != nil {
				return err.Error(), false
			}
		}
		d := r.judge(cmd, ws)
		if d.Effect != gate.Allow {
			os.RemoveAll(dir)
			return "", false
		}
		ran = true
		if r.asNobody {
			for _, d := range []string{dir, ws, tmp, filepath.Join(ws, "sub"), filepath.Join(dir, "trace"),
				filepath.Join(ws, "x"), filepath.Join(ws, "list"), filepath.Join(ws, "sub/y")} {
				if err := os.Chown(d, diffNobody, diffNobody); err != nil {
					return err.Error(), false
				}
			}
		}
		if p := r.runOne(sh, cmd, dir, ws, tmp); p != "" {
			out = append(out, fmt.Sprintf("%s (judged: %s): %s", filepath.Base(sh), d.Reason, p))
		}
		os.RemoveAll(dir)
	}
	return strings.Join(out, "; "), ran
}

// runOne runs cmd with shell under strace in ws and checks the trace.
func (r *diffRig) runOne(shell, cmd, dir, ws, tmp string) string {
	ctx, cancel := context.WithTimeout(context.Background(), diffTimeout)
	defer cancel()
	prefix := filepath.Join(dir, "trace", "t")
	c := exec.Command(diffStrace, "-ff", "-qq", "-xx", "-v", "-s", "65536", "-o", prefix,
		"-e", "trace=execve,execveat,open,openat,creat,truncate,unlink,unlinkat,rmdir,rename,renameat,renameat2,mkdir,mkdirat,link,linkat,symlink,symlinkat,mknod,mknodat,chdir,fchdir",
		"-e", "inject=unlink,unlinkat,rmdir,rename,renameat,renameat2,truncate:error=EPERM",
		"-e", "signal=none", "--", shell, "-c", cmd)
	c.Dir = ws
	c.Env = []string{"PATH=" + r.shims, "HOME=" + ws, "TMPDIR=" + tmp, "LC_ALL=C"}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if r.asNobody {
		c.SysProcAttr.Credential = &syscall.Credential{Uid: diffNobody, Gid: diffNobody}
	}
	if err := c.Start(); err != nil {
		return "start: " + err.Error()
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	timedOut := false
	select {
	case <-done:
	case <-ctx.Done():
		timedOut = true
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		<-done
	}
	problems := checkTrace(prefix, shell, cmd, ws, tmp, r)
	if timedOut && problems == "" {
		return "" // a loop the judge allowed (of allowed programs): nothing else ran
	}
	return problems
}

// traceLine is one system call of a strace -xx line: its name, its string arguments decoded (an
// execve's argv after its path, in argv), its other text and its result.
type traceLine struct {
	call   string
	strs   []string
	argv   []string
	dirfd  string
	flags  string
	result string
}

var (
	traceCallRE = regexp.MustCompile(`^([a-z0-9_]+)\((.*)\) += (.*)$`)
	traceStrRE  = regexp.MustCompile(`"((?:\\x[0-9a-f]{2})*)"`)
)

// parseTraceLine reads one line of strace -xx output; ok is false for other lines (exits,
// signals, "resumed" halves).
func parseTraceLine(line string) (traceLine, bool) {
	m := traceCallRE.FindStringSubmatch(line)
	if m == nil {
		return traceLine{}, false
	}
	tl := traceLine{call: m[1], result: m[3]}
	args := m[2]
	decode := func(s string) string {
		b := make([]byte, 0, len(s)/4)
		for i := 0; i+3 < len(s); i += 4 {
			v, _ := strconv.ParseUint(s[i+2:i+4], 16, 8)
			b = append(b, byte(v))
		}
		return string(b)
	}
	if tl.call == "execve" || tl.call == "execveat" {
		open := strings.IndexByte(args, '[')
		end := strings.IndexByte(args, ']')
		if open < 0 || end < open {
			return traceLine{}, false
		}
		for _, s := range traceStrRE.FindAllStringSubmatch(args[:open], -1) {
			tl.strs = append(tl.strs, decode(s[1]))
		}
		for _, s := range traceStrRE.FindAllStringSubmatch(args[open:end], -1) {
			tl.argv = append(tl.argv, decode(s[1]))
		}
		return tl, true
	}
	if first := strings.Index(args, `"`); first > 0 {
		tl.dirfd = strings.TrimSuffix(strings.TrimSpace(args[:first]), ",")
	}
	for _, s := range traceStrRE.FindAllStringSubmatch(args, -1) {
		tl.strs = append(tl.strs, decode(s[1]))
	}
	tl.flags = traceStrRE.ReplaceAllString(args, "")
	return tl, true
}

// writeTargets are the files the judge saw the command write (its redirections' targets,
// literal in an allowed command), absolute and clean.
func writeTargets(cmd, ws string) map[string]bool {
	out := map[string]bool{}
	f, err := parsePOSIX(cmd)
	if err != nil {
		return out
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		r, ok := n.(*syntax.Redirect)
		if !ok || r.Word == nil {
			return true
		}
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.ClbOut, syntax.RdrInOut, syntax.DplOut, syntax.RdrAll, syntax.AppAll:
			p := resolveWord(r.Word).val
			if !filepath.IsAbs(p) {
				p = filepath.Join(ws, p)
			}
			p = filepath.Clean(p)
			if p == ws || strings.HasPrefix(p, ws+"/") { // the judge allows no other
				out[p] = true
			}
		}
		return true
	})
	return out
}

// checkTrace reads the trace files and says what the shell did that the judge did not allow.
func checkTrace(prefix, shell, cmd, ws, tmp string, r *diffRig) string {
	files, _ := filepath.Glob(prefix + ".*")
	if len(files) == 0 {
		return "no trace written"
	}
	targets := writeTargets(cmd, ws)
	var problems []string
	add := func(format string, a ...any) {
		if len(problems) < 5 {
			problems = append(problems, fmt.Sprintf(format, a...))
		}
	}
	rootSeen := false
	for i, name := range files {
		if i > 2000 {
			break
		}
		fh, err := os.Open(name)
		if err != nil {
			add("read trace: %v", err)
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 1<<20), 8<<20)
		for sc.Scan() {
			tl, ok := parseTraceLine(sc.Text())
			if !ok {
				continue
			}
			switch tl.call {
			case "execve", "execveat":
				if !strings.HasPrefix(tl.result, "0") {
					continue // a failed start (PATH lookup), nothing ran
				}
				if !rootSeen && len(tl.strs) == 1 && tl.strs[0] == shell && len(tl.argv) == 3 && tl.argv[2] == cmd {
					rootSeen = true
					continue
				}
				if why := r.startAllowed(tl); why != "" {
					add("started %q %q: %s", tl.strs, tl.argv, why)
				}
			case "chdir", "fchdir":
				if strings.HasPrefix(tl.result, "0") {
					add("changed directory: %s %q", tl.call, tl.strs)
				}
			case "open", "openat", "creat":
				if len(tl.strs) == 0 {
					continue
				}
				writes := tl.call == "creat" || strings.Contains(tl.flags, "O_WRONLY") || strings.Contains(tl.flags, "O_RDWR") ||
					strings.Contains(tl.flags, "O_CREAT") || strings.Contains(tl.flags, "O_TRUNC") || strings.Contains(tl.flags, "O_APPEND")
				if writes {
					if why := writeAllowed(tl, tl.strs[0], ws, tmp, targets); why != "" {
						add("opened %q for writing (%s) = %s: %s", tl.strs[0], strings.TrimSpace(tl.flags), tl.result, why)
					}
				}
			default: // unlink, rename, mkdir, link, symlink, truncate, mknod and their *at forms: a
				// shell does none of these itself
				add("%s %q = %s", tl.call, tl.strs, tl.result)
			}
		}
		fh.Close()
	}
	return strings.Join(problems, "; ")
}

// writeAllowed says why writing p is not allowed ("" when it is): it must be a redirection
// target the judge saw, /dev/null, a terminal probe, or under TMPDIR (here-documents).
func writeAllowed(tl traceLine, p, ws, tmp string, targets map[string]bool) string {
	if p == "/dev/null" || p == "/dev/tty" {
		return ""
	}
	if !filepath.IsAbs(p) {
		if tl.dirfd != "" && tl.dirfd != "AT_FDCWD" {
			return "relative to another directory (" + tl.dirfd + ")"
		}
		p = filepath.Join(ws, p)
	}
	p = filepath.Clean(p)
	if targets[p] || strings.HasPrefix(p, tmp+"/") {
		return ""
	}
	return "not a redirection target the judge saw"
}

// startAllowed says why a started program is not allowed ("" when it is): it must be a shim,
// started by its name, and its argv, quoted again as one simple command, must be allowed by
// the same rules.
func (r *diffRig) startAllowed(tl traceLine) string {
	if len(tl.strs) != 1 || len(tl.argv) == 0 {
		return "an exec the check cannot read"
	}
	path := tl.strs[0]
	if filepath.Dir(path) != r.shims {
		return "not a program from PATH"
	}
	if filepath.Base(path) != tl.argv[0] {
		return "started under another name"
	}
	words := make([]string, len(tl.argv))
	for i, a := range tl.argv {
		words[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'" // single quotes keep every byte but '
	}
	d := r.judge(strings.Join(words, " "), "/nonexistent-workspace")
	if d.Effect != gate.Allow {
		return fmt.Sprintf("the rules do not allow it (%s %s)", d.Effect, d.Reason+d.Note)
	}
	return ""
}

// differentialHandPicked are the attacks of issue 28 and its neighbours, and plain commands the
// judge allows.
var differentialHandPicked = []string{
	"git log", "git log -1", "ls", "ls -la", "git log --oneline -3 && ls -1", "ls | ls", "ls; git log", "ls\ngit log",
	"git log\rid", "git log\r; id", "git log\r\nid", "git log \\\r\nid", "git log # c \\\nid", "git log #\\\nid",
	"ls #x\\\ntouch pwned", "git log\x00; id", "git log\x01; id", "git log \x7f", "ls \u0085id",
	"git log $'\\x3b' id", "ls {a,b}", "ls {--output=x,y}", "l${IFS}s", "ls${IFS}-la", "ls$IFS-la; id",
	"IFS=x; lsx-la", "git log ${X:-$(id)}", "ls $((1+1))", "ls $(id)", "ls `id`", "ls <(id)",
	"nice ls", "timeout 1 ls", "env ls", "command ls", "exec ls", "nohup ls", "sh -c ls", "sh -c -- 'ls; id'",
	"env sh -c 'id'", "chrt 1 ls", "taskset 1 ls", "ls() { id; }; ls", "f() { ls; }; f", "cd .. && ls > f",
	"cd /tmp; ls", "ls > out", "ls >> out", "ls 2>/dev/null", "ls >&2", "ls > ../escape", "ls > /tmp/cs-escape",
	"ls >& out", "ls &> out", "ls > sub/out", "ls > ./sub/../out2", "ls <<EOF\nhello\nEOF", "ls <<'EOF'\n$(id)\nEOF",
	"ls <<EOF\n$(id)\nEOF", "ls <<< x", "ls | sh", "git log | bash", "git push", "git log && git push",
	"rm x", "ls && rm x", "/bin/id", "ls; /usr/bin/id", "g''it log", `"git" log`, `g\it log`, "git log --output=pwned",
	"git log --outp=pwned", "ls *", "ls ./*", "ls ~", "ls \"$HOME\"", "ls -- -x", "ls\\\n-la", "ls \\\n; id",
	"ls & id", "ls & ls", "! ls", "(ls)", "{ ls; }", "if ls; then git log; fi", "for f in a b; do ls \"./$f\"; done",
	"while false; do id; done; ls", "case x in x) ls;; esac", "ls # comment", "ls #; id", "ls\t-la", "X=1 ls",
	"ls $X", "ls \"$X\"", "ls ./$X", "git log -- x", "ls -R sub", "git log --format=%H -2",
}

// differentialGenerated makes n commands from the classes of issue 28 (CR, CR-LF, NUL,
// backslash-newline in comments and words, here-documents, $IFS, ${…}, $((…)), wrappers, sh -c,
// functions, cd, redirections) with a fixed seed, many of them allowed.
func differentialGenerated(n int) []string {
	rng := rand.New(rand.NewPCG(28, 2026))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	bases := []string{"git log", "git log -1", "git log --oneline -3", "ls", "ls -la", "ls -1 .", "ls ./*",
		`ls "$HOME"`, "git log --format=%H", "ls sub", "git log -- x"}
	payloads := []string{"id", "touch pwned", "rm x", "/bin/id", "/usr/bin/touch pwned2", "git push", "sh -c id",
		"env id", "git log --output=pwned3", "ls > ../escape", "ls > /tmp/cs-escape", "cat x", "x"}
	seps := []string{"; ", " && ", " || ", " | ", "\n", "\r", "\r\n", "\\\r\n", " # c \\\n", " #\\\n", "\x00",
		" & ", "\t", " \\\n", "\\\n", "\n# c\n", "\r#", " ;; ", "\n\n"}
	perturb := func(b string) string {
		switch rng.IntN(9) {
		case 0:
			return strings.Replace(b, "git", "g''it", 1)
		case 1:
			return strings.Replace(b, "ls", `"ls"`, 1)
		case 2:
			return strings.Replace(b, "git", `g\it`, 1)
		case 3:
			return strings.Replace(strings.Replace(b, "git log", "git${IFS}log", 1), "ls ", "ls${IFS}", 1)
		case 4:
			return strings.Replace(b, " ", " \\\n", 1)
		case 5:
			return b + " # " + pick(payloads)
		}
		return b
	}
	wrappers := []string{"nice ", "timeout 1 ", "env ", "command ", "exec ", "nohup ", "chrt 1 ", "taskset 1 ",
		"stdbuf -oL ", "sh -c -- ", "env sh -c "}
	redirs := []string{" > out", " >> out", " 2>/dev/null", " >&2", " > ../x", " >& out", " &> out", " > sub/o",
		" 2>&1", " < x", " > /tmp/cs-x", " >| out", " 1>out 2>out2"}
	benign := []string{"; ", " && ", " || ", " | ", "\n", " & ", "\n\n", " ;\n"}
	inside := []string{" > out", " >> out", " 2>/dev/null", " >&2", " > sub/o", " 2>&1", " < x", " >| out", " 1>out 2>out2"}
	allowed := func() string { return perturb(pick(bases)) + pick(benign) + perturb(pick(bases)) + pick(inside) }
	forms := []func() string{
		allowed, allowed, allowed, allowed, allowed,
		func() string { return "{ " + pick(bases) + "; " + pick(bases) + "; }" + pick(inside) },
		func() string { return "(" + pick(bases) + pick(benign) + pick(bases) + ")" },
		func() string { return "if " + pick(bases) + "; then " + pick(bases) + "; else " + pick(bases) + "; fi" },
		func() string { return "for f in a b; do " + pick(bases) + ` "./$f"; done` },
		func() string { return pick(bases) + " <<'EOF'\n" + pick(payloads) + "\nEOF" },
		func() string { return perturb(pick(bases)) + pick(seps) + pick(payloads) },
		func() string { return perturb(pick(bases)) + pick(seps) + perturb(pick(bases)) },
		func() string { return pick(bases) + pick(seps) + pick(bases) + pick(seps) + pick(bases) },
		func() string { return pick(wrappers) + pick(bases) },
		func() string { return "sh -c '" + pick(bases) + pick(seps) + pick(payloads) + "'" },
		func() string { return pick(bases) + " <<EOF\n" + pick(payloads) + "\nEOF" },
		func() string { return pick(bases) + " <<'EOF'\n$(" + pick(payloads) + ")\nEOF\n" + pick(bases) },
		func() string { return pick(bases) + " <<EOF\n$(" + pick(payloads) + ")\nEOF" },
		func() string { return "f() { " + pick(payloads) + "; }; " + pick(bases) + "; f" },
		func() string { return "ls() { " + pick(payloads) + "; }; " + pick(bases) },
		func() string {
			return "cd " + pick([]string{"..", "/tmp", "sub", "~"}) + pick(seps) + pick(bases) + pick(redirs)
		},
		func() string {
			return pick(bases) + " " + pick([]string{"${X:-$(id)}", "$((1+1))", "${#X}", "${X}", "$X", "${IFS}-la", "$(id)", "`id`"})
		},
		func() string { return pick(bases) + pick(redirs) },
		func() string { return perturb(pick(bases)) + pick(redirs) + pick(seps) + pick(bases) + pick(redirs) },
		func() string { return "IFS=x; " + pick(bases) },
		func() string {
			return pick(bases) + " " + pick([]string{"{a,b}", `\{a,b\}`, "'{a,b}'", "{1..2}", "HEAD@{1}"})
		},
		func() string { return pick(bases) + pick(seps) + pick(wrappers) + pick(payloads) },
	}
	out := make([]string, 0, n)
	seen := map[string]bool{}
	for len(out) < n {
		c := forms[rng.IntN(len(forms))]()
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// TestShellJudgeAgainstDashAndBash is issue 28's acceptance 1: at least 300 generated and
// hand-picked commands; every one the judge allows runs under dash and bash without starting or
// writing anything the judge did not allow.
func TestShellJudgeAgainstDashAndBash(t *testing.T) {
	if testing.Short() {
		t.Skip("runs shells")
	}
	rig := newDiffRig(t)
	cmds := append(append([]string{}, differentialHandPicked...), differentialGenerated(260)...)
	if len(cmds) < 300 {
		t.Fatalf("only %d commands", len(cmds))
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ran     int
		work    = make(chan string)
		workers = 4
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cmd := range work {
				p, r := rig.check(cmd, diffDash, diffBash)
				mu.Lock()
				if r {
					ran++
				}
				mu.Unlock()
				if p != "" {
					t.Errorf("%q: %s", cmd, p)
				}
			}
		}()
	}
	for _, c := range cmds {
		work <- c
	}
	close(work)
	wg.Wait()
	t.Logf("%d commands, %d allowed and run under dash and bash", len(cmds), ran)
	if ran < 100 {
		t.Errorf("only %d of %d commands were allowed: the check says little", ran, len(cmds))
	}
}

// TestDifferentialRigCatchesWhatTheShellDid checks the check: run directly (not through the
// judge), commands that start a program by path, start one the rules do not allow, write outside
// the workspace or change directory are all reported; plain ones are not.
func TestDifferentialRigCatchesWhatTheShellDid(t *testing.T) {
	if testing.Short() {
		t.Skip("runs shells")
	}
	rig := newDiffRig(t)
	cases := []struct{ cmd, want string }{
		{"git log; ls -la", ""},
		{"ls > out", ""},
		{"ls <<EOF\nhi\nEOF", ""},
		{"/bin/true", "not a program from PATH"},
		{"id", "the rules do not allow it"},
		{"git push", "the rules do not allow it"},
		{"git log --output=x", "the rules do not allow it"},
		{"ls > ../escape", "not a redirection target the judge saw"},
		{"cd sub", "changed directory"},
		{"exec -a ls git log", "started under another name"},
	}
	for _, tc := range cases {
		for _, sh := range []string{diffDash, diffBash} {
			if sh == diffDash && strings.HasPrefix(tc.cmd, "exec -a") {
				continue // dash has no exec -a
			}
			dir := filepath.Join(rig.root, fmt.Sprintf("direct-%d", rig.n.Add(1)))
			ws, tmp := filepath.Join(dir, "ws"), filepath.Join(dir, "tmp")
			for _, d := range []string{ws + "/sub", tmp, dir + "/trace"} {
				if err := os.MkdirAll(d, 0o777); err != nil {
					t.Fatal(err)
				}
			}
			if rig.asNobody {
				for _, d := range []string{dir, ws, ws + "/sub", tmp, dir + "/trace"} {
					if err := os.Chown(d, diffNobody, diffNobody); err != nil {
						t.Fatal(err)
					}
				}
			}
			got := rig.runOne(sh, tc.cmd, dir, ws, tmp)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("%s -c %q: %q, want %q", sh, tc.cmd, got, tc.want)
			}
		}
	}
}

// FuzzShellDifferential is the same check as a fuzz target against real dash and bash (`make
// fuzz`): a command the judge allows must start and write only what it allowed under both.
func FuzzShellDifferential(f *testing.F) {
	for _, s := range differentialHandPicked {
		f.Add(s)
	}
	rig := newDiffRig(f)
	f.Fuzz(func(t *testing.T, cmd string) {
		if p, _ := rig.check(cmd, diffDash, diffBash); p != "" {
			t.Fatalf("%q: %s", cmd, p)
		}
	})
}
