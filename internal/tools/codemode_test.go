package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/tool"
)

// nestedFake is a tool.Context whose ExecuteTool answers from handle, numbering calls c1/1,
// c1/2, … like the pipeline, and recording what was asked.
type nestedFake struct {
	handle func(ctx context.Context, name string, args json.RawMessage) tool.Result

	mu    sync.Mutex
	n     int
	asked []tool.Call
}

func (f *nestedFake) ToolCallID() string    { return "c1" }
func (f *nestedFake) SessionID() string     { return "s1" }
func (f *nestedFake) Workspace() string     { return "/nowhere" }
func (f *nestedFake) Consent() tool.Consent { return tool.Consent{ByPerson: true} }
func (f *nestedFake) Authorize(context.Context, string, any, string) tool.Authorization {
	return tool.Authorization{Allowed: true}
}
func (f *nestedFake) ExecuteTool(ctx context.Context, name string, arguments any) tool.Outcome {
	raw, ok := arguments.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(arguments)
		if err != nil {
			panic(err)
		}
		raw = b
	}
	f.mu.Lock()
	f.n++
	c := tool.Call{ID: fmt.Sprintf("c1/%d", f.n), ParentToolCallID: "c1", Name: name, Arguments: raw}
	f.asked = append(f.asked, c)
	f.mu.Unlock()
	start := time.Now()
	res := f.handle(ctx, name, raw)
	return tool.Outcome{ToolCall: c, Result: res, IsError: res.IsError, DurationMs: time.Since(start).Milliseconds()}
}

func (f *nestedFake) calls() []tool.Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]tool.Call(nil), f.asked...)
}

// cannedTools answers the codemode tests' tools: structured (structuredContent), plain (text),
// echo (its arguments as text), write_file (denied) and anything else (not found).
func cannedTools(_ context.Context, name string, args json.RawMessage) tool.Result {
	switch name {
	case "structured":
		return tool.Result{Content: []tool.Content{tool.Text("2 files")}, StructuredContent: json.RawMessage(`{"files":["a","b"],"count":2}`)}
	case "plain":
		return tool.Result{Content: []tool.Content{tool.Text("hello"), tool.Text("world")}}
	case "echo":
		return tool.Result{Content: []tool.Content{tool.Text(string(args))}}
	case "write_file":
		return tool.ErrorResult("Denied by owner: no")
	case "slow_fail":
		return tool.Result{IsError: true, Content: []tool.Content{tool.Text("timed out")}, StructuredContent: json.RawMessage(`{"exitCode":-1}`)}
	}
	return tool.NotFound(name)
}

// runJS runs codemode with code against tc and returns its result and structuredContent, which
// must match codemode's outputSchema whether the script failed or not.
func runJS(t *testing.T, ctx context.Context, cfg Config, tc tool.Context, code string, onUpdate func(tool.Update)) (tool.Result, CodemodeOutput) {
	t.Helper()
	cm := mustTools(t, cfg)["codemode"]
	raw, _ := json.Marshal(map[string]string{"code": code})
	if v := cm.ValidateInput(raw); len(v) > 0 {
		t.Fatalf("input %s: %v", raw, v)
	}
	res, err := cm.Execute(ctx, raw, onUpdate, tc)
	if err != nil {
		t.Fatalf("codemode returned a Go error: %v", err)
	}
	if v := cm.ValidateOutput(res.StructuredContent); len(v) > 0 {
		t.Fatalf("structuredContent %s violates the outputSchema: %v", res.StructuredContent, v)
	}
	var out CodemodeOutput
	if err := json.Unmarshal(res.StructuredContent, &out); err != nil {
		t.Fatal(err)
	}
	return res, out
}

func TestCodemodeDefinition(t *testing.T) {
	cm := mustTools(t, Config{})["codemode"]
	if got, want := cm.Exposure, tool.ModelOnly; got != want {
		t.Errorf("exposure %s, want %s", got, want)
	}
	if cm.ActiveByDefault() {
		t.Error("codemode is active by default, want inactive until activated")
	}
	a := cm.Annotations
	if a.ReadOnlyHint == nil || !*a.ReadOnlyHint || a.OpenWorldHint == nil || *a.OpenWorldHint || a.DestructiveHint != nil {
		t.Errorf("annotations %+v, want readOnly, closed world", a)
	}
	if cm.Title != "Code mode" || !cm.HasOutputSchema() {
		t.Errorf("title %q, outputSchema %v", cm.Title, cm.HasOutputSchema())
	}
}

