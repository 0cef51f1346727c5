package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"

	"countersign/internal/realpath"
	"countersign/internal/rules"
	"countersign/internal/tool"
)

// One parse, one program (SPEC §14 "Rules judge the action, not the text").
//
// run_command no longer hands its text to /bin/sh, which may read it differently from the rules'
// parser (a carriage return, a backslash before CR-LF, a comment ending in a backslash: each made
// dash run a program the matcher never saw). The command is parsed once, as POSIX shell with
// mvdan.cc/sh/v3/syntax — the parser and the language the rules judged it in — and that parse is
// what runs, in mvdan.cc/sh/v3/interp. A command that is not POSIX but is bash (which only a
// person can have approved: no allow rule matches it) is parsed as bash and runs the same way.
//
// Checked where it happens: the interpreter calls back before every program it starts (argv after
// expansion, in the folder it starts in) and every file a redirection opens (resolved from the
// shell's current folder, so `cd ..` counts). Each is put to the gate as an action of the call
// (tool.Context.Authorize): a deny rule blocks it always; when a person approved the command as
// written, the rest runs as written; otherwise what the rules do not cover — a program no allow
// rule matches, a program started outside the workspace, a file written outside it or into the
// repository's own files — becomes a nested approval in the call's card. A refused action stops
// the whole command at once (nothing after it runs) and the result says why.

// shellRun is one run_command command line running in the interpreter.
type shellRun struct {
	tc        tool.Context
	cfg       Config // made for the call (forCall): its marker goes to every program
	workspace string // the workspace's real path
	protected Protected
	// clock is the command's timeout, paused while the gate waits for a person (nil: none).
	clock *pausableTimer

	mu sync.Mutex
	// leader is the process group every program of the command joins: a placeholder process
	// that lives until the command ends, so that the group's id cannot be reused by another
	// process while the command may still signal it (0 before it started).
	leader     int
	leaderDone chan struct{}
	leaderIn   *os.File // the leader's standard input: closing it ends the leader
	done       bool     // the command has ended: nothing more starts
	// globbed counts the folder entries the command's globs have read (readDir).
	globbed int
	// tmpdir is the TMPDIR the command's programs get ("" for none): the interpreter's own is
	// interpTempDir.
	tmpdir string
	// refused is the first action the gate refused; the runner stops on it.
	refused *refusal
}

// refusal is an action the gate did not allow, as the command's error result says it.
type refusal struct {
	action string // "start `rm x`", "write /tmp/x"
	reason string
}

func (r *refusal) Error() string {
	return "Blocked: " + r.action + ": " + r.reason
}

// interpTempDir is the interpreter's temporary folder ($TMPDIR in its own environment): a folder
// that cannot exist. mvdan.cc/sh opens any path in its temporary folder named sh-interp-* itself,
// without the open handler (its FIFOs for process substitution), so a command that could name
// that folder could open anything unseen (`ln -s /proc/self/environ /tmp/sh-interp-e`). Nothing
// can be made under /proc; process substitution, never allowed by a rule and not in dash either,
// fails there. The programs a command starts get the TMPDIR they had (shellRun.tmpdir).
const interpTempDir = "/proc/countersign-interp-has-no-temporary-folder"

// interpEnv is env for a new interpreter: its TMPDIR is interpTempDir.
func interpEnv(env []string) expand.Environ {
	return expand.ListEnviron(append(env[:len(env):len(env)], "TMPDIR="+interpTempDir)...)
}

// waitStmt is the shell's `wait`, run after a command to wait for its background jobs.
var waitStmt = func() *syntax.Stmt {
	f, err := syntax.NewParser().Parse(strings.NewReader("wait"), "")
	if err != nil {
		panic(err)
	}
	return f.Stmts[0]
}()

// maxCommandBytes bounds a command line: a longer one is not parsed or run.
const maxCommandBytes = 1 << 20

// parseCommand parses a run_command command line as the rules judged it: POSIX shell first and,
// when that fails, bash (a command only a person can have approved). The error names both.
func parseCommand(command string) (*syntax.File, error) {
	if len(command) > maxCommandBytes {
		return nil, fmt.Errorf("the command is %d bytes, more than the %d a command may have", len(command), maxCommandBytes)
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(command), "")
	if err == nil {
		return f, nil
	}
	bf, berr := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), "")
	if berr == nil {
		return bf, nil
	}
	return nil, fmt.Errorf("the command does not parse as shell: %v", err)
}

