package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"countersign/internal/tool"
)

// Limits of codemode (SPEC §4 "Codemode": "a time limit and an output cap").
const (
	// DefaultCodemodeTimeout is codemode's default time limit (Config.CodemodeTimeout).
	DefaultCodemodeTimeout = 10 * time.Second
	// DefaultCodemodeMemoryLimit is codemode's default memory budget (CodemodeConfig.MemoryLimit):
	// 512 MiB.
	DefaultCodemodeMemoryLimit = 512 << 20
	// CodemodeConsoleCap caps, in bytes, the console output a script keeps (each line counts its
	// text plus one); beyond it lines are cut and consoleTruncated is set: 16 KiB.
	CodemodeConsoleCap = 16 << 10
	// MaxCodemodeCalls caps the tool calls one script may start; later ones reject at once, so a
	// loop of cheap calls cannot run unbounded while the time limit does not tick (it counts only
	// the time the script itself runs).
	MaxCodemodeCalls = 1000
	// maxListedCalls caps the calls listed in codemode's text for the model (all of them stay
	// in structuredContent).
	maxListedCalls = 50
	// maxCallError caps, in bytes, the error text kept per call in codemode's structuredContent.
	maxCallError = 4 << 10
	// maxCallStack bounds the interpreter's call stack, so runaway recursion fails as an error.
	maxCallStack = 10_000
)

// ConsoleLine is one line a script wrote with console.log, info, warn or error: the level ("log",
// "info", "warn", "error") and the text, its arguments joined by spaces (strings as they are,
// other values as JSON, errors as "Name: message").
type ConsoleLine struct {
	Level string `json:"level"`
	Text  string `json:"text"`
}

// CodemodeCall is one tool call a script made through tools.<name>: the nested call's id
// ("<parent id>/<n>", SPEC §4), the tool's name, status "ok" or "error", and for an error the
// result's text (cut to 4 KiB), e.g. "Denied by owner: not now".
type CodemodeCall struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// CodemodeOutput is codemode's structuredContent (SPEC §4 "Codemode": "the codemode result lists
// every call with its status, plus console output"), also on an isError result ("an error that has
// data", SPEC §1 rule 1): result is the script's return value as JSON (null when it returned
// nothing or failed; a JSON string of the first OutputCap bytes, with resultTruncated, when it was
// longer); error is the failure text when the script threw, was stopped, or never settled; console
// lists the console output, consoleTruncated when some was cut; calls lists every tool call in
// the order the script started them; durationMs is the whole run's wall time.
type CodemodeOutput struct {
	Result           json.RawMessage `json:"result"`
	ResultTruncated  bool            `json:"resultTruncated,omitempty"`
	Error            string          `json:"error,omitempty"`
	Console          []ConsoleLine   `json:"console"`
	ConsoleTruncated bool            `json:"consoleTruncated"`
	Calls            []CodemodeCall  `json:"calls"`
	DurationMs       int64           `json:"durationMs"`
}

const codemodeInput = `{
  "type": "object",
  "properties": {
    "code": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "JavaScript run as the body of an async function: use await, and return the value you want back."}
  },
  "required": ["code"],
  "additionalProperties": false
}`

const codemodeOutput = `{
  "type": "object",
  "properties": {
    "result": {},
    "resultTruncated": {"type": "boolean"},
    "error": {"type": "string"},
    "console": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "level": {"enum": ["log", "info", "warn", "error"]},
          "text": {"type": "string"}
        },
        "required": ["level", "text"],
        "additionalProperties": false
      }
    },
    "consoleTruncated": {"type": "boolean"},
    "calls": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "id": {"type": "string"},
          "name": {"type": "string"},
          "status": {"enum": ["ok", "error"]},
          "error": {"type": "string"}
        },
        "required": ["id", "name", "status"],
        "additionalProperties": false
      }
    },
    "durationMs": {"type": "integer", "minimum": 0}
  },
  "required": ["result", "console", "consoleTruncated", "calls", "durationMs"],
  "additionalProperties": false
}`