func TestCodemodeScripts(t *testing.T) {
	tests := []struct {
		name      string
		code      string
		wantError bool
		// result is the return value as JSON; "" skips the check.
		result string
		// text holds substrings of the model's text.
		text    []string
		console []ConsoleLine
		calls   []CodemodeCall
	}{
		{
			name: "returns a value", code: `return {sum: 1 + 2, ok: true}`,
			result: `{"sum":3,"ok":true}`, text: []string{`Result: {"sum":3,"ok":true}`},
		},
		{
			name: "returns nothing", code: `let x = 1`,
			result: `null`, text: []string{"Result: undefined"},
		},
		{
			name:   "console is captured",
			code:   `console.log("a", 1, {b: [2]}, null, undefined); console.info("i"); console.warn("w"); console.error(new TypeError("bad")); return 0`,
			result: `0`,
			console: []ConsoleLine{
				{Level: "log", Text: `a 1 {"b":[2]} null undefined`},
				{Level: "info", Text: "i"}, {Level: "warn", Text: "w"}, {Level: "error", Text: "TypeError: bad"},
			},
			text: []string{"Console:\na 1", "[warn] w", "[error] TypeError: bad"},
		},
		{
			name: "structuredContent resolves as an object", code: `const r = await tools.structured({}); return r.files.length + r.count`,
			result: `4`, calls: []CodemodeCall{{ID: "c1/1", Name: "structured", Status: "ok"}},
			text: []string{"Tool calls: 1 (0 failed)", "- structured c1/1: ok"},
		},
		{
			name: "text resolves as a string", code: `return await tools.plain()`,
			result: `"hello\nworld"`, calls: []CodemodeCall{{ID: "c1/1", Name: "plain", Status: "ok"}},
		},
		{
			name: "arguments are sent as JSON", code: `return await tools.echo({a: [1, "x"], b: null})`,
			result: `"{\"a\":[1,\"x\"],\"b\":null}"`, calls: []CodemodeCall{{ID: "c1/1", Name: "echo", Status: "ok"}},
		},
		{
			name: "a denied call rejects with the result text",
			code: `try { await tools.write_file({path: "x", content: ""}); return "wrote" } catch (e) {
			  return [e instanceof Error, e.message, e.toolName, e.toolCallId] }`,
			result: `[true,"Denied by owner: no","write_file","c1/1"]`,
			calls:  []CodemodeCall{{ID: "c1/1", Name: "write_file", Status: "error", Error: "Denied by owner: no"}},
			text:   []string{"- write_file c1/1: error: Denied by owner: no"},
		},
		{
			name:   "an error with data carries its structuredContent",
			code:   `try { await tools.slow_fail({}) } catch (e) { return e.structuredContent.exitCode }`,
			result: `-1`, calls: []CodemodeCall{{ID: "c1/1", Name: "slow_fail", Status: "error", Error: "timed out"}},
		},
		{
			name:   "an unknown tool rejects with not found",
			code:   `try { await tools["no.such-tool"]({}) } catch (e) { return e.message }`,
			result: `"Tool \"no.such-tool\" not found"`,
			calls:  []CodemodeCall{{ID: "c1/1", Name: "no.such-tool", Status: "error", Error: `Tool "no.such-tool" not found`}},
		},
		{
			name:      "an uncaught rejection fails the script with data",
			code:      `console.log("before"); await tools.write_file({path: "x", content: ""}); console.log("after")`,
			wantError: true, result: `null`,
			text:    []string{"Script failed: Error: Denied by owner: no", "Console:\nbefore", "- write_file c1/1: error"},
			console: []ConsoleLine{{Level: "log", Text: "before"}},
			calls:   []CodemodeCall{{ID: "c1/1", Name: "write_file", Status: "error", Error: "Denied by owner: no"}},
		},
		{
			name:      "an uncaught throw is an error that has data",
			code:      "console.warn('about to');\nthrow new Error('boom')",
			wantError: true, result: `null`,
			text:    []string{"Script failed: Error: boom", "codemode.js:2:"},
			console: []ConsoleLine{{Level: "warn", Text: "about to"}},
		},
		{
			name: "a thrown non-error", code: `throw "plain"`,
			wantError: true, text: []string{"Script failed: plain"},
		},
		{
			name: "a syntax error", code: `return (`,
			wantError: true, text: []string{"Script failed: SyntaxError"},
		},
		{
			name: "runaway recursion", code: `function f() { return f() + 1 } return f()`,
			wantError: true, text: []string{"Script failed:", "call stack"},
		},
		{
			name: "a promise that can never settle", code: `await new Promise(() => {})`,
			wantError: true, text: []string{"Script failed: the script awaits a promise that can never settle"},
		},
		{
			name: "no require, process, file, network or timers",
			code: `return [typeof require, typeof module, typeof process, typeof fetch, typeof XMLHttpRequest,
			  typeof setTimeout, typeof setInterval, typeof Deno, typeof Bun, typeof globalThis.fs, typeof os]`,
			result: `["undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined"]`,
		},
		{
			name:   "tools is not a thenable and keeps Object's methods",
			code:   `const t = await tools; return [t === tools, typeof tools.anything, typeof tools.toString, "then" in tools, Object.keys(tools).length]`,
			result: `[true,"function","function",false,0]`,
		},
		{
			name: "a return value JSON cannot hold", code: `return () => 1`,
			result: `null`, text: []string{"Result: undefined"},
		},
		{
			name: "a cyclic return value", code: `const a = {}; a.a = a; return a`,
			wantError: true, text: []string{"Script failed: the return value cannot be serialised as JSON"},
		},
		{
			name:   "overwritten globals do not break the bridge",
			code:   `JSON.parse = null; Error = null; try { await tools.write_file({path: "x", content: ""}) } catch (e) { return e.message + " " + (await tools.structured({})).count }`,
			result: `"Denied by owner: no 2"`,
			calls: []CodemodeCall{{ID: "c1/1", Name: "write_file", Status: "error", Error: "Denied by owner: no"},
				{ID: "c1/2", Name: "structured", Status: "ok"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out := runJS(t, context.Background(), Config{}, &nestedFake{handle: cannedTools}, tt.code, nil)
			if got, want := res.IsError, tt.wantError; got != want {
				t.Errorf("isError = %v, want %v; text:\n%s", got, want, res.TextOf())
			}
			if tt.result != "" && string(out.Result) != tt.result {
				t.Errorf("result = %s, want %s", out.Result, tt.result)
			}
			for _, s := range tt.text {
				if !strings.Contains(res.TextOf(), s) {
					t.Errorf("text %q does not contain %q", res.TextOf(), s)
				}
			}
			if tt.wantError != (out.Error != "") {
				t.Errorf("structuredContent error = %q, want one only on failure", out.Error)
			}
			wantConsole := tt.console
			if wantConsole == nil {
				wantConsole = []ConsoleLine{}
			}
			if !reflect.DeepEqual(out.Console, wantConsole) {
				t.Errorf("console = %+v, want %+v", out.Console, wantConsole)
			}
			wantCalls := tt.calls
			if wantCalls == nil {
				wantCalls = []CodemodeCall{}
			}
			if !reflect.DeepEqual(out.Calls, wantCalls) {
				t.Errorf("calls = %+v, want %+v", out.Calls, wantCalls)
			}
		})
	}
}

func TestCodemodeOutputCaps(t *testing.T) {
	tests := []struct {
		name          string
		code          string
		wantTruncated bool
	}{
		{"under the cap", `for (let i = 0; i < 10; i++) console.log("x".repeat(100))`, false},
		{"long lines", `for (let i = 0; i < 100; i++) console.log(i + ":" + "é".repeat(500))`, true},
		{"many empty lines", `for (let i = 0; i < 100000; i++) console.log()`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out := runJS(t, context.Background(), Config{}, &nestedFake{handle: cannedTools}, tt.code, nil)
			if res.IsError {
				t.Fatalf("isError: %s", res.TextOf())
			}
			if got, want := out.ConsoleTruncated, tt.wantTruncated; got != want {
				t.Errorf("consoleTruncated = %v, want %v", got, want)
			}
			size := 0
			for _, l := range out.Console {
				size += len(l.Text) + 1
				if !json.Valid(tool.Structured(l.Text)) || strings.ContainsRune(l.Text, '\uFFFD') {
					t.Fatalf("a line was cut inside a character: %q", l.Text)
				}
			}
			if size > CodemodeConsoleCap {
				t.Errorf("kept %d bytes of console, cap %d", size, CodemodeConsoleCap)
			}
			if tt.wantTruncated && !strings.Contains(res.TextOf(), "[Console output cut at 16 KiB.]") {
				t.Errorf("text does not say the console was cut:\n…%s", res.TextOf()[max(0, len(res.TextOf())-200):])
			}
		})
	}
	t.Run("result", func(t *testing.T) {
		res, out := runJS(t, context.Background(), Config{OutputCap: 1000}, &nestedFake{handle: cannedTools}, `return "x".repeat(5000)`, nil)
		if res.IsError || !out.ResultTruncated {
			t.Fatalf("isError %v, resultTruncated %v; want a cut result", res.IsError, out.ResultTruncated)
		}
		var s string
		if err := json.Unmarshal(out.Result, &s); err != nil || len(s) != 1000 || !strings.HasPrefix(s, `"xxx`) {
			t.Errorf("result %.40s… (%d bytes, %v): want the first 1000 bytes of the JSON as a string", s, len(s), err)
		}
	})
}

