package models

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"countersign/internal/agent"
)

func newTestAnthropic(f *fakeVendor, idle time.Duration) *Anthropic {
	m := NewAnthropic(AnthropicConfig{
		APIKey: "sk-ant-test", BaseURL: f.URL, Model: "claude-sonnet-4-5",
		HTTPClient: f.Client(), IdleTimeout: idle,
	})
	return m
}

func TestAnthropicStream(t *testing.T) {
	text := recorded(t, "anthropic", "text.sse")
	readme := agent.Block{Type: "toolCall", ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "read_file", Arguments: json.RawMessage(`{"path":"README.md"}`)}
	gotest := agent.Block{Type: "toolCall", ID: "toolu_01Hq7vK2mN8pR4sT6wY9zB3c", Name: "run_command", Arguments: json.RawMessage(`{"command":"go test ./..."}`)}
	thinking := recorded(t, "anthropic", "thinking.sse")
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
		body:      text,
		req:       userSays("Do the tests pass?"),
		wantText:  []string{"Hello", "! The", " tests pass."},
		wantOrder: []string{"text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Stop, Usage: u(472, 12, 0, 0), Content: []agent.Block{
			{Type: "text", Text: "Hello! The tests pass."},
		}},
	}, {
		name:      "text and two parallel tool calls with arguments in fragments",
		body:      recorded(t, "anthropic", "tools.sse"),
		req:       roundTrip(),
		wantText:  []string{"I'll read the file", " and run the tests."},
		wantCalls: []agent.Block{readme, gotest},
		wantPartials: []agent.PartialCall{
			{Index: 0, ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "read_file", Arguments: ""},
			{Index: 0, ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "read_file", Arguments: `{"pa`},
			{Index: 0, ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "read_file", Arguments: `{"path": "READ`},
			{Index: 0, ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "read_file", Arguments: `{"path": "README.md"}`},
			{Index: 1, ID: "toolu_01Hq7vK2mN8pR4sT6wY9zB3c", Name: "run_command", Arguments: ""},
			{Index: 1, ID: "toolu_01Hq7vK2mN8pR4sT6wY9zB3c", Name: "run_command", Arguments: `{"command":`},
			{Index: 1, ID: "toolu_01Hq7vK2mN8pR4sT6wY9zB3c", Name: "run_command", Arguments: `{"command": "go test ./..."}`},
		},
		wantOrder: []string{"text", "text", "partial", "partial", "partial", "partial", "call", "partial", "partial", "partial", "call"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.ToolUse, Usage: u(472, 89, 0, 0), Content: []agent.Block{
			{Type: "text", Text: "I'll read the file and run the tests."}, readme, gotest,
		}},
	}, {
		name:         "thinking and redacted thinking kept with their signature and data, not as text",
		body:         thinking,
		req:          userSays("Do the tests pass?"),
		wantThinking: []string{"The user wants to know", " whether the tests pass.", " I'll read the README", " and run them."},
		wantText:     []string{"Let me look."},
		wantCalls: []agent.Block{
			{Type: "toolCall", ID: "toolu_01Rd7mQ2xV9kP4sN8wL3zT6b", Name: "read_file", Arguments: json.RawMessage(`{"path":"README.md"}`)},
		},
		wantPartials: []agent.PartialCall{
			{Index: 0, ID: "toolu_01Rd7mQ2xV9kP4sN8wL3zT6b", Name: "read_file", Arguments: ""},
			{Index: 0, ID: "toolu_01Rd7mQ2xV9kP4sN8wL3zT6b", Name: "read_file", Arguments: `{"pa`},
			{Index: 0, ID: "toolu_01Rd7mQ2xV9kP4sN8wL3zT6b", Name: "read_file", Arguments: `{"path": "README.md"}`},
		},
		wantOrder: []string{"thinking", "thinking", "thinking", "thinking", "text", "partial", "partial", "partial", "call"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.ToolUse, Usage: u(186, 143, 2304, 0), Content: []agent.Block{
			{Type: "thinking", Thinking: "The user wants to know whether the tests pass. I'll read the README and run them.",
				Signature: anthropicSignature(t, thinking)},
			{Type: "thinking", Redacted: true, Data: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB1URRtPQaBxMMeDOpNBb9FuF5GtDdMn0iD"},
			{Type: "text", Text: "Let me look."},
			{Type: "toolCall", ID: "toolu_01Rd7mQ2xV9kP4sN8wL3zT6b", Name: "read_file", Arguments: json.RawMessage(`{"path":"README.md"}`)},
		}},
	}, {
		name:      "stop_sequence",
		body:      strings.Replace(text, `"stop_reason":"end_turn"`, `"stop_reason":"stop_sequence"`, 1),
		req:       userSays("Count."),
		wantText:  []string{"Hello", "! The", " tests pass."},
		wantOrder: []string{"text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Stop, Usage: u(472, 12, 0, 0), Content: []agent.Block{
			{Type: "text", Text: "Hello! The tests pass."},
		}},
	}, {
		name:      "max_tokens",
		body:      strings.Replace(text, `"stop_reason":"end_turn"`, `"stop_reason":"max_tokens"`, 1),
		req:       userSays("Write a novel."),
		wantText:  []string{"Hello", "! The", " tests pass."},
		wantOrder: []string{"text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Length, Usage: u(472, 12, 0, 0), Content: []agent.Block{
			{Type: "text", Text: "Hello! The tests pass."},
		}},
	}, {
		name:      "refusal",
		body:      strings.Replace(text, `"stop_reason":"end_turn"`, `"stop_reason":"refusal"`, 1),
		req:       userSays("Something bad."),
		wantText:  []string{"Hello", "! The", " tests pass."},
		wantOrder: []string{"text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Error, Usage: u(472, 12, 0, 0),
			ErrorMessage: "anthropic: the model declined to answer (stop_reason refusal)",
			Content:      []agent.Block{{Type: "text", Text: "Hello! The tests pass."}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := streamAndCompare(t, tt.body, func(f *fakeVendor) agent.Model { return newTestAnthropic(f, 0) }, tt.req, tt.want,
				deltas{text: tt.wantText, thinking: tt.wantThinking, calls: tt.wantCalls, partials: tt.wantPartials, order: tt.wantOrder},
				"The user wants")
			r, body := f.only(t)
			if got, want := r.Path, "/v1/messages"; got != want {
				t.Errorf("path: got %q, want %q", got, want)
			}
			if got, want := r.Header.Get("Authorization"), "Bearer sk-ant-test"; got != want {
				t.Errorf("Authorization: got %q, want %q", got, want)
			}
			if r.Header.Get("Anthropic-Version") == "" {
				t.Error("no Anthropic-Version header")
			}
			for k, want := range map[string]any{"model": "claude-sonnet-4-5", "stream": true, "max_tokens": float64(4096)} {
				if got := body[k]; got != want {
					t.Errorf("%s: got %v, want %v", k, got, want)
				}
			}
			if _, ok := body["thinking"]; ok {
				t.Errorf("thinking asked for without a setting: %v", body["thinking"])
			}
		})
	}
}

