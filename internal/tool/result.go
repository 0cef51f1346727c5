package tool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Content is one content block of a tool result (MCP 2025-11-25 §tools, tool result content):
// {"type": "text", "text": ...} or {"type": "image", "data": base64, "mimeType": ...}.
type Content struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	Data     string `json:"data,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
}

// Text returns a text content block.
func Text(s string) Content { return Content{Type: "text", Text: s} }

// ContractViolation records that a successful result broke the tool's outputSchema (SPEC §1
// results, rule 3). The Result that carries it has IsError set and a text naming every violation;
// Content and StructuredContent here are what the tool itself returned, kept for the UI only.
type ContractViolation struct {
	Violations        []Violation     `json:"violations"`
	Content           []Content       `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
}

// NestedStatus is what became of a nested call (NestedCall.Status, SPEC §4). Its values are
// stable: results stored in transcripts carry them.
type NestedStatus string

// The nested calls' statuses.
const (
	NestedOK         NestedStatus = "ok"         // it ran and its result is not an error
	NestedError      NestedStatus = "error"      // it failed, ran or not (an unknown tool, bad arguments, an error result)
	NestedBlocked    NestedStatus = "blocked"    // a tool_call handler refused it
	NestedDenied     NestedStatus = "denied"     // a rule or a person denied it, or its approval timed out
	NestedUnfinished NestedStatus = "unfinished" // it never finished: its run was stopped, its approval cancelled, the server restarted
)

// NestedCall is one entry of a parent's nestedCalls record (SPEC §4). Status is one of the
// NestedStatus values. Error is the text of an isError result, Result the text of a
// successful one (its ModelContent: the text blocks, or structuredContent as JSON when there is
// no text block); each is cut to 4 KiB, and to what is left of the record's 64 KiB of result
// text. Truncated is set when this call's arguments, result or error were cut; Violation when
// its result broke the tool's outputSchema (SPEC §1 rule 3: status error, Error names the
// violations). ApprovalID is the id of the audit record of the call's decision — for a call the
// audit groups (issue 19: allowed by a rule with others of its parent), its group's record, which
// does not name this call — and "" when the call was never gated or its record was not stored.
type NestedCall struct {
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Status     NestedStatus    `json:"status"`
	DurationMs int64           `json:"durationMs"`
	Error      string          `json:"error,omitempty"`
	Result     string          `json:"result,omitempty"`
	Truncated  bool            `json:"truncated,omitempty"`
	Violation  bool            `json:"violation,omitempty"`
	ApprovalID string          `json:"approvalId,omitempty"`
}

// NestedCalls is the bounded record of the calls a tool made through ExecuteTool (SPEC §4): at
// most 256 calls, arguments cut to 8 KiB each and 32 KiB in all, result (or error) text cut to
// 4 KiB each and 64 KiB in all; Complete is false when anything was cut (a call left out, or a
// call marked Truncated).
type NestedCalls struct {
	Calls    []NestedCall `json:"calls"`
	Complete bool         `json:"complete"`
}

// Interruption records that a call was executing when the server stopped (SPEC §8): it was never
// run again, and the model reads "Interrupted by server restart" as its result. For the UI only.
// StartedAt is when the call was let run (the decision on its approval, which its execution
// follows at once); nil when it never was. At is when the next process recovered it: the
// result's DurationMs is At − StartedAt, how long the call ran as far as the store can tell.
type Interruption struct {
	StartedAt *time.Time `json:"startedAt,omitempty"`
	At        time.Time  `json:"at"`
}

// Result is a tool result (MCP 2025-11-25 §tools CallToolResult, plus pi's details). Content is
// what the model reads; StructuredContent a JSON object for programs; Details UI-only data never
// sent to the model. DurationMs, NestedCalls, ContractViolation and Interrupted are filled by the
// pipeline.
type Result struct {
	Content           []Content          `json:"content"`
	StructuredContent json.RawMessage    `json:"structuredContent,omitempty"`
	IsError           bool               `json:"isError"`
	Details           json.RawMessage    `json:"details,omitempty"`
	DurationMs        int64              `json:"durationMs"`
	NestedCalls       *NestedCalls       `json:"nestedCalls,omitempty"`
	ContractViolation *ContractViolation `json:"contractViolation,omitempty"`
	Interrupted       *Interruption      `json:"interrupted,omitempty"`
	// Stopped is set on the error result of a call that its run's Stop (or a graceful shutdown)
	// ended before it finished, whose text is "Run stopped by <who>" (SPEC §2): the call was
	// cancelled, it did not fail. For the UI only.
	Stopped bool `json:"stopped,omitempty"`
}

