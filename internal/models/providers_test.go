package models

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/tool"
)

// vendorKit is one of the three vendor APIs as the tests drive it: its recorded streams'
// folder and files, its path, and a model of it talking to a fake vendor.
type vendorKit struct {
	name      string
	dir       string // testdata/<dir>
	path      string // the API's path as the fake vendor sees it
	midStream string // a recorded stream that fails after it started
	midError  string // the start of the error that stream ends with
	model     func(f *fakeVendor, retries int) agent.Model
}

func vendorKits() []vendorKit {
	return []vendorKit{{
		name: "Chat Completions", dir: "openai", path: "/v1/chat/completions",
		midStream: "error_midstream.sse",
		midError:  "openai: error in the stream: The server had an error while processing your request. Sorry about that!",
		model: func(f *fakeVendor, retries int) agent.Model {
			m := NewOpenAI(OpenAIConfig{APIKey: "sk-test", BaseURL: f.URL + "/v1", Model: "gpt-4o-mini", HTTPClient: f.Client(), MaxRetries: retries})
			return m
		},
	}, {
		name: "Responses", dir: "responses", path: "/v1/responses",
		midStream: "error.sse",
		midError: "openai-responses: error in the stream: server_error: The server had an error processing your request. Sorry about that! " +
			"You can retry your request, or contact us through our help center at help.openai.com if you keep seeing this error.",
		model: func(f *fakeVendor, retries int) agent.Model {
			m := NewResponses(ResponsesConfig{APIKey: "sk-test", BaseURL: f.URL + "/v1", Model: "gpt-4.1-mini", HTTPClient: f.Client(), MaxRetries: retries})
			return m
		},
	}, {
		name: "Anthropic Messages", dir: "anthropic", path: "/v1/messages",
		midStream: "overloaded.sse",
		midError:  "anthropic: error in the stream: overloaded_error: Overloaded",
		model: func(f *fakeVendor, retries int) agent.Model {
			m := NewAnthropic(AnthropicConfig{APIKey: "sk-ant-test", BaseURL: f.URL, Model: "claude-sonnet-4-5", HTTPClient: f.Client(), MaxRetries: retries})
			return m
		},
	}}
}

const instructions = "You work in the folder /srv/ws. Risky tool calls wait for a person, who may deny them with a reason: continue from a denial, do not retry it."

// systemOf is the system prompt a request body carries, in its API's field.
func systemOf(t *testing.T, kit vendorKit, body map[string]any) (any, bool) {
	t.Helper()
	switch kit.dir {
	case "openai":
		msgs, _ := body["messages"].([]any)
		if len(msgs) == 0 {
			return nil, false
		}
		if first, _ := msgs[0].(map[string]any); first["role"] == "system" {
			return first, true
		}
		return nil, false
	case "responses":
		v, ok := body["instructions"]
		return v, ok
	default:
		v, ok := body["system"]
		return v, ok
	}
}

func TestVendorModelsSendTheInstructionsAsTheSystemPrompt(t *testing.T) {
	want := map[string]string{
		"openai":    `{"role": "system", "content": "` + instructions + `"}`,
		"responses": `"` + instructions + `"`,
		"anthropic": `[{"type": "text", "text": "` + instructions + `"}]`,
	}
	for _, kit := range vendorKits() {
		t.Run(kit.name, func(t *testing.T) {
			for _, system := range []string{instructions, " \n"} {
				f := newFakeVendor(t, serveSSE(recorded(t, kit.dir, "text.sse")))
				req := userSays("Do the tests pass?")
				req.System = system
				if _, err := kit.model(f, 0).Stream(context.Background(), req, func(agent.Delta) {}); err != nil {
					t.Fatalf("Stream: %v", err)
				}
				_, body := f.only(t)
				got, ok := systemOf(t, kit, body)
				if system != instructions {
					if ok {
						t.Errorf("blank instructions sent as %v", got)
					}
					continue
				}
				if !ok {
					t.Fatalf("no system prompt in %v", body)
				}
				jsonEqual(t, "system prompt", got, want[kit.dir])
			}
		})
	}
}

// serveFirst answers the first request with first and every later one with then; it records
// when each request arrived.
type serveFirst struct {
	first, then http.HandlerFunc
	mu          sync.Mutex
	arrived     []time.Time
}

