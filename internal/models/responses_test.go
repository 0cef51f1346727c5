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

func newTestResponses(f *fakeVendor, model string, idle time.Duration) *Responses {
	m := NewResponses(ResponsesConfig{
		APIKey: "sk-test", BaseURL: f.URL + "/v1", Model: model,
		HTTPClient: f.Client(), IdleTimeout: idle,
	})
	return m
}

// recordedItem is the item of the response.output_item.done event of a recorded stream whose
// item id is id, as JSON text.
func recordedItem(t *testing.T, body, id string) map[string]any {
	t.Helper()
	for _, e := range events(body) {
		_, data, ok := strings.Cut(e, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type string         `json:"type"`
			Item map[string]any `json:"item"`
		}
		if json.Unmarshal([]byte(data), &ev) == nil && ev.Type == "response.output_item.done" && ev.Item["id"] == id {
			return ev.Item
		}
	}
	t.Fatalf("no response.output_item.done for %s", id)
	return nil
}

func TestResponsesStream(t *testing.T) {
	text := recorded(t, "responses", "text.sse")
	reasoning := recorded(t, "responses", "reasoning.sse")
	rs := recordedItem(t, reasoning, "rs_0a7c6b5d4e3f2a1b0068b1c4f1a2b3c4d5e6f7a8b9c0d1e2")
	readme := agent.Block{Type: "toolCall", ID: "call_Qx1vR8pT2mLk", Name: "read_file", Arguments: json.RawMessage(`{"path":"README.md"}`)}
	gotest := agent.Block{Type: "toolCall", ID: "call_Zt2kW4nB7vQs", Name: "run_command", Arguments: json.RawMessage(`{"command":"go test ./..."}`)}
	tests := []struct {
		name         string
		model        string
		body         string
		wantText     []string
		wantThinking []string
		wantCalls    []agent.Block
		wantPartials []agent.PartialCall
		wantOrder    []string
		want         agent.Message
	}{{
		name:      "text in several deltas, with usage",
		model:     "gpt-4.1-mini",
		body:      text,
		wantText:  []string{"Hello", "! The", " tests pass."},
		wantOrder: []string{"text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Stop, Usage: u(216, 9, 1024, 0), Content: []agent.Block{
			{Type: "text", Text: "Hello! The tests pass."},
		}},
	}, {
		name:      "two parallel function calls with arguments in fragments",
		model:     "gpt-4.1",
		body:      recorded(t, "responses", "tools.sse"),
		wantCalls: []agent.Block{readme, gotest},
		wantPartials: []agent.PartialCall{
			{Index: 0, ID: "call_Qx1vR8pT2mLk", Name: "read_file", Arguments: ""},
			{Index: 0, ID: "call_Qx1vR8pT2mLk", Name: "read_file", Arguments: `{"`},
			{Index: 0, ID: "call_Qx1vR8pT2mLk", Name: "read_file", Arguments: `{"path`},
			{Index: 0, ID: "call_Qx1vR8pT2mLk", Name: "read_file", Arguments: `{"path":"`},
			{Index: 0, ID: "call_Qx1vR8pT2mLk", Name: "read_file", Arguments: `{"path":"READ`},
			{Index: 0, ID: "call_Qx1vR8pT2mLk", Name: "read_file", Arguments: `{"path":"README.md`},
			{Index: 0, ID: "call_Qx1vR8pT2mLk", Name: "read_file", Arguments: `{"path":"README.md"}`},
			{Index: 1, ID: "call_Zt2kW4nB7vQs", Name: "run_command", Arguments: ""},
			{Index: 1, ID: "call_Zt2kW4nB7vQs", Name: "run_command", Arguments: `{"`},
			{Index: 1, ID: "call_Zt2kW4nB7vQs", Name: "run_command", Arguments: `{"command`},
			{Index: 1, ID: "call_Zt2kW4nB7vQs", Name: "run_command", Arguments: `{"command":"`},
			{Index: 1, ID: "call_Zt2kW4nB7vQs", Name: "run_command", Arguments: `{"command":"go test`},
			{Index: 1, ID: "call_Zt2kW4nB7vQs", Name: "run_command", Arguments: `{"command":"go test ./...`},
			{Index: 1, ID: "call_Zt2kW4nB7vQs", Name: "run_command", Arguments: `{"command":"go test ./..."}`},
		},
		wantOrder: []string{"partial", "partial", "partial", "partial", "partial", "partial", "partial", "call",
			"partial", "partial", "partial", "partial", "partial", "partial", "partial", "call"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.ToolUse, Usage: u(2318, 52, 0, 0),
			Content: []agent.Block{readme, gotest}},
	}, {
		name:  "a reasoning item kept with its id and encrypted content, its summary as thinking",
		model: "o4-mini",
		body:  reasoning,
		wantThinking: []string{"**Checking", " the README**\n\nThe user", " asks what the project is;", " the README says.",
			"\n\n**Reading", " it first**\n\nOne", " read_file call."},
		wantCalls: []agent.Block{
			{Type: "toolCall", ID: "call_Mn8bV5cX2zLk", Name: "read_file", Arguments: json.RawMessage(`{"path":"README.md"}`)},
		},
		wantPartials: []agent.PartialCall{
			{Index: 0, ID: "call_Mn8bV5cX2zLk", Name: "read_file", Arguments: ""},
			{Index: 0, ID: "call_Mn8bV5cX2zLk", Name: "read_file", Arguments: `{"`},
			{Index: 0, ID: "call_Mn8bV5cX2zLk", Name: "read_file", Arguments: `{"path`},
			{Index: 0, ID: "call_Mn8bV5cX2zLk", Name: "read_file", Arguments: `{"path":"`},
			{Index: 0, ID: "call_Mn8bV5cX2zLk", Name: "read_file", Arguments: `{"path":"README`},
			{Index: 0, ID: "call_Mn8bV5cX2zLk", Name: "read_file", Arguments: `{"path":"README.md"}`},
		},
		wantOrder: []string{"thinking", "thinking", "thinking", "thinking", "thinking", "thinking", "thinking",
			"partial", "partial", "partial", "partial", "partial", "partial", "call"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.ToolUse, Usage: u(964, 412, 2048, 0), Content: []agent.Block{
			{Type: "thinking", ID: "rs_0a7c6b5d4e3f2a1b0068b1c4f1a2b3c4d5e6f7a8b9c0d1e2",
				Thinking:  "**Checking the README**\n\nThe user asks what the project is; the README says.\n\n**Reading it first**\n\nOne read_file call.",
				Signature: rs["encrypted_content"].(string)},
			{Type: "toolCall", ID: "call_Mn8bV5cX2zLk", Name: "read_file", Arguments: json.RawMessage(`{"path":"README.md"}`)},
		}},
	}, {
		name:  "incomplete for max_output_tokens",
		model: "gpt-4.1-mini",
		body: strings.Replace(strings.Replace(text, `"type":"response.completed","response":{`, `"type":"response.incomplete","response":{`, 1),
			`"status":"completed","background":false,"error":null,"incomplete_details":null`,
			`"status":"incomplete","background":false,"error":null,"incomplete_details":{"reason":"max_output_tokens"}`, 1),
		wantText:  []string{"Hello", "! The", " tests pass."},
		wantOrder: []string{"text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Length, Usage: u(216, 9, 1024, 0), Content: []agent.Block{
			{Type: "text", Text: "Hello! The tests pass."},
		}},
	}, {
		name:  "incomplete for content_filter",
		model: "gpt-4.1-mini",
		body: strings.Replace(strings.Replace(text, `"type":"response.completed","response":{`, `"type":"response.incomplete","response":{`, 1),
			`"status":"completed","background":false,"error":null,"incomplete_details":null`,
			`"status":"incomplete","background":false,"error":null,"incomplete_details":{"reason":"content_filter"}`, 1),
		wantText:  []string{"Hello", "! The", " tests pass."},
		wantOrder: []string{"text", "text", "text"},
		want: agent.Message{Role: agent.Assistant, StopReason: agent.Error, Usage: u(216, 9, 1024, 0),
			ErrorMessage: "openai-responses: the reply is incomplete (content_filter)",
			Content:      []agent.Block{{Type: "text", Text: "Hello! The tests pass."}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := streamAndCompare(t, tt.body, func(f *fakeVendor) agent.Model { return newTestResponses(f, tt.model, 0) }, userSays("Do the tests pass?"), tt.want,
				deltas{text: tt.wantText, thinking: tt.wantThinking, calls: tt.wantCalls, partials: tt.wantPartials, order: tt.wantOrder},
				"Checking")
			r, body := f.only(t)
			if got, want := r.Path, "/v1/responses"; got != want {
				t.Errorf("path: got %q, want %q", got, want)
			}
			if got, want := r.Header.Get("Authorization"), "Bearer sk-test"; got != want {
				t.Errorf("Authorization: got %q, want %q", got, want)
			}
			for k, want := range map[string]any{"model": tt.model, "stream": true, "store": false} {
				if got := body[k]; got != want {
					t.Errorf("%s: got %v, want %v", k, got, want)
				}
			}
			if _, ok := body["previous_response_id"]; ok {
				t.Errorf("a stateless request names a previous response: %v", body["previous_response_id"])
			}
		})
	}
}

