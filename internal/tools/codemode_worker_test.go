package tools

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
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
