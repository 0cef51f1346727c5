package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime/metrics"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dop251/goja"

	"countersign/internal/tool"
)

// Limits of codemode (SPEC §4 "Codemode": "a time limit and an output cap").
const (
	// DefaultCodemodeTimeout is codemode's default time limit (Config.CodemodeTimeout).
	DefaultCodemodeTimeout = 10 * time.Second
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
			" (time spent waiting for tool calls does not count), at most " +
			fmt.Sprint(MaxCodemodeCalls) + " tool calls.",
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
			return runCodemode(ctx, cfg, in.Code, emitter(onUpdate), tc), nil
		},
	}
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

// jsRun is one codemode run. The goja runtime is not goroutine-safe, so it is touched only by the
// goroutine that called runCodemode, which runs an event loop: nested calls run on their own
// goroutines and hand their settlement back as a callback on jobs; the loop runs one callback at
// a time (resolving or rejecting the call's Promise, which runs the script's continuations) until
// the script's top-level Promise settles, the time limit is spent, or ctx ends. Other goroutines
// only call vm.Interrupt, which is safe from any goroutine.
type jsRun struct {
	ctx      context.Context
	tc       tool.Context
	onUpdate func(tool.Update)
	vm       *goja.Runtime
	limit    time.Duration // of script execution
	heapBase uint64        // the process's heap when the run started
	used     time.Duration // script execution so far
	timeUp   *stopped

	// Nested calls: their context, cancelled when the script ends; their settlement callbacks;
	// done, closed when the loop no longer takes callbacks; wg, the calls' goroutines.
	callCtx     context.Context
	cancelCalls context.CancelCauseFunc
	jobs        chan func()
	done        chan struct{}
	wg          sync.WaitGroup
	inflight    int // calls whose callback has not run; the loop's goroutine only

	// The built-ins as they were before the script ran (it may overwrite the globals).
	errorCtor *goja.Object
	stringify goja.Callable
	parse     goja.Callable

	console      []ConsoleLine // the loop's goroutine only
	consoleBytes int
	consoleCut   bool

	mu       sync.Mutex // guards calls and finished, written by the calls' goroutines
	calls    []CodemodeCall
	finished int
}