// anthropicSignature is the signature_delta of a recorded stream.
func anthropicSignature(t *testing.T, body string) string {
	t.Helper()
	_, rest, ok := strings.Cut(body, `"signature_delta","signature":"`)
	sig, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 || sig == "" {
		t.Fatal("no signature_delta in the recorded stream")
	}
	return sig
}

// TestAnthropicRequest checks the transcript and tools as sent: tool_use blocks with their ids,
// the tool results as tool_result blocks with is_error in one user message (with the user's next
// text), structuredContent as JSON text when there is no text block, no details, no empty error
// message.
func TestAnthropicRequest(t *testing.T) {
	f := newFakeVendor(t, serveSSE(recorded(t, "anthropic", "text.sse")))
	if _, err := newTestAnthropic(f, 0).Stream(context.Background(), roundTrip(), func(agent.Delta) {}); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	r, body := f.only(t)
	jsonEqual(t, "messages", body["messages"], `[
		{"role": "user", "content": [{"type": "text", "text": "Check the repo."}]},
		{"role": "assistant", "content": [
			{"type": "text", "text": "Let me look."},
			{"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "README.md"}},
			{"type": "tool_use", "id": "call_2", "name": "run_command", "input": {"command": "go test ./..."}}
		]},
		{"role": "user", "content": [
			{"type": "tool_result", "tool_use_id": "call_1", "is_error": false,
				"content": [{"type": "text", "text": "# Countersign"}]},
			{"type": "tool_result", "tool_use_id": "call_2", "is_error": true,
				"content": [{"type": "text", "text": "{\"exitCode\": 1, \"stdout\": \"FAIL\"}"}]},
			{"type": "text", "text": "Try again."}
		]}
	]`)
	jsonEqual(t, "tools", body["tools"], `[
		{"name": "read_file", "description": "Reads a workspace file.", "input_schema": {
			"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false}},
		{"name": "run_command", "description": "Runs a shell command.", "input_schema": {
			"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
	]`)
	if strings.Contains(string(r.Body), "UI-only") || strings.Contains(string(r.Body), "details") {
		t.Errorf("the request carries a tool result's details: %s", r.Body)
	}
}

