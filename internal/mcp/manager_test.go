package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// stdioServerBin is the test MCP server of testdata/stdioserver, built once by TestMain.
var stdioServerBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if fuzzing() {
		os.Exit(m.Run()) // a fuzz target alone needs no server
	}
	dir, err := os.MkdirTemp("", "countersign-mcp-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stdioServerBin = filepath.Join(dir, "stdioserver")
	// testdata is not part of ./..., so the test builds the server itself.
	build := exec.Command("go", "build", "-o", stdioServerBin, "./testdata/stdioserver")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building testdata/stdioserver:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fuzzing reports whether this process only fuzzes (go test -run '^$' -fuzz X, or one of its
// workers), so that TestMain need not build the test server.
func fuzzing() bool {
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		return true
	}
	fz, run := flag.Lookup("test.fuzz"), flag.Lookup("test.run")
	return fz != nil && fz.Value.String() != "" && run != nil && run.Value.String() == "^$"
}

// newTestManager returns a started Manager with short timings, changed by opts, closed when the
// test ends.
func newTestManager(t *testing.T, cfg Config, opts ...func(*Manager)) (*Manager, *changes) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m := NewManager(cfg, log)
	m.connectTimeout, m.startWait = 10*time.Second, 10*time.Second
	m.backoffMin, m.backoffMax = 300*time.Millisecond, 2*time.Second
	m.keepAlive, m.terminateDuration = 0, time.Second
	for _, o := range opts {
		o(m)
	}
	ch := &changes{m: m}
	m.OnChange(ch.record)
	m.Start(context.Background())
	t.Cleanup(m.Close)
	return m, ch
}

// changes records the server statuses seen by each OnChange call.
type changes struct {
	m     *Manager
	mu    sync.Mutex
	calls int
	seen  []ServerStatus
}

func (c *changes) record() {
	st := c.m.Servers()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.seen = append(c.seen, st...)
}

// sawState reports whether an OnChange call saw server name in state.
func (c *changes) sawState(name string, state State) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.seen {
		if s.Name == name && s.State == state {
			return true
		}
	}
	return false
}

func (c *changes) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func status(m *Manager, name string) ServerStatus {
	for _, s := range m.Servers() {
		if s.Name == name {
			return s
		}
	}
	return ServerStatus{}
}

func findTool(t *testing.T, m *Manager, name string) *tool.Tool {
	t.Helper()
	for _, tl := range m.Tools() {
		if tl.Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %s in %v", name, toolNames(m.Tools()))
	return nil
}

func toolNames(ts []*tool.Tool) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return names
}

func call(ctx context.Context, tl *tool.Tool, args string, onUpdate func(tool.Update)) (tool.Result, error) {
	if onUpdate == nil {
		onUpdate = func(tool.Update) {}
	}
	return tl.Execute(ctx, json.RawMessage(args), onUpdate, nil)
}

func assertJSON(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %q is not JSON: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func hint(p *bool) string {
	if p == nil {
		return "absent"
	}
	return strconv.FormatBool(*p)
}

func assertAnnotations(t *testing.T, tl *tool.Tool, readOnly, destructive, idempotent, openWorld string) {
	t.Helper()
	a := tl.Annotations
	got := []string{hint(a.ReadOnlyHint), hint(a.DestructiveHint), hint(a.IdempotentHint), hint(a.OpenWorldHint)}
	want := []string{readOnly, destructive, idempotent, openWorld}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s annotations (readOnly, destructive, idempotent, openWorld) = %v, want %v", tl.Name, got, want)
	}
}

