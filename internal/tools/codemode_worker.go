package tools

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dop251/goja"
)

// CodemodeWorkerArg is the first argument that makes the server binary a codemode worker: its
// main must call ServeCodemodeWorker before anything else (before parsing flags) when os.Args[1]
// is this, and exit with its status. The default CodemodeConfig.Command starts the running
// binary (/proc/self/exe) with it.
const CodemodeWorkerArg = "__codemode-worker"

// Exit statuses of ServeCodemodeWorker besides 0 (the script ran and its "done" was written, or
// the parent closed stdin).
const (
	// workerExitProtocol: the parent sent something that is not the protocol.
	workerExitProtocol = 3
	// workerExitLimits: the worker could not set its own limits, so it ran nothing.
	workerExitLimits = 4
)

// codemodeProcs is the worker's GOMAXPROCS: the interpreter runs on one, the other keeps the
// reader of the parent's outcomes and the collector from waiting on it (with one, a goroutine
// blocked reading stdin holds the only P until sysmon takes it back, milliseconds per call).
const codemodeProcs = 2

// codemodeCPUSlack is how much CPU time the worker's RLIMIT_CPU allows beyond codemodeProcs
// times the time limit (the most CPU time the script's running time can use). The parent ends
// the worker at the time limit (of script execution, by the wall clock); the CPU limit is the
// bound that holds even if the parent cannot.
const codemodeCPUSlack = 5 * time.Second

// ServeCodemodeWorker is the codemode worker: the interpreter of SPEC §4 "Codemode", run in a
// child process of the server so that it can be killed whatever the script does. It reads the
// "run" message from stdin, sets its own limits first (RLIMIT_AS: the address space it has now
// plus the run's memoryLimit; RLIMIT_CPU: twice the time limit plus 5 s; no core files; two
// Go processors; a soft Go memory limit of half the budget), then runs the script, sending its tool
// calls and console lines to stdout and taking the calls' outcomes from stdin (see
// codemodeMessage), and writes "done" last. It returns the process's exit status: 0 after "done",
// workerExitProtocol (3) for a parent that breaks the protocol, workerExitLimits (4) when a limit
// cannot be set. It owns the process: when stdin closes (the parent ended or died) it exits at
// once with os.Exit(0), even from inside a script that never yields.
func ServeCodemodeWorker(stdin io.Reader, stdout io.Writer) int {
	runtime.GOMAXPROCS(codemodeProcs)
	in := newMessageReader(stdin, MaxCodemodeMessage)
	req, err := in.read()
	if err == nil && req.Type != msgRun {
		err = fmt.Errorf("the first message is %q, want %q", req.Type, msgRun)
	}
	if err == nil && (req.TimeoutNs <= 0 || req.OutputCap <= 0 || req.MemoryLimit <= 0) {
		err = errors.New("the run message has no time limit, output cap or memory limit")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "codemode worker:", err)
		return workerExitProtocol
	}
	limit := time.Duration(req.TimeoutNs)
	if err := setWorkerLimits(req.MemoryLimit, limit); err != nil {
		fmt.Fprintln(os.Stderr, "codemode worker: cannot set limits:", err)
		return workerExitLimits
	}
	in.max = codemodeMessageCap(req.OutputCap)
	r := &jsRun{
		out: bufio.NewWriterSize(stdout, 64<<10), max: in.max, vm: goja.New(), limit: limit,
		memoryLimit: req.MemoryLimit, heapBase: heapBytes(),
		timeUp:   &stopped{fmt.Sprintf("Script stopped: time limit of %s exceeded", limit)},
		outcomes: make(chan codemodeMessage),
		pending:  map[int]pendingCall{},
		tools:    req.Tools,
	}
	go r.readOutcomes(in)
	r.send(codemodeMessage{Type: msgReady})

	result, failure := r.run(req.Code)

	done := codemodeMessage{Type: msgDone}
	if failure != nil {
		done.Error = cutUTF8(failure.Error(), req.OutputCap)
	} else if len(result) > req.OutputCap {
		done.ResultHead = cutUTF8(string(result), req.OutputCap)
	} else {
		done.Result = result
	}
	r.send(done)
	return 0
}

