// Package models holds the model providers the agent loop talks to (SPEC §5, §17): faux, the
// embedded scripted model that replays JSON scripts, and the registry that finds it by name; the
// vendor models, streamed with the vendors' official SDKs — OpenAI Chat Completions and any
// OpenAI-compatible server (openai.go), OpenAI's Responses API (responses.go) and Anthropic's
// Messages API (anthropic.go) — with what they share (vendor.go: the transcript made replayable,
// tool names, the idle watchdog, ErrContextLength; retry.go: retries announced before their
// wait; partial.go: streaming tool-call arguments; window.go: context windows), and the catalog
// of the vendors configured by environment variables (vendors.go).
package models

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"countersign/internal/agent"
)

// Script is a faux model script (SPEC §5): each model request consumes the next step.
type Script struct {
	Name  string `json:"-"`
	Steps []Step `json:"steps"`
}

// Step is one scripted assistant message (SPEC §5 format, with §17's usage and thinking):
//
//	{"content": [{"type": "thinking", "thinking": "The README first."},
//	             {"type": "text", "text": "Let me look."},
//	             {"type": "toolCall", "id": "c1", "name": "read_file", "arguments": {"path": "README.md"}}],
//	 "stopReason": "toolUse", "usage": {"input": 1234, "output": 56}, "delayMs": 200}
//
// Content holds text, toolCall and thinking blocks, streamed in that order as Delta{Text},
// Delta{ToolCall} and Delta{Thinking} (thinking is the model's reasoning, kept in the message
// and never part of its text); StopReason is stop | toolUse | length | error (error needs
// ErrorMessage); DelayMs waits before streaming. Usage, optional, is the token usage the message
// reports as its provider's (agent.Usage: "input", "output", "cacheRead", "cacheWrite", each a
// count of tokens, never negative).
//
// Text may quote the latest tool result: {{lastResult.text}} is its text, {{lastResult.FIELD}}
// a top-level field of its structuredContent (e.g. {{lastResult.exitCode}}).
type Step struct {
	Content      []agent.Block    `json:"content"`
	StopReason   agent.StopReason `json:"stopReason"`
	ErrorMessage string           `json:"errorMessage,omitempty"`
	DelayMs      int              `json:"delayMs,omitempty"`
	Usage        *agent.Usage     `json:"usage,omitempty"`
}

// ScriptError is a script refused at load: the file, the position in it (1-based line and
// column; 0 when unknown) and the reason.
type ScriptError struct {
	File   string
	Line   int
	Column int
	Reason string
}

func (e *ScriptError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Reason)
}