// run runs the parsed command f in dir with env, its standard streams stdin, stdout and
// stderr (files, handed to the programs it starts as they are), until it ends or ctx is done.
// It returns the exit status (as a shell reports it: 128+n for a program killed by signal n) and,
// when the gate refused an action, the refusal. Whatever the command started is killed when it
// ends (its process groups), as /bin/sh's group was.
func (s *shellRun) run(ctx context.Context, f *syntax.File, dir string, env []string, stdin, stdout, stderr *os.File) (int, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := s.startLeader(dir); err != nil {
		return 0, fmt.Errorf("%w: %w", errCannotStart, err)
	}
	s.tmpdir = ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok {
			s.tmpdir = v
		}
	}
	r, err := s.newRunner(dir, env, stdin, stdout, stderr, 0)
	if err != nil {
		s.finish()
		return 0, fmt.Errorf("%w: %w", errCannotStart, err)
	}
	err = r.Run(runCtx, f)
	// The command has ended: its background jobs (goroutines of the interpreter) stop at their
	// next statement, and are waited for (a bounded `wait`, not the file: no EXIT trap again),
	// so that none writes after the call returned (for at most pipeGrace); then what it started
	// goes with its group.
	cancel()
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_ = r.Run(context.WithoutCancel(ctx), waitStmt)
	}()
	select {
	case <-waited:
	case <-time.After(pipeGrace): // a job blocked where cancelling does not reach (a FIFO's open)
	}
	s.finish()
	if ref := s.refusedAction(); ref != nil {
		return 126, ref
	}
	if err == nil {
		return 0, nil
	}
	if code, ok := interp.IsExitStatus(err); ok {
		return int(code), nil
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return 0, err
}

// startLeader starts the placeholder process whose group every program of the command joins
// (cat, reading a pipe the server holds: it ends when the pipe closes, and with the server by the
// parent-death signal). Its OS thread stays locked until it ends (childAttr: Go's Pdeathsig
// fires when the thread that started the process exits).
func (s *shellRun) startLeader(dir string) error {
	cat, err := exec.LookPath("cat")
	if err != nil {
		cat = "/bin/cat"
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	started := make(chan error, 1)
	s.leaderDone = make(chan struct{})
	go func() {
		defer close(s.leaderDone)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command(cat)
		cmd.Stdin = r
		cmd.Dir = dir // where the command runs, like the programs of its group
		cmd.Env = callEnv(nil, s.cfg)
		cmd.SysProcAttr = childAttr()
		err := cmd.Start()
		r.Close()
		if err != nil {
			started <- err
			return
		}
		s.leader = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		w.Close()
		return fmt.Errorf("the command's process group: %w", err)
	}
	s.leaderIn = w
	return nil
}

// finish marks the command ended and kills its process group: whatever it left running (a
// background job, a daemon) and the leader, which is then reaped.
func (s *shellRun) finish() {
	s.mu.Lock()
	s.done = true
	leader := s.leader
	s.mu.Unlock()
	if leader == 0 {
		return
	}
	_ = killGroup(leader)
	s.leaderIn.Close()
	<-s.leaderDone
}

func (s *shellRun) refuse(r *refusal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused == nil {
		s.refused = r
	}
	return r
}

func (s *shellRun) refusedAction() *refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// authorize puts one action to the gate as a run_command call of text (see tool.Context.Authorize);
// uncovered says why no rule may allow it ("" when rules may). A refusal is recorded and stops
// the runner.
func (s *shellRun) authorize(ctx context.Context, action, text, uncovered string) error {
	// The time a person takes to decide is not the command's: its timeout waits meanwhile.
	s.clock.pause()
	a := s.tc.Authorize(ctx, "run_command", map[string]string{"command": text}, uncovered)
	s.clock.resume()
	if a.Allowed {
		return nil
	}
	reason := a.Reason
	if reason == "" {
		reason = "not allowed"
	}
	return s.refuse(&refusal{action: action, reason: reason})
}

// killProgram stands for `kill` in a command's argv between callHandler and exec: the
// interpreter has no kill builtin, so kill runs as the system's program (a word no command can
// hold: it has a NUL byte).
const killProgram = "\x00kill"

// callHandler is the interpreter's CallHandler, which sees every simple command after expansion:
// `kill` goes to the system's kill program (see killProgram).
func callHandler(_ context.Context, args []string) ([]string, error) {
	if args[0] == "kill" {
		args = append([]string{killProgram}, args[1:]...)
	}
	return args, nil
}

// signalsServer reports whether a kill names the server as a target: in the interpreter $$ is
// the server's pid, and `kill $$` must not stop Countersign. A target is read as kill reads it,
// as a number (`0$$` and `+$$` are the same pid): the server's pid, any of its threads' ids
// (a signal to a thread reaches the whole process), -1 (every process the server's user may
// signal) and minus the server's group. Signal options (-9, -TERM, -s NAME, -n N, -l) are not
// targets.
func signalsServer(args []string) bool {
	targets := args[1:]
	if len(targets) > 0 && strings.HasPrefix(targets[0], "-") && targets[0] != "--" {
		switch targets[0] {
		case "-s", "-n":
			targets = targets[min(2, len(targets)):]
		default:
			targets = targets[1:]
		}
	}
	if len(targets) > 0 && targets[0] == "--" {
		targets = targets[1:]
	}
	for _, a := range targets {
		n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(a, "+")), 10, 64)
		switch {
		case err != nil:
			continue // not a pid (a job name, %1): kill refuses it itself
		case n == -1, n == -int64(syscall.Getpgrp()):
			return true
		case n > 0 && serverTask(int(n)):
			return true
		}
	}
	return false
}