// setWorkerLimits sets the worker process's own limits (see ServeCodemodeWorker). RLIMIT_AS is
// relative to the address space the process has already reserved: the Go runtime reserves about
// 1.2 GB of it at start (more under the race detector), so an absolute limit set by the parent
// before exec would stop the runtime from starting at all.
func setWorkerLimits(memory int64, timeout time.Duration) error {
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{}); err != nil {
		return fmt.Errorf("RLIMIT_CORE: %w", err)
	}
	vm, err := addressSpace()
	if err != nil {
		return err
	}
	as := vm + uint64(memory)
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: as, Max: as}); err != nil {
		return fmt.Errorf("RLIMIT_AS: %w", err)
	}
	// Soft and hard equal: the kernel sends SIGKILL when the hard limit is reached (the Go
	// runtime ignores SIGXCPU, the soft limit's signal).
	cpu := uint64((codemodeProcs*timeout + codemodeCPUSlack + time.Second - 1) / time.Second)
	if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpu, Max: cpu}); err != nil {
		return fmt.Errorf("RLIMIT_CPU: %w", err)
	}
	debug.SetMemoryLimit(memory / 2)
	// A deep recursion in Go (JSON of deeply nested data) ends as "stack overflow", not as
	// running out of address space.
	debug.SetMaxStack(int(memory / 4))
	return nil
}

// addressSpace is the process's virtual memory size in bytes (VmSize, /proc/self/status).
func addressSpace() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmSize %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmSize in /proc/self/status")
}

// jsToolName is the tool name rule (MCP 2025-11-25 §tools); other keys of `tools` are undefined.
var jsToolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// reservedToolKeys are keys of `tools` that are not tool calls: Object.prototype's methods (so
// `String(tools)` and `tools.hasOwnProperty` behave), "then" (so `await tools` does not call a
// tool) and "toJSON".
var reservedToolKeys = map[string]bool{
	"then": true, "toJSON": true, "constructor": true, "toString": true, "toLocaleString": true,
	"valueOf": true, "hasOwnProperty": true, "isPrototypeOf": true, "propertyIsEnumerable": true,
}

// stopped is the value a script is interrupted with (goja's Interrupt) and the reason it ended.
type stopped struct{ text string }

func (s *stopped) Error() string { return s.text }

// pendingCall is a tool call the script awaits: its tool and its Promise's resolve and reject.
type pendingCall struct {
	name            string
	resolve, reject func(any) error
}

// jsRun is one codemode run inside the worker. The goja runtime is not goroutine-safe, so it is
// touched only by the goroutine that called run, which runs an event loop: calls are sent to the
// parent, whose outcomes come back on outcomes (from readOutcomes); the loop takes one at a time
// (resolving or rejecting the call's Promise, which runs the script's continuations) until the
// script's top-level Promise settles or the time limit is spent. Other goroutines only call
// vm.Interrupt, which is safe from any goroutine.
type jsRun struct {
	out         *bufio.Writer // to the parent; the loop's goroutine only
	max         int           // protocol line cap
	vm          *goja.Runtime
	limit       time.Duration // of script execution
	memoryLimit int64         // the run's budget; the heap may grow by half of it
	heapBase    uint64        // the heap when the run started
	used        time.Duration // script execution so far
	timeUp      *stopped

	outcomes chan codemodeMessage
	pending  map[int]pendingCall // by call ID; the loop's goroutine only
	calls    int                 // calls started
	inflight int                 // calls whose outcome has not been taken
	consumed int                 // outcomes taken

	// The built-ins as they were before the script ran (it may overwrite the globals).
	errorCtor *goja.Object
	stringify goja.Callable
	parse     goja.Callable

	consoleBytes int
	consoleCut   bool

	// tools are the names the parent said the script may call: the keys of `tools`.
	tools []string
}

// send writes msg to the parent (see sendLine). Its fields are all valid JSON: only a call's
// arguments could not be, and toolFunc encodes those itself.
func (r *jsRun) send(msg codemodeMessage) {
	line, err := encodeMessage(msg)
	if err != nil {
		panic(err)
	}
	r.sendLine(line)
}

