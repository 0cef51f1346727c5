package models

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/tool"
)

// fakeVendor is a local stand-in for a vendor API: it records each request and answers with a
// recorded response from testdata/.
type fakeVendor struct {
	*httptest.Server
	mu       sync.Mutex
	requests []recordedRequest
}

type recordedRequest struct {
	Path   string
	Header http.Header
	Body   []byte
}

func newFakeVendor(t *testing.T, respond http.HandlerFunc) *fakeVendor {
	t.Helper()
	f := &fakeVendor{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, recordedRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		f.mu.Unlock()
		respond(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

// only returns the one request the vendor received, decoded.
func (f *fakeVendor) only(t *testing.T) (recordedRequest, map[string]any) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) != 1 {
		t.Fatalf("the vendor got %d requests, want 1", len(f.requests))
	}
	var body map[string]any
	if err := json.Unmarshal(f.requests[0].Body, &body); err != nil {
		t.Fatalf("request body: %v\n%s", err, f.requests[0].Body)
	}
	return f.requests[0], body
}

// recorded reads testdata/<vendor>/<name>.
func recorded(t *testing.T, vendor, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", vendor, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// events splits an SSE body into its events, each with its blank line.
func events(body string) []string {
	var out []string
	for _, e := range strings.SplitAfter(body, "\n\n") {
		if strings.TrimSpace(e) != "" {
			out = append(out, e)
		}
	}
	return out
}

// serveSSE streams body event by event, flushing each, as a vendor does.
func serveSSE(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeEvents(w, events(body))
	}
}

func writeEvents(w http.ResponseWriter, evs []string) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for _, e := range evs {
		io.WriteString(w, e)
		w.(http.Flusher).Flush()
	}
}

// serveError answers with an HTTP error status and a JSON body.
func serveError(status int, body string, header map[string]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// serveCut streams the first n events of body, then drops the connection without ending the
// chunked response: the client reads an unexpected EOF.
func serveCut(body string, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeEvents(w, events(body)[:n])
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	}
}

// serveEnded streams the first n events of body and ends the response normally, as a proxy
// that gives up between events does.
func serveEnded(body string, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeEvents(w, events(body)[:n])
	}
}

// serveStall streams the first n events of body, then sends nothing until the client leaves.
func serveStall(body string, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeEvents(w, events(body)[:n])
		<-r.Context().Done()
	}
}

// deltas records what a model streamed.
type deltas struct {
	text     []string
	thinking []string
	calls    []agent.Block
	partials []agent.PartialCall
	retries  []agent.Retry
	order    []string // the kind of each delta, in order: text, thinking, call, partial, retry
}

// expect compares the deltas with want's text, thinking, calls, partials and order (not retries).
func (d *deltas) expect(t *testing.T, want deltas) {
	t.Helper()
	if !reflect.DeepEqual(d.text, want.text) {
		t.Errorf("text deltas: got %q, want %q", d.text, want.text)
	}
	if !reflect.DeepEqual(d.thinking, want.thinking) {
		t.Errorf("thinking deltas: got %q, want %q", d.thinking, want.thinking)
	}
	if !reflect.DeepEqual(d.calls, want.calls) {
		t.Errorf("tool call deltas:\ngot  %+v\nwant %+v", d.calls, want.calls)
	}
	if !reflect.DeepEqual(d.partials, want.partials) {
		t.Errorf("partial deltas:\ngot  %+v\nwant %+v", d.partials, want.partials)
	}
	if !reflect.DeepEqual(d.order, want.order) {
		t.Errorf("delta order: got %q, want %q", d.order, want.order)
	}
}

func (d *deltas) on(x agent.Delta) {
	set := 0
	if x.Text != "" {
		d.text = append(d.text, x.Text)
		d.order = append(d.order, "text")
		set++
	}
	if x.Thinking != "" {
		d.thinking = append(d.thinking, x.Thinking)
		d.order = append(d.order, "thinking")
		set++
	}
	if x.ToolCall != nil {
		d.calls = append(d.calls, *x.ToolCall)
		d.order = append(d.order, "call")
		set++
	}
	if x.Partial != nil {
		d.partials = append(d.partials, *x.Partial)
		d.order = append(d.order, "partial")
		set++
	}
	if x.Retry != nil {
		d.retries = append(d.retries, *x.Retry)
		d.order = append(d.order, "retry")
		set++
	}
	if set != 1 {
		panic(fmt.Sprintf("a delta with %d fields set: %+v", set, x))
	}
}