// serverTask reports whether id is the server's pid or the id of one of its threads (its
// /proc/<id>/status says Tgid: <server pid>).
func serverTask(id int) bool {
	self := os.Getpid()
	if id == self {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(id) + "/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			return strings.TrimSpace(v) == strconv.Itoa(self)
		}
	}
	return false
}

// newRunner is an interpreter for the command (depth 0) or for what it runs in turn (a shell's
// -c string, a script without a #! line; depth counts them): in dir with env (its TMPDIR made
// interpTempDir), the streams given, every program, open and glob going through s, and params
// as `set` takes them.
func (s *shellRun) newRunner(dir string, env []string, stdin io.Reader, stdout, stderr io.Writer, depth int, params ...string) (*interp.Runner, error) {
	opts := []interp.RunnerOption{
		interp.Dir(dir),
		interp.Env(interpEnv(env)),
		interp.StdIO(stdin, stdout, stderr),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc {
			return func(ctx context.Context, args []string) error {
				return s.execIn(ctx, interp.HandlerCtx(ctx), args, depth)
			}
		}),
		interp.OpenHandler(s.open),
		interp.ReadDirHandler2(s.readDir),
		interp.CallHandler(callHandler),
	}
	if len(params) > 0 {
		opts = append(opts, interp.Params(params...))
	}
	return interp.New(opts...)
}

// maxUnwrap bounds how deep execIn sees through sh -c and env.
const maxUnwrap = 8

// execIn judges and starts one program with the shell's state hc. A shell's `-c` string and
// env's program are not handed to another program to run unseen: once the wrapper itself is
// allowed, what it would run is judged and run here in turn (depth counts the wrappers).
func (s *shellRun) execIn(ctx context.Context, hc interp.HandlerContext, args []string, depth int) error {
	if args[0] == killProgram {
		args = append([]string{"kill"}, args[1:]...)
		if signalsServer(args) {
			fmt.Fprintf(hc.Stderr, "kill: %s would signal the Countersign server (in run_command's shell $$ is the server's process), so it was not sent\n", strings.Join(args[1:], " "))
			return interp.ExitStatus(1)
		}
	}
	text := quoteArgv(args)
	uncovered := ""
	if !s.inside(hc.Dir) {
		uncovered = fmt.Sprintf("`%s` would start in %s, outside the workspace, which no rule covers", shorten(text, 200), hc.Dir)
		text = "cd " + shellQuote(hc.Dir) + " && " + text
	} else if depth >= maxUnwrap || !s.seenThrough(hc.Env, args) {
		if sh := unseenShell(args); sh != "" {
			uncovered = fmt.Sprintf("`%s` starts %s, which would run commands no rule can see (a script, standard input, a string behind a wrapper)", shorten(text, 200), sh)
		}
	}
	if err := s.authorize(ctx, "`"+shorten(text, 200)+"`", text, uncovered); err != nil {
		fmt.Fprintf(hc.Stderr, "countersign: %v\n", err)
		return err
	}
	if depth < maxUnwrap {
		if src, lang, opts, params, ok := shellString(args); ok {
			return s.subshell(ctx, hc, src, lang, opts, params, depth)
		}
		if env, prog, ok := envProgram(hc.Env, args); ok {
			hc.Env = env
			return s.execIn(ctx, hc, prog, depth+1)
		}
	}
	path, err := interp.LookPathDir(hc.Dir, hc.Env, args[0])
	if err != nil {
		fmt.Fprintln(hc.Stderr, err)
		return interp.ExitStatus(127)
	}
	return s.start(ctx, hc, path, args, depth)
}

