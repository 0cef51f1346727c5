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

// Codemode's limits hold whatever the script does (issue 15 item 2): the time limit and Stop
// end a script stuck in a native call that never sees goja's interrupt, and a script cannot take
// the server's memory.

// ran is codemode's answer to one call, or that it did not answer in time.
type ran struct {
	res     tool.Result
	out     CodemodeOutput
	elapsed time.Duration
	err     error
}

// startJS runs codemode with code on its own goroutine (t.Fatal must stay on the test's) and
// returns the channel its answer comes on.
func startJS(t *testing.T, ctx context.Context, cfg Config, tc tool.Context, code string) <-chan ran {
	t.Helper()
	cm := mustTools(t, cfg)["codemode"]
	raw, _ := json.Marshal(map[string]string{"code": code})
	c := make(chan ran, 1)
	go func() {
		start := time.Now()
		res, err := cm.Execute(ctx, raw, nil, tc)
		r := ran{res: res, elapsed: time.Since(start), err: err}
		if err == nil {
			if v := cm.ValidateOutput(res.StructuredContent); len(v) > 0 {
				r.err = errors.New("structuredContent violates the outputSchema")
			} else {
				r.err = json.Unmarshal(res.StructuredContent, &r.out)
			}
		}
		c <- r
	}()
	return c
}

// within waits at most d for codemode's answer, failing the test when it does not come (the
// script's goroutine is left behind: a test that fails here has found the bug it looks for).
func within(t *testing.T, c <-chan ran, d time.Duration) ran {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("codemode: %v", r.err)
		}
		return r
	case <-time.After(d):
		t.Fatalf("codemode did not answer within %s", d)
		return ran{}
	}
}

// assertNoWorkers fails the test when a codemode worker of this process still runs or is not
// reaped.
func assertNoWorkers(t *testing.T) {
	t.Helper()
	if pids := CodemodeWorkers(t); len(pids) > 0 {
		t.Errorf("codemode workers %v outlive the call", pids)
	}
}

// backtracking are regular expressions goja hands to regexp2 (a backreference, a lookahead),
// which backtrack for ever on this input and never look at goja's interrupt.
var backtracking = []struct{ name, code string }{
	{"a backreference", `/^(\w+\s?)*\1$/.test("a".repeat(40) + "!")`},
	{"a lookahead", `/(?=(a+)+c)a/.test("a".repeat(40) + "!")`},
}

// TestCodemodeBacktrackingRegexpEndsAtTheTimeLimit: the script's first call marks that it runs
// (the worker has started): from there it ends within the time limit plus 1 s.
func TestCodemodeBacktrackingRegexpEndsAtTheTimeLimit(t *testing.T) {
	const limit = 2 * time.Second
	for _, re := range backtracking {
		t.Run(re.name, func(t *testing.T) {
			fake := &nestedFake{handle: cannedTools}
			c := startJS(t, context.Background(), Config{CodemodeTimeout: limit}, fake, "await tools.plain(); return "+re.code)
			for len(fake.calls()) == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			running := time.Now()
			r := within(t, c, limit+time.Second)
			if d := time.Since(running); d >= limit+time.Second {
				t.Errorf("ended %s after the script ran, want within the time limit of %s plus 1s", d, limit)
			}
			if got, want := r.out.Error, "Script stopped: time limit of 2s exceeded"; !r.res.IsError || got != want {
				t.Errorf("isError %v, error %q; want %q", r.res.IsError, got, want)
			}
			if r.elapsed < limit {
				t.Errorf("ended after %s, before the time limit of %s", r.elapsed, limit)
			}
			assertNoWorkers(t)
		})
	}
}

func TestCodemodeBacktrackingRegexpEndsOnStop(t *testing.T) {
	for _, re := range backtracking {
		t.Run(re.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			fake := &nestedFake{handle: cannedTools}
			c := startJS(t, ctx, Config{CodemodeTimeout: time.Minute}, fake, "await tools.plain(); return "+re.code)
			for len(fake.calls()) == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			AwaitSpinning(t, 300*time.Millisecond)
			stop := time.Now()
			cancel(errors.New("Run stopped by owner"))
			r := within(t, c, 5*time.Second)
			if d := time.Since(stop); d >= time.Second {
				t.Errorf("Stop took %s to end the script, want less than 1s", d)
			}
			if got, want := r.out.Error, "Script stopped: Run stopped by owner"; !r.res.IsError || got != want {
				t.Errorf("isError %v, error %q; want %q", r.res.IsError, got, want)
			}
			if want := []CodemodeCall{{ID: "c1/1", Name: "plain", Status: "ok"}}; !reflect.DeepEqual(r.out.Calls, want) {
				t.Errorf("calls %+v, want %+v", r.out.Calls, want)
			}
			assertNoWorkers(t)
		})
	}
}

