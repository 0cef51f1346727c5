package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"countersign/internal/procenv"
)

// fakeWorkerArg starts this package's test binary as a misbehaving codemode worker; the next
// argument says how it misbehaves (see fakeWorker).
const fakeWorkerArg = "__codemode-fake-worker"

// fakeWorker is a worker that breaks the protocol or dies in the way mode says, to test the
// server's side. It returns the exit status.
func fakeWorker(args []string) int {
	mode := ""
	if len(args) > 0 {
		mode = args[0]
	}
	out := func(lines ...string) {
		for _, l := range lines {
			fmt.Fprintln(os.Stdout, l)
		}
	}
	// block reads stdin to its end: the server closes it, or kills the worker.
	block := func() int {
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
	readLine := func() string {
		var b strings.Builder
		one := make([]byte, 1)
		for {
			if _, err := os.Stdin.Read(one); err != nil || one[0] == '\n' {
				return b.String()
			}
			b.WriteByte(one[0])
		}
	}
	const ready = `{"type":"ready"}`
	switch mode {
	case "garbage":
		out("hello, this is not JSON")
		return block()
	case "long":
		os.Stdout.WriteString(strings.Repeat("x", MaxCodemodeMessage+16*DefaultOutputCap+1))
		return block()
	case "unknown-type":
		out(ready, `{"type":"teleport"}`)
		return block()
	case "unknown-field":
		out(`{"type":"ready","sudo":true}`)
		return block()
	case "two-objects":
		out(ready + ready)
		return block()
	case "before-ready":
		out(`{"type":"console","level":"log","text":"early"}`)
		return block()
	case "call-out-of-order":
		out(ready, `{"type":"call","id":7,"name":"plain","arguments":{}}`)
		return block()
	case "call-bad-name":
		out(ready, `{"type":"call","id":1,"name":"a b","arguments":{}}`)
		return block()
	case "console-bad-level":
		out(ready, `{"type":"console","level":"shout","text":"x"}`)
		return block()
	case "exit":
		fmt.Fprintln(os.Stderr, "boom: the worker gave up")
		return 7
	case "silent":
		return block()
	case "spin":
		out(ready)
		for {
		}
	case "flood":
		out(ready)
		for i := 0; ; i++ {
			out(fmt.Sprintf(`{"type":"console","level":"log","text":"line %d"}`, i))
		}
	case "env":
		readLine()
		out(ready, fmt.Sprintf(`{"type":"console","level":"log","text":%q}`, strings.Join(os.Environ(), " ")), `{"type":"done"}`)
		return 0
	case "call-then-oom":
		readLine()
		out(ready, `{"type":"call","id":1,"name":"plain","arguments":{}}`, `{"type":"wait"}`)
		readLine()
		out(`{"type":"call","id":2,"name":"plain","arguments":{}}`)
		time.Sleep(50 * time.Millisecond)
		fmt.Fprintln(os.Stderr, "fatal error: runtime: out of memory")
		return 2
	}
	fmt.Fprintf(os.Stderr, "fake worker: unknown mode %q\n", mode)
	return 1
}

// fakeConfig is a Config whose codemode worker is the fake worker in mode.
func fakeConfig(mode string, timeout time.Duration) Config {
	return Config{CodemodeTimeout: timeout, Codemode: CodemodeConfig{Command: []string{"/proc/self/exe", fakeWorkerArg, mode}}}
}

// TestCodemodeWorkerThatBreaksTheProtocol: whatever a worker writes, or however it ends, the
// server answers with a clear error at once (or at the time limit), never crashes or hangs, and
// reaps the worker. Lines are bounded: a worker writing without end is refused at the cap.
func TestCodemodeWorkerThatBreaksTheProtocol(t *testing.T) {
	tests := []struct {
		mode    string
		timeout time.Duration
		error   string // a prefix of the codemode error
		calls   []CodemodeCall
	}{
		{mode: "garbage", error: `Script failed: the interpreter broke the protocol (not a message: invalid character 'h'`},
		{mode: "long", error: fmt.Sprintf("Script failed: the interpreter broke the protocol (message too long: a line longer than %d bytes)", codemodeMessageCap(DefaultOutputCap))},
		{mode: "unknown-type", error: `Script failed: the interpreter broke the protocol (an unknown message type "teleport")`},
		{mode: "unknown-field", error: `Script failed: the interpreter broke the protocol (not a message: json: unknown field "sudo"`},
		{mode: "two-objects", error: `Script failed: the interpreter broke the protocol (not a message: text after the JSON object`},
		{mode: "before-ready", error: `Script failed: the interpreter broke the protocol (a "console" message before "ready")`},
		{mode: "call-out-of-order", error: `Script failed: the interpreter broke the protocol (call 7 where call 1 was next)`},
		{mode: "call-bad-name", error: `Script failed: the interpreter broke the protocol (a call of "a b", which is not a tool name)`},
		{mode: "console-bad-level", error: `Script failed: the interpreter broke the protocol (a console line of level "shout")`},
		{mode: "exit", error: "Script failed: the interpreter ended unexpectedly (exit status 7): boom: the worker gave up"},
		{mode: "spin", timeout: 500 * time.Millisecond, error: "Script stopped: time limit of 500ms exceeded"},
		{mode: "flood", timeout: 500 * time.Millisecond, error: "Script stopped: time limit of 500ms exceeded"},
		{mode: "call-then-oom", error: "Script stopped: memory limit exceeded",
			calls: []CodemodeCall{{ID: "c1/1", Name: "plain", Status: "ok"}, {ID: "c1/2", Name: "plain", Status: "ok"}}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			r := within(t, startJS(t, context.Background(), fakeConfig(tt.mode, tt.timeout), &nestedFake{handle: cannedTools}, "return 1"), 10*time.Second)
			if !r.res.IsError || !strings.HasPrefix(r.out.Error, tt.error) {
				t.Errorf("isError %v, error %q; want one starting %q", r.res.IsError, r.out.Error, tt.error)
			}
			wantCalls := tt.calls
			if wantCalls == nil {
				wantCalls = []CodemodeCall{}
			}
			if !reflect.DeepEqual(r.out.Calls, wantCalls) {
				t.Errorf("calls %+v, want %+v", r.out.Calls, wantCalls)
			}
			if tt.mode == "flood" {
				size := 0
				for _, l := range r.out.Console {
					size += len(l.Text) + 1
				}
				if !r.out.ConsoleTruncated || size > CodemodeConsoleCap {
					t.Errorf("kept %d bytes of console (consoleTruncated %v), want at most the cap, cut", size, r.out.ConsoleTruncated)
				}
			}
			assertNoWorkers(t)
		})
	}
	t.Run("silent until Stop", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		c := startJS(t, ctx, fakeConfig("silent", 0), &nestedFake{handle: cannedTools}, "return 1")
		for len(CodemodeWorkers(t)) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		stop := time.Now()
		cancel(errors.New("Run stopped by owner"))
		r := within(t, c, 5*time.Second)
		if d := time.Since(stop); d >= time.Second {
			t.Errorf("Stop took %s", d)
		}
		if got, want := r.out.Error, "Script stopped: Run stopped by owner"; got != want {
			t.Errorf("error %q, want %q", got, want)
		}
		assertNoWorkers(t)
	})
}