// codemodeTool is the codemode tool of SPEC §4 and §10: model-only, inactive until activated;
// readOnly and closed world because the sandbox itself touches nothing: every call it makes goes
// through ExecuteTool, so the gate sees, and may prompt for, each one.
func codemodeTool(cfg Config) *tool.Tool {
	// The server's caps, shared by every call of this tool: workers running script, and workers
	// alive (running or waiting for their calls' outcomes).
	slots := &codemodeSlots{running: make(chan struct{}, cfg.Codemode.MaxWorkers),
		alive: make(chan struct{}, cfg.Codemode.MaxWorkers*CodemodeAliveFactor)}
	return &tool.Tool{
		Name:  "codemode",
		Title: "Code mode",
		Description: "Run JavaScript (the body of an async function) that calls tools and combines " +
			"their results. `await tools.<name>(args)` calls a tool with an arguments object: it " +
			"returns the tool's structuredContent as an object when it has one, else its text; a " +
			"failed, blocked or denied call throws an Error whose message is the result text. " +
			"Calls run concurrently with `await Promise.all([...])`. Each call is gated like a " +
			"direct one, and may wait for a person's approval. `console.log/info/warn/error` is " +
			"captured (" + fmt.Sprint(CodemodeConsoleCap>>10) + " KiB at most). `return` a " +
			"JSON-serialisable value to get it back. There is no file, network or process access " +
			"(no require, fetch, setTimeout), and the script may run for " + cfg.CodemodeTimeout.String() +
			" (time spent waiting for tool calls does not count), grow its memory by " +
			fmt.Sprint(cfg.Codemode.MemoryLimit>>21) + " MiB and make at most " +
			fmt.Sprint(MaxCodemodeCalls) + " tool calls; past a limit it is stopped.",
		InputSchema:   json.RawMessage(codemodeInput),
		OutputSchema:  json.RawMessage(codemodeOutput),
		Annotations:   readOnly(),
		Exposure:      tool.ModelOnly,
		DefaultActive: tool.Bool(false),
		Execute: func(ctx context.Context, arguments json.RawMessage, onUpdate func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct {
				Code string `json:"code"`
			}
			if err := decode(arguments, &in); err != nil {
				return tool.Result{}, err
			}
			return runCodemode(ctx, cfg, slots, in.Code, emitter(onUpdate), tc), nil
		},
	}
}

// codemodeRun is one codemode call on the server's side (SPEC §4 "Codemode"): the script runs in
// a worker process (ServeCodemodeWorker) that this side starts, feeds and, when the time limit is
// spent or ctx ends, kills. Every tool call the script makes is run here, through the tool
// context's ExecuteTool, so it passes the same pipeline as any call (handlers, rules, prompts).
// One goroutine, the loop, reads the worker's messages and keeps the time limit; each call runs
// on its own goroutine and hands its outcome to the writer goroutine, the only one that writes
// to the worker after the run message.
type codemodeRun struct {
	ctx        context.Context
	cfg        Config
	slots      *codemodeSlots // the server's caps on running and live workers
	slot       runningSlot    // this run's hold on a running slot
	tc         tool.Context
	onUpdate   func(tool.Update)
	maxMessage int // protocol line cap

	// Nested calls: their context, cancelled when the script ends; their goroutines; outbox,
	// their outcomes for the writer; sent, one token per outcome written to the worker; done,
	// closed when the run is over (nothing more is written or counted).
	callCtx     context.Context
	cancelCalls context.CancelCauseFunc
	wg          sync.WaitGroup
	outbox      chan []byte
	sent        chan struct{}
	done        chan struct{}

	console      []ConsoleLine // the loop's goroutine only
	consoleBytes int
	consoleCut   bool

	mu       sync.Mutex // guards calls and finished, written by the calls' goroutines
	calls    []CodemodeCall
	finished int
}

// Timing of the worker, seen from the server.
const (
	// codemodeStartTimeout bounds how long a worker may take to start and send "ready".
	codemodeStartTimeout = 10 * time.Second
	// codemodeKillGrace is how long past the time limit the server waits for the worker to stop
	// the script itself (with the same error) before it kills the worker.
	codemodeKillGrace = 100 * time.Millisecond
	// codemodeExitWait bounds how long the server waits, once the worker closed its stdout, for
	// it to exit and for its stderr, before it kills it.
	codemodeExitWait = 2 * time.Second
)