// readOutcomes hands the parent's outcomes to the loop. At the end of stdin (the parent is done
// with this run, or died) it ends the process, whatever the script is doing; anything else than
// an outcome is a broken protocol, which ends it too.
func (r *jsRun) readOutcomes(in *messageReader) {
	for {
		msg, err := in.read()
		if errors.Is(err, io.EOF) {
			os.Exit(0)
		}
		if err == nil && msg.Type != msgOutcome {
			err = fmt.Errorf("a %q message, want %q", msg.Type, msgOutcome)
		}
		if err != nil {
			protocolExit(err)
		}
		r.outcomes <- msg
	}
}

// protocolExit ends the worker for a parent that broke the protocol.
func protocolExit(err error) {
	fmt.Fprintln(os.Stderr, "codemode worker: protocol:", err)
	os.Exit(workerExitProtocol)
}

// run sets up the runtime, runs the script and its event loop, and returns the return value as
// JSON (nil for undefined) or why the script failed.
func (r *jsRun) run(code string) (json.RawMessage, error) {
	if err := r.setup(); err != nil {
		return nil, fmt.Errorf("Script failed: %v", err)
	}
	// The body starts on the wrapper's first line, so the script's line numbers are its own.
	src := "(async function () {" + code + "\n})()"
	var v goja.Value
	if err := r.enter(func() (err error) {
		v, err = r.vm.RunScript("codemode.js", src)
		return err
	}); err != nil {
		return nil, r.failure(err)
	}
	p, ok := v.Export().(*goja.Promise)
	if !ok {
		return nil, errors.New("Script failed: the script did not run as an async function")
	}
	for p.State() == goja.PromiseStatePending {
		if r.inflight == 0 {
			// Nothing can settle it: there are no timers, and no call will call back.
			return nil, errors.New("Script failed: the script awaits a promise that can never settle")
		}
		var msg codemodeMessage
		select {
		case msg = <-r.outcomes:
		default:
			// Blocked until the next outcome: the parent stops counting the time limit.
			r.send(codemodeMessage{Type: msgWait, Consumed: r.consumed})
			msg = <-r.outcomes
		}
		r.consumed++
		c, ok := r.pending[msg.ID]
		if !ok {
			protocolExit(fmt.Errorf("an outcome for call %d, which is not pending", msg.ID))
		}
		delete(r.pending, msg.ID)
		r.inflight--
		if err := r.enter(func() error { return r.protect(func() { r.settleCall(c, msg) }) }); err != nil {
			return nil, r.failure(err)
		}
	}
	if p.State() == goja.PromiseStateRejected {
		text, err := r.describe(p.Result())
		if err != nil {
			return nil, r.failure(err)
		}
		return nil, errors.New("Script failed: " + text)
	}
	if goja.IsUndefined(p.Result()) {
		return nil, nil
	}
	var s goja.Value
	if err := r.enter(func() (err error) {
		s, err = r.stringify(goja.Undefined(), p.Result())
		return err
	}); err != nil {
		f := r.failure(err)
		var s *stopped
		if errors.As(f, &s) {
			return nil, f
		}
		return nil, errors.New("Script failed: the return value cannot be serialised as JSON: " +
			strings.TrimPrefix(f.Error(), "Script failed: "))
	}
	if s == nil || goja.IsUndefined(s) {
		return nil, nil // a function or a symbol: JSON has no such value
	}
	return json.RawMessage(s.String()), nil
}

// setup builds the sandbox: the ECMAScript built-ins goja has (no require, no timers, no file,
// network or process access: none is added), console and tools.
func (r *jsRun) setup() error {
	r.vm.SetMaxCallStackSize(maxCallStack)
	var ok bool
	if r.errorCtor, ok = r.vm.Get("Error").(*goja.Object); !ok {
		return errors.New("no Error constructor")
	}
	jsonObj := r.vm.Get("JSON").ToObject(r.vm)
	if r.stringify, ok = goja.AssertFunction(jsonObj.Get("stringify")); !ok {
		return errors.New("no JSON.stringify")
	}
	if r.parse, ok = goja.AssertFunction(jsonObj.Get("parse")); !ok {
		return errors.New("no JSON.parse")
	}
	console := r.vm.NewObject()
	for _, level := range []string{"log", "info", "warn", "error"} {
		if err := console.Set(level, r.consoleFunc(level)); err != nil {
			return err
		}
	}
	if err := r.vm.Set("console", console); err != nil {
		return err
	}
	return r.vm.Set("tools", r.vm.NewDynamicObject(&toolsObject{r: r, fns: map[string]goja.Value{}}))
}

