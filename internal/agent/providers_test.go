package agent_test

// The agent's context budget against the real provider code (internal/models, the vendors'
// official SDKs) and a local stand-in for each vendor's API that refuses a request body too
// large for its context window, as the vendors do (issue 18, acceptance 1's last item): the run
// finishes because the agent shortened first, and the body the vendor received carries the stub.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/models"
)

// fakeVendorAPI is a vendor API on a local server: it records every request body, refuses one
// over maxBody bytes with the vendor's context-length error (400), and otherwise streams a call
// of the tool "big" for the first turns answers, then a final text.
type fakeVendorAPI struct {
	*httptest.Server
	maxBody, turns int
	mu             sync.Mutex
	bodies         []string
	refused        int
	answered       int
}

// vendorDialect is how one vendor API speaks: its path, its context-length error, and its
// streamed answers (the n-th answer, a tool call or a text), which report prompt tokens of
// input: the fake counts a token per 4 bytes of body, as a tokenizer roughly would.
type vendorDialect struct {
	path         string
	tooLong      string
	call, answer func(w io.Writer, n, prompt int)
}

func newFakeVendorAPI(t *testing.T, d vendorDialect, maxBody, turns int) *fakeVendorAPI {
	t.Helper()
	f := &fakeVendorAPI{maxBody: maxBody, turns: turns}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != d.path {
			http.Error(w, "no such path "+r.URL.Path, http.StatusNotFound)
			return
		}
		f.mu.Lock()
		f.bodies = append(f.bodies, string(body))
		tooLong := len(body) > f.maxBody
		if tooLong {
			f.refused++
		} else {
			f.answered++
		}
		n := f.answered
		f.mu.Unlock()
		if tooLong {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, d.tooLong)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if n <= f.turns {
			d.call(w, n, len(body)/4)
		} else {
			d.answer(w, n, len(body)/4)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeVendorAPI) received() (bodies []string, refused int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.bodies...), f.refused
}

// sse writes one server-sent event (event may be "": a data-only event).
func sse(w io.Writer, event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
}

// Shapes: OpenAI's "Streaming" chat.completion.chunk objects and its error object; Anthropic's
// "Streaming Messages" events and its error shape ("prompt is too long").
var (
	chatCompletions = vendorDialect{
		path:    "/v1/chat/completions",
		tooLong: `{"error":{"message":"This model's maximum context length is 2000 tokens. However, your messages resulted in 3120 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		call: func(w io.Writer, n, prompt int) {
			chunk := func(delta map[string]any, finish any) map[string]any {
				return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake-gpt",
					"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
			}
			sse(w, "", chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": fmt.Sprintf("call_%d", n),
				"type": "function", "function": map[string]any{"name": "big", "arguments": ""}}}}, nil))
			sse(w, "", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": "{}"}}}}, nil))
			sse(w, "", chunk(map[string]any{}, "tool_calls"))
			openaiUsage(w, prompt)
			io.WriteString(w, "data: [DONE]\n\n")
		},
		answer: func(w io.Writer, _, prompt int) {
			sse(w, "", map[string]any{"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1, "model": "fake-gpt",
				"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": "All read."}, "finish_reason": nil}}})
			sse(w, "", map[string]any{"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1, "model": "fake-gpt",
				"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
			openaiUsage(w, prompt)
			io.WriteString(w, "data: [DONE]\n\n")
		},
	}
	anthropicMessages = vendorDialect{
		path:    "/v1/messages",
		tooLong: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 3120 tokens > 2000 maximum"}}`,
		call: func(w io.Writer, n, prompt int) {
			anthropicStart(w, prompt)
			sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
				"content_block": map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", n), "name": "big", "input": map[string]any{}}})
			sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": "{}"}})
			sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
			anthropicStop(w, "tool_use")
		},
		answer: func(w io.Writer, _, prompt int) {
			anthropicStart(w, prompt)
			sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
				"content_block": map[string]any{"type": "text", "text": ""}})
			sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "text_delta", "text": "All read."}})
			sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
			anthropicStop(w, "end_turn")
		},
	}
)