// TestCodemodeMemoryIsBounded: scripts that allocate without bound, step by step or in one
// native call, end with a clear error, and this process (the server's side) stays under
// 300 MB of RSS all along.
func TestCodemodeMemoryIsBounded(t *testing.T) {
	const maxRSS = 300 << 20
	// The scripts that fill memory step by step get a smaller budget than the default, only to
	// run faster (under the race detector goja allocates slowly).
	const small = 128 << 20
	tests := []struct {
		name   string
		code   string
		budget int64 // CodemodeConfig.MemoryLimit; 0 for the default
		calls  []CodemodeCall
	}{
		{"a string doubled in a loop", `let s = 'x'; const keep = []; for (let i = 0; i < 40; i++) { s += s; keep.push(s + i); } return keep.length`, 0, nil},
		{"an array grown in a loop", `const a = []; for (;;) a.push("x".repeat(1000) + a.length)`, small, nil},
		{"one native call: String.prototype.repeat", `return "x".repeat(1 << 30).length`, 0, nil},
		{"one native call: Array.prototype.fill", `return new Array(1e9).fill(0).length`, small, nil},
		{"one native call: JSON.stringify", `const a = new Array(300000).fill("z".repeat(1000)); return JSON.stringify([a, a, a]).length`, small, nil},
		{"after a tool call", `await tools.plain(); return "x".repeat(1 << 30).length`, 0,
			[]CodemodeCall{{ID: "c1/1", Name: "plain", Status: "ok"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ResetPeakRSS(t)
			cfg := Config{CodemodeTimeout: time.Minute, Codemode: CodemodeConfig{MemoryLimit: tt.budget}}
			r := within(t, startJS(t, context.Background(), cfg, &nestedFake{handle: cannedTools}, tt.code), time.Minute)
			if !r.res.IsError || !strings.HasPrefix(r.out.Error, "Script stopped: memory limit exceeded") {
				t.Errorf("isError %v, error %q; want the memory limit", r.res.IsError, r.out.Error)
			}
			peak := StatusBytes(t, "VmHWM")
			if peak >= maxRSS {
				t.Errorf("this process's peak RSS was %d MiB during the script, want under %d MiB", peak>>20, maxRSS>>20)
			}
			t.Logf("%s; this process's peak RSS %d MiB", r.out.Error, peak>>20)
			wantCalls := tt.calls
			if wantCalls == nil {
				wantCalls = []CodemodeCall{}
			}
			if !reflect.DeepEqual(r.out.Calls, wantCalls) {
				t.Errorf("calls %+v, want %+v", r.out.Calls, wantCalls)
			}
			assertNoWorkers(t)
		})
	}
}

// TestCodemodeWorkersAreCappedServerWide: with MaxWorkers 2 (so 8 workers alive), ten codemode
// calls of one server (one tool) at once whose scripts wait for their calls never have more than
// 8 workers alive: eight wait for their calls, two wait for a slot and say so, and all ten finish
// once the first ones do. Another call stopped while it waits for a slot ends at once, having
// started no worker.
func TestCodemodeWorkersAreCappedServerWide(t *testing.T) {
	const (
		running = 2
		workers = running * CodemodeAliveFactor
		calls   = workers + 2
	)
	cm := mustTools(t, Config{CodemodeTimeout: time.Minute, Codemode: CodemodeConfig{MaxWorkers: running}})["codemode"]

	var (
		mu   sync.Mutex
		peak int // the most workers seen alive, by the sampler and by each nested call
	)
	see := func() {
		n := len(CodemodeWorkers(t))
		mu.Lock()
		peak = max(peak, n)
		mu.Unlock()
	}
	release := make(chan struct{})
	fake := &nestedFake{handle: func(ctx context.Context, name string, args json.RawMessage) tool.Result {
		see() // this call's worker is alive, waiting for this outcome
		select {
		case <-release:
			return tool.Result{Content: []tool.Content{tool.Text("released")}}
		case <-ctx.Done():
			return tool.ErrorResult("%s", context.Cause(ctx))
		}
	}}

	// waiting records which calls said they wait for a slot.
	var waiting sync.Map
	type answer struct {
		n   int
		res tool.Result
		err error
	}
	answers := make(chan answer, calls+1)
	start := func(ctx context.Context, n int) {
		raw, _ := json.Marshal(map[string]string{"code": fmt.Sprintf("await tools.hold({}); return %d", n)})
		onUpdate := func(u tool.Update) {
			if strings.HasPrefix(u.Message, "waiting for a codemode slot") {
				if prev, ok := waiting.Load(n); !ok || !strings.HasSuffix(prev.(string), "alive)") {
					waiting.Store(n, u.Message)
				}
			}
		}
		go func() {
			res, err := cm.Execute(ctx, raw, onUpdate, fake)
			answers <- answer{n, res, err}
		}()
	}
	// waiters are the calls that said they wait for a live-worker slot (a call may first wait
	// a moment for a running slot while the others' scripts have not reached their calls yet).
	waiters := func() map[int]string {
		out := map[int]string{}
		waiting.Range(func(k, v any) bool {
			if strings.HasSuffix(v.(string), "alive)") {
				out[k.(int)] = v.(string)
			}
			return true
		})
		return out
	}
	awaitCond := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (nested calls %d, waiting %v, workers %v)", what, len(fake.calls()), waiters(), CodemodeWorkers(t))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	for n := 1; n <= calls; n++ {
		start(context.Background(), n)
	}
	awaitCond("eight scripts waiting for their calls and two for a slot", func() bool { return len(fake.calls()) == workers && len(waiters()) == calls-workers })
	for n, msg := range waiters() {
		if want := fmt.Sprintf("waiting for a codemode slot (%d alive)", workers); msg != want {
			t.Errorf("call %d said %q, want %q", n, msg, want)
		}
	}
	see()

	// Stop ends a call that waits for a slot at once.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	start(ctx, calls+1)
	awaitCond("one more call to wait for a slot", func() bool { _, ok := waiters()[calls+1]; return ok })
	stopped := time.Now()
	cancel(errors.New("Run stopped by owner"))
	select {
	case a := <-answers:
		if d := time.Since(stopped); d > time.Second {
			t.Errorf("Stop took %s to end a call waiting for a slot", d)
		}
		var out CodemodeOutput
		if a.err != nil || json.Unmarshal(a.res.StructuredContent, &out) != nil {
			t.Fatalf("call %d: %v, structuredContent %s", a.n, a.err, a.res.StructuredContent)
		}
		if a.n != calls+1 || !a.res.IsError || out.Error != "Script stopped: Run stopped by owner" || len(out.Calls) != 0 {
			t.Errorf("call %d answered isError %v, error %q, calls %+v; want call %d stopped, with no calls", a.n, a.res.IsError, out.Error, out.Calls, calls+1)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not end the call waiting for a slot")
	}

	// A sampler watches the workers while the ten finish.
	sampled := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-quit:
				return
			case <-time.After(2 * time.Millisecond):
				see()
			}
		}
	}()
	close(release)
	got := map[int]bool{}
	for range calls {
		select {
		case a := <-answers:
			if a.err != nil || a.res.IsError {
				t.Errorf("call %d: %v, isError %v: %s", a.n, a.err, a.res.IsError, a.res.TextOf())
			}
			var out CodemodeOutput
			if err := json.Unmarshal(a.res.StructuredContent, &out); err != nil || string(out.Result) != fmt.Sprint(a.n) {
				t.Errorf("call %d returned %s (%v), want %d", a.n, out.Result, err, a.n)
			}
			got[a.n] = true
		case <-time.After(time.Minute):
			t.Fatalf("only calls %v finished", got)
		}
	}
	close(quit)
	<-sampled
	if peak > workers {
		t.Errorf("%d workers were alive at once, want at most %d", peak, workers)
	}
	if len(fake.calls()) != calls {
		t.Errorf("%d nested calls, want %d (one per script that ran)", len(fake.calls()), calls)
	}
	assertNoWorkers(t)
}