// runCodemode runs code as the body of an async function in a fresh worker (SPEC §4 "Codemode")
// and returns codemode's result: success with the return value, or isError with the same
// structuredContent when the script threw, was stopped by the time limit, the memory limit or
// ctx (also while it waited for one of slots), awaited something that can never happen, or the
// worker failed. It returns only after the worker is reaped and every nested call it started has
// ended.
func runCodemode(ctx context.Context, cfg Config, slots *codemodeSlots, code string, onUpdate func(tool.Update), tc tool.Context) tool.Result {
	start := time.Now()
	r := &codemodeRun{
		ctx: ctx, cfg: cfg, slots: slots, tc: tc, onUpdate: onUpdate, maxMessage: codemodeMessageCap(cfg.OutputCap),
		outbox: make(chan []byte), sent: make(chan struct{}), done: make(chan struct{}),
	}
	r.callCtx, r.cancelCalls = context.WithCancelCause(ctx)

	result, resultHead, failure := r.run(code)

	// Calls still running are cancelled with the reason the script ended; nothing more is
	// written to the (dead) worker, and the calls' goroutines are waited for, so none outlives
	// the tool's call and the parent's nestedCalls record is whole.
	close(r.done)
	cause := failure
	if cause == nil {
		cause = errors.New("The script returned before this call finished")
	}
	r.cancelCalls(cause)
	r.wg.Wait()

	out := CodemodeOutput{Result: json.RawMessage("null"), Console: r.console, ConsoleTruncated: r.consoleCut}
	if out.Console == nil {
		out.Console = []ConsoleLine{}
	}
	r.mu.Lock()
	out.Calls = append([]CodemodeCall{}, r.calls...)
	r.mu.Unlock()
	switch {
	case failure != nil:
	case resultHead != "":
		out.Result, out.ResultTruncated = tool.Structured(cutUTF8(resultHead, cfg.OutputCap)), true
	case len(result) > cfg.OutputCap:
		out.Result, out.ResultTruncated = tool.Structured(cutUTF8(string(result), cfg.OutputCap)), true
	case result != nil:
		out.Result = result
	}
	head := "Result: " + string(out.Result)
	if failure == nil && result == nil && !out.ResultTruncated {
		head = "Result: undefined (the script returned nothing)"
	}
	if failure != nil {
		out.Error = failure.Error()
		head = out.Error
	}
	out.DurationMs = time.Since(start).Milliseconds()
	return tool.Result{
		Content:           []tool.Content{tool.Text(codemodeText(head, out))},
		StructuredContent: tool.Structured(out),
		IsError:           failure != nil,
	}
}