// TestResponsesRequest checks the transcript and tools as sent: user and assistant messages,
// function_call items with their call ids, function_call_output items with the text of
// ModelContent, no details, no empty error message; tools as non-strict functions.
func TestResponsesRequest(t *testing.T) {
	f := newFakeVendor(t, serveSSE(recorded(t, "responses", "text.sse")))
	if _, err := newTestResponses(f, "gpt-4.1", 0).Stream(context.Background(), roundTrip(), func(agent.Delta) {}); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	r, body := f.only(t)
	jsonEqual(t, "input", body["input"], `[
		{"role": "user", "content": "Check the repo."},
		{"role": "assistant", "content": "Let me look."},
		{"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"README.md\"}"},
		{"type": "function_call", "call_id": "call_2", "name": "run_command", "arguments": "{\"command\":\"go test ./...\"}"},
		{"type": "function_call_output", "call_id": "call_1", "output": "# Countersign"},
		{"type": "function_call_output", "call_id": "call_2", "output": "{\"exitCode\": 1, \"stdout\": \"FAIL\"}"},
		{"role": "user", "content": "Try again."}
	]`)
	jsonEqual(t, "tools", body["tools"], `[
		{"type": "function", "name": "read_file", "description": "Reads a workspace file.", "strict": false,
			"parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false}},
		{"type": "function", "name": "run_command", "description": "Runs a shell command.", "strict": false,
			"parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
	]`)
	for _, k := range []string{"include", "reasoning"} {
		if _, ok := body[k]; ok {
			t.Errorf("%s asked of a model that does not reason: %v", k, body[k])
		}
	}
	if strings.Contains(string(r.Body), "UI-only") || strings.Contains(string(r.Body), "details") {
		t.Errorf("the request carries a tool result's details: %s", r.Body)
	}
}