func (s *serveFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.arrived = append(s.arrived, time.Now())
	n := len(s.arrived)
	s.mu.Unlock()
	if n == 1 {
		s.first(w, r)
		return
	}
	s.then(w, r)
}

func TestVendorModelsRetryAfterTheWaitTheyAnnounce(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header map[string]string
		wait   func(time.Duration) bool // the announced wait is right
	}{
		{"429 with Retry-After", http.StatusTooManyRequests, map[string]string{"Retry-After": "1"},
			func(d time.Duration) bool { return d == time.Second }},
		// Without Retry-After the wait is a backoff with random jitter: the SDK must wait the
		// one announced, not a jitter of its own.
		{"503 without Retry-After", http.StatusServiceUnavailable, nil,
			func(d time.Duration) bool { return d >= 375*time.Millisecond && d <= 500*time.Millisecond }},
	}
	for _, kit := range vendorKits() {
		for _, tt := range tests {
			t.Run(kit.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				limited := recorded(t, kit.dir, "error_429.json")
				srv := &serveFirst{
					first: serveError(tt.status, limited, tt.header),
					then:  serveSSE(recorded(t, kit.dir, "text.sse")),
				}
				f := newFakeVendor(t, srv.ServeHTTP)
				var d deltas
				got, err := kit.model(f, 2).Stream(context.Background(), userSays("Hi"), d.on)
				if err != nil {
					t.Fatalf("Stream: %v", err)
				}
				if got, want := got.Text(), "Hello! The tests pass."; got != want {
					t.Errorf("text: got %q, want %q", got, want)
				}
				var e struct {
					Error struct{ Message string } `json:"error"`
				}
				if err := json.Unmarshal([]byte(limited), &e); err != nil || e.Error.Message == "" {
					t.Fatalf("the recorded 429 has no message: %v", err)
				}
				if len(d.retries) != 1 {
					t.Fatalf("retry deltas: got %+v, want exactly one", d.retries)
				}
				r := d.retries[0]
				if r.Attempt != 1 || r.Status != tt.status || r.Reason != e.Error.Message || !tt.wait(r.Wait) {
					t.Errorf("retry: got %+v, want attempt 1, status %d, the provider's message %q and the right wait", r, tt.status, e.Error.Message)
				}
				if len(d.order) == 0 || d.order[0] != "retry" {
					t.Errorf("delta order %q: the retry is not announced first", d.order)
				}
				bodies := f.all(t)
				if len(bodies) != 2 {
					t.Fatalf("requests: got %d, want 2", len(bodies))
				}
				if !reflect.DeepEqual(bodies[0], bodies[1]) {
					t.Errorf("the retry sent another body:\n%v\n%v", bodies[0], bodies[1])
				}
				srv.mu.Lock()
				gap := srv.arrived[1].Sub(srv.arrived[0])
				srv.mu.Unlock()
				if gap < r.Wait {
					t.Errorf("the retry came %v after the first request, before the announced wait of %v", gap, r.Wait)
				}
			})
		}
	}
}

func TestVendorModelsRetryAnUnreachableServerAfterTheBackoff(t *testing.T) {
	for _, kit := range vendorKits() {
		t.Run(kit.name, func(t *testing.T) {
			t.Parallel()
			srv := &serveFirst{
				first: func(w http.ResponseWriter, r *http.Request) {
					conn, _, err := http.NewResponseController(w).Hijack()
					if err != nil {
						panic(err)
					}
					conn.Close() // no response at all
				},
				then: serveSSE(recorded(t, kit.dir, "text.sse")),
			}
			f := newFakeVendor(t, srv.ServeHTTP)
			var d deltas
			got, err := kit.model(f, 1).Stream(context.Background(), userSays("Hi"), d.on)
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if got.Text() != "Hello! The tests pass." {
				t.Errorf("text: got %q", got.Text())
			}
			if len(d.retries) != 1 {
				t.Fatalf("retry deltas: got %+v, want one", d.retries)
			}
			r := d.retries[0]
			if r.Attempt != 1 || r.Status != 0 || r.Wait != 500*time.Millisecond || !strings.Contains(r.Reason, "EOF") {
				t.Errorf("retry: got %+v, want attempt 1, no status, wait 500ms (the backoff's bound), the connection error", r)
			}
		})
	}
}

