package models

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"time"

	"countersign/internal/agent"
	"countersign/internal/tool"
)

// This file holds what the vendor providers (openai.go, anthropic.go) share: the transcript made
// replayable, tool names the vendors accept, tool-call arguments, and the idle watchdog.

// DefaultIdleTimeout is how long a vendor stream may stay silent (no response headers, no event)
// before it fails with a timeout. It is generous because a local model on a CPU can think for
// minutes before its first token.
const DefaultIdleTimeout = 5 * time.Minute

// replayable returns the transcript as the vendors accept it:
//   - assistant messages with neither text nor tool calls are dropped (an error or aborted
//     message carries no content, and both vendors refuse an empty assistant turn);
//   - every tool call is answered right after its assistant message: a call whose result is
//     missing (the server stopped mid-run) gets an error result, and a result that answers no
//     call of the preceding assistant message is dropped (both vendors refuse either).
func replayable(msgs []agent.Message) []agent.Message {
	var out []agent.Message
	var open []agent.Block // calls of the last assistant message not answered yet
	answer := func() {
		for _, c := range open {
			res := tool.ErrorResult("No result: the run ended before tool call %s (%s) finished.", c.ID, c.Name)
			out = append(out, agent.Message{Role: agent.ToolResult, ToolCallID: c.ID, ToolName: c.Name, Result: &res})
		}
		open = nil
	}
	for _, m := range msgs {
		switch m.Role {
		case agent.Assistant:
			answer()
			if !hasContent(m) {
				continue
			}
			out = append(out, m)
			open = m.ToolCalls()
		case agent.ToolResult:
			i := indexOfCall(open, m.ToolCallID)
			if i < 0 {
				continue
			}
			open = append(open[:i:i], open[i+1:]...)
			out = append(out, m)
		default:
			answer()
			out = append(out, m)
		}
	}
	answer()
	return out
}

func hasContent(m agent.Message) bool {
	for _, b := range m.Content {
		if b.Type == "toolCall" || b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			return true
		}
	}
	return false
}

func indexOfCall(calls []agent.Block, id string) int {
	for i, c := range calls {
		if c.ID == id {
			return i
		}
	}
	return -1
}

// resultText is a tool result as one text for a vendor that takes text only (SPEC §1 results,
// rule 5: ModelContent; details are never sent). Images become a short note.
func resultText(r *tool.Result) string {
	if r == nil {
		return ""
	}
	var parts []string
	for _, c := range r.ModelContent() {
		switch c.Type {
		case "text":
			parts = append(parts, c.Text)
		case "image":
			parts = append(parts, fmt.Sprintf("(a %s image, not shown: this model takes text only in tool results)", c.MimeType))
		}
	}
	return strings.Join(parts, "\n")
}

// maxToolName is the longest tool name both vendors accept (OpenAI: 64 of [A-Za-z0-9_-]).
const maxToolName = 64

var vendorToolNameRule = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// vendorToolName is the name a tool is declared under to a vendor. Countersign names may hold
// "." and run to 128 characters (SPEC §1), which the vendors refuse; such a name has its other
// characters replaced by "_", is cut to fit, and gets a hash of the original so two names never
// meet. Names the vendors accept are kept as they are.
func vendorToolName(name string) string {
	if vendorToolNameRule.MatchString(name) {
		return name
	}
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "_" + hex.EncodeToString(sum[:4])
	if len(b) > maxToolName-len(suffix) {
		b = b[:maxToolName-len(suffix)]
	}
	return string(b) + suffix
}

// toolNames maps vendor tool names back to the declared tools' names.
type toolNames map[string]string

func newToolNames(specs []agent.ToolSpec) toolNames {
	n := toolNames{}
	for _, s := range specs {
		n[vendorToolName(s.Name)] = s.Name
	}
	return n
}

// local is the Countersign name of a tool the model called; an unknown name is kept, so the call
// pipeline answers it with "Tool not found".
func (n toolNames) local(vendorName string) string {
	if name, ok := n[vendorName]; ok {
		return name
	}
	return vendorName
}