// TestCodemodeWorkerGetsNothingButItsCallsMarker: the worker's environment is its call's marker
// and its owner alone (SPEC §8: what a crash leaves is found by it; issue 33: a takeover kills it
// only once its owner is gone); the server's secrets (the owner token,
// the model providers' keys) stay in the server.
func TestCodemodeWorkerGetsNothingButItsCallsMarker(t *testing.T) {
	t.Setenv("COUNTERSIGN_TOKEN", "owner-token-that-must-not-leak")
	t.Setenv("OPENAI_API_KEY", "sk-must-not-leak")
	cfg := fakeConfig("env", 0)
	cfg.StoreID = "sqlite:/data/cs.db"
	r := within(t, startJS(t, context.Background(), cfg, &nestedFake{handle: cannedTools}, "return 1"), 10*time.Second)
	if r.res.IsError {
		t.Fatalf("isError: %s", r.res.TextOf())
	}
	if want := []ConsoleLine{{Level: "log", Text: "COUNTERSIGN_CALL=sqlite:%2Fdata%2Fcs.db s1 c1 " + procenv.OwnerVar + "=" + procenv.Owner()}}; !reflect.DeepEqual(r.out.Console, want) {
		t.Errorf("the worker's environment, as it printed it: %+v; want %+v", r.out.Console, want)
	}
}

// TestMessageReaderBoundsLines: lines arrive whole however the stream is cut; a line of exactly
// the cap is taken, one byte more is refused, and so is an unfinished line at the end.
func TestMessageReaderBoundsLines(t *testing.T) {
	line := func(text string) string { return `{"type":"console","level":"log","text":"` + text + `"}` + "\n" }
	exact := line(strings.Repeat("x", 100))
	tests := []struct {
		name   string
		stream string
		max    int
		want   []string // the texts read, then the error's text ("EOF" for a clean end)
	}{
		{"two lines", line("a") + line("b"), 1000, []string{"a", "b", "EOF"}},
		{"a line of exactly the cap", exact, len(exact), []string{strings.Repeat("x", 100), "EOF"}},
		{"one byte over the cap", exact, len(exact) - 1, []string{fmt.Sprintf("message too long: a line longer than %d bytes", len(exact)-1)}},
		{"over the cap with no newline", strings.Repeat("y", 5000), 1000, []string{"message too long: a line longer than 1000 bytes"}},
		{"cut short", line("a") + `{"type":`, 1000, []string{"a", "unexpected EOF: a line cut short (8 bytes)"}},
		{"not JSON", "hello\n", 1000, []string{`not a message: invalid character 'h' looking for beginning of value (line starts "hello")`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMessageReader(iotest.OneByteReader(strings.NewReader(tt.stream)), tt.max)
			var got []string
			for {
				msg, err := m.read()
				if err != nil {
					got = append(got, err.Error())
					break
				}
				got = append(got, msg.Text)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("read %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCodemodeWorkerExitsWhenTheServerIsGone: a worker whose stdin closes (the server ended or
// died) exits at once, even from inside a native call that never yields.
func TestCodemodeWorkerExitsWhenTheServerIsGone(t *testing.T) {
	cmd := exec.Command("/proc/self/exe", CodemodeWorkerArg)
	cmd.Env = []string{}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	run, err := encodeMessage(codemodeMessage{Type: msgRun, Code: "return " + backtracking[0].code,
		TimeoutNs: int64(time.Minute), OutputCap: DefaultOutputCap, MemoryLimit: DefaultCodemodeMemoryLimit})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write(run); err != nil {
		t.Fatal(err)
	}
	if msg, err := newMessageReader(stdout, MaxCodemodeMessage).read(); err != nil || msg.Type != msgReady {
		t.Fatalf("first message %+v, %v; want ready", msg, err)
	}
	AwaitSpinning(t, 200*time.Millisecond)
	stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the worker exited with %v, want status 0", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the worker still runs 5s after its stdin closed")
	}
}
