// Package fakemodels is a test helper: local stand-ins for the Anthropic Messages API and the
// OpenAI Responses API, enough to run the real Claude Code and Codex command-line agents offline
// (SPEC §18 end-to-end tests; ../shared/agents/README.md "Claude Code, headless" and "Codex,
// headless"). A Script picks each answer from the request the agent sent: a text, or one tool
// call; the handlers stream it as server-sent events in the order the real APIs use and record
// every request.
//
//	a := &fakemodels.Anthropic{Script: fakemodels.ToolThenText("Bash", `{"command":"touch proof"}`, "done")}
//	srv := httptest.NewServer(a)   // ANTHROPIC_BASE_URL=srv.URL
//	r := &fakemodels.Responses{Script: fakemodels.CodexShell("touch proof", "allow")}
//	srv := httptest.NewServer(r)   // config.toml: base_url = srv.URL + "/v1", wire_api = "responses"
//
// FromPrompt is the Script of cmd/fakemodel, the server the browser suite runs the real agents
// against: each run's prompt says what the model does (`fake-bash: <command>`), so one server
// serves many runs at once.
//
// Sources for the shapes: Anthropic API reference "Streaming Messages" (event order
// message_start, content_block_start, content_block_delta (text_delta, input_json_delta),
// content_block_stop, message_delta, message_stop) and "Count tokens"; OpenAI API reference
// "Streaming events" for Responses (response.created, response.in_progress,
// response.output_item.added, response.content_part.added, response.output_text.delta,
// response.output_text.done, response.content_part.done, response.function_call_arguments.delta,
// response.function_call_arguments.done, response.output_item.done, response.completed, each with
// sequence_number); the requests of Claude Code 2.1.328 and Codex 0.169.0 recorded in
// ../shared/agents/recorded (copied to testdata/).
package fakemodels

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Turn is one answer of the fake model: Text, a tool call (ToolName with ToolInput, a JSON
// object's text), or both (the text first).
type Turn struct {
	Text      string
	ToolName  string
	ToolInput string
}

// Request is one request an agent sent, as received.
type Request struct {
	Method string
	Path   string // without the query (Claude Code adds ?beta=true)
	Query  string
	Header http.Header
	Body   []byte
}

// Script picks the answer to a request for a model turn.
type Script func(Request) Turn

// recorder keeps the requests a handler received.
type recorder struct {
	mu       sync.Mutex
	requests []Request
}

// Requests returns a copy of the requests received so far, in order.
func (r *recorder) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}

// record reads the request's body (at most 16 MiB) and keeps it.
func (r *recorder) record(req *http.Request) (Request, error) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
	if err != nil {
		return Request{}, err
	}
	rq := Request{Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery, Header: req.Header.Clone(), Body: body}
	r.mu.Lock()
	r.requests = append(r.requests, rq)
	r.mu.Unlock()
	return rq, nil
}

// ToolThenText is a Script for either API: a tool call of name with input until the request
// carries a tool result, then text.
func ToolThenText(name, input, text string) Script {
	return func(r Request) Turn {
		if r.HasToolResult() {
			return Turn{Text: text}
		}
		return Turn{ToolName: name, ToolInput: input}
	}
}

// CodexShell is a Responses Script for Codex: its `exec_command` tool with cmd and an escalation
// (`sandbox_permissions: "require_escalated"`, which is what makes Codex ask for approval and
// fire PermissionRequest) until the request carries the command's output, then "done"; to
// Codex's guardian (the reviewer that decides when no hook did) it answers guardian, "allow" or
// "deny".
func CodexShell(cmd, guardian string) Script {
	input, _ := json.Marshal(map[string]string{"cmd": cmd, "justification": "make a proof file", "sandbox_permissions": "require_escalated"})
	return func(r Request) Turn {
		if r.IsGuardian() {
			return Turn{Text: GuardianAnswer(guardian, "fake guardian")}
		}
		if r.HasToolResult() {
			return Turn{Text: "done"}
		}
		return Turn{ToolName: "exec_command", ToolInput: string(input)}
	}
}

// GuardianAnswer is the JSON Codex's guardian asks for (its text.format json_schema
// "codex_output_schema"): {risk_level, user_authorization, outcome, rationale}.
func GuardianAnswer(outcome, rationale string) string {
	b, _ := json.Marshal(map[string]string{"risk_level": "low", "user_authorization": "high", "outcome": outcome, "rationale": rationale})
	return string(b)
}

// IsGuardian reports whether the request is Codex's guardian review rather than the agent's own
// turn: header `x-openai-subagent: guardian` (Codex 0.169.0), or a prompt_cache_key
// "guardian:…".
func (r Request) IsGuardian() bool {
	if r.Header.Get("X-Openai-Subagent") == "guardian" {
		return true
	}
	var b struct {
		PromptCacheKey string `json:"prompt_cache_key"`
	}
	_ = json.Unmarshal(r.Body, &b)
	return strings.HasPrefix(b.PromptCacheKey, "guardian:")
}

// HasToolResult reports whether the request's last message carries a tool's result: Anthropic,
// a `tool_result` block in the last user message; Responses, a last input item of type
// `function_call_output`.
func (r Request) HasToolResult() bool {
	var b struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Input json.RawMessage `json:"input"`
	}
	if json.Unmarshal(r.Body, &b) != nil {
		return false
	}
	if n := len(b.Messages); n > 0 {
		last := b.Messages[n-1]
		var blocks []struct {
			Type string `json:"type"`
		}
		if last.Role != "user" || json.Unmarshal(last.Content, &blocks) != nil {
			return false
		}
		for _, bl := range blocks {
			if bl.Type == "tool_result" {
				return true
			}
		}
		return false
	}
	var items []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(b.Input, &items) != nil || len(items) == 0 {
		return false
	}
	return items[len(items)-1].Type == "function_call_output"
}

// sse writes server-sent events, flushing after each.
type sse struct {
	w http.ResponseWriter
}

func newSSE(w http.ResponseWriter) sse {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return sse{w}
}

func (s sse) event(name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err) // the fakes marshal only maps of strings, numbers and slices
	}
	fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, b)
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

// chunks splits s into about three pieces, as the APIs stream tool input and text in fragments.
func chunks(s string) []string {
	if len(s) < 6 {
		return []string{s}
	}
	a, b := len(s)/3, 2*len(s)/3
	for !validCut(s, a) {
		a++
	}
	for b <= a || !validCut(s, b) {
		b++
	}
	out := []string{s[:a], s[a:b]}
	if b < len(s) {
		out = append(out, s[b:])
	}
	return out
}

// validCut reports whether i is a rune boundary of s.
func validCut(s string, i int) bool {
	return i >= len(s) || s[i]&0xC0 != 0x80
}

// writeError writes an API error body in the Anthropic and OpenAI shape with status.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

// decodeRequest reads the fields the fakes need from a model request body.
func decodeRequest(body []byte) (model string, stream bool, err error) {
	var b struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&b); err != nil {
		return "", false, err
	}
	return b.Model, b.Stream, nil
}
