package models

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
)

func newTestOpenAI(f *fakeVendor, idle time.Duration) *OpenAI {
	m := NewOpenAI(OpenAIConfig{
		APIKey: "sk-test", BaseURL: f.URL + "/v1", Model: "gpt-4o-mini",
		HTTPClient: f.Client(), IdleTimeout: idle,
	})
	return m
}

func TestOpenAIStream(t *testing.T) {
	readme := agent.Block{Type: "toolCall", ID: "call_Qx1vR8", Name: "read_file", Arguments: json.RawMessage(`{"path":"README.md"}`)}
	gotest := agent.Block{Type: "toolCall", ID: "call_Zt2kW4", Name: "run_command", Arguments: json.RawMessage(`{"command":"go test ./..."}`)}
	reasoning := recorded(t, "openai", "reasoning.sse")
	tests := []struct {
		name         string
		body         string
		req          agent.Request
		wantText     []string
		wantThinking []string
		wantCalls    []agent.Block
		wantPartials []agent.PartialCall
		wantOrder    []string
		want         agent.Message
	}{{
		name:      "text in several deltas, with usage",
		body:      recorded(t, "openai", "text.sse"),
		req:       userSays("Do the tests pass?"),
		wantText:  []string{"Hello", "! The", " tests pass."},
		wantOrder: []string{"text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Stop, Usage: u(216, 9, 1024, 0), Content: []agent.Block{
			{Type: "text", Text: "Hello! The tests pass."},
		}},
	}, {
		name:      "two parallel tool calls with arguments in fragments",
		body:      recorded(t, "openai", "tools.sse"),
		req:       roundTrip(),
		wantCalls: []agent.Block{readme, gotest},
		wantPartials: []agent.PartialCall{
			{Index: 0, ID: "call_Qx1vR8", Name: "read_file", Arguments: ""},
			{Index: 0, ID: "call_Qx1vR8", Name: "read_file", Arguments: `{"pa`},
			{Index: 0, ID: "call_Qx1vR8", Name: "read_file", Arguments: `{"path": "READ`},
			{Index: 0, ID: "call_Qx1vR8", Name: "read_file", Arguments: `{"path": "README.md"}`},
			{Index: 1, ID: "call_Zt2kW4", Name: "run_command", Arguments: ""},
			{Index: 1, ID: "call_Zt2kW4", Name: "run_command", Arguments: `{"command":`},
			{Index: 1, ID: "call_Zt2kW4", Name: "run_command", Arguments: `{"command": "go test ./..."}`},
		},
		// The first call is complete when the second starts; the second when the stream ends.
		wantOrder: []string{"partial", "partial", "partial", "partial", "call", "partial", "partial", "partial", "call"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.ToolUse, Usage: u(2318, 52, 0, 0),
			Content: []agent.Block{readme, gotest}},
	}, {
		name:     "Ollama: whole calls in one chunk, finish_reason stop",
		body:     recorded(t, "openai", "tools_ollama.sse"),
		req:      userSays("What is here?"),
		wantText: []string{"Let me look."},
		wantCalls: []agent.Block{
			{Type: "toolCall", ID: "call_9x2mfl3q", Name: "read_file", Arguments: json.RawMessage(`{"path":"README.md"}`)},
			{Type: "toolCall", ID: "call_k7wq0c1v", Name: "list_files", Arguments: json.RawMessage(`{}`)},
		},
		wantPartials: []agent.PartialCall{
			{Index: 0, ID: "call_9x2mfl3q", Name: "read_file", Arguments: `{"path":"README.md"}`},
			{Index: 1, ID: "call_k7wq0c1v", Name: "list_files", Arguments: `{}`},
		},
		wantOrder: []string{"text", "partial", "call", "partial", "call"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.ToolUse, Content: []agent.Block{
			{Type: "text", Text: "Let me look."},
			{Type: "toolCall", ID: "call_9x2mfl3q", Name: "read_file", Arguments: json.RawMessage(`{"path":"README.md"}`)},
			{Type: "toolCall", ID: "call_k7wq0c1v", Name: "list_files", Arguments: json.RawMessage(`{}`)},
		}},
	}, {
		name:         "DeepSeek: reasoning_content kept as a thinking block, not as text",
		body:         reasoning,
		req:          userSays("Do the tests pass?"),
		wantThinking: []string{"The user asks", " whether the tests pass.", " I should say", " what I saw."},
		wantText:     []string{"Hello", "! The", " tests pass."},
		wantOrder:    []string{"thinking", "thinking", "thinking", "thinking", "text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Stop, Usage: u(20, 61, 1280, 0), Content: []agent.Block{
			{Type: "thinking", Thinking: "The user asks whether the tests pass. I should say what I saw."},
			{Type: "text", Text: "Hello! The tests pass."},
		}},
	}, {
		name:         "Ollama and vLLM: reasoning",
		body:         strings.ReplaceAll(reasoning, `"reasoning_content"`, `"reasoning"`),
		req:          userSays("Do the tests pass?"),
		wantThinking: []string{"The user asks", " whether the tests pass.", " I should say", " what I saw."},
		wantText:     []string{"Hello", "! The", " tests pass."},
		wantOrder:    []string{"thinking", "thinking", "thinking", "thinking", "text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Stop, Usage: u(20, 61, 1280, 0), Content: []agent.Block{
			{Type: "thinking", Thinking: "The user asks whether the tests pass. I should say what I saw."},
			{Type: "text", Text: "Hello! The tests pass."},
		}},
	}, {
		name:      "length",
		body:      strings.Replace(recorded(t, "openai", "text.sse"), `"finish_reason":"stop"`, `"finish_reason":"length"`, 1),
		req:       userSays("Write a novel."),
		wantText:  []string{"Hello", "! The", " tests pass."},
		wantOrder: []string{"text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Length, Usage: u(216, 9, 1024, 0), Content: []agent.Block{
			{Type: "text", Text: "Hello! The tests pass."},
		}},
	}, {
		name:      "content_filter",
		body:      strings.Replace(recorded(t, "openai", "text.sse"), `"finish_reason":"stop"`, `"finish_reason":"content_filter"`, 1),
		req:       userSays("Something bad."),
		wantText:  []string{"Hello", "! The", " tests pass."},
		wantOrder: []string{"text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Error, Usage: u(216, 9, 1024, 0),
			ErrorMessage: "openai: the reply was stopped by the provider's content filter",
			Content:      []agent.Block{{Type: "text", Text: "Hello! The tests pass."}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := streamAndCompare(t, tt.body, func(f *fakeVendor) agent.Model { return newTestOpenAI(f, 0) }, tt.req, tt.want,
				deltas{text: tt.wantText, thinking: tt.wantThinking, calls: tt.wantCalls, partials: tt.wantPartials, order: tt.wantOrder},
				"The user asks")
			r, body := f.only(t)
			if got, want := r.Path, "/v1/chat/completions"; got != want {
				t.Errorf("path: got %q, want %q", got, want)
			}
			if got, want := r.Header.Get("Authorization"), "Bearer sk-test"; got != want {
				t.Errorf("Authorization: got %q, want %q", got, want)
			}
			if got, want := body["model"], "gpt-4o-mini"; got != want {
				t.Errorf("model: got %v, want %v", got, want)
			}
			if got, want := body["stream"], true; got != want {
				t.Errorf("stream: got %v, want %v", got, want)
			}
			jsonEqual(t, "stream_options", body["stream_options"], `{"include_usage": true}`)
		})
	}
}