// A stdio server gets the allowlisted environment (procenv), the -pass-env names and its own
// "env", never the rest of Countersign's: not the owner token, not a model provider's key.
func TestStdioServerGetsAnAllowlistedEnvironment(t *testing.T) {
	t.Setenv("COUNTERSIGN_TOKEN", "owner-secret-owner-secret-owner-secret")
	t.Setenv("OPENAI_API_KEY", "sk-secret")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
	t.Setenv("SOME_SERVER_SETTING", "server-only")
	t.Setenv("PASSED_ON", "passed")
	t.Setenv("HOME", "/home/someone")
	envFile := filepath.Join(t.TempDir(), "env")
	m, _ := newTestManager(t, Config{PassEnv: []string{"PASSED_ON"}, Servers: []ServerConfig{
		{Name: "files", Command: stdioServerBin, Env: map[string]string{"STDIOSERVER_ENV_FILE": envFile, "OWN_SETTING": "own"}},
	}})
	if st := status(m, "files"); st.State != Up {
		t.Fatalf("server %+v, want up", st)
	}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for _, name := range []string{"COUNTERSIGN_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SOME_SERVER_SETTING"} {
		if v, ok := got[name]; ok {
			t.Errorf("the server sees %s=%q", name, v)
		}
	}
	for name, want := range map[string]string{"HOME": "/home/someone", "PATH": os.Getenv("PATH"),
		"PASSED_ON": "passed", "OWN_SETTING": "own", "STDIOSERVER_ENV_FILE": envFile} {
		if got[name] != want {
			t.Errorf("the server sees %s=%q, want %q", name, got[name], want)
		}
	}
}

