package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"countersign/internal/procenv"
	"countersign/internal/tool"
)

// capture keeps at most limit bytes of a stream, either the first ones (head) or the last ones
// (tail), and counts every byte written. It is safe for concurrent use.
type capture struct {
	limit int
	tail  bool

	mu    sync.Mutex
	buf   []byte
	total int64
}

func newCapture(limit int, tail bool) *capture { return &capture{limit: limit, tail: tail} }

func (c *capture) write(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if !c.tail {
		if room := c.limit - len(c.buf); room > 0 {
			c.buf = append(c.buf, p[:min(room, len(p))]...)
		}
		return
	}
	c.buf = append(c.buf, p...)
	// Trim only when twice over the limit, so appends stay amortised O(1).
	if len(c.buf) > 2*c.limit {
		c.buf = append(c.buf[:0], c.buf[len(c.buf)-c.limit:]...)
	}
}

// bytes returns the kept bytes; a tail starts on a UTF-8 boundary.
func (c *capture) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buf
	if c.tail && len(b) > c.limit {
		b = b[len(b)-c.limit:]
		for n := 0; n < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); n++ {
			b = b[1:]
		}
	}
	return bytes.Clone(b)
}

func (c *capture) String() string { return string(c.bytes()) }

// truncated reports whether bytes were dropped.
func (c *capture) truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total > int64(c.limit)
}

// size is the number of bytes written in all.
func (c *capture) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// maxLine bounds one line passed to a process's onLine; the rest of a longer line is dropped.
const maxLine = 1 << 20

// process is one command to run in its own process group, its output read as it comes.
type process struct {
	argv    []string
	dir     string
	env     []string
	timeout time.Duration // 0: none but ctx
	// stdout and stderr, when set, capture the streams; with combined, stderr goes to stdout's
	// pipe (interleaved as written) and the stderr capture is unused.
	stdout, stderr *capture
	combined       bool
	// onLine, when set, is called with each line (without its newline) of each stream, from the
	// stream's reader goroutine, until run returns.
	onLine func(stderr bool, line []byte)
}

// exit is how a process ended.
type exit struct {
	code     int // exit status; 128+n when killed by signal n (as shells report); -1 on timeout
	timedOut bool
	duration time.Duration
}

// errCannotStart wraps a process that could not be started (SPEC §10: no data; the tool fails).
var errCannotStart = errors.New("cannot start")

// pipeGrace is how long run keeps reading after the process exits: whatever it started in the
// background is killed with its group, but a process that left the group may hold the pipes.
const pipeGrace = 2 * time.Second

// run starts the process in a new process group, with the parent-death signal (childAttr), and
// waits for it. Cancelling ctx, or the timeout, kills the whole group (SIGKILL to -pgid) so
// children die too; when the process exits normally, whatever it left running in its group is
// killed as well, so no work outlives the call; if the server dies, the process dies with it. A
// cancelled ctx returns ctx's error; a timeout is exit.timedOut; a process that cannot start is
// an error wrapping errCannotStart.
func (p process) run(ctx context.Context) (exit, error) {
	// Locked from before Start until after Wait: the parent-death signal follows the thread that
	// started the process (childAttr).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if p.timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, p.timeout)
	}
	defer cancel()

	out, err := openOutput()
	if err != nil {
		return exit{}, err
	}
	defer out.close()

	cmd := exec.CommandContext(runCtx, p.argv[0], p.argv[1:]...)
	cmd.Dir = p.dir
	cmd.Env = p.env
	// *os.File outputs are handed to the child as they are: no copying goroutines, so Wait
	// returns when the process exits, not when every holder of the pipe has closed it.
	cmd.Stdout = out.outW
	cmd.Stderr = out.errW
	if p.combined {
		cmd.Stderr = out.outW
	}
	cmd.SysProcAttr = childAttr()
	var killed atomic.Bool
	cmd.Cancel = func() error {
		killed.Store(true)
		return killGroup(cmd.Process.Pid)
	}

	begin := time.Now()
	err = cmd.Start()
	out.closeWriters()
	if err != nil {
		return exit{}, fmt.Errorf("%w %q: %w", errCannotStart, strings.Join(p.argv, " "), err)
	}
	out.pump(p)

	waitErr := cmd.Wait()
	// The group's leader is gone; its leftovers go with it.
	_ = killGroup(cmd.Process.Pid)
	out.drain()
	e := exit{duration: time.Since(begin)}

	if killed.Load() {
		if ctx.Err() != nil {
			return e, ctx.Err()
		}
		e.code, e.timedOut = -1, true
		return e, nil
	}
	st := cmd.ProcessState
	if st == nil {
		return e, waitErr
	}
	e.code = st.ExitCode()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.code = 128 + int(ws.Signal())
	}
	return e, nil
}