// inputSchema decodes a declared inputSchema; a tool without one takes an empty object.
func inputSchema(raw json.RawMessage) (map[string]any, error) {
	schema := map[string]any{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		return nil, fmt.Errorf("inputSchema is not a JSON object: %v", err)
	}
	return schema, nil
}

// callArguments checks the arguments a model streamed for a tool call: none become {}, anything
// else must be a JSON object (returned compacted). The error says what is wrong ("arguments are not
// valid JSON: …", "arguments are not a JSON object: …"), with the start of what was streamed.
func callArguments(raw string) (json.RawMessage, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return json.RawMessage("{}"), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(raw)); err != nil {
		if strings.Contains(err.Error(), "unexpected end of JSON input") {
			return nil, fmt.Errorf("arguments are not valid JSON: they end before the JSON value does: %s", short(raw))
		}
		return nil, fmt.Errorf("arguments are not valid JSON: %v: %s", err, short(raw))
	}
	if raw[0] != '{' {
		return nil, fmt.Errorf("arguments are not a JSON object: %s", short(raw))
	}
	return buf.Bytes(), nil
}

// callBlock is a streamed tool call as a toolCall block. Arguments that are not a JSON object do
// not end the model's answer (SPEC §9): the call keeps {} as its arguments and carries the
// reason in ArgumentsError, which the call pipeline answers with an error result, and the run
// goes on to the model's next answer.
func callBlock(id, name, raw string) agent.Block {
	b := agent.Block{Type: "toolCall", ID: id, Name: name}
	args, err := callArguments(raw)
	if err != nil {
		b.Arguments, b.ArgumentsError = json.RawMessage("{}"), err.Error()
		return b
	}
	b.Arguments = args
	return b
}

// replayArguments is a stored call's arguments as sent back to a vendor: always a JSON object.
func replayArguments(args json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(args); len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return t
	}
	return json.RawMessage("{}")
}

// newCallID makes an id for a tool call that came without one (some OpenAI-compatible servers).
func newCallID() string { return "call_" + strings.ToLower(rand.Text()[:12]) }

// finishCalls applies the rules common to both vendors to a streamed message: a message with
// tool calls is a toolUse message whatever the vendor said (some OpenAI-compatible servers say
// "stop"), and a toolUse message without calls is a plain stop.
func finishCalls(msg *agent.Message) {
	n := len(msg.ToolCalls())
	switch {
	case n > 0 && msg.StopReason == agent.Stop:
		msg.StopReason = agent.ToolUse
	case n == 0 && msg.StopReason == agent.ToolUse:
		msg.StopReason = agent.Stop
	}
}

// ErrContextLength is agent.ErrContextLength (the same value), wrapped by the error a vendor
// model returns when the provider refused the request because it does not fit the model's
// context window: OpenAI's code context_length_exceeded (Chat Completions and the Responses API,
// as an HTTP 400 or an error in the stream), the "maximum context length" / "context size"
// errors of OpenAI-compatible servers (vLLM, llama.cpp, LM Studio), and Anthropic's "prompt is
// too long" and "input length and max_tokens exceed context limit" (HTTP 400). The error's
// message stays the provider's; test with errors.Is(err, agent.ErrContextLength). Sending the
// same request again fails the same way: the caller shortens what it sends or ends the run
// saying so (SPEC §17).
var ErrContextLength = agent.ErrContextLength

// contextLengthError is a provider error that is ErrContextLength.
type contextLengthError struct{ error }

func (e contextLengthError) Is(target error) bool { return target == ErrContextLength }
func (e contextLengthError) Unwrap() error        { return e.error }

// contextLengthPhrases are the parts of provider error codes and messages that say a request was
// too long for the model (lower case).
var contextLengthPhrases = []string{
	"context_length_exceeded",         // OpenAI error code
	"maximum context length",          // OpenAI, vLLM: "This model's maximum context length is ..."
	"exceeds the context window",      // OpenAI Responses: "Your input exceeds the context window ..."
	"context size",                    // llama.cpp: "the request exceeds the available context size"
	"greater than the context length", // LM Studio
	"prompt is too long",              // Anthropic: "prompt is too long: 215000 tokens > 200000 maximum"
	"exceed context limit",            // Anthropic: "input length and `max_tokens` exceed context limit"
}