func TestReasoningModel(t *testing.T) {
	for name, want := range map[string]bool{
		"o1": true, "o3": true, "o3-mini": true, "o4-mini": true, "gpt-5": true, "gpt-5-mini": true, "gpt-5.1-codex": true,
		"codex-mini-latest": true, "openai/o3": true,
		"gpt-5-chat-latest": false, "gpt-4o": false, "gpt-4.1-mini": false, "llama3.1:8b": false, "omni-moderation": false,
	} {
		if got := ReasoningModel(name); got != want {
			t.Errorf("ReasoningModel(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestResponsesReasoningSummarySetting(t *testing.T) {
	no := false
	tests := []struct {
		name string
		cfg  ResponsesConfig
		want string // reasoning and include as sent, "" for neither
	}{
		{"a reasoning model: summaries and encrypted reasoning", ResponsesConfig{Model: "o4-mini"},
			`{"include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"}}`},
		{"detailed summaries", ResponsesConfig{Model: "gpt-5", ReasoningSummary: "detailed"},
			`{"include": ["reasoning.encrypted_content"], "reasoning": {"summary": "detailed"}}`},
		{"no summaries", ResponsesConfig{Model: "gpt-5", ReasoningSummary: "none"},
			`{"include": ["reasoning.encrypted_content"]}`},
		{"reasoning turned off", ResponsesConfig{Model: "gpt-5", Reasoning: &no}, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeVendor(t, serveSSE(recorded(t, "responses", "text.sse")))
			tt.cfg.BaseURL, tt.cfg.HTTPClient = f.URL+"/v1", f.Client()
			if _, err := NewResponses(tt.cfg).Stream(context.Background(), userSays("Hi"), func(agent.Delta) {}); err != nil {
				t.Fatalf("Stream: %v", err)
			}
			_, body := f.only(t)
			got := map[string]any{}
			for _, k := range []string{"include", "reasoning"} {
				if v, ok := body[k]; ok {
					got[k] = v
				}
			}
			jsonEqual(t, "include and reasoning", got, tt.want)
		})
	}
}

func TestResponsesErrors(t *testing.T) {
	text := recorded(t, "responses", "text.sse")
	tests := []struct {
		name    string
		respond http.HandlerFunc
		idle    time.Duration
		want    string // the error's start
	}{{
		name:    "429 with the provider's message",
		respond: serveError(http.StatusTooManyRequests, recorded(t, "responses", "error_429.json"), map[string]string{"Retry-After": "20"}),
		want:    "openai-responses: 429 Too Many Requests: Rate limit reached for gpt-4.1-mini in organization org-3cZ1u0 on requests per min (RPM)",
	}, {
		name:    "an error event in the stream, as recorded",
		respond: serveSSE(recorded(t, "responses", "error.sse")),
		want:    "openai-responses: error in the stream: server_error: The server had an error processing your request.",
	}, {
		name: "an error event in the stream, as documented",
		respond: serveSSE(strings.Join(events(text)[:4], "") + "event: error\n" +
			`data: {"type":"error","code":"server_error","message":"The server had an error processing your request.","param":null,"sequence_number":4}` + "\n\n"),
		want: "openai-responses: error in the stream: server_error: The server had an error processing your request.",
	}, {
		name:    "response.failed",
		respond: serveSSE(recorded(t, "responses", "failed.sse")),
		want:    "openai-responses: error in the stream: rate_limit_exceeded: Request too large for gpt-4.1-mini in organization org-3cZ1u0 on tokens per min (TPM)",
	}, {
		name:    "stream cut in the middle",
		respond: serveCut(text, 5),
		want:    "openai-responses: the stream was cut before the model finished: unexpected EOF",
	}, {
		name:    "stream ended without response.completed",
		respond: serveEnded(text, 9),
		want:    "openai-responses: the stream ended before the model finished (no response.completed)",
	}, {
		name:    "silent stream",
		respond: serveStall(text, 3),
		idle:    150 * time.Millisecond,
		want:    "openai-responses: timeout: no data from the provider for 150ms",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeVendor(t, tt.respond)
			var d deltas
			got, err := newTestResponses(f, "gpt-4.1-mini", tt.idle).Stream(context.Background(), userSays("Hi"), d.on)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error: got %v, want %q...", err, tt.want)
			}
			if !reflect.DeepEqual(got, agent.Message{}) {
				t.Errorf("message with the error: got %+v, want none", got)
			}
			if errors.Is(err, ErrContextLength) {
				t.Errorf("%v is not a context-length error", err)
			}
			f.only(t) // exactly one request: no retry
		})
	}
}