// runCodemode runs code as the body of an async function in a fresh goja runtime (SPEC §4
// "Codemode") and returns codemode's result: success with the return value, or isError with the
// same structuredContent when the script threw, was stopped by the time limit or ctx, or awaited
// something that can never happen. It returns only after every nested call it started has ended.
func runCodemode(ctx context.Context, cfg Config, code string, onUpdate func(tool.Update), tc tool.Context) tool.Result {
	start := time.Now()
	r := &jsRun{
		ctx: ctx, tc: tc, onUpdate: onUpdate, vm: goja.New(), limit: cfg.CodemodeTimeout, heapBase: heapBytes(),
		timeUp: &stopped{fmt.Sprintf("Script stopped: time limit of %s exceeded", cfg.CodemodeTimeout)},
		jobs:   make(chan func()),
		done:   make(chan struct{}),
	}
	r.callCtx, r.cancelCalls = context.WithCancelCause(ctx)
	// Stop interrupts the script wherever it is; the loop also watches ctx while it waits.
	stopInterrupt := context.AfterFunc(ctx, func() { r.vm.Interrupt(r.cancelled()) })

	result, failure := r.run(code)

	stopInterrupt()
	// Calls still running are cancelled with the reason the script ended; the loop takes no more
	// callbacks, and the calls' goroutines are waited for, so none outlives the tool's call and
	// the parent's nestedCalls record is whole.
	cause := failure
	if cause == nil {
		cause = errors.New("The script returned before this call finished")
	}
	r.cancelCalls(cause)
	close(r.done)
	r.wg.Wait()

	out := CodemodeOutput{Result: json.RawMessage("null"), Console: r.console, ConsoleTruncated: r.consoleCut}
	if out.Console == nil {
		out.Console = []ConsoleLine{}
	}
	r.mu.Lock()
	out.Calls = append([]CodemodeCall{}, r.calls...)
	r.mu.Unlock()
	if failure == nil && result != nil {
		out.Result = result
		if len(result) > cfg.OutputCap {
			out.Result = tool.Structured(cutUTF8(string(result), cfg.OutputCap))
			out.ResultTruncated = true
		}
	}
	head := "Result: " + string(out.Result)
	if failure == nil && result == nil {
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
		select {
		case job := <-r.jobs:
			if err := r.enter(func() error { return r.protect(job) }); err != nil {
				return nil, r.failure(err)
			}
		case <-r.ctx.Done():
			return nil, r.cancelled()
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
// tool calls (an approval may take a person minutes).
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

// MaxCodemodeHeapGrowth bounds how much a script may grow the process's heap: goja has no
// memory limit of its own, so a watchdog samples the Go heap while the script runs and
// interrupts it past this growth. The measure is the whole process's heap (other sessions'
// work counts too), so it is a guard against a runaway script, not an exact quota; one huge
// allocation can overshoot it before the next sample.
const MaxCodemodeHeapGrowth = 256 << 20

// heapBytes is the live heap of the process (runtime/metrics; no stop-the-world).
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// watchMemory interrupts the script when the heap grows more than MaxCodemodeHeapGrowth above
// where it was when the run started; the returned func stops the watchdog.
func (r *jsRun) watchMemory() func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if h := heapBytes(); h > r.heapBase+MaxCodemodeHeapGrowth {
					r.vm.Interrupt(&stopped{fmt.Sprintf("Script stopped: memory limit exceeded (the script grew the heap by more than %d MiB)", MaxCodemodeHeapGrowth>>20)})
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// cancelled is the reason a script stopped because ctx ended: "Script stopped: Run stopped by
// owner" for a Stop.
func (r *jsRun) cancelled() *stopped {
	return &stopped{"Script stopped: " + context.Cause(r.ctx).Error()}
}

// failure turns an error of the runtime into the reason the script ended.
func (r *jsRun) failure(err error) error {
	var interrupted *goja.InterruptedError
	if errors.As(err, &interrupted) {
		if s, ok := interrupted.Value().(*stopped); ok {
			return s
		}
	}
	if r.ctx.Err() != nil {
		return r.cancelled()
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

// describe is a thrown or rejected value as text: an Error's stack ("Error: boom\n\tat …"), else
// its string form. It may run script code (a toString), so it runs under the time limit; a
// toString that throws gives a stand-in text, an interrupt the error.
func (r *jsRun) describe(v goja.Value) (string, error) {
	var text string
	err := r.enter(func() error {
		return r.protect(func() {
			if o, ok := v.(*goja.Object); ok && r.vm.InstanceOf(o, r.errorCtor) {
				if st := o.Get("stack"); st != nil && !goja.IsUndefined(st) {
					text = strings.TrimRight(st.String(), "\n")
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

// consoleFunc is console.<level>: it keeps a line, within CodemodeConsoleCap.
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
		if len(text) > room {
			r.consoleCut = true
			if room <= 0 {
				return goja.Undefined()
			}
			text = cutUTF8(text, room)
		}
		r.consoleBytes += len(text) + 1
		r.console = append(r.console, ConsoleLine{Level: level, Text: text})
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
			panic(err) // the time limit or Stop: let it unwind the script
		}
	}
	return v.String()
}

// toolsObject is the script's `tools`: any key that is a tool name is a function calling that
// tool; whether the tool exists and may be called is ExecuteTool's answer (`Tool "x" not found`).
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
func (t *toolsObject) Keys() []string              { return []string{} }

// toolFunc is tools.<name>(args): it starts the call and returns a Promise of its result.
func (r *jsRun) toolFunc(name string) func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		p, resolve, reject := r.vm.NewPromise()
		raw, err := r.arguments(call.Argument(0))
		switch {
		case err != nil:
			r.settle(reject(r.newError(fmt.Sprintf("Arguments for tool %q cannot be sent: %v", name, err))))
		case !r.start(name, raw, resolve, reject):
			r.settle(reject(r.newError(fmt.Sprintf("Call limit reached: a script may make at most %d tool calls", MaxCodemodeCalls))))
		}
		return r.vm.ToValue(p)
	}
}

// settle propagates an uncatchable error (the time limit, Stop) of a resolve or reject called
// from inside the script.
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

// start runs one nested call on its own goroutine and returns false when the script has used up
// MaxCodemodeCalls. The call's settlement comes back to the loop as a callback.
func (r *jsRun) start(name string, raw json.RawMessage, resolve, reject func(any) error) bool {
	r.mu.Lock()
	if len(r.calls) >= MaxCodemodeCalls {
		r.mu.Unlock()
		return false
	}
	i := len(r.calls)
	r.calls = append(r.calls, CodemodeCall{Name: name, Status: "error", Error: "did not finish"})
	r.mu.Unlock()
	r.inflight++
	r.wg.Add(1)
	r.onUpdate(tool.Update{Progress: float64(r.finishedCount()), Message: fmt.Sprintf("Calling %s", name)})
	go func() {
		defer r.wg.Done()
		out := r.tc.ExecuteTool(r.callCtx, name, raw)
		rec := CodemodeCall{ID: out.ToolCall.ID, Name: name, Status: "ok"}
		if out.IsError {
			rec.Status, rec.Error = "error", cutUTF8(callErrorText(name, out), maxCallError)
		}
		r.mu.Lock()
		r.calls[i] = rec
		r.finished++
		n := r.finished
		r.mu.Unlock()
		msg := fmt.Sprintf("%s %s: ok", name, rec.ID)
		if out.IsError {
			msg = fmt.Sprintf("%s %s: error: %s", name, rec.ID, firstLine(rec.Error))
		}
		r.onUpdate(tool.Update{Progress: float64(n), Message: msg})
		// Runs on the loop, inside protect: settle panics with an interrupt, which protect returns.
		r.post(func() {
			r.inflight--
			if out.IsError {
				r.settle(reject(r.callError(name, out)))
				return
			}
			v, err := r.value(out)
			if err != nil {
				r.settle(reject(r.newError(fmt.Sprintf("The result of tool %q cannot be read: %v", name, err))))
				return
			}
			r.settle(resolve(v))
		})
	}()
	return true
}

func (r *jsRun) finishedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finished
}

// post hands a callback to the loop, or drops it when the loop has ended.
func (r *jsRun) post(job func()) {
	select {
	case r.jobs <- job:
	case <-r.done:
	}
}

// value is what a successful call resolves with (SPEC §4): its structuredContent as an object
// when it has one (every tool with an outputSchema does), else its text.
func (r *jsRun) value(out tool.Outcome) (goja.Value, error) {
	if sc := out.Result.StructuredContent; len(sc) > 0 {
		return r.parse(goja.Undefined(), r.vm.ToValue(string(sc)))
	}
	return r.vm.ToValue(out.Result.TextOf()), nil
}

// callError is the Error a failed, blocked or denied call rejects with: its message is the
// result's text ("Denied by owner: no"); toolName and toolCallId say which call, and
// structuredContent is there when the error has data.
func (r *jsRun) callError(name string, out tool.Outcome) goja.Value {
	e := r.newError(callErrorText(name, out))
	_ = e.Set("toolName", name)
	_ = e.Set("toolCallId", out.ToolCall.ID)
	if sc := out.Result.StructuredContent; len(sc) > 0 {
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