// requests returns every request the vendor received, decoded.
func (f *fakeVendor) all(t *testing.T) []map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	for _, r := range f.requests {
		var body map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatalf("request body: %v\n%s", err, r.Body)
		}
		out = append(out, body)
	}
	return out
}

// u is a usage for a want.
func u(input, output, cacheRead, cacheWrite int64) *agent.Usage {
	return &agent.Usage{Input: input, Output: output, CacheRead: cacheRead, CacheWrite: cacheWrite}
}

// jsonEqual reports whether got (decoded JSON) equals the JSON text want.
func jsonEqual(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want: %v", what, err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.MarshalIndent(got, "", "  ")
		ww, _ := json.MarshalIndent(w, "", "  ")
		t.Errorf("%s:\ngot  %s\nwant %s", what, g, ww)
	}
}

// roundTrip is the transcript of test (c): an assistant message with two tool calls, one result
// with text (and UI-only details) and one with structuredContent only and isError, a failed
// model request (an error message without content), and the user's next message.
func roundTrip() agent.Request {
	return agent.Request{
		Messages: []agent.Message{
			{Role: agent.User, Content: []agent.Block{{Type: "text", Text: "Check the repo."}}},
			{Role: agent.Assistant, StopReason: agent.ToolUse, Content: []agent.Block{
				{Type: "text", Text: "Let me look."},
				{Type: "toolCall", ID: "call_1", Name: "read_file", Arguments: json.RawMessage(`{"path":"README.md"}`)},
				{Type: "toolCall", ID: "call_2", Name: "run_command", Arguments: json.RawMessage(`{"command":"go test ./..."}`)},
			}},
			{Role: agent.ToolResult, ToolCallID: "call_1", ToolName: "read_file", Result: toolResult(`{
				"content": [{"type": "text", "text": "# Countersign"}],
				"details": {"secret": "UI-only"}, "isError": false}`)},
			{Role: agent.ToolResult, ToolCallID: "call_2", ToolName: "run_command", Result: toolResult(`{
				"content": [], "structuredContent": {"exitCode": 1, "stdout": "FAIL"}, "isError": true}`)},
			{Role: agent.Assistant, StopReason: agent.Error, ErrorMessage: "openai: 500 Internal Server Error: boom"},
			{Role: agent.User, Content: []agent.Block{{Type: "text", Text: "Try again."}}},
		},
		Tools: []agent.ToolSpec{
			{Name: "read_file", Description: "Reads a workspace file.", InputSchema: json.RawMessage(
				`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`)},
			{Name: "run_command", Description: "Runs a shell command.", InputSchema: json.RawMessage(
				`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
		},
	}
}

func userSays(text string) agent.Request {
	return agent.Request{Messages: []agent.Message{{Role: agent.User, Content: []agent.Block{{Type: "text", Text: text}}}}}
}

func toolResult(js string) *tool.Result {
	var r tool.Result
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		panic(err)
	}
	return &r
}

// streamAndCompare is the head of each provider's stream test: a fake vendor serves body, the
// model made by newModel over it streams req, and the message (its usage compared apart, for a
// clearer failure), the deltas and their order must be want and wantDeltas; thought, a phrase of
// the recorded reasoning, must not be in the answer text. It returns the fake vendor, whose one
// request the caller checks.
func streamAndCompare(t *testing.T, body string, newModel func(*fakeVendor) agent.Model, req agent.Request,
	want agent.Message, wantDeltas deltas, thought string) *fakeVendor {
	t.Helper()
	f := newFakeVendor(t, serveSSE(body))
	var d deltas
	got, err := newModel(f).Stream(context.Background(), req, d.on)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("message:\ngot  %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(got.Usage, want.Usage) {
		t.Errorf("usage: got %+v, want %+v", got.Usage, want.Usage)
	}
	d.expect(t, wantDeltas)
	if strings.Contains(got.Text(), thought) {
		t.Errorf("the reasoning is in the answer text: %q", got.Text())
	}
	return f
}