// run starts the worker, sends it the script and serves it until it sends "done", dies, breaks
// the protocol, runs out of time, or ctx ends; the worker is killed and reaped before run
// returns. It returns the script's return value as JSON (nil for undefined), or the start of a
// longer one (resultHead), or why the script failed.
func (r *codemodeRun) run(code string) (result json.RawMessage, resultHead string, failure error) {
	var names []string
	if l, ok := r.tc.(tool.NestedTools); ok {
		names = l.NestedTools()
	}
	runLine, err := encodeMessage(codemodeMessage{Type: msgRun, Code: code, TimeoutNs: int64(r.cfg.CodemodeTimeout),
		OutputCap: r.cfg.OutputCap, MemoryLimit: r.cfg.Codemode.MemoryLimit, Tools: names})
	if err != nil {
		return nil, "", fmt.Errorf("Script failed: %v", err)
	}
	release, err := r.acquireSlots()
	if err != nil {
		return nil, "", err
	}
	defer release() // after w.stop (deferred below) has reaped the worker
	w, err := startWorker(r.cfg.Codemode.Command, r.maxMessage, callEnv([]string{}, r.cfg.forCall(r.tc)))
	if err != nil {
		return nil, "", fmt.Errorf("Script failed: the interpreter cannot start: %v", err)
	}
	defer w.stop()
	w.bg.Add(1)
	go r.write(w, runLine)

	// The time limit counts while the worker runs script: from "ready" on, except while it
	// waits for an outcome (it said "wait" having consumed every outcome written so far).
	var (
		ready     bool
		sent      int  // outcomes written
		waitingAt = -1 // the consumed count of a "wait" that is the worker's latest message, else -1
		running   bool
		since     time.Time     // when the worker last started running
		used      time.Duration // running time before since
		budget    = r.cfg.CodemodeTimeout + codemodeKillGrace
	)
	timer := time.NewTimer(codemodeStartTimeout)
	defer timer.Stop()
	timeUp := fmt.Errorf("Script stopped: time limit of %s exceeded", r.cfg.CodemodeTimeout)
	for {
		select {
		case msg, ok := <-w.msgs:
			if !ok {
				return nil, "", r.ended(w)
			}
			if msg.Type != msgReady && !ready {
				return nil, "", w.broken(fmt.Errorf("a %q message before %q", msg.Type, msgReady))
			}
			waitingAt = -1
			switch msg.Type {
			case msgReady:
				if ready {
					return nil, "", w.broken(fmt.Errorf("a second %q message", msgReady))
				}
				ready = true
			case msgConsole:
				if err := r.keepConsole(msg); err != nil {
					return nil, "", w.broken(err)
				}
			case msgCall:
				if err := r.startCall(msg); err != nil {
					return nil, "", w.broken(err)
				}
			case msgWait:
				r.mu.Lock()
				calls := len(r.calls)
				r.mu.Unlock()
				if msg.Consumed < 0 || msg.Consumed > calls {
					return nil, "", w.broken(fmt.Errorf("a %q having consumed %d outcomes of %d calls", msgWait, msg.Consumed, calls))
				}
				waitingAt = msg.Consumed
			case msgDone:
				if msg.Error != "" {
					return nil, "", errors.New(msg.Error)
				}
				return msg.Result, msg.ResultHead, nil
			default:
				return nil, "", w.broken(fmt.Errorf("an unknown message type %q", msg.Type))
			}
		case <-r.sent:
			sent++
		case <-r.ctx.Done():
			w.kill()
			return nil, "", errors.New("Script stopped: " + context.Cause(r.ctx).Error())
		case <-timer.C:
			w.kill()
			if !ready {
				return nil, "", fmt.Errorf("Script failed: the interpreter did not start within %s", codemodeStartTimeout)
			}
			return nil, "", timeUp
		}
		if !ready {
			continue
		}
		// The worker is blocked only while its latest message is a "wait" and no outcome was
		// written after the ones it had consumed. (An outcome it consumed before the loop counted
		// it as written makes consumed > sent for a moment: running, until the count catches up.)
		switch blocked := waitingAt == sent; {
		case blocked && running:
			used += time.Since(since)
			running = false
			timer.Stop()
			// Waiting for its calls (a person's approval may take hours), the worker runs no
			// script: its running slot goes to another call until an outcome is written.
			r.slot.idle(waitingAt)
		case !blocked && !running:
			running, since = true, time.Now()
			timer.Reset(max(budget-used, 0))
		}
	}
}

// CodemodeAliveFactor bounds the codemode workers alive at once: CodemodeAliveFactor ×
// CodemodeConfig.MaxWorkers, running or waiting for their calls' outcomes (issue 35: a script
// waiting for a person holds no running slot, but its worker and its heap stay alive).
const CodemodeAliveFactor = 4

// codemodeSlots are the server's caps on codemode workers: running counts the workers running
// script (CodemodeConfig.MaxWorkers: CPU and the heap's growth), alive the workers that exist
// (CodemodeAliveFactor times as many: a waiting worker keeps its heap).
type codemodeSlots struct {
	running, alive chan struct{}
}