func TestStdioServer(t *testing.T) {
	dir := t.TempDir()
	pidFile, cancelFile := filepath.Join(dir, "files.pid"), filepath.Join(dir, "files.cancelled")
	cfg := Config{Servers: []ServerConfig{
		{Name: "files", Command: stdioServerBin, Env: map[string]string{
			"MCPGODEBUG":              "hintomitempty=1", // false readOnlyHint/idempotentHint go absent
			"STDIOSERVER_PID_FILE":    pidFile,
			"STDIOSERVER_CANCEL_FILE": cancelFile,
		}},
		{Name: "local", Command: stdioServerBin, Trusted: true,
			Env: map[string]string{"MCPGODEBUG": "hintomitempty=1"}},
		{Name: "broken", Command: stdioServerBin, Env: map[string]string{"STDIOSERVER_FAIL": "1"}},
		{Name: "missing", Command: filepath.Join(dir, "no-such-server")},
	}}
	m, changes := newTestManager(t, cfg)
	ctx := context.Background()

	t.Run("status", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			state   State
			trusted bool
			errHas  string
		}{
			{"files", Up, false, ""},
			{"local", Up, true, ""},
			{"broken", Down, false, "stdioserver: cannot open the database"},
			{"missing", Down, false, "no such file or directory"},
		} {
			st := status(m, tc.name)
			t.Logf("%s: %s %s", tc.name, st.State, st.Error)
			if st.State != tc.state || st.Trusted != tc.trusted || st.Transport != "stdio" {
				t.Errorf("%s: state %q trusted %v transport %q, want %q %v stdio (error %q)",
					tc.name, st.State, st.Trusted, st.Transport, tc.state, tc.trusted, st.Error)
			}
			if !strings.Contains(st.Error, tc.errHas) || (tc.errHas == "") != (st.Error == "") {
				t.Errorf("%s: error %q, want one containing %q", tc.name, st.Error, tc.errHas)
			}
		}
		got := status(m, "files").Tools
		want := []string{"files__bad_output", "files__echo", "files__fail_with_data", "files__picture", "files__slow"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("files tools = %v, want %v", got, want)
		}
	})

	t.Run("tools", func(t *testing.T) {
		got := toolNames(m.Tools())
		want := []string{
			"files__bad_output", "files__echo", "files__fail_with_data", "files__picture", "files__slow",
			"local__bad_output", "local__echo", "local__fail_with_data", "local__picture", "local__slow",
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Tools() = %v, want %v", got, want)
		}
		echo := findTool(t, m, "files__echo")
		if echo.Title != "Echo" || echo.Description != "Echoes its text." || echo.Exposure != tool.Direct {
			t.Errorf("echo: title %q description %q exposure %q", echo.Title, echo.Description, echo.Exposure)
		}
		assertJSON(t, "echo inputSchema", echo.InputSchema,
			`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)
		assertJSON(t, "echo outputSchema", echo.OutputSchema,
			`{"type":"object","properties":{"echo":{"type":"string"}},"required":["echo"]}`)
		assertAnnotations(t, echo, "true", "absent", "absent", "false")
		fail := findTool(t, m, "files__fail_with_data")
		if fail.Title != "Fail with data" {
			t.Errorf("fail_with_data title = %q, want the annotations.title %q", fail.Title, "Fail with data")
		}
		assertAnnotations(t, fail, "absent", "false", "absent", "absent")
		assertAnnotations(t, findTool(t, m, "files__bad_output"), "absent", "absent", "absent", "absent")
		assertAnnotations(t, findTool(t, m, "files__slow"), "absent", "true", "true", "absent")

		for _, tl := range m.Tools() {
			if want := strings.HasPrefix(tl.Name, "files__"); tl.AlwaysAsk != want {
				t.Errorf("%s AlwaysAsk = %v, want %v (untrusted servers always ask)", tl.Name, tl.AlwaysAsk, want)
			}
			// The prompt says why it asks (issue 16, item 5).
			if want := map[bool]string{true: "server files is not trusted"}[tl.AlwaysAsk]; tl.AskReason != want {
				t.Errorf("%s AskReason = %q, want %q", tl.Name, tl.AskReason, want)
			}
		}
		reg := tool.NewRegistry()
		added, err := m.RegisterTools(reg)
		if err != nil || !reflect.DeepEqual(added, want) {
			t.Errorf("RegisterTools = %v, %v; want %v", added, err, want)
		}
		if added, err := m.RegisterTools(reg); len(added) != 0 || err != nil {
			t.Errorf("RegisterTools again = %v, %v; want nothing new", added, err)
		}
		if again := findTool(t, m, "files__echo"); again != echo {
			t.Error("Tools() returned a new pointer for an unchanged tool")
		}
	})

	t.Run("results", func(t *testing.T) {
		res, err := call(ctx, findTool(t, m, "files__echo"), `{"text":"hi"}`, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || res.TextOf() != "echo: hi" {
			t.Errorf("echo = %+v", res)
		}
		assertJSON(t, "echo structuredContent", res.StructuredContent, `{"echo":"hi"}`)

		res, err = call(ctx, findTool(t, m, "files__picture"), `{}`, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantContent := []tool.Content{tool.Text("a picture"),
			{Type: "image", Data: base64.StdEncoding.EncodeToString([]byte("\x89PNG")), MimeType: "image/png"}}
		if !reflect.DeepEqual(res.Content, wantContent) {
			t.Errorf("picture content = %+v, want %+v", res.Content, wantContent)
		}

		// isError with data is kept whole, and never validated against outputSchema (SPEC §1 rules 1, 4).
		fail := findTool(t, m, "files__fail_with_data")
		res, err = call(ctx, fail, `{}`, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || res.TextOf() != "quota exceeded" {
			t.Errorf("fail_with_data = %+v", res)
		}
		assertJSON(t, "fail_with_data structuredContent", res.StructuredContent, `{"reason":42}`)

		// A success that breaks outputSchema arrives as sent; the pipeline's Finalize flags it (rule 3).
		bad := findTool(t, m, "files__bad_output")
		res, err = call(ctx, bad, `{}`, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError {
			t.Errorf("bad_output isError = true, want the server's false")
		}
		assertJSON(t, "bad_output structuredContent", res.StructuredContent, `{"count":"three"}`)

		reg := tool.NewRegistry()
		for _, tl := range []*tool.Tool{fail, bad} {
			if err := reg.Register(tl); err != nil && !strings.Contains(err.Error(), "already registered") {
				t.Fatal(err)
			}
		}
		if fin := fail.Finalize(call(ctx, fail, `{}`, nil)); !fin.IsError || fin.ContractViolation != nil || len(fin.StructuredContent) == 0 {
			t.Errorf("Finalize(fail_with_data) = %+v, want the error kept whole", fin)
		}
		if fin := bad.Finalize(call(ctx, bad, `{}`, nil)); !fin.IsError || fin.ContractViolation == nil {
			t.Errorf("Finalize(bad_output) = %+v, want a contract violation", fin)
		}
	})

	t.Run("progress", func(t *testing.T) {
		var mu sync.Mutex
		var updates []tool.Update
		res, err := call(ctx, findTool(t, m, "files__slow"), `{}`, func(u tool.Update) {
			mu.Lock()
			updates = append(updates, u)
			mu.Unlock()
		})
		if err != nil || res.TextOf() != "done" {
			t.Fatalf("slow = %+v, %v", res, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(updates) != 5 {
			t.Fatalf("got %d updates, want 5: %+v", len(updates), updates)
		}
		for i, u := range updates {
			want := tool.Update{Progress: float64(i + 1), Total: 5, Message: fmt.Sprintf("step %d of 5", i+1)}
			if !reflect.DeepEqual(u, want) {
				t.Errorf("update %d = %+v, want %+v", i, u, want)
			}
		}
	})

	t.Run("cancel", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		start := time.Now()
		_, err := call(cctx, findTool(t, m, "files__slow"), `{}`, func(tool.Update) { cancel() })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 800*time.Millisecond {
			t.Errorf("cancelled call took %v", d)
		}
		// The SDK sent notifications/cancelled: the server's handler saw its context end.
		testkit.Eventually(t, "the server to record the cancellation", func() bool {
			b, _ := os.ReadFile(cancelFile)
			return string(b) == "cancelled"
		})
		if st := status(m, "files"); st.State != Up {
			t.Errorf("after a cancelled call files is %s (%s), want up", st.State, st.Error)
		}
	})

	t.Run("crash and reconnect", func(t *testing.T) {
		echo := findTool(t, m, "files__echo")
		pid := readPID(t, pidFile)
		proc, err := os.FindProcess(pid)
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.Kill(); err != nil {
			t.Fatal(err)
		}
		_, err = call(ctx, echo, `{"text":"anyone?"}`, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "MCP server files is down: ") {
			t.Fatalf("call after kill: err = %v, want \"MCP server files is down: …\"", err)
		}
		t.Logf("call after kill: %v", err)
		testkit.Eventually(t, "an OnChange with files down", func() bool { return changes.sawState("files", Down) })
		testkit.Eventually(t, "files to be up again", func() bool { return status(m, "files").State == Up })
		if newPID := readPID(t, pidFile); newPID == pid {
			t.Errorf("files still has pid %d; want a restarted process", pid)
		}
		if findTool(t, m, "files__echo") != echo {
			t.Error("files__echo has a new pointer after the reconnect")
		}
		res, err := call(ctx, echo, `{"text":"back"}`, nil)
		if err != nil || res.TextOf() != "echo: back" {
			t.Fatalf("echo after reconnect = %+v, %v", res, err)
		}
		if st := status(m, "local"); st.State != Up {
			t.Errorf("local is %s; one server's crash must not touch another", st.State)
		}
	})

	t.Run("down server keeps retrying", func(t *testing.T) {
		if st := status(m, "broken"); st.State != Down || len(st.Tools) != 0 {
			t.Errorf("broken = %+v, want down without tools", st)
		}
	})
}

func readPID(t *testing.T, file string) int {
	t.Helper()
	var pid int
	testkit.Eventually(t, "the pid file", func() bool {
		b, _ := os.ReadFile(file)
		pid, _ = strconv.Atoi(string(b))
		return pid > 0
	})
	return pid
}

// httpServer is an in-process streamable HTTP MCP server that requires a bearer token.
type httpServer struct {
	*httptest.Server
	mcp        *sdk.Server
	handler    atomic.Pointer[http.Handler]
	unauthored atomic.Int64 // requests that came without the token
}

const httpToken = "Bearer s3cret"

func newHTTPServer(t *testing.T) *httpServer {
	t.Helper()
	// PageSize 2 with four tools makes tools/list paginate.
	s := sdk.NewServer(&sdk.Implementation{Name: "httpserver", Version: "1.0.0"}, &sdk.ServerOptions{PageSize: 2})
	yes := true
	s.AddTool(&sdk.Tool{
		Name: "add", Description: "Adds two integers.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"sum":{"type":"integer"}},"required":["sum"]}`),
		// The SDK marshals readOnlyHint and idempotentHint even when false: explicit false.
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes},
	}, func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var in struct{ A, B int }
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return nil, err
		}
		return &sdk.CallToolResult{
			Content:           []sdk.Content{&sdk.TextContent{Text: strconv.Itoa(in.A + in.B)}},
			StructuredContent: map[string]any{"sum": in.A + in.B},
		}, nil
	})
	s.AddTool(&sdk.Tool{
		Name: "count", Description: "Counts to three, reporting progress.",
		InputSchema: json.RawMessage(`{"type":"object"}`),
	}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		for i := 1; i <= 3; i++ {
			err := req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Message: strconv.Itoa(i)})
			if err != nil {
				return nil, err
			}
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "counted"}}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "greet", Title: "Greet", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "hello"}}}, nil
		})
	no := false
	s.AddTool(&sdk.Tool{Name: "peek", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}}, peek)
	hs := &httpServer{mcp: s}
	hs.restart()
	hs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != httpToken {
			hs.unauthored.Add(1)
			http.Error(w, "missing or wrong token", http.StatusUnauthorized)
			return
		}
		(*hs.handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs
}