// ParseScript parses and checks a script. Errors are *ScriptError naming file, position and
// reason: malformed JSON, unknown fields, a step without content, an unknown stop reason, a
// toolCall without a name or with arguments that are not a JSON object, a thinking block
// without thinking, an error step without errorMessage, a negative usage count.
func ParseScript(file string, data []byte) (*Script, error) {
	fail := func(offset int64, format string, args ...any) error {
		line, col := position(data, offset)
		return &ScriptError{File: file, Line: line, Column: col, Reason: fmt.Sprintf(format, args...)}
	}
	// Steps are decoded one by one so a semantic error can point at its step.
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := expectDelim(dec, '{'); err != nil {
		return nil, jsonError(file, data, dec, err)
	}
	var sc Script
	sawSteps := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonError(file, data, dec, err)
		}
		key, _ := tok.(string)
		if key != "steps" {
			return nil, fail(dec.InputOffset(), "unknown field %q (a script is {\"steps\": [...]})", key)
		}
		sawSteps = true
		if err := expectDelim(dec, '['); err != nil {
			return nil, jsonError(file, data, dec, err)
		}
		for dec.More() {
			at := dec.InputOffset()
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, jsonError(file, data, dec, err)
			}
			at += int64(len(data[at:]) - len(bytes.TrimLeft(data[at:], " \t\r\n,")))
			step, err := parseStep(raw, len(sc.Steps)+1)
			if err != nil {
				return nil, fail(at, "%v", err)
			}
			sc.Steps = append(sc.Steps, step)
		}
		if _, err := dec.Token(); err != nil {
			return nil, jsonError(file, data, dec, err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, jsonError(file, data, dec, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fail(dec.InputOffset(), "unexpected data after the script object")
	}
	if !sawSteps || len(sc.Steps) == 0 {
		return nil, fail(0, "the script has no steps")
	}
	return &sc, nil
}

func parseStep(raw json.RawMessage, n int) (Step, error) {
	var st Step
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("step %d: %v", n, err)
	}
	switch st.StopReason {
	case agent.Stop, agent.ToolUse, agent.Length:
	case agent.Error:
		if st.ErrorMessage == "" {
			return st, fmt.Errorf("step %d: stopReason \"error\" needs an errorMessage", n)
		}
	case "":
		return st, fmt.Errorf("step %d: stopReason is missing (stop, toolUse, length or error)", n)
	default:
		return st, fmt.Errorf("step %d: unknown stopReason %q (stop, toolUse, length or error)", n, st.StopReason)
	}
	if st.DelayMs < 0 {
		return st, fmt.Errorf("step %d: delayMs must not be negative", n)
	}
	if u := st.Usage; u != nil && (u.Input < 0 || u.Output < 0 || u.CacheRead < 0 || u.CacheWrite < 0) {
		return st, fmt.Errorf("step %d: usage counts must not be negative", n)
	}
	for i, b := range st.Content {
		switch b.Type {
		case "text":
		case "thinking":
			if b.Thinking == "" {
				return st, fmt.Errorf("step %d, content %d: a thinking block needs its \"thinking\" text", n, i+1)
			}
		case "toolCall":
			if b.Name == "" {
				return st, fmt.Errorf("step %d, content %d: a toolCall needs a name", n, i+1)
			}
			if len(b.Arguments) == 0 {
				st.Content[i].Arguments = json.RawMessage("{}")
			} else if t := bytes.TrimSpace(b.Arguments); t[0] != '{' {
				return st, fmt.Errorf("step %d, content %d: toolCall arguments must be a JSON object", n, i+1)
			}
		default:
			return st, fmt.Errorf("step %d, content %d: unknown content type %q (text, toolCall or thinking)", n, i+1, b.Type)
		}
	}
	return st, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("expected %q, found %v", string(want), tok)
	}
	return nil
}

func jsonError(file string, data []byte, dec *json.Decoder, err error) error {
	// The decoder's offsets are relative to what it buffered; parsing the whole document again
	// gives the absolute position of a syntax error (SyntaxError.Offset is just past the bad
	// byte).
	offset := dec.InputOffset()
	var se *json.SyntaxError
	var v any
	if whole := json.Unmarshal(data, &v); errors.As(whole, &se) {
		offset, err = se.Offset-1, whole
		if strings.Contains(se.Error(), "unexpected end") {
			offset = int64(len(data))
		}
	} else if _, isObject := v.(map[string]any); whole == nil && !isObject {
		offset = int64(len(data) - len(bytes.TrimLeft(data, " \t\r\n")))
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		offset, err = int64(len(data)), errors.New("unexpected end of JSON")
	}
	line, col := position(data, offset)
	return &ScriptError{File: file, Line: line, Column: col, Reason: "invalid JSON: " + err.Error()}
}

// position converts a byte offset to a 1-based line and column (in characters).
func position(data []byte, offset int64) (line, col int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return line, col
}

// Faux is the scripted model. Its state is the transcript: the step for a request is the number
// of assistant messages already in it that were delivered, so a restart resumes where the script
// was. An aborted message is not a step: the step it was streaming (cut by Stop, or by a restart,
// whose placeholder says "Interrupted by server restart") was never delivered, so the next
// request streams it again.
type Faux struct {
	Script *Script
	// ChunkDelay is the pause between streamed text chunks.
	ChunkDelay time.Duration

	// seen is what the last request's transcript held, so the next request of the same session
	// (a run's transcript only grows) counts only the messages after it: without it a K-turn run
	// rescanned its whole transcript at every turn (issue 19's flatness).
	mu   sync.Mutex
	seen fauxSeen
}

// fauxSeen is the step count of a session's transcript up to messages: steps delivered assistant
// messages, lastResult the index of the latest tool result (-1: none).
type fauxSeen struct {
	session         string
	messages, steps int
	lastResult      int
}