func TestCodemodeTimeLimit(t *testing.T) {
	tests := []struct {
		name string
		code string
	}{
		{"a busy loop", `while (true) {}`},
		{"a busy loop after a call", `await tools.plain(); for (;;) {}`},
		{"a loop inside console.log's argument", `console.log({ toJSON() { for (;;) {} } })`},
		{"a busy loop in a catch block", `try { await tools.write_file({}) } catch (e) { while (true) {} }`},
		{"a loop in an uncaught error's toString", `throw { toString() { for (;;) {} } }`},
		{"a loop in the return value's toJSON", `return { toJSON() { for (;;) {} } }`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			res, out := runJS(t, context.Background(), Config{CodemodeTimeout: 300 * time.Millisecond},
				&nestedFake{handle: cannedTools}, tt.code, nil)
			elapsed := time.Since(start)
			if !res.IsError {
				t.Fatalf("not an error: %s", res.TextOf())
			}
			if got, want := out.Error, "Script stopped: time limit of 300ms exceeded"; got != want {
				t.Errorf("error = %q, want %q", got, want)
			}
			if !strings.HasPrefix(res.TextOf(), "Script stopped: time limit of 300ms exceeded") {
				t.Errorf("text = %q", res.TextOf())
			}
			if elapsed > 5*time.Second {
				t.Errorf("took %s to stop a 300ms script", elapsed)
			}
		})
	}
	t.Run("waiting for calls does not count", func(t *testing.T) {
		slow := &nestedFake{handle: func(ctx context.Context, name string, args json.RawMessage) tool.Result {
			time.Sleep(200 * time.Millisecond) // as a person deciding would
			return tool.Result{Content: []tool.Content{tool.Text("ok")}}
		}}
		res, out := runJS(t, context.Background(), Config{CodemodeTimeout: 300 * time.Millisecond}, slow,
			`for (let i = 0; i < 3; i++) await tools.wait(); return "done"`, nil)
		if res.IsError || string(out.Result) != `"done"` || len(out.Calls) != 3 {
			t.Errorf("isError %v, result %s, %d calls; want done after 3 calls: %s", res.IsError, out.Result, len(out.Calls), res.TextOf())
		}
	})
}