func TestAnthropicErrors(t *testing.T) {
	text := recorded(t, "anthropic", "text.sse")
	tests := []struct {
		name    string
		respond http.HandlerFunc
		idle    time.Duration
		want    string // the error's start
	}{{
		name: "429 with the provider's message",
		respond: serveError(http.StatusTooManyRequests, recorded(t, "anthropic", "error_429.json"),
			map[string]string{"Retry-After": "12", "Request-Id": "req_011CUz8dJ1e2Q3vW4x5Y6z7A"}),
		want: "anthropic: 429 Too Many Requests: This request would exceed the rate limit for your organization",
	}, {
		name: "529 overloaded",
		respond: serveError(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CV"}`,
			map[string]string{"X-Should-Retry": "false"}),
		want: "anthropic: 529: Overloaded",
	}, {
		name:    "a proxy's 502 without JSON",
		respond: serveError(http.StatusBadGateway, "upstream connect error", nil),
		want:    "anthropic: 502 Bad Gateway: upstream connect error",
	}, {
		name:    "stream cut in the middle",
		respond: serveCut(text, 4),
		want:    "anthropic: the stream was cut before the model finished: unexpected EOF",
	}, {
		name:    "stream ended without message_stop",
		respond: serveEnded(text, 8),
		want:    "anthropic: the stream ended before the model finished (no message_stop)",
	}, {
		name:    "error event in the stream",
		respond: serveSSE(recorded(t, "anthropic", "overloaded.sse")),
		want:    "anthropic: error in the stream: overloaded_error: Overloaded",
	}, {
		name:    "silent stream",
		respond: serveStall(text, 3),
		idle:    150 * time.Millisecond,
		want:    "anthropic: timeout: no data from the provider for 150ms",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeVendor(t, tt.respond)
			start := time.Now()
			got, err := newTestAnthropic(f, tt.idle).Stream(context.Background(), userSays("Hi"), func(agent.Delta) {})
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

func TestAnthropicCancel(t *testing.T) {
	f := newFakeVendor(t, serveStall(recorded(t, "anthropic", "text.sse"), 4))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := newTestAnthropic(f, 0).Stream(ctx, userSays("Hi"), func(agent.Delta) {
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

// ANTHROPIC_BASE_URL is the API root without /v1: the SDK appends v1/messages to it, keeping a
// path prefix (a proxy's), with or without a trailing slash. A base URL that ends in /v1 asks
// for /v1/v1/messages (the README says so).
func TestAnthropicBaseURLIsTheRootWithoutV1(t *testing.T) {
	for base, want := range map[string]string{
		"":          "/v1/messages",
		"/":         "/v1/messages",
		"/proxy":    "/proxy/v1/messages",
		"/proxy/":   "/proxy/v1/messages",
		"/proxy/v1": "/proxy/v1/v1/messages",
	} {
		t.Run(base, func(t *testing.T) {
			f := newFakeVendor(t, serveSSE(recorded(t, "anthropic", "text.sse")))
			m := NewAnthropic(AnthropicConfig{APIKey: "sk-ant-test", BaseURL: f.URL + base, Model: "claude-sonnet-4-5", HTTPClient: f.Client()})
			if _, err := m.Stream(context.Background(), userSays("Hi."), func(agent.Delta) {}); err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if r, _ := f.only(t); r.Path != want {
				t.Errorf("base %q: the SDK asked for %q, want %q", f.URL+base, r.Path, want)
			}
		})
	}
}