// TestOpenAIRequest checks the transcript and tools as sent: tool calls with their ids, tool
// results as role "tool" messages with the text of ModelContent (structuredContent as JSON text
// when there is no text block), no details, no empty error message.
func TestOpenAIRequest(t *testing.T) {
	f := newFakeVendor(t, serveSSE(recorded(t, "openai", "text.sse")))
	if _, err := newTestOpenAI(f, 0).Stream(context.Background(), roundTrip(), func(agent.Delta) {}); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	r, body := f.only(t)
	jsonEqual(t, "messages", body["messages"], `[
		{"role": "user", "content": "Check the repo."},
		{"role": "assistant", "content": "Let me look.", "tool_calls": [
			{"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"README.md\"}"}},
			{"id": "call_2", "type": "function", "function": {"name": "run_command", "arguments": "{\"command\":\"go test ./...\"}"}}
		]},
		{"role": "tool", "tool_call_id": "call_1", "content": "# Countersign"},
		{"role": "tool", "tool_call_id": "call_2", "content": "{\"exitCode\": 1, \"stdout\": \"FAIL\"}"},
		{"role": "user", "content": "Try again."}
	]`)
	jsonEqual(t, "tools", body["tools"], `[
		{"type": "function", "function": {"name": "read_file", "description": "Reads a workspace file.",
			"parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false}}},
		{"type": "function", "function": {"name": "run_command", "description": "Runs a shell command.",
			"parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
	]`)
	if strings.Contains(string(r.Body), "UI-only") || strings.Contains(string(r.Body), "details") {
		t.Errorf("the request carries a tool result's details: %s", r.Body)
	}
}