// TestCodemodeConcurrentCalls: Promise.all's calls run at once: each blocks until both started.
func TestCodemodeConcurrentCalls(t *testing.T) {
	var started sync.WaitGroup
	started.Add(2)
	both := make(chan struct{})
	go func() { started.Wait(); close(both) }()
	fake := &nestedFake{handle: func(ctx context.Context, name string, args json.RawMessage) tool.Result {
		started.Done()
		select {
		case <-both:
			return tool.Result{Content: []tool.Content{tool.Text(name + " done")}}
		case <-time.After(5 * time.Second):
			return tool.ErrorResult("%s: the other call never started", name)
		}
	}}
	res, out := runJS(t, context.Background(), Config{}, fake, `return await Promise.all([tools.a({}), tools.b({})])`, nil)
	if res.IsError {
		t.Fatalf("isError: %s", res.TextOf())
	}
	if got, want := string(out.Result), `["a done","b done"]`; got != want {
		t.Errorf("result %s, want %s", got, want)
	}
	if len(out.Calls) != 2 || out.Calls[0].Name != "a" || out.Calls[1].Name != "b" {
		t.Errorf("calls %+v, want a then b (the order they started)", out.Calls)
	}
}

func TestCodemodeCancellation(t *testing.T) {
	stop := errors.New("Run stopped by owner")
	t.Run("while waiting for a call", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		waiting := make(chan struct{})
		fake := &nestedFake{handle: func(ctx context.Context, name string, args json.RawMessage) tool.Result {
			close(waiting)
			<-ctx.Done()
			return tool.ErrorResult("%s", context.Cause(ctx))
		}}
		go func() { <-waiting; cancel(stop) }()
		start := time.Now()
		res, out := runJS(t, ctx, Config{}, fake, `await tools.write_file({path: "a", content: ""}); await tools.write_file({path: "b", content: ""})`, nil)
		if time.Since(start) > 5*time.Second {
			t.Errorf("took %s to stop", time.Since(start))
		}
		if !res.IsError || out.Error != "Script stopped: Run stopped by owner" {
			t.Errorf("isError %v, error %q; want the stop", res.IsError, out.Error)
		}
		want := []CodemodeCall{{ID: "c1/1", Name: "write_file", Status: "error", Error: "Run stopped by owner"}}
		if !reflect.DeepEqual(out.Calls, want) {
			t.Errorf("calls %+v, want %+v (nothing after the stop)", out.Calls, want)
		}
	})
	t.Run("while running", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		time.AfterFunc(100*time.Millisecond, func() { cancel(stop) })
		start := time.Now()
		res, out := runJS(t, ctx, Config{CodemodeTimeout: time.Minute}, &nestedFake{handle: cannedTools}, `for (;;) {}`, nil)
		if time.Since(start) > 5*time.Second {
			t.Errorf("took %s to stop", time.Since(start))
		}
		if !res.IsError || out.Error != "Script stopped: Run stopped by owner" {
			t.Errorf("isError %v, error %q; want the stop", res.IsError, out.Error)
		}
	})
	t.Run("a call the script did not await is cancelled when it returns", func(t *testing.T) {
		fake := &nestedFake{handle: func(ctx context.Context, name string, args json.RawMessage) tool.Result {
			<-ctx.Done()
			return tool.ErrorResult("%s", context.Cause(ctx))
		}}
		res, out := runJS(t, context.Background(), Config{}, fake, `tools.forgotten({}); return 1`, nil)
		if res.IsError || string(out.Result) != "1" {
			t.Fatalf("isError %v, result %s", res.IsError, out.Result)
		}
		want := []CodemodeCall{{ID: "c1/1", Name: "forgotten", Status: "error", Error: "The script returned before this call finished"}}
		if !reflect.DeepEqual(out.Calls, want) {
			t.Errorf("calls %+v, want %+v", out.Calls, want)
		}
	})
}