// responsesAPI speaks OpenAI's Responses API: "Streaming events" (response.output_item.added,
// response.function_call_arguments.delta, response.output_text.delta, response.completed with
// usage) and the same context_length_exceeded error object.
var responsesAPI = vendorDialect{
	path:    "/v1/responses",
	tooLong: `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`,
	call: func(w io.Writer, n, prompt int) {
		item := map[string]any{"id": fmt.Sprintf("fc_%d", n), "type": "function_call", "status": "in_progress", "arguments": "",
			"call_id": fmt.Sprintf("call_%d", n), "name": "big"}
		responsesStart(w)
		sse(w, "response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item, "sequence_number": 2})
		sse(w, "response.function_call_arguments.delta", map[string]any{"type": "response.function_call_arguments.delta",
			"item_id": item["id"], "output_index": 0, "delta": "{}", "sequence_number": 3})
		sse(w, "response.function_call_arguments.done", map[string]any{"type": "response.function_call_arguments.done",
			"item_id": item["id"], "output_index": 0, "arguments": "{}", "sequence_number": 4})
		done := map[string]any{"id": item["id"], "type": "function_call", "status": "completed", "arguments": "{}", "call_id": item["call_id"], "name": "big"}
		sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": done, "sequence_number": 5})
		responsesCompleted(w, []any{done}, prompt)
	},
	answer: func(w io.Writer, _, prompt int) {
		responsesStart(w)
		msg := map[string]any{"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}
		sse(w, "response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": msg, "sequence_number": 2})
		part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
		sse(w, "response.content_part.added", map[string]any{"type": "response.content_part.added", "item_id": "msg_1", "output_index": 0, "content_index": 0, "part": part, "sequence_number": 3})
		sse(w, "response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "All read.", "sequence_number": 4})
		sse(w, "response.output_text.done", map[string]any{"type": "response.output_text.done", "item_id": "msg_1", "output_index": 0, "content_index": 0, "text": "All read.", "sequence_number": 5})
		done := map[string]any{"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": "All read.", "annotations": []any{}}}}
		sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": done, "sequence_number": 6})
		responsesCompleted(w, []any{done}, prompt)
	},
}

func responsesStart(w io.Writer) {
	sse(w, "response.created", map[string]any{"type": "response.created", "sequence_number": 0,
		"response": map[string]any{"id": "resp_1", "object": "response", "created_at": 1767312000, "status": "in_progress", "model": "fake-gpt", "output": []any{}}})
}

func responsesCompleted(w io.Writer, output []any, prompt int) {
	sse(w, "response.completed", map[string]any{"type": "response.completed", "sequence_number": 9,
		"response": map[string]any{"id": "resp_1", "object": "response", "created_at": 1767312000, "status": "completed", "model": "fake-gpt",
			"output": output, "usage": map[string]any{"input_tokens": prompt, "input_tokens_details": map[string]any{"cached_tokens": 0},
				"output_tokens": 5, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": prompt + 5}}})
}

func anthropicStart(w io.Writer, prompt int) {
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_1", "type": "message",
		"role": "assistant", "model": "fake-claude", "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": prompt, "output_tokens": 1}}})
}