// acquireSlots takes one of the server's live-worker slots, then a running slot, waiting for
// each when all are taken: it says so first through onUpdate ("waiting for a codemode slot
// (N running)", "… (N alive)"), and gives up when ctx ends, with the same error as a stop while
// running. The wait comes before the worker starts, so it does not count against the time
// limit. release gives back both (the running slot only if the run holds it then).
func (r *codemodeRun) acquireSlots() (release func(), err error) {
	if err := r.take(r.slots.alive, "alive"); err != nil {
		return nil, err
	}
	if err := r.take(r.slots.running, "running"); err != nil {
		<-r.slots.alive
		return nil, err
	}
	r.slot = runningSlot{slots: r.slots.running, held: true}
	return func() {
		r.slot.release()
		<-r.slots.alive
	}, nil
}

// take takes one slot of c for the run, waiting for one when all are taken (saying so first,
// with what counts, "running" or "alive"), or ctx's end.
func (r *codemodeRun) take(c chan struct{}, what string) error {
	select {
	case c <- struct{}{}:
		return nil
	default:
	}
	r.onUpdate(tool.Update{Message: fmt.Sprintf("waiting for a codemode slot (%d %s)", len(c), what)})
	select {
	case c <- struct{}{}:
		return nil
	case <-r.ctx.Done():
		return errors.New("Script stopped: " + context.Cause(r.ctx).Error())
	}
}

// runningSlot is one run's hold on a running slot (codemodeSlots.running): held while its
// worker may run script, given back while the worker waits for outcomes (idle), and taken again
// by the writer before it writes the next outcome (beforeWrite), so a worker never runs script
// without one. The loop gives it back and the writer takes it; mu orders the two.
type runningSlot struct {
	slots   chan struct{}
	mu      sync.Mutex
	held    bool
	written int // outcomes the writer has written or is about to write
}

// idle gives the slot back if the worker, having consumed consumed outcomes, waits for the next
// and no outcome past those is written or being written.
func (s *runningSlot) idle(consumed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held && s.written == consumed {
		s.held = false
		<-s.slots
	}
}

// beforeWrite takes the slot again, if the run gave it back, before an outcome is written (which
// lets the worker run), waiting for one while all are taken; false when the run is over, the
// worker gone or ctx ended first (the outcome is then not written).
func (s *runningSlot) beforeWrite(done, quit, ctxDone <-chan struct{}) bool {
	s.mu.Lock()
	if !s.held {
		s.mu.Unlock()
		select {
		case s.slots <- struct{}{}:
		case <-done:
			return false
		case <-quit:
			return false
		case <-ctxDone:
			return false
		}
		s.mu.Lock()
		s.held = true
	}
	s.written++
	s.mu.Unlock()
	return true
}

// release gives the slot back if the run holds it (once the worker is reaped).
func (s *runningSlot) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.held = false
		<-s.slots
	}
}

// write sends the run message, then each outcome in the order the calls finish, counting each
// written outcome on sent. It ends when the run is over or the worker's stdin is closed.
func (r *codemodeRun) write(w *codemodeWorker, runLine []byte) {
	defer w.bg.Done()
	if _, err := w.stdin.Write(runLine); err != nil {
		return // the worker died: its stdout ends, and the loop says why
	}
	for {
		select {
		case line := <-r.outbox:
			if !r.slot.beforeWrite(r.done, w.quit, r.ctx.Done()) {
				return
			}
			if _, err := w.stdin.Write(line); err != nil {
				return
			}
			select {
			case r.sent <- struct{}{}:
			case <-r.done:
				return
			case <-w.quit:
				return
			}
		case <-r.done:
			return
		case <-w.quit:
			return
		}
	}
}

// keepConsole keeps a console line within CodemodeConsoleCap (the worker cuts first; this holds
// the cap whatever it sends).
func (r *codemodeRun) keepConsole(msg codemodeMessage) error {
	if msg.Cut {
		if msg.Level != "" || msg.Text != "" {
			return errors.New("a console cut mark with a line")
		}
		r.consoleCut = true
		return nil
	}
	switch msg.Level {
	case "log", "info", "warn", "error":
	default:
		return fmt.Errorf("a console line of level %q", msg.Level)
	}
	if r.consoleCut {
		return nil
	}
	text := msg.Text
	room := CodemodeConsoleCap - r.consoleBytes - 1
	if len(text) > room {
		r.consoleCut = true
		if room <= 0 {
			return nil
		}
		text = cutUTF8(text, room)
	}
	r.consoleBytes += len(text) + 1
	r.console = append(r.console, ConsoleLine{Level: msg.Level, Text: text})
	return nil
}