// Stream implements agent.Model: it replays the next step, text and thinking in small chunks,
// with the step's usage as the message's. Faux does not implement agent.ContextWindow: a script
// has no context window (the agent shortens for -context-tokens only).
func (f *Faux) Stream(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
	f.mu.Lock()
	seen := f.seen
	if seen.messages == 0 || seen.session != req.SessionID || seen.messages > len(req.Messages) {
		seen = fauxSeen{session: req.SessionID, lastResult: -1}
	}
	for i := seen.messages; i < len(req.Messages); i++ {
		switch req.Messages[i].Role {
		case agent.Assistant:
			if req.Messages[i].StopReason != agent.Aborted {
				seen.steps++
			}
		case agent.ToolResult:
			seen.lastResult = i
		}
	}
	seen.messages = len(req.Messages)
	f.seen = seen
	f.mu.Unlock()
	n := seen.steps
	var last *agent.Message
	if seen.lastResult >= 0 {
		last = &req.Messages[seen.lastResult]
	}
	if n >= len(f.Script.Steps) {
		return agent.Message{}, fmt.Errorf("the faux script %q has no step left (it has %d); start a new session to replay it", f.Script.Name, len(f.Script.Steps))
	}
	step := f.Script.Steps[n]
	if err := sleep(ctx, time.Duration(step.DelayMs)*time.Millisecond); err != nil {
		return agent.Message{}, err
	}
	msg := agent.Message{Role: agent.Assistant, StopReason: step.StopReason, ErrorMessage: step.ErrorMessage}
	if step.Usage != nil {
		u := *step.Usage
		msg.Usage = &u
	}
	for _, b := range step.Content {
		switch b.Type {
		case "text":
			text := expand(b.Text, last)
			for _, chunk := range chunks(text) {
				if err := sleep(ctx, f.ChunkDelay); err != nil {
					return agent.Message{}, err
				}
				onDelta(agent.Delta{Text: chunk})
			}
			msg.Content = append(msg.Content, agent.Block{Type: "text", Text: text})
		case "thinking":
			for _, chunk := range chunks(b.Thinking) {
				if err := sleep(ctx, f.ChunkDelay); err != nil {
					return agent.Message{}, err
				}
				onDelta(agent.Delta{Thinking: chunk})
			}
			msg.Content = append(msg.Content, agent.Block{Type: "thinking", Thinking: b.Thinking})
		case "toolCall":
			if b.ID == "" {
				b.ID = "call_" + strings.ToLower(rand.Text()[:12])
			}
			onDelta(agent.Delta{ToolCall: &b})
			msg.Content = append(msg.Content, b)
		}
	}
	return msg, ctx.Err()
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// chunks splits text into pieces of about a word, as a model streams: each chunk ends after a
// space or newline, and a long word is cut every 16 bytes (on a rune boundary).
func chunks(text string) []string {
	var out []string
	for len(text) > 0 {
		i := 0
		for i < len(text) && i < 16 {
			_, size := utf8.DecodeRuneInString(text[i:])
			i += size
			if c := text[i-size]; c == ' ' || c == '\n' {
				break
			}
		}
		out = append(out, text[:i])
		text = text[i:]
	}
	return out
}

var placeholder = regexp.MustCompile(`\{\{lastResult\.([A-Za-z0-9_]+)\}\}`)

// expand fills {{lastResult.*}} placeholders from the latest tool result.
func expand(text string, last *agent.Message) string {
	return placeholder.ReplaceAllStringFunc(text, func(m string) string {
		field := placeholder.FindStringSubmatch(m)[1]
		if last == nil || last.Result == nil {
			return "(no tool result)"
		}
		if field == "text" {
			return clip(last.Result.TextOf())
		}
		var sc map[string]json.RawMessage
		if err := json.Unmarshal(last.Result.StructuredContent, &sc); err != nil || sc[field] == nil {
			return "(no " + field + ")"
		}
		var s string
		if json.Unmarshal(sc[field], &s) == nil {
			return clip(strings.TrimRight(s, "\n"))
		}
		return clip(string(sc[field]))
	})
}

func clip(s string) string {
	const max = 2000
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}