// enter runs f on the runtime with the time limit's remaining budget: a timer interrupts the
// script when the budget is spent. Only time spent running script counts, not time waiting for
// tool calls (an approval may take a person minutes). A script that does not see the interrupt
// (a native call such as a backtracking regexp) is killed by the parent.
func (r *jsRun) enter(f func() error) error {
	remaining := r.limit - r.used
	if remaining <= 0 {
		return r.timeUp
	}
	timer := time.AfterFunc(remaining, func() { r.vm.Interrupt(r.timeUp) })
	stopWatch := r.watchMemory()
	begin := time.Now()
	err := f()
	stopWatch()
	r.used += time.Since(begin)
	if !timer.Stop() {
		r.used = r.limit // it fired: whatever f returned, the budget is spent
	}
	return err
}

// heapBytes is the live heap of the process (runtime/metrics; no stop-the-world).
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// watchMemory interrupts the script when the heap grows by more than half the memory budget
// (the rest is room for the collector): a script that allocates step by step ends with a clear
// error while the worker still runs; one huge allocation runs into RLIMIT_AS instead, which ends
// the worker. The returned func stops the watchdog.
func (r *jsRun) watchMemory() func() {
	done := make(chan struct{})
	growth := uint64(r.memoryLimit / 2)
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if h := heapBytes(); h > r.heapBase+growth {
					r.vm.Interrupt(&stopped{fmt.Sprintf("Script stopped: memory limit exceeded (the script grew the heap by more than %d MiB)", growth>>20)})
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// failure turns an error of the runtime into the reason the script ended.
func (r *jsRun) failure(err error) error {
	var interrupted *goja.InterruptedError
	if errors.As(err, &interrupted) {
		if s, ok := interrupted.Value().(*stopped); ok {
			return s
		}
	}
	var overflow *goja.StackOverflowError
	if errors.As(err, &overflow) {
		return fmt.Errorf("Script failed: maximum call stack size (%d) exceeded%s", maxCallStack, overflow.Error())
	}
	var ex *goja.Exception
	if errors.As(err, &ex) {
		// A compile error's message repeats its name ("SyntaxError: SyntaxError: …").
		text := strings.Replace(r.describeException(ex), "SyntaxError: SyntaxError: ", "SyntaxError: ", 1)
		return errors.New("Script failed: " + text)
	}
	return errors.New("Script failed: " + err.Error())
}

// describeException is an uncaught exception's text with its stack when there is one.
func (r *jsRun) describeException(ex *goja.Exception) string {
	if ex.Value() == nil {
		return ex.Error()
	}
	text, err := r.describe(ex.Value())
	if err != nil {
		return ex.Error()
	}
	return text
}

// goFrames matches a stack frame of a Go function goja names by its Go symbol
// ("at countersign/internal/tools.(*toolsObject).Get.(*jsRun).toolFunc.func1 (native)"): a
// script's reader gets "at tools function (native)" instead of the server's internals.
var goFrames = regexp.MustCompile(`at [^\s()]*[/*][^\s]* \(native\)`)

// describe is a thrown or rejected value as text: an Error's stack ("Error: boom\n\tat …"), else
// its string form. It may run script code (a toString), so it runs under the time limit; a
// toString that throws gives a stand-in text, an interrupt the error.
func (r *jsRun) describe(v goja.Value) (string, error) {
	var text string
	err := r.enter(func() error {
		return r.protect(func() {
			if o, ok := v.(*goja.Object); ok && r.vm.InstanceOf(o, r.errorCtor) {
				if st := o.Get("stack"); st != nil && !goja.IsUndefined(st) {
					text = goFrames.ReplaceAllString(strings.TrimRight(st.String(), "\n"), "at tools function (native)")
					return
				}
			}
			text = v.String()
		})
	})
	var interrupted *goja.InterruptedError
	if errors.As(err, &interrupted) {
		return "", err
	}
	if err != nil {
		text = "a value that cannot be shown (" + err.Error() + ")"
	}
	return text, nil
}

// protect runs f as if it were a native function the script called: a JavaScript exception or an
// interrupt inside it comes back as the error, and promise jobs queued by f (the continuations of
// a resolved call) run before protect returns. Every use of the runtime outside RunScript goes
// through it.
func (r *jsRun) protect(f func()) error {
	fn, _ := goja.AssertFunction(r.vm.ToValue(func(goja.FunctionCall) goja.Value {
		f()
		return goja.Undefined()
	}))
	_, err := fn(goja.Undefined())
	return err
}

// consoleFunc is console.<level>: it sends a line to the parent, within CodemodeConsoleCap.
func (r *jsRun) consoleFunc(level string) func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		if r.consoleCut {
			return goja.Undefined()
		}
		parts := make([]string, len(call.Arguments))
		for i, a := range call.Arguments {
			parts[i] = r.format(a)
		}
		text := strings.Join(parts, " ")
		room := CodemodeConsoleCap - r.consoleBytes - 1
		cut := len(text) > room
		if cut {
			text = cutUTF8(text, max(room, 0))
		}
		if !cut || room > 0 {
			r.consoleBytes += len(text) + 1
			r.send(codemodeMessage{Type: msgConsole, Level: level, Text: text})
		}
		if cut {
			r.consoleCut = true
			r.send(codemodeMessage{Type: msgConsole, Cut: true})
		}
		return goja.Undefined()
	}
}