// seenThrough reports whether execIn runs what args would run in the interpreter, in turn
// judged: a shell's -c string, env's program.
func (s *shellRun) seenThrough(env expand.Environ, args []string) bool {
	if _, _, _, _, ok := shellString(args); ok {
		return true
	}
	_, _, ok := envProgram(env, args)
	return ok
}

// unseenShell names the shell args start when the interpreter would not see what it runs: a
// shell started as a program (with a script, standard input or options execIn does not read)
// or behind a program that starts others (`nohup sh -c`, `xargs sh -c`, `find -exec sh -c`,
// `env -S 'sh -c …'`); "" when there is none. Such a start is an action no rule may cover: a
// person is asked, even under a rule that allows every command, so that deny rules are not
// dodged by `echo 'rm x' | sh`.
func unseenShell(args []string) string {
	first := func(w string) string {
		f, _, _ := strings.Cut(strings.TrimSpace(w), " ")
		return filepath.Base(f)
	}
	if rules.IsShell(filepath.Base(args[0])) {
		return filepath.Base(args[0])
	}
	if !rules.RunsOthers(filepath.Base(args[0])) {
		return ""
	}
	for _, a := range args[1:] {
		if sh := first(a); rules.IsShell(sh) {
			return sh
		}
	}
	return ""
}

// shellString recognises `sh -c STRING [NAME [ARGS…]]` (sh, dash, bash), with the shell's
// single-letter options before or clustered with -c (`sh -ec`, `bash -l -c`, `sh -e -x -c --`),
// and returns the string, the language to parse it in, the options the interpreter takes
// (-e -u -x -v -f: errexit and its kin; -l is ignored: no profile is read) and the words after
// the string ($0, then $1…). Any other option (-o NAME, --norc, -i) is not seen through.
func shellString(args []string) (src string, lang syntax.LangVariant, opts, params []string, ok bool) {
	switch filepath.Base(args[0]) {
	case "sh", "dash":
		lang = syntax.LangPOSIX
	case "bash":
		lang = syntax.LangBash
	default:
		return "", 0, nil, nil, false
	}
	rest, command := args[1:], false
	for len(rest) > 0 && len(rest[0]) > 1 && rest[0][0] == '-' && rest[0] != "--" {
		for _, f := range rest[0][1:] {
			switch f {
			case 'c':
				command = true
			case 'e', 'u', 'x', 'v', 'f':
				opts = append(opts, "-"+string(f))
			case 'l':
			default:
				return "", 0, nil, nil, false
			}
		}
		rest = rest[1:]
	}
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if !command || len(rest) == 0 {
		return "", 0, nil, nil, false
	}
	if len(rest) > 1 {
		params = rest[1:] // $0, then $1…
	}
	return rest[0], lang, opts, params, true
}

// envProgram recognises `env [-i] [-u NAME] [NAME=VALUE…] [--] PROGRAM [ARGS…]` and returns the
// environment PROGRAM gets and its argv. Other options (-S, -C, …) are not seen through.
func envProgram(cur expand.Environ, args []string) (expand.Environ, []string, bool) {
	if filepath.Base(args[0]) != "env" {
		return nil, nil, false
	}
	vars := exportedEnv(cur)
	i := 1
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-i" || a == "--ignore-environment" || a == "-":
			vars = nil
		case a == "-u" && i+1 < len(args):
			i++
			vars = unsetVar(vars, args[i])
		case a == "--":
			i++
			goto program
		case strings.HasPrefix(a, "-"):
			return nil, nil, false
		case strings.Contains(a, "="):
			name, _, _ := strings.Cut(a, "=")
			vars = append(unsetVar(vars, name), a)
		default:
			goto program
		}
	}