func peek(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "peeked"}}}, nil
}

// restart replaces the HTTP handler, as a restarted server process would: sessions are forgotten.
func (hs *httpServer) restart() {
	var h http.Handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return hs.mcp }, nil)
	hs.handler.Store(&h)
}

func TestHTTPServer(t *testing.T) {
	hs := newHTTPServer(t)
	cfg := Config{Servers: []ServerConfig{
		{Name: "remote", URL: hs.URL, Headers: map[string]string{"Authorization": httpToken}, Trusted: true},
		{Name: "noauth", URL: hs.URL},
	}}
	m, changes := newTestManager(t, cfg)
	ctx := context.Background()

	t.Run("headers", func(t *testing.T) {
		if st := status(m, "remote"); st.State != Up || st.Transport != "http" {
			t.Fatalf("remote = %+v, want up over http", st)
		}
		st := status(m, "noauth")
		if st.State != Down || !strings.Contains(st.Error, "Unauthorized") {
			t.Errorf("noauth = %+v, want down with an Unauthorized error", st)
		}
		if hs.unauthored.Load() == 0 {
			t.Error("the server never saw a request without the token; is the check wired?")
		}
	})

	t.Run("tools", func(t *testing.T) {
		got := toolNames(m.Tools())
		want := []string{"remote__add", "remote__count", "remote__greet", "remote__peek"} // over two pages
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Tools() = %v, want %v", got, want)
		}
		add := findTool(t, m, "remote__add")
		assertJSON(t, "add inputSchema", add.InputSchema,
			`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}`)
		assertAnnotations(t, add, "false", "true", "false", "absent")
		if add.AlwaysAsk {
			t.Error("remote__add AlwaysAsk = true; the server is trusted")
		}
		greet := findTool(t, m, "remote__greet")
		if greet.Title != "Greet" || len(greet.OutputSchema) != 0 {
			t.Errorf("greet: title %q outputSchema %s", greet.Title, greet.OutputSchema)
		}
		assertAnnotations(t, greet, "absent", "absent", "absent", "absent")
	})

	t.Run("call", func(t *testing.T) {
		res, err := call(ctx, findTool(t, m, "remote__add"), `{"a":2,"b":3}`, nil)
		if err != nil || res.IsError || res.TextOf() != "5" {
			t.Fatalf("add = %+v, %v", res, err)
		}
		assertJSON(t, "add structuredContent", res.StructuredContent, `{"sum":5}`)
	})

	t.Run("progress", func(t *testing.T) {
		var mu sync.Mutex
		var got []string
		res, err := call(ctx, findTool(t, m, "remote__count"), `{}`, func(u tool.Update) {
			mu.Lock()
			got = append(got, fmt.Sprintf("%g:%s", u.Progress, u.Message))
			mu.Unlock()
		})
		if err != nil || res.TextOf() != "counted" {
			t.Fatalf("count = %+v, %v", res, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"1:1", "2:2", "3:3"}; !reflect.DeepEqual(got, want) {
			t.Errorf("updates = %v, want %v", got, want)
		}
	})

	t.Run("list_changed", func(t *testing.T) {
		greet := findTool(t, m, "remote__greet")
		reg := tool.NewRegistry()
		if _, err := m.RegisterTools(reg); err != nil {
			t.Fatal(err)
		}
		before := changes.count()
		hs.mcp.AddTool(&sdk.Tool{Name: "late", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "late but here"}}}, nil
			})
		hs.mcp.RemoveTools("greet")
		testkit.Eventually(t, "remote__late to appear and remote__greet to go", func() bool {
			return reflect.DeepEqual(toolNames(m.Tools()), []string{"remote__add", "remote__count", "remote__late", "remote__peek"})
		})
		if changes.count() == before {
			t.Error("OnChange was not called for the new tool list")
		}
		if added, err := m.RegisterTools(reg); err != nil || !reflect.DeepEqual(added, []string{"remote__late"}) {
			t.Errorf("RegisterTools after list_changed = %v, %v; want [remote__late]", added, err)
		}
		res, err := call(ctx, findTool(t, m, "remote__late"), `{}`, nil)
		if err != nil || res.TextOf() != "late but here" {
			t.Errorf("late = %+v, %v", res, err)
		}
		_, err = call(ctx, greet, `{}`, nil)
		if err == nil || err.Error() != `MCP server remote no longer offers tool "greet"` {
			t.Errorf("greet after removal: err = %v", err)
		}
	})

	t.Run("definition change", func(t *testing.T) {
		peekTool := findTool(t, m, "remote__peek")
		if res, err := call(ctx, peekTool, `{}`, nil); err != nil || res.TextOf() != "peeked" {
			t.Fatalf("peek = %+v, %v", res, err)
		}
		// The trusted server now says peek is destructive: the registered definition said it
		// needs no approval, so its calls are refused rather than run unapproved.
		yes := true
		hs.mcp.AddTool(&sdk.Tool{Name: "peek", InputSchema: json.RawMessage(`{"type":"object"}`),
			Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes}}, peek)
		testkit.Eventually(t, "a warning about peek", func() bool { return len(status(m, "remote").Warnings) > 0 })
		if w := status(m, "remote").Warnings; !reflect.DeepEqual(w, []string{"tool remote__peek changed its definition after it was registered; the first one stays in force until Countersign restarts"}) {
			t.Errorf("warnings = %q", w)
		}
		if findTool(t, m, "remote__peek") != peekTool {
			t.Error("a changed tool got a new pointer; the registry holds the first")
		}
		_, err := call(ctx, peekTool, `{}`, nil)
		if err == nil || !strings.Contains(err.Error(), "changed the annotations of tool \"peek\" so that its calls need approval") {
			t.Errorf("peek after the change: err = %v", err)
		}
	})

	t.Run("server restart", func(t *testing.T) {
		add := findTool(t, m, "remote__add")
		hs.restart() // the session Countersign holds is gone
		_, err := call(ctx, add, `{"a":1,"b":1}`, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "MCP server remote is down: ") {
			t.Fatalf("call after restart: err = %v, want \"MCP server remote is down: …\"", err)
		}
		t.Logf("call after restart: %v", err)
		testkit.Eventually(t, "remote to be up again", func() bool { return status(m, "remote").State == Up })
		res, err := call(ctx, add, `{"a":1,"b":1}`, nil)
		if err != nil || res.TextOf() != "2" {
			t.Errorf("add after reconnect = %+v, %v", res, err)
		}
	})
}