// format is one console argument as text: strings as they are, errors as their string form,
// functions and symbols by String, anything else as JSON (or String when JSON fails).
func (r *jsRun) format(v goja.Value) string {
	if v == nil || goja.IsUndefined(v) {
		return "undefined"
	}
	if s, ok := v.Export().(string); ok {
		return s
	}
	if o, ok := v.(*goja.Object); ok {
		if r.vm.InstanceOf(o, r.errorCtor) {
			return o.String()
		}
		if _, isFunc := goja.AssertFunction(o); isFunc {
			return o.String()
		}
	}
	if s, err := r.stringify(goja.Undefined(), v); err == nil && s != nil && !goja.IsUndefined(s) {
		return s.String()
	} else if err != nil {
		var interrupted *goja.InterruptedError
		if errors.As(err, &interrupted) {
			panic(err) // the time limit: let it unwind the script
		}
	}
	return v.String()
}

// toolsObject is the script's `tools`: any key that is a tool name is a function calling that
// tool; whether the tool exists and may be called is the parent's ExecuteTool's answer
// (`Tool "x" not found`).
type toolsObject struct {
	r   *jsRun
	fns map[string]goja.Value
}

func (t *toolsObject) Get(key string) goja.Value {
	if reservedToolKeys[key] || strings.HasPrefix(key, "__") || !jsToolName.MatchString(key) {
		return nil
	}
	f, ok := t.fns[key]
	if !ok {
		f = t.r.vm.ToValue(t.r.toolFunc(key))
		t.fns[key] = f
	}
	return f
}
func (t *toolsObject) Set(string, goja.Value) bool { return false }
func (t *toolsObject) Has(key string) bool         { return t.Get(key) != nil }
func (t *toolsObject) Delete(string) bool          { return false }

// Keys are the tools the script may call (codemodeMessage.Tools), so Object.keys(tools) and
// for…in list them; names a function could not be reached by are left out.
func (t *toolsObject) Keys() []string {
	keys := make([]string, 0, len(t.r.tools))
	for _, name := range t.r.tools {
		if t.Get(name) != nil {
			keys = append(keys, name)
		}
	}
	return keys
}