program:
	if i >= len(args) || strings.Contains(args[i], "=") {
		return nil, nil, false
	}
	return expand.ListEnviron(vars...), args[i:], true
}

func unsetVar(vars []string, name string) []string {
	out := vars[:0:0]
	for _, kv := range vars {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// subshell runs a shell's -c string here, with the same checks, as that shell would in hc's
// folder and environment.
func (s *shellRun) subshell(ctx context.Context, hc interp.HandlerContext, src string, lang syntax.LangVariant, opts, params []string, depth int) error {
	f, err := syntax.NewParser(syntax.Variant(lang)).Parse(strings.NewReader(src), "")
	if err != nil {
		fmt.Fprintf(hc.Stderr, "sh: %v\n", err)
		return interp.ExitStatus(2)
	}
	f.Name = "sh" // $0, as `sh -c` without a name gives it
	if len(params) > 0 {
		f.Name, params = params[0], params[1:]
	}
	stdin, _ := hc.Stdin.(*os.File)
	r, err := s.newRunner(hc.Dir, s.programEnv(hc.Env), stdin, hc.Stdout, hc.Stderr, depth+1,
		append(append(opts, "--"), params...)...)
	if err != nil {
		return err
	}
	return r.Run(ctx, f)
}

// start runs the program at path with args in the command's process group (the leader's), with
// the parent-death signal and the call's marker (procs.go), and waits for it.
func (s *shellRun) start(ctx context.Context, hc interp.HandlerContext, path string, args []string, depth int) error {
	newCmd := func() *exec.Cmd {
		cmd := exec.Command(path)
		cmd.Args = args
		cmd.Env = callEnv(s.programEnv(hc.Env), s.cfg)
		cmd.Dir = hc.Dir
		cmd.Stdin, cmd.Stdout, cmd.Stderr = hc.Stdin, hc.Stdout, hc.Stderr
		cmd.SysProcAttr = childAttr()
		cmd.SysProcAttr.Pgid = s.leader
		return cmd
	}
	// Until the program has been waited for: the parent-death signal is tied to the thread
	// that started it (childAttr).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return errors.New("the command has ended")
	}
	cmd := newCmd()
	err := cmd.Start()
	// A concurrently forked process may briefly hold the file open for writing (ETXTBSY,
	// go.dev/issue/22315): retry for a short while, as interp's own handler does.
	for delay := time.Millisecond; errors.Is(err, syscall.ETXTBSY) && delay < 300*time.Millisecond; delay *= 2 {
		s.mu.Unlock()
		time.Sleep(delay)
		s.mu.Lock()
		cmd = newCmd()
		err = cmd.Start()
	}
	s.mu.Unlock()
	if errors.Is(err, syscall.ENOEXEC) {
		return s.script(ctx, hc, path, args, depth)
	}
	if err != nil {
		fmt.Fprintln(hc.Stderr, err)
		return interp.ExitStatus(127)
	}
	// Cancelled (Stop, the timeout): the whole group goes, as /bin/sh's did.
	stop := context.AfterFunc(ctx, func() {
		_ = killGroup(s.leader)
		_ = cmd.Process.Kill() // a program that left the group (setsid) is still waited for
	})
	err = cmd.Wait()
	stop()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return interp.ExitStatus(128 + int(ws.Signal()))
		}
		return interp.ExitStatus(ee.ExitCode())
	default:
		return err
	}
}