// startCall runs the worker's call on its own goroutine, through ExecuteTool, and queues its
// outcome for the worker. Calls are numbered 1, 2, … in the order the script starts them, at
// most MaxCodemodeCalls (the worker refuses more itself).
func (r *codemodeRun) startCall(msg codemodeMessage) error {
	r.mu.Lock()
	n := len(r.calls)
	r.mu.Unlock()
	switch {
	case msg.ID != n+1:
		return fmt.Errorf("call %d where call %d was next", msg.ID, n+1)
	case n >= MaxCodemodeCalls:
		return fmt.Errorf("more than %d calls", MaxCodemodeCalls)
	case !jsToolName.MatchString(msg.Name):
		return fmt.Errorf("a call of %q, which is not a tool name", preview([]byte(msg.Name)))
	case len(msg.Arguments) == 0:
		return fmt.Errorf("call %d without arguments", msg.ID)
	}
	name, args, id := msg.Name, msg.Arguments, msg.ID
	r.mu.Lock()
	r.calls = append(r.calls, CodemodeCall{Name: name, Status: "error", Error: "did not finish"})
	finished := r.finished
	r.mu.Unlock()
	r.wg.Add(1)
	r.onUpdate(tool.Update{Progress: float64(finished), Message: fmt.Sprintf("Calling %s", name)})
	go func() {
		defer r.wg.Done()
		out := r.tc.ExecuteTool(r.callCtx, name, args)
		rec := CodemodeCall{ID: out.ToolCall.ID, Name: name, Status: "ok"}
		if out.IsError {
			rec.Status, rec.Error = "error", cutUTF8(callErrorText(name, out), maxCallError)
		}
		r.mu.Lock()
		r.calls[id-1] = rec
		r.finished++
		n := r.finished
		r.mu.Unlock()
		msg := fmt.Sprintf("%s %s: ok", name, rec.ID)
		if out.IsError {
			msg = fmt.Sprintf("%s %s: error: %s", name, rec.ID, firstLine(rec.Error))
		}
		r.onUpdate(tool.Update{Progress: float64(n), Message: msg})
		select {
		case r.outbox <- r.outcomeLine(id, name, out):
		case <-r.done:
		}
	}()
	return nil
}

// outcomeLine is the protocol line of call id's outcome. One the worker could not take (larger
// than the line cap, or structuredContent that is not JSON) becomes an error outcome saying so.
func (r *codemodeRun) outcomeLine(id int, name string, out tool.Outcome) []byte {
	msg := codemodeMessage{Type: msgOutcome, ID: id, ToolCallID: out.ToolCall.ID, IsError: out.IsError,
		Text: out.Result.TextOf(), StructuredContent: out.Result.StructuredContent}
	if out.IsError {
		msg.Text = callErrorText(name, out)
	}
	line, err := encodeMessage(msg)
	if err == nil && len(line) > r.maxMessage {
		err = fmt.Errorf("it takes %d bytes, more than the %d codemode takes", len(line), r.maxMessage)
	}
	if err != nil {
		line, _ = encodeMessage(codemodeMessage{Type: msgOutcome, ID: id, ToolCallID: out.ToolCall.ID, IsError: true,
			Text: fmt.Sprintf("The result of tool %q cannot be passed to the script: %v", name, err)})
	}
	return line
}

// ended is why the script ended when the worker's messages ended without "done": the reader's
// error when the worker broke the protocol, else what its exit says (see died). A line cut
// short by the end of stdout is a death, not a broken protocol: a worker killed mid-write.
func (r *codemodeRun) ended(w *codemodeWorker) error {
	if !errors.Is(w.readErr, io.EOF) && !errors.Is(w.readErr, io.ErrUnexpectedEOF) {
		return w.broken(w.readErr)
	}
	return w.died(r.cfg.Codemode.MemoryLimit)
}