func TestCodemodeCallLimitAndUpdates(t *testing.T) {
	var mu sync.Mutex
	var messages []string
	onUpdate := func(u tool.Update) {
		mu.Lock()
		messages = append(messages, u.Message)
		mu.Unlock()
	}
	fake := &nestedFake{handle: cannedTools}
	res, out := runJS(t, context.Background(), Config{}, fake, `
	  let refused = "";
	  for (let i = 0; i < `+fmt.Sprint(MaxCodemodeCalls+1)+`; i++) {
	    try { await tools.plain() } catch (e) { refused = e.message }
	  }
	  return refused`, onUpdate)
	if res.IsError {
		t.Fatalf("isError: %s", res.TextOf())
	}
	if got, want := string(out.Result), fmt.Sprintf(`"Call limit reached: a script may make at most %d tool calls"`, MaxCodemodeCalls); got != want {
		t.Errorf("result %s, want %s", got, want)
	}
	if got, want := len(out.Calls), MaxCodemodeCalls; got != want {
		t.Errorf("%d calls listed, want %d", got, want)
	}
	if got, want := len(fake.calls()), MaxCodemodeCalls; got != want {
		t.Errorf("%d calls made, want %d", got, want)
	}
	if !strings.Contains(res.TextOf(), "… and 950 more") {
		t.Errorf("text does not bound the calls it lists:\n%.300s", res.TextOf())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(messages) < 2 || messages[0] != "Calling plain" || messages[1] != "plain c1/1: ok" {
		t.Errorf("updates start %q, want a started and a finished message per call", messages[:min(2, len(messages))])
	}
}

// TestCodemodeMemoryLimit: a script that doubles a string without end is stopped by the memory
// watchdog, not left to take the server's memory.
func TestCodemodeMemoryLimit(t *testing.T) {
	res, out := runJS(t, context.Background(), Config{CodemodeTimeout: time.Minute}, &nestedFake{handle: cannedTools},
		`let s = 'x'; const keep = []; for (let i = 0; i < 40; i++) { s += s; keep.push(s + i); } return keep.length`, nil)
	if !res.IsError || !strings.Contains(out.Error, "memory limit") {
		t.Errorf("result %q (error %q), want the memory limit", res.TextOf(), out.Error)
	}
}

// BenchmarkCodemodeStart is the cost of one codemode call that makes no tool call: for the
// worker process, a process start and its exit.
func BenchmarkCodemodeStart(b *testing.B) {
	cm := mustTools(b, Config{})["codemode"]
	raw := json.RawMessage(`{"code":"return 1"}`)
	tc := &nestedFake{handle: cannedTools}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := cm.Execute(context.Background(), raw, nil, tc); err != nil || res.IsError {
			b.Fatalf("%v %s", err, res.TextOf())
		}
	}
}