func TestVendorModelsDoNotWaitForALongRetryAfter(t *testing.T) {
	for _, kit := range vendorKits() {
		t.Run(kit.name, func(t *testing.T) {
			limited := recorded(t, kit.dir, "error_429.json")
			f := newFakeVendor(t, serveError(http.StatusTooManyRequests, limited, map[string]string{"Retry-After": "3600"}))
			var d deltas
			_, err := kit.model(f, 2).Stream(context.Background(), userSays("Hi"), d.on)
			if err == nil || !strings.Contains(err.Error(), "429 Too Many Requests: ") {
				t.Fatalf("error: got %v, want the provider's 429", err)
			}
			if len(d.retries) != 0 {
				t.Errorf("retry deltas: got %+v, want none", d.retries)
			}
			f.only(t)
		})
	}
}

func TestVendorModelsStopDuringARetryWaitReturnsAtOnce(t *testing.T) {
	for _, kit := range vendorKits() {
		t.Run(kit.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeVendor(t, serveError(http.StatusServiceUnavailable, recorded(t, kit.dir, "error_429.json"),
				map[string]string{"Retry-After": "120"}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			retrying := make(chan agent.Retry, 1)
			done := make(chan error, 1)
			go func() {
				_, err := kit.model(f, 2).Stream(ctx, userSays("Hi"), func(d agent.Delta) {
					if d.Retry != nil {
						retrying <- *d.Retry
					}
				})
				done <- err
			}()
			select {
			case r := <-retrying:
				if r.Wait != 120*time.Second || r.Status != http.StatusServiceUnavailable {
					t.Errorf("retry: got %+v, want status 503 and a wait of 2m", r)
				}
			case err := <-done:
				t.Fatalf("Stream returned %v without announcing a retry", err)
			}
			cancel() // Stop, while the SDK waits two minutes
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("error: got %v, want context.Canceled", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Stream did not return when it was stopped during the retry wait")
			}
			f.only(t)
		})
	}
}

func TestVendorModelsSayWhenTheRequestDoesNotFitTheContextWindow(t *testing.T) {
	for _, kit := range vendorKits() {
		t.Run(kit.name, func(t *testing.T) {
			body := recorded(t, kit.dir, "error_context_length.json")
			f := newFakeVendor(t, serveError(http.StatusBadRequest, body, nil))
			got, err := kit.model(f, 2).Stream(context.Background(), userSays("Hi"), func(agent.Delta) {})
			if !errors.Is(err, ErrContextLength) {
				t.Fatalf("error %v: not ErrContextLength", err)
			}
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			if json.Unmarshal([]byte(body), &e) != nil || !strings.HasSuffix(err.Error(), "400 Bad Request: "+e.Error.Message) {
				t.Errorf("error %q: want the provider's message %q", err, e.Error.Message)
			}
			if !reflect.DeepEqual(got, agent.Message{}) {
				t.Errorf("message with the error: %+v", got)
			}
			f.only(t) // a 400 is not retried
		})
	}
	t.Run("Responses, in the stream", func(t *testing.T) {
		f := newFakeVendor(t, serveSSE(strings.Replace(recorded(t, "responses", "failed.sse"),
			`"code":"rate_limit_exceeded","message":"Request too large for gpt-4.1-mini in organization org-3cZ1u0 on tokens per min (TPM): Limit 30000, Requested 35364."`,
			`"code":"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust your input and try again."`, 1)))
		_, err := vendorKits()[1].model(f, 0).Stream(context.Background(), userSays("Hi"), func(agent.Delta) {})
		if !errors.Is(err, ErrContextLength) || !strings.Contains(err.Error(), "Your input exceeds the context window") {
			t.Errorf("error %v: want ErrContextLength with the provider's message", err)
		}
	})
}

func TestVendorModelsEndOnAnErrorMidStreamWithoutAMessage(t *testing.T) {
	for _, kit := range vendorKits() {
		t.Run(kit.name, func(t *testing.T) {
			f := newFakeVendor(t, serveSSE(recorded(t, kit.dir, kit.midStream)))
			var d deltas
			got, err := kit.model(f, 2).Stream(context.Background(), userSays("Hi"), d.on)
			if err == nil || err.Error() != kit.midError {
				t.Fatalf("error: got %v, want %q", err, kit.midError)
			}
			if !reflect.DeepEqual(got, agent.Message{}) {
				t.Errorf("a half-written message with the error: %+v", got)
			}
			if !reflect.DeepEqual(d.text, []string{"Hello"}) {
				t.Errorf("text deltas: got %q, want the one before the error", d.text)
			}
			if errors.Is(err, ErrContextLength) {
				t.Errorf("%v is not a context-length error", err)
			}
			f.only(t) // an error after the stream began is not retried
		})
	}
}

// nextTurn is the transcript after msg: the user's question, msg, and a result for each of its
// calls.
func nextTurn(msg agent.Message) agent.Request {
	req := userSays("Do the tests pass?")
	req.Messages = append(req.Messages, msg)
	for _, c := range msg.ToolCalls() {
		res := tool.Result{Content: []tool.Content{tool.Text("# Countersign")}}
		req.Messages = append(req.Messages, agent.Message{Role: agent.ToolResult, ToolCallID: c.ID, ToolName: c.Name, Result: &res})
	}
	return req
}

// foreignThinking are thinking blocks another API made: a Chat Completions server's reasoning
// (no signature), an Anthropic thinking block (a signature, no id) and a Responses reasoning
// item (an rs_ id and encrypted content).
var foreignThinking = map[string]agent.Block{
	"openai":    {Type: "thinking", Thinking: "Chat reasoning."},
	"anthropic": {Type: "thinking", Thinking: "Claude thinking.", Signature: "EqQBCgIYAhIM"},
	"responses": {Type: "thinking", ID: "rs_68b1", Thinking: "Summary.", Signature: "gAAAAABo"},
}

// withForeign puts the thinking blocks of the other APIs first in msg's content.
func withForeign(msg agent.Message, own string) agent.Message {
	var content []agent.Block
	for _, k := range []string{"openai", "anthropic", "responses"} {
		if k != own {
			content = append(content, foreignThinking[k])
		}
	}
	msg.Content = append(content, msg.Content...)
	return msg
}

// TestAnthropicSendsThinkingBack checks that the thinking and redacted_thinking blocks of an
// assistant turn with tool_use go back unchanged and before the tool_use, as the Messages API
// requires; other APIs' thinking blocks are not sent.
func TestAnthropicSendsThinkingBack(t *testing.T) {
	thinking := recorded(t, "anthropic", "thinking.sse")
	f := newFakeVendor(t, serveSSE(thinking))
	m := newTestAnthropic(f, 0)
	first, err := m.Stream(context.Background(), userSays("Do the tests pass?"), func(agent.Delta) {})
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if _, err := m.Stream(context.Background(), nextTurn(withForeign(first, "anthropic")), func(agent.Delta) {}); err != nil {
		t.Fatalf("second Stream: %v", err)
	}
	bodies := f.all(t)
	if len(bodies) != 2 {
		t.Fatalf("requests: got %d, want 2", len(bodies))
	}
	sig, _ := json.Marshal(anthropicSignature(t, thinking))
	jsonEqual(t, "the second request's messages", bodies[1]["messages"], `[
		{"role": "user", "content": [{"type": "text", "text": "Do the tests pass?"}]},
		{"role": "assistant", "content": [
			{"type": "thinking", "thinking": "The user wants to know whether the tests pass. I'll read the README and run them.",
				"signature": `+string(sig)+`},
			{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB1URRtPQaBxMMeDOpNBb9FuF5GtDdMn0iD"},
			{"type": "text", "text": "Let me look."},
			{"type": "tool_use", "id": "toolu_01Rd7mQ2xV9kP4sN8wL3zT6b", "name": "read_file", "input": {"path": "README.md"}}
		]},
		{"role": "user", "content": [
			{"type": "tool_result", "tool_use_id": "toolu_01Rd7mQ2xV9kP4sN8wL3zT6b", "is_error": false,
				"content": [{"type": "text", "text": "# Countersign"}]}
		]}
	]`)
}

// TestAnthropicAsksForThinking checks the thinking settings as sent: a budget (max_tokens
// raised above it) or adaptive.
func TestAnthropicAsksForThinking(t *testing.T) {
	tests := []struct {
		name     string
		thinking AnthropicThinking
		want     string
	}{
		{"budget", AnthropicThinking{Budget: 8000}, `{"max_tokens": 12096, "thinking": {"type": "enabled", "budget_tokens": 8000}}`},
		{"budget under the minimum", AnthropicThinking{Budget: 10}, `{"max_tokens": 5120, "thinking": {"type": "enabled", "budget_tokens": 1024}}`},
		{"adaptive", AnthropicThinking{Adaptive: true}, `{"max_tokens": 4096, "thinking": {"type": "adaptive"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeVendor(t, serveSSE(recorded(t, "anthropic", "text.sse")))
			m := NewAnthropic(AnthropicConfig{BaseURL: f.URL, Model: "claude-sonnet-4-5", HTTPClient: f.Client(), Thinking: tt.thinking})
			if _, err := m.Stream(context.Background(), userSays("Hi"), func(agent.Delta) {}); err != nil {
				t.Fatalf("Stream: %v", err)
			}
			_, body := f.only(t)
			jsonEqual(t, "max_tokens and thinking", map[string]any{"max_tokens": body["max_tokens"], "thinking": body["thinking"]}, tt.want)
		})
	}
}

// TestResponsesSendsReasoningBack checks that a reasoning item goes back whole (id, summary,
// encrypted_content) before its function call, so a stateless request (store false) keeps the
// model's reasoning across turns; other APIs' thinking blocks are not sent.
func TestResponsesSendsReasoningBack(t *testing.T) {
	reasoning := recorded(t, "responses", "reasoning.sse")
	rs := recordedItem(t, reasoning, "rs_0a7c6b5d4e3f2a1b0068b1c4f1a2b3c4d5e6f7a8b9c0d1e2")
	f := newFakeVendor(t, serveSSE(reasoning))
	m := newTestResponses(f, "o4-mini", 0)
	first, err := m.Stream(context.Background(), userSays("Do the tests pass?"), func(agent.Delta) {})
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if _, err := m.Stream(context.Background(), nextTurn(withForeign(first, "responses")), func(agent.Delta) {}); err != nil {
		t.Fatalf("second Stream: %v", err)
	}
	bodies := f.all(t)
	if len(bodies) != 2 {
		t.Fatalf("requests: got %d, want 2", len(bodies))
	}
	enc, _ := json.Marshal(rs["encrypted_content"])
	jsonEqual(t, "the second request's input", bodies[1]["input"], `[
		{"role": "user", "content": "Do the tests pass?"},
		{"type": "reasoning", "id": "rs_0a7c6b5d4e3f2a1b0068b1c4f1a2b3c4d5e6f7a8b9c0d1e2", "encrypted_content": `+string(enc)+`,
			"summary": [{"type": "summary_text", "text": "**Checking the README**\n\nThe user asks what the project is; the README says.\n\n**Reading it first**\n\nOne read_file call."}]},
		{"type": "function_call", "call_id": "call_Mn8bV5cX2zLk", "name": "read_file", "arguments": "{\"path\":\"README.md\"}"},
		{"type": "function_call_output", "call_id": "call_Mn8bV5cX2zLk", "output": "# Countersign"}
	]`)
	for i, body := range bodies {
		jsonEqual(t, "include", body["include"], `["reasoning.encrypted_content"]`)
		if body["store"] != false {
			t.Errorf("request %d: store %v, want false", i+1, body["store"])
		}
	}
}

// TestOpenAIDoesNotSendReasoningBack: Chat Completions has no field for a reasoning text
// (DeepSeek refuses reasoning_content in input), so a thinking block stays out of the request.
func TestOpenAIDoesNotSendReasoningBack(t *testing.T) {
	f := newFakeVendor(t, serveSSE(recorded(t, "openai", "reasoning.sse")))
	m := newTestOpenAI(f, 0)
	first, err := m.Stream(context.Background(), userSays("Do the tests pass?"), func(agent.Delta) {})
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	req := nextTurn(withForeign(first, "openai"))
	req.Messages = append(req.Messages, agent.Message{Role: agent.User, Content: []agent.Block{{Type: "text", Text: "Thanks."}}})
	if _, err := m.Stream(context.Background(), req, func(agent.Delta) {}); err != nil {
		t.Fatalf("second Stream: %v", err)
	}
	bodies := f.all(t)
	if len(bodies) != 2 {
		t.Fatalf("requests: got %d, want 2", len(bodies))
	}
	jsonEqual(t, "the second request's messages", bodies[1]["messages"], `[
		{"role": "user", "content": "Do the tests pass?"},
		{"role": "assistant", "content": "Hello! The tests pass."},
		{"role": "user", "content": "Thanks."}
	]`)
}

func TestVendorModelsContextWindow(t *testing.T) {
	tests := []struct {
		name  string
		model agent.ContextWindow
		want  int
	}{
		{"gpt-4o-mini", NewOpenAI(OpenAIConfig{Model: "gpt-4o-mini"}), 128_000},
		{"gpt-4.1 by Responses", NewResponses(ResponsesConfig{Model: "gpt-4.1-2025-04-14"}), 1_047_576},
		{"gpt-5-mini: its input share", NewResponses(ResponsesConfig{Model: "gpt-5-mini"}), 272_000},
		{"gpt-5-chat-latest", NewOpenAI(OpenAIConfig{Model: "gpt-5-chat-latest"}), 128_000},
		{"o4-mini", NewResponses(ResponsesConfig{Model: "o4-mini"}), 200_000},
		{"a local model", NewOpenAI(OpenAIConfig{Model: "llama3.1:8b"}), DefaultContextWindow},
		{"a configured window", NewOpenAI(OpenAIConfig{Model: "llama3.1:8b", ContextWindow: 131_072}), 131_072},
		{"claude-sonnet-4-5: the window less max_tokens", NewAnthropic(AnthropicConfig{Model: "claude-sonnet-4-5"}), 200_000 - 4096},
		{"claude with a thinking budget", NewAnthropic(AnthropicConfig{Model: "claude-opus-4-1", Thinking: AnthropicThinking{Budget: 16_000}}), 200_000 - 20_096},
		{"claude with a configured window", NewAnthropic(AnthropicConfig{Model: "claude-opus-4-1", ContextWindow: 50_000}), 50_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.model.ContextWindow(); got != tt.want {
				t.Errorf("ContextWindow: got %d, want %d", got, tt.want)
			}
		})
	}
}

// TestPartialsReportEveryFragment: every fragment that adds to a call's arguments is reported
// with the whole text so far (the agent throttles what it publishes); a fragment that adds
// nothing is not. The last fragment before a pause is not held back: a card shows all that came.
func TestPartialsReportEveryFragment(t *testing.T) {
	var got []agent.PartialCall
	p := newPartials(func(d agent.Delta) { got = append(got, *d.Partial) })
	steps := []struct {
		index int
		args  string
	}{
		{0, ""},             // call 0 starts
		{0, `{"pa`},         //
		{0, `{"pa`},         // an empty fragment: nothing new
		{0, `{"path":`},     //
		{1, ""},             // call 1 starts
		{0, `{"path":"a"}`}, // the last fragment of call 0 before a pause
	}
	for _, s := range steps {
		p.update(s.index, "c", "read_file", s.args)
	}
	want := []agent.PartialCall{
		{Index: 0, ID: "c", Name: "read_file", Arguments: ""},
		{Index: 0, ID: "c", Name: "read_file", Arguments: `{"pa`},
		{Index: 0, ID: "c", Name: "read_file", Arguments: `{"path":`},
		{Index: 1, ID: "c", Name: "read_file", Arguments: ""},
		{Index: 0, ID: "c", Name: "read_file", Arguments: `{"path":"a"}`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("partials:\ngot  %+v\nwant %+v", got, want)
	}
}

// TestVendorStreamsReportTheWholeArgumentsBeforeTheCall streams a recorded pair of tool calls: each
// call's start is reported, its last Partial holds its whole arguments (nothing held back), and
// the complete call follows.
func TestVendorStreamsReportTheWholeArgumentsBeforeTheCall(t *testing.T) {
	f := newFakeVendor(t, serveSSE(recorded(t, "anthropic", "tools.sse")))
	m := NewAnthropic(AnthropicConfig{BaseURL: f.URL, Model: "claude-sonnet-4-5", HTTPClient: f.Client()})
	var d deltas
	if _, err := m.Stream(context.Background(), userSays("Hi"), d.on); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if len(d.calls) != 2 {
		t.Fatalf("calls %d, want 2", len(d.calls))
	}
	last := map[int]agent.PartialCall{}
	starts := 0
	for _, p := range d.partials {
		if p.Arguments == "" {
			starts++
		}
		last[p.Index] = p
	}
	if starts != 2 {
		t.Errorf("%d call starts reported, want 2: %+v", starts, d.partials)
	}
	for i, c := range d.calls {
		var got, want any
		if err := json.Unmarshal([]byte(last[i].Arguments), &got); err != nil {
			t.Errorf("call %d: last partial %q is not the whole arguments: %v", i, last[i].Arguments, err)
			continue
		}
		_ = json.Unmarshal(c.Arguments, &want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("call %d: last partial %s, call %s", i, last[i].Arguments, c.Arguments)
		}
	}
}

// TestRetryWait checks which responses are retried and after how long.
func TestRetryWait(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		header  map[string]string
		attempt int
		want    time.Duration // -1: not retried; 0 with backoff: the jittered backoff
		backoff bool
	}{
		{"429 with Retry-After seconds", 429, map[string]string{"Retry-After": "2"}, 0, 2 * time.Second, false},
		{"429 with Retry-After-Ms first", 429, map[string]string{"Retry-After-Ms": "1500", "Retry-After": "9"}, 0, 1500 * time.Millisecond, false},
		{"fractional seconds", 503, map[string]string{"Retry-After": "0.25"}, 0, 250 * time.Millisecond, false},
		{"an HTTP date in the past", 503, map[string]string{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0, 0, false},
		{"negative", 429, map[string]string{"Retry-After": "-3"}, 0, 0, false},
		{"the longest wait", 429, map[string]string{"Retry-After": "120"}, 0, 2 * time.Minute, false},
		{"a longer wait is not waited for", 429, map[string]string{"Retry-After": "121"}, 0, -1, false},
		{"529 overloaded, backoff", 529, nil, 0, 0, true},
		{"500, second retry's backoff", 500, nil, 1, 0, true},
		{"408", 408, nil, 0, 0, true},
		{"409", 409, nil, 0, 0, true},
		{"400 is not retried", 400, nil, 0, -1, false},
		{"401 is not retried", 401, nil, 0, -1, false},
		{"x-should-retry false wins", 503, map[string]string{"X-Should-Retry": "false", "Retry-After": "1"}, 0, -1, false},
		{"x-should-retry true wins", 400, map[string]string{"X-Should-Retry": "true", "Retry-After": "1"}, 0, time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &http.Response{StatusCode: tt.status, Header: http.Header{}}
			for k, v := range tt.header {
				res.Header.Set(k, v)
			}
			got, ok := retryWait(res, tt.attempt)
			switch {
			case tt.want < 0:
				if ok {
					t.Errorf("retried after %v, want no retry", got)
				}
			case tt.backoff:
				top := nominalBackoff(tt.attempt)
				if !ok || got < top*3/4 || got > top || got%time.Millisecond != 0 {
					t.Errorf("got %v, %v; want a whole number of ms in [%v, %v]", got, ok, top*3/4, top)
				}
			default:
				if !ok || got != tt.want {
					t.Errorf("got %v, %v; want %v", got, ok, tt.want)
				}
			}
		})
	}
	for attempt, want := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second} {
		if got := nominalBackoff(attempt); got != want {
			t.Errorf("nominalBackoff(%d) = %v, want %v", attempt, got, want)
		}
	}
}

// TestRetryNoticeTellsTheSDKItsWait checks what the middleware leaves in a retried response for
// the SDK: x-should-retry and the wait in Retry-After-Ms, the body still readable.
func TestRetryNoticeTellsTheSDKItsWait(t *testing.T) {
	body := `{"error":{"message":"Rate limit reached","type":"requests"}}`
	var calls atomic.Int32
	next := func(*http.Request) (*http.Response, error) {
		calls.Add(1)
		res := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"3"}}, Body: ioNopCloser(body)}
		return res, nil
	}
	var got []agent.Retry
	n := &retryNotice{maxRetries: 1, onDelta: func(d agent.Delta) { got = append(got, *d.Retry) }}
	req, _ := http.NewRequest(http.MethodPost, "http://vendor.invalid/v1", nil)
	res, err := n.middleware(req, next)
	if err != nil {
		t.Fatal(err)
	}
	if res.Header.Get("Retry-After-Ms") != "3000" || res.Header.Get("X-Should-Retry") != "true" {
		t.Errorf("headers for the SDK: %v", res.Header)
	}
	if b := readAll(t, res); b != body {
		t.Errorf("body after the middleware read it: %q", b)
	}
	if want := []agent.Retry{{Attempt: 1, Status: 429, Wait: 3 * time.Second, Reason: "Rate limit reached"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("retries: got %+v, want %+v", got, want)
	}
	// The last attempt is not announced: the SDK gives up.
	res, _ = n.middleware(req, next)
	if len(got) != 1 || res.Header.Get("Retry-After-Ms") != "" {
		t.Errorf("the attempt after the last retry was announced: %+v, %v", got, res.Header)
	}
}

func ioNopCloser(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

func readAll(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