// toolFunc is tools.<name>(args): it sends the call to the parent and returns a Promise of its
// result.
func (r *jsRun) toolFunc(name string) func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		p, resolve, reject := r.vm.NewPromise()
		raw, err := r.arguments(call.Argument(0))
		var line []byte
		if err == nil && r.calls < MaxCodemodeCalls {
			line, err = encodeMessage(codemodeMessage{Type: msgCall, ID: r.calls + 1, Name: name, Arguments: raw})
			if err == nil && len(line) > r.max {
				err = fmt.Errorf("they take %d bytes, more than the %d a call may send", len(line), r.max)
			}
		}
		switch {
		case err != nil:
			r.settle(reject(r.newError(fmt.Sprintf("Arguments for tool %q cannot be sent: %v", name, err))))
		case r.calls >= MaxCodemodeCalls:
			r.settle(reject(r.newError(fmt.Sprintf("Call limit reached: a script may make at most %d tool calls", MaxCodemodeCalls))))
		default:
			r.calls++
			r.inflight++
			r.pending[r.calls] = pendingCall{name: name, resolve: resolve, reject: reject}
			r.sendLine(line)
		}
		return r.vm.ToValue(p)
	}
}

// sendLine writes an encoded message to the parent. A parent that is gone ends the process:
// nobody waits for the script any more.
func (r *jsRun) sendLine(line []byte) {
	_, err := r.out.Write(line)
	if err == nil {
		err = r.out.Flush()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "codemode worker: write to the parent:", err)
		os.Exit(0)
	}
}

// settle propagates an uncatchable error (the time limit) of a resolve or reject called from
// inside the script.
func (r *jsRun) settle(err error) {
	if err != nil {
		panic(err)
	}
}

// arguments serialises a call's arguments with JSON.stringify: undefined and null send {}; a
// value JSON cannot represent (a function) sends null, which the tool's inputSchema refuses.
func (r *jsRun) arguments(v goja.Value) (json.RawMessage, error) {
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return json.RawMessage("{}"), nil
	}
	s, err := r.stringify(goja.Undefined(), v)
	if err != nil {
		var interrupted *goja.InterruptedError
		if errors.As(err, &interrupted) {
			panic(err)
		}
		return nil, err
	}
	if s == nil || goja.IsUndefined(s) {
		return json.RawMessage("null"), nil
	}
	return json.RawMessage(s.String()), nil
}

// settleCall settles a call's Promise with its outcome (SPEC §4): a success resolves with its
// structuredContent as an object when it has one (every tool with an outputSchema does), else
// its text; a failure rejects with an Error (callError). It runs on the loop, inside protect:
// settle panics with an interrupt, which protect returns.
func (r *jsRun) settleCall(c pendingCall, msg codemodeMessage) {
	if msg.IsError {
		r.settle(c.reject(r.callError(c.name, msg)))
		return
	}
	v, err := r.value(msg)
	if err != nil {
		r.settle(c.reject(r.newError(fmt.Sprintf("The result of tool %q cannot be read: %v", c.name, err))))
		return
	}
	r.settle(c.resolve(v))
}

// value is what a successful call resolves with.
func (r *jsRun) value(msg codemodeMessage) (goja.Value, error) {
	if sc := msg.StructuredContent; len(sc) > 0 {
		return r.parse(goja.Undefined(), r.vm.ToValue(string(sc)))
	}
	return r.vm.ToValue(msg.Text), nil
}

// callError is the Error a failed, blocked or denied call rejects with: its message is the
// result's text ("Denied by owner: no"); toolName and toolCallId say which call, and
// structuredContent is there when the error has data.
func (r *jsRun) callError(name string, msg codemodeMessage) goja.Value {
	e := r.newError(msg.Text)
	_ = e.Set("toolName", name)
	_ = e.Set("toolCallId", msg.ToolCallID)
	if sc := msg.StructuredContent; len(sc) > 0 {
		if v, err := r.parse(goja.Undefined(), r.vm.ToValue(string(sc))); err == nil {
			_ = e.Set("structuredContent", v)
		}
	}
	return e
}

// newError is `new Error(message)` with the original Error constructor.
func (r *jsRun) newError(message string) *goja.Object {
	e, err := r.vm.New(r.errorCtor, r.vm.ToValue(message))
	if err != nil {
		panic(err) // only an interrupt can get here
	}
	return e
}