// ErrorResult is "an error that has none" (SPEC §1 rule 2): isError with one text block.
func ErrorResult(format string, args ...any) Result {
	return Result{Content: []Content{Text(fmt.Sprintf(format, args...))}, IsError: true}
}

// TextOf joins the result's text blocks with newlines.
func (r Result) TextOf() string {
	var parts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// ModelTextPrefix returns the text of ModelContent (its text blocks joined with newlines) cut to
// at most n bytes at a UTF-8 boundary, and whether anything was cut; it copies no more than it
// keeps, so a large result costs little.
func (r Result) ModelTextPrefix(n int) (_ string, cut bool) {
	content := r.ModelContent()
	if len(content) == 1 && content[0].Type == "text" {
		// The usual result, one text block: its prefix, without a copy.
		t := content[0].Text
		if len(t) > n {
			return CutUTF8(t, n), true
		}
		return t, false
	}
	var b strings.Builder
	first := true
	for _, c := range content {
		if c.Type != "text" {
			continue
		}
		if !first {
			if b.Len()+1 > n {
				return b.String(), true
			}
			b.WriteByte('\n')
		}
		first = false
		if b.Len()+len(c.Text) > n {
			b.WriteString(CutUTF8(c.Text, n-b.Len()))
			return b.String(), true
		}
		b.WriteString(c.Text)
	}
	return b.String(), false
}

// CutUTF8 returns the longest prefix of s of at most n bytes that does not split a UTF-8
// sequence.
func CutUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	i := n
	// Back up over continuation bytes to the start of the rune that n splits (at most 3).
	for i > 0 && i > n-utf8.UTFMax && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// ModelContent is the content the model receives (SPEC §1 rule 5): the content blocks, or, when
// there is no text block and structuredContent is present, its JSON serialisation as text.
func (r Result) ModelContent() []Content {
	for _, c := range r.Content {
		if c.Type == "text" {
			return r.Content
		}
	}
	if len(r.StructuredContent) == 0 {
		return r.Content
	}
	return append(append([]Content(nil), r.Content...), Text(string(r.StructuredContent)))
}

// Structured marshals v as a structuredContent value. It panics if v cannot be marshalled, which
// is a programming error in the tool.
func Structured(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("tool.Structured: %v", err))
	}
	return b
}

// Finalize applies the result rules of SPEC §1 to what a tool's execute returned:
//
//  1. a returned isError result is kept whole, data included;
//  2. a Go error (or a recovered panic, passed here as an error) becomes isError with one text
//     block, the error message, and no data;
//  3. a successful result is validated against outputSchema: a mismatch, or no structuredContent
//     when the tool declares an outputSchema, turns it into isError with a text naming the tool
//     and every violation, the original kept in ContractViolation for the UI;
//  4. isError results are never validated.
//
// Rule 5 is ModelContent; rule 6 is the store's.
func (t *Tool) Finalize(res Result, err error) Result {
	if err != nil {
		return ErrorResult("%s", err.Error())
	}
	if res.Content == nil {
		res.Content = []Content{}
	}
	if res.IsError || t.output == nil && len(res.StructuredContent) == 0 {
		return res
	}
	var violations []Violation
	switch {
	case len(bytes.TrimSpace(res.StructuredContent)) == 0:
		violations = []Violation{{Message: "no structuredContent, but the tool declares an outputSchema"}}
	case !isObject(res.StructuredContent):
		violations = []Violation{{Message: "structuredContent must be a JSON object"}}
	default:
		violations = t.ValidateOutput(res.StructuredContent)
	}
	if len(violations) == 0 {
		return res
	}
	lines := make([]string, len(violations))
	for i, v := range violations {
		lines[i] = "- " + v.String()
	}
	return Result{
		Content: []Content{Text(fmt.Sprintf("Tool %q returned a result that violates its outputSchema:\n%s",
			t.Name, strings.Join(lines, "\n")))},
		IsError: true,
		Details: res.Details,
		ContractViolation: &ContractViolation{
			Violations: violations, Content: res.Content, StructuredContent: res.StructuredContent,
		},
	}
}

func isObject(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

// InvalidArguments is the error result for arguments that break inputSchema (SPEC §1
// "Arguments"): every violation (JSON pointer + message) and the arguments received.
func InvalidArguments(name string, violations []Violation, received json.RawMessage) Result {
	lines := make([]string, len(violations))
	for i, v := range violations {
		lines[i] = "- " + v.String()
	}
	if len(received) == 0 {
		received = json.RawMessage("{}")
	}
	return ErrorResult("Invalid arguments for tool %q:\n%s\nReceived arguments: %s",
		name, strings.Join(lines, "\n"), string(received))
}

// NotFound is the error result for a tool that does not exist or is not reachable (SPEC §1).
func NotFound(name string) Result { return ErrorResult("Tool %q not found", name) }