// script runs a file the kernel will not execute (no #! line) as a shell script, as shells do,
// in a new interpreter with the same checks.
func (s *shellRun) script(ctx context.Context, hc interp.HandlerContext, path string, args []string, depth int) error {
	if depth >= maxUnwrap {
		fmt.Fprintf(hc.Stderr, "%s: scripts without a #! line call each other more than %d deep\n", args[0], maxUnwrap)
		return interp.ExitStatus(126)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(hc.Stderr, err)
		return interp.ExitStatus(126)
	}
	f, err := parseCommand(string(b))
	if err != nil {
		fmt.Fprintf(hc.Stderr, "%s: %v\n", args[0], err)
		return interp.ExitStatus(2)
	}
	f.Name = args[0]
	stdin, _ := hc.Stdin.(*os.File)
	r, err := s.newRunner(hc.Dir, s.programEnv(hc.Env), stdin, hc.Stdout, hc.Stderr, depth+1, args[1:]...)
	if err != nil {
		return err
	}
	return r.Run(ctx, f)
}

// maxGlobEntries bounds the folder entries one command's globs may read: globs expand inside the
// server, so `*/../*/*/*` over a wide tree would take the server's time and memory (the
// programs a command starts are what its timeout is for).
const maxGlobEntries = 200_000

// readDir is the interpreter's ReadDirHandler2, for globs: it stops when the command's context
// ends (Stop, the timeout) and past maxGlobEntries.
func (s *shellRun) readDir(ctx context.Context, path string) ([]fs.DirEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(path)
	s.mu.Lock()
	s.globbed += len(entries)
	over := s.globbed > maxGlobEntries
	s.mu.Unlock()
	if over {
		return nil, fmt.Errorf("the command's globs read more than %d folder entries, so the glob was not expanded", maxGlobEntries)
	}
	return entries, err
}

// writeFlags are the open flags of a redirection that writes (>, >>, <>, >|).
const writeFlags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREATE | os.O_TRUNC

// open is the interpreter's OpenHandler: every file a redirection opens, its path as written
// and the shell's current folder in hc.Dir. The server's own files are never opened; a write
// outside the workspace, or into the repository's own files, is an action no rule covers.
func (s *shellRun) open(ctx context.Context, path string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	hc := interp.HandlerCtx(ctx)
	if err := ctx.Err(); err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err} // the command has ended
	}
	if path == "" {
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
	}
	abs := path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(hc.Dir, abs)
	}
	abs = filepath.Clean(abs)
	if abs == "/dev/null" {
		return os.OpenFile(abs, flag, perm)
	}
	target, err := realpath.Resolve("/", abs)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if serversOwn(abs) || serversOwn(target) {
		err := s.refuse(&refusal{action: "open " + path, reason: "it is the Countersign server's own process (its environment, memory or open files): the shell runs inside the server, so /proc/self, /dev/fd and /dev/std* are the server's"})
		fmt.Fprintf(hc.Stderr, "countersign: %v\n", err)
		return nil, err
	}
	if realpath.IsOneOf(target, s.protected) {
		err := s.refuse(&refusal{action: "open " + path, reason: "it is one of the server's own files, which commands never read or write"})
		fmt.Fprintf(hc.Stderr, "countersign: %v\n", err)
		return nil, err
	}
	if flag&writeFlags != 0 {
		op := ">"
		if flag&os.O_APPEND != 0 {
			op = ">>"
		}
		if why := s.uncoveredWrite(target); why != "" {
			text := ": " + op + " " + shellQuote(target)
			where := target
			if target != abs {
				where = abs + " (which is " + target + ")"
			}
			if err := s.authorize(ctx, "write "+where, text, "the command writes "+where+", "+why); err != nil {
				fmt.Fprintf(hc.Stderr, "countersign: %v\n", err)
				return nil, err
			}
		}
	}
	// What was judged is what opens: the resolved path, not followed again (a symbolic link
	// swapped in at its end since is refused, not followed).
	return os.OpenFile(target, flag|syscall.O_NOFOLLOW, perm)
}