// openaiUsage is the last chunk of a stream asked for with stream_options.include_usage: no
// choices, the usage.
func openaiUsage(w io.Writer, prompt int) {
	sse(w, "", map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake-gpt",
		"choices": []any{}, "usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}})
}

func anthropicStop(w io.Writer, reason string) {
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": reason, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 5}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

// vendors are the three provider code paths, each with its dialect.
var vendors = []struct {
	name    string
	dialect vendorDialect
	model   func(baseURL string) agent.Model
}{
	{name: "OpenAI Chat Completions", dialect: chatCompletions, model: func(u string) agent.Model {
		return models.NewOpenAI(models.OpenAIConfig{APIKey: "test", BaseURL: u + "/v1", Model: "fake-gpt"})
	}},
	{name: "OpenAI Responses", dialect: responsesAPI, model: func(u string) agent.Model {
		return models.NewResponses(models.ResponsesConfig{APIKey: "test", BaseURL: u + "/v1", Model: "fake-gpt"})
	}},
	{name: "Anthropic Messages", dialect: anthropicMessages, model: func(u string) agent.Model {
		return models.NewAnthropic(models.AnthropicConfig{APIKey: "test", BaseURL: u, Model: "fake-claude"})
	}},
}

// checkShortenedRun checks a finished run of turns calls of "big" (size-byte results) against
// the bodies its vendor received: the last one carries a stub, the first result went out whole
// once and then shortened, the newest result whole, and the store kept every result whole.
func checkShortenedRun(t *testing.T, h *harness, bodies []string, turns, size int) {
	t.Helper()
	last := bodies[len(bodies)-1]
	if !strings.Contains(last, "[result shortened for the model: 2.9 KB, see the transcript]") {
		t.Errorf("the last request carries no shortened result:\n%.2000s", last)
	}
	// The first result ("bbb…", the tool's first letter run) went out whole, then shortened.
	first := strings.Repeat("b", size)
	if !strings.Contains(bodies[1], first) || strings.Contains(last, first) {
		t.Errorf("the first result: whole in the second request %v, in the last %v; want whole, then shortened",
			strings.Contains(bodies[1], first), strings.Contains(last, first))
	}
	if newest := strings.Repeat(string(rune('a'+turns%26)), size); !strings.Contains(last, newest) {
		t.Error("the last request does not carry the newest result whole")
	}
	results := 0
	for _, e := range h.entries() {
		if e.Message.Role == agent.ToolResult {
			results++
			if len(e.Message.Result.TextOf()) != size {
				t.Errorf("stored result %s shortened in the store", e.Message.ToolCallID)
			}
		}
	}
	if results != turns {
		t.Errorf("%d results stored, want %d", results, turns)
	}
}

func TestProvidersNeverReachTheirContextLengthErrorBecauseTheAgentShortensFirst(t *testing.T) {
	const turns, size = 5, 3000 // 15,000 bytes of results; the vendor takes 9,000 bytes of body at most
	for _, v := range vendors {
		t.Run(v.name, func(t *testing.T) {
			vendor := newFakeVendorAPI(t, v.dialect, 9000, turns)
			h := newModelHarness(t, v.model(vendor.URL), agent.Config{Instructions: "Read what is asked.", ContextTokens: 2000},
				bigTool("big", size))
			if end := h.run("read it all"); end.Error != "" {
				t.Fatalf("the run ended with %q", end.Error)
			}
			bodies, refused := vendor.received()
			if refused != 0 || len(bodies) != turns+1 {
				t.Fatalf("the vendor refused %d of %d requests, want none of %d", refused, len(bodies), turns+1)
			}
			checkShortenedRun(t, h, bodies, turns, size)
		})
	}
}

// TestProvidersRefusingATooLongRequestGetItShortenedHarder: with no budget set (the model's own
// window is far larger than what this vendor takes), the vendor's context-length error reaches the
// agent through the provider as agent.ErrContextLength; the request is shortened harder and sent
// once more, the run finishes, and the later requests are fitted to what the vendor took.
func TestProvidersRefusingATooLongRequestGetItShortenedHarder(t *testing.T) {
	const turns, size = 5, 3000
	for _, v := range vendors {
		t.Run(v.name, func(t *testing.T) {
			vendor := newFakeVendorAPI(t, v.dialect, 9000, turns)
			h := newModelHarness(t, v.model(vendor.URL), agent.Config{Instructions: "Read what is asked."}, bigTool("big", size))
			if end := h.run("read it all"); end.Error != "" {
				t.Fatalf("the run ended with %q", end.Error)
			}
			bodies, refused := vendor.received()
			if refused != 1 || len(bodies) != turns+2 {
				t.Fatalf("the vendor refused %d of %d requests, want 1 of %d: one refusal, then fitted", refused, len(bodies), turns+2)
			}
			checkShortenedRun(t, h, bodies, turns, size)
		})
	}
}