func TestOpenAIErrors(t *testing.T) {
	text := recorded(t, "openai", "text.sse")
	tests := []struct {
		name    string
		respond http.HandlerFunc
		idle    time.Duration
		want    string // the error's start
	}{{
		name:    "429 with the provider's message",
		respond: serveError(http.StatusTooManyRequests, recorded(t, "openai", "error_429.json"), map[string]string{"Retry-After": "20"}),
		want:    "openai: 429 Too Many Requests: Rate limit reached for gpt-4o-mini in organization org-3cZ1u0 on requests per min (RPM)",
	}, {
		name:    "401",
		respond: serveError(http.StatusUnauthorized, `{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, nil),
		want:    "openai: 401 Unauthorized: Incorrect API key provided: sk-test.",
	}, {
		name:    "a proxy's 502 without JSON",
		respond: serveError(http.StatusBadGateway, "upstream connect error", nil),
		want:    "openai: 502 Bad Gateway: upstream connect error",
	}, {
		name:    "stream cut in the middle",
		respond: serveCut(text, 3),
		want:    "openai: the stream was cut before the model finished: unexpected EOF",
	}, {
		name:    "stream ended without finish_reason",
		respond: serveEnded(text, 3),
		want:    "openai: the stream ended before the model finished (no finish_reason)",
	}, {
		name: "error in the stream",
		respond: serveSSE(strings.Join(events(text)[:2], "") +
			`data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}` + "\n\n"),
		want: "openai: error in the stream: The server had an error while processing your request.",
	}, {
		name:    "silent stream",
		respond: serveStall(text, 2),
		idle:    150 * time.Millisecond,
		want:    "openai: timeout: no data from the provider for 150ms",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeVendor(t, tt.respond)
			start := time.Now()
			got, err := newTestOpenAI(f, tt.idle).Stream(context.Background(), userSays("Hi"), func(agent.Delta) {})
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error: got %v, want %q...", err, tt.want)
			}
			if !reflect.DeepEqual(got, agent.Message{}) {
				t.Errorf("message with the error: got %+v, want none", got)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v: retried or waited", d)
			}
			f.only(t) // exactly one request: no retry
		})
	}
}

func TestOpenAICancel(t *testing.T) {
	f := newFakeVendor(t, serveStall(recorded(t, "openai", "text.sse"), 2))
	ctx, cancel := context.WithCancel(context.Background())
	var d deltas
	done := make(chan error, 1)
	go func() {
		_, err := newTestOpenAI(f, 0).Stream(ctx, userSays("Hi"), func(x agent.Delta) {
			d.on(x)
			cancel() // Stop pressed after the first delta
		})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error: got %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not return after its context was cancelled")
	}
}

// TestOpenAIRetry checks that MaxRetries retries a failed request before streaming.
func TestOpenAIRetry(t *testing.T) {
	var calls atomic.Int32
	f := newFakeVendor(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			serveError(http.StatusServiceUnavailable, `{"error":{"message":"busy","type":"server_error"}}`, map[string]string{"Retry-After-Ms": "10"})(w, r)
			return
		}
		serveSSE(recorded(t, "openai", "text.sse"))(w, r)
	})
	m := NewOpenAI(OpenAIConfig{BaseURL: f.URL, Model: "gpt-4o-mini", HTTPClient: f.Client(), MaxRetries: 1})
	got, err := m.Stream(context.Background(), userSays("Hi"), func(agent.Delta) {})
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if got, want := got.Text(), "Hello! The tests pass."; got != want {
		t.Errorf("text: got %q, want %q", got, want)
	}
	if got, want := calls.Load(), int32(2); got != want {
		t.Errorf("requests: got %d, want %d", got, want)
	}
}