// killGroup sends SIGKILL to the process group pgid.
func killGroup(pgid int) error {
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// pump reads r to its end into c and p.onLine.
func (p process) pump(wg *sync.WaitGroup, r *os.File, c *capture, stderr bool) {
	defer wg.Done()
	buf := make([]byte, 32<<10)
	var line []byte
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if c != nil {
				c.write(chunk)
			}
			for p.onLine != nil && len(chunk) > 0 {
				i := bytes.IndexByte(chunk, '\n')
				part := chunk
				if i >= 0 {
					part = chunk[:i]
				}
				if room := maxLine - len(line); room > 0 {
					line = append(line, part[:min(room, len(part))]...)
				}
				if i < 0 {
					break
				}
				p.onLine(stderr, line)
				line = line[:0]
				chunk = chunk[i+1:]
			}
		}
		if err != nil {
			break
		}
	}
	if p.onLine != nil && len(line) > 0 {
		p.onLine(stderr, line)
	}
}

// environ is the environment of a tool's commands: the server's allowlisted variables (see
// procenv: never its whole environment, which holds the owner token and the model providers'
// keys; a command's output lands in a transcript reviewers may see, and run_checks and
// failing_tests run workspace code), then cfg.Env, then more (a tool's own settings, such as
// git's GIT_*), then the marker of the call cfg was made for (callEnv). Later entries win.
func environ(cfg Config, more ...string) []string {
	env := procenv.Filter(os.Environ(), cfg.PassEnv)
	env = append(env, cfg.Env...)
	return callEnv(append(env, more...), cfg)
}

// shellQuote quotes s for /bin/sh as one word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// reporter forwards progress to onUpdate at most once per interval: the first update at once,
// later ones coalesced, the latest sent when the interval has passed (SPEC §10: long-running
// tools report progress). close stops it; no update is sent after close returns.
type reporter struct {
	onUpdate func(tool.Update)
	every    time.Duration

	mu      sync.Mutex
	last    time.Time
	pending func() tool.Update
	closed  bool
	stop    chan struct{}
	done    chan struct{}
}

// reportEvery is the shortest interval between two progress updates (at most 10 a second).
const reportEvery = 100 * time.Millisecond

func newReporter(onUpdate func(tool.Update)) *reporter {
	r := &reporter{onUpdate: emitter(onUpdate), every: reportEvery, stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *reporter) loop() {
	defer close(r.done)
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.mu.Lock()
			if r.pending != nil && !r.closed && time.Since(r.last) >= r.every {
				r.send(r.pending)
			}
			r.mu.Unlock()
		}
	}
}

// update queues the update u builds, sending it at once when the last update is old enough.
// u is called only when the update is sent, with the reporter's lock held: it must not call
// update, and a caller must not hold a lock u takes.
func (r *reporter) update(u func() tool.Update) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if time.Since(r.last) >= r.every {
		r.send(u)
		return
	}
	r.pending = u
}

// send calls onUpdate; r.mu is held, which keeps calls in order and never concurrent.
func (r *reporter) send(u func() tool.Update) {
	r.pending = nil
	r.last = time.Now()
	r.onUpdate(u())
}

// close stops the reporter, dropping a pending update, and waits for its goroutine.
func (r *reporter) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.done
}

// runWith is run for a command that runs in this process rather than as one child: body gets
// the streams (standard input /dev/null, and the write ends of the output pipes, to hand to the
// programs it starts as they are) and returns an exit status, or an error. body owns the
// command's timeout and must kill what it started when ctx ends. Output is read as it comes, as
// for run; a process that outlived body and holds the pipes is given pipeGrace. A cancelled ctx
// returns ctx's error.
func (p process) runWith(ctx context.Context, body func(ctx context.Context, stdin, stdout, stderr *os.File) (int, error)) (exit, error) {
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return exit{}, err
	}
	defer stdin.Close()
	out, err := openOutput()
	if err != nil {
		return exit{}, err
	}
	defer out.close()
	out.pump(p)
	begin := time.Now()
	code, bodyErr := body(ctx, stdin, out.outW, out.errW)
	out.closeWriters()
	out.drain()
	e := exit{duration: time.Since(begin), code: code}
	if ctx.Err() != nil {
		return e, ctx.Err()
	}
	return e, bodyErr
}

// output is the two pipes a command's stdout and stderr are read from as they come (pump).
type output struct {
	outR, outW, errR, errW *os.File
	wg                     sync.WaitGroup
}

func openOutput() (*output, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	return &output{outR: outR, outW: outW, errR: errR, errW: errW}, nil
}

// pump reads both pipes into p's captures and p.onLine until drain.
func (o *output) pump(p process) {
	o.wg.Add(2)
	go p.pump(&o.wg, o.outR, p.stdout, false)
	go p.pump(&o.wg, o.errR, p.stderr, true)
}

// closeWriters closes this process's write ends (the children keep theirs).
func (o *output) closeWriters() {
	o.outW.Close()
	o.errW.Close()
}

// drain waits for the readers to reach the end of both pipes, at most pipeGrace: a process
// that left the group may hold them; closing the read ends then wakes the blocked readers
// (os.Pipe files use the poller).
func (o *output) drain() {
	drained := make(chan struct{})
	go func() { o.wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(pipeGrace):
		o.outR.Close()
		o.errR.Close()
		<-drained
	}
}

// close closes the read ends.
func (o *output) close() {
	o.outR.Close()
	o.errR.Close()
}