// serversOwn reports whether path (absolute, cleaned) names the server's own process in /proc
// or its file descriptors: in the interpreter a redirection is opened by the server itself, so
// `< /proc/self/environ` would read the server's environment (the owner token, the model
// providers' keys) and `< /dev/fd/7` one of its open files.
func serversOwn(path string) bool {
	self := "/proc/" + strconv.Itoa(os.Getpid())
	for _, p := range []string{"/proc/self", "/proc/thread-self", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr", self} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	// /proc/<id of one of the server's threads> is the server too.
	if rest, ok := strings.CutPrefix(path, "/proc/"); ok {
		id, _, _ := strings.Cut(rest, "/")
		if n, err := strconv.Atoi(id); err == nil && serverTask(n) {
			return true
		}
	}
	return false
}

// uncoveredWrite says why no rule covers writing target (a real path), "" when one may: outside
// the workspace, or into git's own files (realpath.Place.Git: .git/, a HEAD, a folder laid out
// as a repository), judged as the rules and the file tools judge a path.
func (s *shellRun) uncoveredWrite(target string) string {
	pl, err := realpath.Locate(s.workspace, target)
	switch {
	case err != nil:
		return "a path that cannot be resolved (" + err.Error() + ")"
	case !pl.Inside:
		return "outside the workspace"
	}
	if why := pl.Git(true); why != "" {
		return "one of git's own files (" + why + ")"
	}
	return ""
}

// inside reports whether dir (the shell's current folder) resolves inside the workspace.
func (s *shellRun) inside(dir string) bool {
	real, err := realpath.Resolve("/", dir)
	if err != nil {
		return false
	}
	_, ok := s.relative(real)
	return ok
}

// relative is target (a real path) relative to the workspace's real path, and whether it is
// inside it.
func (s *shellRun) relative(target string) (string, bool) {
	rel, err := filepath.Rel(s.workspace, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// programEnv is the environment a program the command starts gets: the shell's exported
// variables, with the TMPDIR the command had in place of the interpreter's (interpTempDir).
func (s *shellRun) programEnv(env expand.Environ) []string {
	list := exportedEnv(env)
	for i, kv := range list {
		if kv == "TMPDIR="+interpTempDir {
			if s.tmpdir == "" {
				return append(list[:i], list[i+1:]...)
			}
			list[i] = "TMPDIR=" + s.tmpdir
		}
	}
	return list
}

// exportedEnv is the shell's exported variables.
func exportedEnv(env expand.Environ) []string {
	list := make([]string, 0, 32)
	for name, vr := range env.Each {
		if !vr.IsSet() {
			for i, kv := range list {
				if strings.HasPrefix(kv, name+"=") {
					list[i] = ""
				}
			}
			continue
		}
		if vr.Exported && vr.Kind == expand.String {
			list = append(list, name+"="+vr.String())
		}
	}
	out := list[:0]
	for _, kv := range list {
		if kv != "" {
			out = append(out, kv)
		}
	}
	return out
}

// quoteArgv is argv as one POSIX command line that the rules' parser reads back as exactly these
// words: plain words as they are, every other single-quoted.
func quoteArgv(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if plainWord(a, i == 0) {
			b.WriteString(a)
		} else {
			b.WriteString(shellQuote(a))
		}
	}
	return b.String()
}

// plainWord reports whether a reads back as itself unquoted: letters, digits and _@%+=:,./-
// (no = in a first word, which would be an assignment).
func plainWord(a string, first bool) bool {
	if a == "" {
		return false
	}
	for i := 0; i < len(a); i++ {
		c := a[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("_@%+:,./-", c) >= 0:
		case c == '=' && !first:
		default:
			return false
		}
	}
	return true
}

// pausableTimer calls fire once a duration of running time has passed; pause and resume stop
// and restart the count (the command's timeout does not run while a person decides). Nesting
// is counted: the clock runs again when every pause has resumed. A nil timer does nothing.
type pausableTimer struct {
	mu     sync.Mutex
	left   time.Duration
	since  time.Time
	paused int
	t      *time.Timer
	fire   func()
}

func newPausableTimer(d time.Duration, fire func()) *pausableTimer {
	pt := &pausableTimer{left: d, since: time.Now(), fire: fire}
	pt.t = time.AfterFunc(d, fire)
	return pt
}

func (pt *pausableTimer) pause() {
	if pt == nil {
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.paused++; pt.paused == 1 && pt.t.Stop() {
		pt.left -= time.Since(pt.since)
	}
}

func (pt *pausableTimer) resume() {
	if pt == nil {
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.paused--; pt.paused == 0 {
		pt.since = time.Now()
		pt.t = time.AfterFunc(max(pt.left, 0), pt.fire)
	}
}

func (pt *pausableTimer) stop() {
	if pt == nil {
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.t.Stop()
	pt.paused = 1 << 30 // never again
}