// codemodeWorker is a running worker process: its stdin, its messages (read from its stdout by
// a goroutine: msgs is closed at the end of stdout, with readErr set first), its exit and the
// start of its stderr.
type codemodeWorker struct {
	cmd     *exec.Cmd
	stdin   *os.File
	stdout  *os.File
	stderr  *os.File
	msgs    chan codemodeMessage
	readErr error
	quit    chan struct{} // closed by stop: the reader and the writer stop

	exited  chan struct{} // closed when the process has been reaped
	errDone chan struct{} // closed when stderr has been read to its end
	errMu   sync.Mutex
	errHead []byte // the first workerStderrCap bytes of its stderr

	bg sync.WaitGroup // the reader, the stderr reader and the writer
}

// workerStderrCap is how much of a worker's stderr is kept (the Go runtime's fatal error comes
// first).
const workerStderrCap = 8 << 10

// startWorker starts command in its own process group with the parent-death signal (childAttr),
// in "/", with env as its whole environment (the call's marker only: callEnv) and pipes for its
// stdin, stdout and stderr, and starts reading its messages (lines of at most maxMessage bytes)
// and its stderr.
func startWorker(command []string, maxMessage int, env []string) (w *codemodeWorker, err error) {
	if len(command) == 0 {
		return nil, errors.New("no worker command")
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File) {
		if err == nil {
			r, w, err = os.Pipe()
			files = append(files, r, w)
		}
		return r, w
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Dir = "/"
	// The worker's whole environment is env: nothing of the server's (it holds the owner token
	// and the model providers' API keys) is passed on, and the interpreter needs nothing.
	cmd.Env = env
	// *os.File streams are handed over as they are: no copying goroutines inside exec.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = childAttr()
	w = &codemodeWorker{cmd: cmd, stdin: inW, stdout: outR, stderr: errR,
		msgs: make(chan codemodeMessage), quit: make(chan struct{}), exited: make(chan struct{}), errDone: make(chan struct{})}
	// One goroutine, locked to its thread, starts the worker and waits for it: the parent-death
	// signal follows the thread that started the process (childAttr).
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait() // its status is in cmd.ProcessState
		close(w.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	files = []*os.File{inR, outW, errW} // the child's ends: closed here, kept open by the child
	w.bg.Add(2)
	go w.read(maxMessage)
	go w.readStderr()
	return w, nil
}

// read hands the worker's messages to msgs until its stdout ends or a line is not a message.
func (w *codemodeWorker) read(maxMessage int) {
	defer w.bg.Done()
	defer close(w.msgs)
	in := newMessageReader(w.stdout, maxMessage)
	for {
		msg, err := in.read()
		if err != nil {
			w.readErr = err
			return
		}
		select {
		case w.msgs <- msg:
		case <-w.quit:
			w.readErr = io.EOF
			return
		}
	}
}

// readStderr keeps the start of the worker's stderr and reads the rest to its end.
func (w *codemodeWorker) readStderr() {
	defer w.bg.Done()
	defer close(w.errDone)
	buf := make([]byte, 4<<10)
	for {
		n, err := w.stderr.Read(buf)
		w.errMu.Lock()
		if room := workerStderrCap - len(w.errHead); room > 0 {
			w.errHead = append(w.errHead, buf[:min(n, room)]...)
		}
		w.errMu.Unlock()
		if err != nil {
			return
		}
	}
}

// kill ends the worker's process group with SIGKILL, unless the worker has been reaped (its
// pid could be another process's by now).
func (w *codemodeWorker) kill() {
	select {
	case <-w.exited:
	default:
		_ = killGroup(w.cmd.Process.Pid)
	}
}

// stop kills the worker if it still runs, reaps it and closes the pipes, waiting for the
// goroutines that use them.
func (w *codemodeWorker) stop() {
	w.kill()
	<-w.exited
	close(w.quit)
	w.stdin.Close() // wakes a writer blocked on a full pipe
	select {
	case <-w.errDone:
	case <-time.After(codemodeExitWait):
	}
	w.stdout.Close()
	w.stderr.Close()
	w.bg.Wait()
}

// broken kills a worker that broke the protocol and says so.
func (w *codemodeWorker) broken(err error) error {
	w.kill()
	return fmt.Errorf("Script failed: the interpreter broke the protocol (%v)", err)
}

// outOfMemory reports whether a worker's stderr says it ran out of address space: the Go
// runtime's "out of memory" (or, under the race detector, its arena reservation failing as
// "address space collisions"), or an mmap's ENOMEM.
func outOfMemory(stderr string) bool {
	for _, s := range []string{"out of memory", "cannot allocate memory", "failed to allocate",
		"failed to reserve", "address space collisions"} {
		if strings.Contains(stderr, s) {
			return true
		}
	}
	return false
}

// died is why a worker that closed its stdout without "done" ended, from its exit status and
// the start of its stderr: the memory limit (the Go runtime ran out of the address space
// RLIMIT_AS allows), a stack overflow, SIGKILL (RLIMIT_CPU, or the system's out-of-memory
// killer), or another exit.
func (w *codemodeWorker) died(memoryLimit int64) error {
	select {
	case <-w.exited:
	case <-time.After(codemodeExitWait):
		w.kill() // it closed its stdout but lives on
		<-w.exited
	}
	select {
	case <-w.errDone:
	case <-time.After(codemodeExitWait):
	}
	w.errMu.Lock()
	stderr := string(w.errHead)
	w.errMu.Unlock()
	first := firstLine(strings.TrimSpace(stderr))
	status := "exit status unknown"
	if st := w.cmd.ProcessState; st != nil {
		status = st.String()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return fmt.Errorf("Script stopped: the interpreter was killed (%s: its CPU time limit, or the system is out of memory)", status)
		}
	}
	switch {
	case outOfMemory(stderr):
		return fmt.Errorf("Script stopped: memory limit exceeded (the script needed more than the %d MiB the interpreter may add)", memoryLimit>>20)
	case strings.Contains(stderr, "stack overflow") || strings.Contains(stderr, "stack exceeds"):
		return errors.New("Script failed: the interpreter's stack overflowed (data nested too deep?)")
	case first != "":
		return fmt.Errorf("Script failed: the interpreter ended unexpectedly (%s): %s", status, first)
	}
	return fmt.Errorf("Script failed: the interpreter ended unexpectedly (%s)", status)
}

// callErrorText is a failed call's result text, or a stand-in when it has none.
func callErrorText(name string, out tool.Outcome) string {
	if text := out.Result.TextOf(); text != "" {
		return text
	}
	return fmt.Sprintf("Tool %q failed", name)
}

// codemodeText is codemode's text for the model: head (the result or the failure), the console
// output and the calls, in sections separated by a blank line.
func codemodeText(head string, out CodemodeOutput) string {
	sections := []string{head}
	if out.ResultTruncated {
		sections[0] += "\n[The result was cut.]"
	}
	if len(out.Console) > 0 || out.ConsoleTruncated {
		var b strings.Builder
		b.WriteString("Console:")
		for _, l := range out.Console {
			b.WriteString("\n")
			if l.Level != "log" {
				b.WriteString("[" + l.Level + "] ")
			}
			b.WriteString(l.Text)
		}
		if out.ConsoleTruncated {
			fmt.Fprintf(&b, "\n[Console output cut at %d KiB.]", CodemodeConsoleCap>>10)
		}
		sections = append(sections, b.String())
	}
	if len(out.Calls) > 0 {
		failed := 0
		for _, c := range out.Calls {
			if c.Status != "ok" {
				failed++
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Tool calls: %d (%d failed)", len(out.Calls), failed)
		for i, c := range out.Calls {
			if i == maxListedCalls {
				fmt.Fprintf(&b, "\n… and %d more", len(out.Calls)-i)
				break
			}
			fmt.Fprintf(&b, "\n- %s %s: %s", c.Name, c.ID, c.Status)
			if c.Error != "" {
				b.WriteString(": " + firstLine(c.Error))
			}
		}
		sections = append(sections, b.String())
	}
	return strings.Join(sections, "\n\n")
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// cutUTF8 returns at most the first n bytes of s, ending on a UTF-8 boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