// isContextLength reports whether a provider error's code or message says the request was too
// long for the model's context window.
func isContextLength(code, message string) bool {
	s := strings.ToLower(code + " " + message)
	for _, p := range contextLengthPhrases {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// markContextLength wraps err as ErrContextLength when code or message say so.
func markContextLength(err error, code, message string) error {
	if isContextLength(code, message) {
		return contextLengthError{err}
	}
	return err
}

// errIdle is the cause of a stream cancelled by its watchdog.
type errIdle time.Duration

func (e errIdle) Error() string {
	return fmt.Sprintf("timeout: no data from the provider for %s (-model-idle-timeout)", time.Duration(e))
}

// watchdog cancels a stream that has been silent for longer than its idle timeout.
type watchdog struct {
	timer  *time.Timer
	idle   time.Duration
	cancel context.CancelCauseFunc
}

// watch derives the stream's context: it is cancelled when ctx is, or with errIdle when kick has
// not been called for idle. stop releases it.
func watch(ctx context.Context, idle time.Duration) (context.Context, *watchdog) {
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w := &watchdog{idle: idle, cancel: cancel}
	w.timer = time.AfterFunc(idle, func() { cancel(errIdle(idle)) })
	return ctx, w
}

func (w *watchdog) kick() { w.timer.Reset(w.idle) }

// pause lets the stream stay silent for d more than its idle timeout: a retry's wait is not
// the provider's silence.
func (w *watchdog) pause(d time.Duration) { w.timer.Reset(w.idle + d) }

func (w *watchdog) stop() {
	w.timer.Stop()
	w.cancel(nil)
}

// streamFailure is the error for a stream that failed: the cancellation or timeout when the
// stream's context ended (the provider's own error is then a consequence), else nil.
func streamFailure(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(ctx)
	var idle errIdle
	if errors.As(cause, &idle) {
		return idle
	}
	return cause
}

// short cuts s to 200 bytes for an error message.
func short(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}

// htmlTitle and htmlTag find an HTML page's title and its tags (errorText).
var (
	htmlTitle = regexp.MustCompile(`(?is)<title[^>]*>(.*?)</title>`)
	htmlTag   = regexp.MustCompile(`(?s)<[^>]*>`)
	htmlDrop  = regexp.MustCompile(`(?is)<(script|style|head)[^>]*>.*?</(script|style|head)>`)
)

// errorText is an error response's body as an error's text: a proxy's or gateway's HTML page
// (Cloudflare's 502, nginx's 504) becomes its title, or else its first line of text, never the
// page verbatim; other text keeps its first line. Bounded (short); "" for a body with no text.
func errorText(body string) string {
	body = strings.TrimSpace(body)
	lower := strings.ToLower(body)
	if strings.HasPrefix(lower, "<") || strings.Contains(lower, "<html") {
		if m := htmlTitle.FindStringSubmatch(body); m != nil {
			if t := strings.Join(strings.Fields(html.UnescapeString(htmlTag.ReplaceAllString(m[1], " "))), " "); t != "" {
				return short(t)
			}
		}
		body = html.UnescapeString(htmlTag.ReplaceAllString(htmlDrop.ReplaceAllString(body, " "), "\n"))
	}
	for _, line := range strings.Split(body, "\n") {
		if t := strings.Join(strings.Fields(line), " "); t != "" {
			return short(t)
		}
	}
	return ""
}

// statusLine is an HTTP status as "429 Too Many Requests", or "529" when Go has no text for it.
func statusLine(code int) string {
	if text := http.StatusText(code); text != "" {
		return fmt.Sprintf("%d %s", code, text)
	}
	return fmt.Sprint(code)
}