// BenchmarkCodemodeNestedCall is the cost of one nested call a script awaits (a round trip to
// the parent over the pipe for the worker process): 100 calls per run, reported per call.
func BenchmarkCodemodeNestedCall(b *testing.B) {
	cm := mustTools(b, Config{})["codemode"]
	raw := json.RawMessage(`{"code":"for (let i = 0; i < 100; i++) await tools.structured({i}); return 1"}`)
	b.ReportAllocs()
	for b.Loop() {
		if res, err := cm.Execute(context.Background(), raw, nil, &nestedFake{handle: cannedTools}); err != nil || res.IsError {
			b.Fatalf("%v %s", err, res.TextOf())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/call")
}

// TestCodemodeErrorsNameNoGoInternals: an error thrown by a tool function and left uncaught shows
// the script's own frames, and native frames without the server's Go symbols (a second review
// saw "at countersign/internal/tools.(*toolsObject).Get.(*jsRun).toolFunc.func1 (native)").
func TestCodemodeErrorsNameNoGoInternals(t *testing.T) {
	fake := &nestedFake{handle: cannedTools}
	res, _ := runJS(t, context.Background(), Config{}, fake, `
	  for (let i = 0; i < `+fmt.Sprint(MaxCodemodeCalls+1)+`; i++) { await tools.plain() }`, nil)
	text := res.TextOf()
	if !res.IsError || !strings.Contains(text, "Call limit reached") {
		t.Fatalf("want the call limit's error, got isError=%v:\n%.500s", res.IsError, text)
	}
	for _, internal := range []string{"countersign/", "(*", "func1", "internal/tools"} {
		if strings.Contains(text, internal) {
			t.Errorf("the error shows Go internals (%q):\n%.800s", internal, text)
		}
	}
	if !strings.Contains(text, "(native)") {
		t.Errorf("the native frame is gone altogether, want it named without Go symbols:\n%.800s", text)
	}
}

// listingFake is a nestedFake that says which tools the script may call (tool.NestedTools).
type listingFake struct {
	nestedFake
	names []string
}

func (f *listingFake) NestedTools() []string { return f.names }

// TestCodemodeToolsObjectListsTheCallableTools (issue 34): Object.keys(tools), for…in and `in`
// see the tools the script may call, as the context lists them; calling one still works, and a
// name outside the list is still tried (and answered "not found" by the pipeline).
func TestCodemodeToolsObjectListsTheCallableTools(t *testing.T) {
	tc := &listingFake{nestedFake: nestedFake{handle: cannedTools}, names: []string{"echo", "plain", "structured"}}
	_, out := runJS(t, context.Background(), Config{}, tc, `
const keys = Object.keys(tools);
const seen = [];
for (const k in tools) seen.push(k);
return {keys, seen, has: "echo" in tools, typ: typeof tools.echo, plain: await tools[keys[1]]()}`, nil)
	if out.Error != "" {
		t.Fatalf("script failed: %s", out.Error)
	}
	want := `{"keys":["echo","plain","structured"],"seen":["echo","plain","structured"],"has":true,"typ":"function","plain":"hello\nworld"}`
	if string(out.Result) != want {
		t.Errorf("result %s, want %s", out.Result, want)
	}
}