// TestCodemodeWaitForASlotIsNotScriptTime: a call that waits for a slot longer than its time
// limit still runs its script once it gets one: the wait is not script time. (With MaxWorkers 1
// the holders are the CodemodeAliveFactor scripts alive, waiting for their calls.)
func TestCodemodeWaitForASlotIsNotScriptTime(t *testing.T) {
	const limit = 300 * time.Millisecond
	cm := mustTools(t, Config{CodemodeTimeout: limit, Codemode: CodemodeConfig{MaxWorkers: 1}})["codemode"]
	release := make(chan struct{})
	fake := &nestedFake{handle: func(ctx context.Context, name string, args json.RawMessage) tool.Result {
		<-release // the holder waits here, which is not script time either
		return tool.Result{Content: []tool.Content{tool.Text("released")}}
	}}
	run := func(code string, onUpdate func(tool.Update)) <-chan tool.Result {
		raw, _ := json.Marshal(map[string]string{"code": code})
		c := make(chan tool.Result, 1)
		go func() {
			res, err := cm.Execute(context.Background(), raw, onUpdate, fake)
			if err != nil {
				res = tool.ErrorResult("Go error: %v", err)
			}
			c <- res
		}()
		return c
	}
	holders := map[string]<-chan tool.Result{}
	for n := range CodemodeAliveFactor {
		name := fmt.Sprint("holder", n)
		holders[name] = run("await tools.hold({}); return '"+name+"'", nil)
	}
	for len(fake.calls()) < CodemodeAliveFactor {
		time.Sleep(5 * time.Millisecond)
	}
	waits := make(chan struct{}, 1)
	waiter := run("return 'waiter'", func(u tool.Update) {
		if strings.HasPrefix(u.Message, "waiting for a codemode slot") {
			waits <- struct{}{}
		}
	})
	select {
	case <-waits:
	case <-time.After(30 * time.Second):
		t.Fatal("the second call did not wait for the slot")
	}
	time.Sleep(2 * limit) // the wait outlasts the time limit
	close(release)
	holders["waiter"] = waiter
	for name, c := range holders {
		select {
		case res := <-c:
			if res.IsError || !strings.HasPrefix(res.TextOf(), "Result: \""+name+"\"") {
				t.Errorf("%s: isError %v: %s", name, res.IsError, res.TextOf())
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s did not finish", name)
		}
	}
}

// TestAWaitingScriptHoldsNoRunningSlot (issue 35, capacity): a script waiting for its calls (a
// person's approval) runs no script, so it holds no running slot — with the default cap, ten
// scripts wait for a person at once and none waits for a slot; with a cap of one, a script
// waiting for a person does not hold up another that runs, and each gets its result once
// released.
func TestAWaitingScriptHoldsNoRunningSlot(t *testing.T) {
	release := make(chan struct{})
	fake := &nestedFake{handle: func(ctx context.Context, name string, args json.RawMessage) tool.Result {
		select {
		case <-release:
			return tool.Result{Content: []tool.Content{tool.Text("approved")}}
		case <-ctx.Done():
			return tool.ErrorResult("%s", context.Cause(ctx))
		}
	}}
	run := func(cm *tool.Tool, code string) <-chan tool.Result {
		raw, _ := json.Marshal(map[string]string{"code": code})
		c := make(chan tool.Result, 1)
		go func() {
			res, err := cm.Execute(context.Background(), raw, func(tool.Update) {}, fake)
			if err != nil {
				res = tool.ErrorResult("Go error: %v", err)
			}
			c <- res
		}()
		return c
	}
	result := func(name string, c <-chan tool.Result) tool.Result {
		t.Helper()
		select {
		case res := <-c:
			return res
		case <-time.After(time.Minute):
			t.Fatalf("%s did not finish", name)
		}
		return tool.Result{}
	}

	// The default cap: ten scripts wait for a person at once.
	cm := mustTools(t, Config{CodemodeTimeout: time.Minute})["codemode"]
	var ten []<-chan tool.Result
	for n := range 10 {
		ten = append(ten, run(cm, fmt.Sprintf("await tools.hold({}); return %d", n)))
	}
	deadline := time.Now().Add(time.Minute)
	for len(fake.calls()) < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 10 scripts reached their call: the others wait for a slot", len(fake.calls()))
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A cap of one: a script waiting for a person, and another that runs meanwhile.
	one := mustTools(t, Config{CodemodeTimeout: time.Minute, Codemode: CodemodeConfig{MaxWorkers: 1}})["codemode"]
	before := len(fake.calls())
	holder := run(one, "await tools.hold({}); return 'holder'")
	for len(fake.calls()) == before {
		time.Sleep(5 * time.Millisecond)
	}
	if res := result("the second script", run(one, "return 'runs'")); res.IsError || !strings.HasPrefix(res.TextOf(), `Result: "runs"`) {
		t.Errorf("the script beside a waiting one: isError %v: %s", res.IsError, res.TextOf())
	}

	close(release)
	for n, c := range ten {
		if res := result(fmt.Sprint("script ", n), c); res.IsError || !strings.HasPrefix(res.TextOf(), "Result: "+fmt.Sprint(n)) {
			t.Errorf("script %d: isError %v: %s", n, res.IsError, res.TextOf())
		}
	}
	if res := result("the holder", holder); res.IsError || !strings.HasPrefix(res.TextOf(), `Result: "holder"`) {
		t.Errorf("the holder: isError %v: %s", res.IsError, res.TextOf())
	}
	assertNoWorkers(t)
}
