package models_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"countersign/internal/agent"
	"countersign/internal/models"
	"countersign/internal/tool"
)

// FuzzParseScript parses arbitrary bytes as a faux script file (SPEC §9: a script that is not
// valid JSON or not a valid script is refused at load with file, position and reason).
// Properties:
//
//   - no panic;
//   - a refusal is a *ScriptError naming the file, with a reason and a position inside the
//     data (line 1..lines+1, column 1..the line's length+1), and its message starts with the file;
//   - an accepted script has steps, each with a known stopReason (error ones with a message), a
//     delay and usage counts not below zero, and text, thinking or toolCall blocks, the calls
//     named with object arguments, the thinking blocks with text;
//   - it round-trips: written back as JSON and parsed again, it is the same script;
//   - its first step replays through the faux model: the streamed text is the message's text, and
//     every tool call gets an id.
func FuzzParseScript(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := models.ParseScript("fuzz.json", data)
		if err != nil {
			checkRefusal(t, data, err)
			return
		}
		if len(sc.Steps) == 0 {
			t.Fatal("accepted a script without steps")
		}
		for i, st := range sc.Steps {
			switch st.StopReason {
			case agent.Stop, agent.ToolUse, agent.Length:
			case agent.Error:
				if st.ErrorMessage == "" {
					t.Fatalf("step %d: error without errorMessage accepted", i+1)
				}
			default:
				t.Fatalf("step %d: stopReason %q accepted", i+1, st.StopReason)
			}
			if st.DelayMs < 0 {
				t.Fatalf("step %d: delayMs %d accepted", i+1, st.DelayMs)
			}
			if u := st.Usage; u != nil && (u.Input < 0 || u.Output < 0 || u.CacheRead < 0 || u.CacheWrite < 0) {
				t.Fatalf("step %d: usage %+v accepted", i+1, *u)
			}
			for _, b := range st.Content {
				switch b.Type {
				case "text":
				case "thinking":
					if b.Thinking == "" {
						t.Fatalf("step %d: a thinking block without thinking accepted", i+1)
					}
				case "toolCall":
					if b.Name == "" || !isObject(b.Arguments) {
						t.Fatalf("step %d: tool call %q with arguments %s accepted", i+1, b.Name, b.Arguments)
					}
				default:
					t.Fatalf("step %d: block type %q accepted", i+1, b.Type)
				}
			}
		}

		written, err := json.Marshal(sc)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := models.ParseScript("fuzz.json", written)
		if err != nil {
			t.Fatalf("the script written back is refused: %v\n%s", err, written)
		}
		rewritten, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(written, rewritten) {
			t.Fatalf("round trip changed the script:\n%s\n%s", written, rewritten)
		}

		first := sc.Steps[0]
		first.DelayMs = 0
		var streamed strings.Builder
		var announced int
		msg, err := (&models.Faux{Script: &models.Script{Name: "fuzz", Steps: []models.Step{first}}}).Stream(context.Background(),
			agent.Request{Messages: []agent.Message{{Role: agent.User, Content: []agent.Block{{Type: "text", Text: "go"}}}}},
			func(d agent.Delta) {
				streamed.WriteString(d.Text)
				if d.ToolCall != nil {
					announced++
				}
			})
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if got, want := streamed.String(), msg.Text(); got != want {
			t.Fatalf("streamed text %q, message text %q", got, want)
		}
		if msg.StopReason != first.StopReason || len(msg.Content) != len(first.Content) || announced != len(msg.ToolCalls()) {
			t.Fatalf("replayed %+v from step %+v (%d calls announced)", msg, first, announced)
		}
		for _, c := range msg.ToolCalls() {
			if c.ID == "" {
				t.Fatalf("tool call %q has no id", c.Name)
			}
		}
	})
}

// isObject reports whether raw is one JSON object (numbers of any size allowed).
func isObject(raw json.RawMessage) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v map[string]any
	return dec.Decode(&v) == nil && v != nil && !dec.More()
}

// checkRefusal checks a refusal of data: a *ScriptError for fuzz.json with a reason and a
// position inside data.
func checkRefusal(t *testing.T, data []byte, err error) {
	t.Helper()
	var se *models.ScriptError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T), want a *ScriptError", err, err)
	}
	if se.File != "fuzz.json" || strings.TrimSpace(se.Reason) == "" || !strings.HasPrefix(err.Error(), "fuzz.json") {
		t.Fatalf("refusal %q: want the file and a reason", err)
	}
	if se.Line == 0 {
		return // no position: only "the script has no steps" and the like
	}
	lines := bytes.Split(data, []byte("\n"))
	if se.Line < 1 || se.Line > len(lines) {
		t.Fatalf("refusal %q: line %d outside 1..%d", err, se.Line, len(lines))
	}
	if n := utf8.RuneCount(lines[se.Line-1]); se.Column < 1 || se.Column > n+1 {
		t.Fatalf("refusal %q: column %d outside 1..%d", err, se.Column, n+1)
	}
}

var placeholder = regexp.MustCompile(`\{\{lastResult\.([A-Za-z0-9_]+)\}\}`)

// FuzzLastResult fills a script text's {{lastResult.X}} placeholders from a tool result — text
// and structuredContent a tool or an MCP server chose — through the faux model. Properties:
//
//   - no panic; the streamed chunks join into the message's text;
//   - a text without placeholders comes out as it is;
//   - each placeholder grows the text by at most the 2000-byte cap and an ellipsis;
//   - with valid UTF-8 inputs, the output is valid UTF-8;
//   - {{lastResult.text}} is the result's text (capped), and {{lastResult.f}} of a structuredContent
//     {"f": <string>} is that string without trailing newlines (capped).
func FuzzLastResult(f *testing.F) {
	f.Fuzz(func(t *testing.T, text, resultText string, structured []byte) {
		result := &tool.Result{Content: []tool.Content{tool.Text(resultText)}, StructuredContent: structured}
		out := replay(t, text, result)
		matches := placeholder.FindAllString(text, -1)
		if len(matches) == 0 && out != text {
			t.Fatalf("text without placeholders %q came out as %q", text, out)
		}
		if limit := len(text) + len(matches)*(2000+len("…")); len(out) > limit {
			t.Fatalf("output of %d bytes, over %d for %d placeholders", len(out), limit, len(matches))
		}
		if utf8.ValidString(text) && utf8.ValidString(resultText) && utf8.Valid(structured) && !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 out of valid inputs: %q", out)
		}
		if !utf8.ValidString(resultText) {
			return
		}
		if got, want := replay(t, "{{lastResult.text}}", result), capped(resultText); got != want {
			t.Fatalf("{{lastResult.text}} = %q, want %q", got, want)
		}
		field, _ := json.Marshal(map[string]string{"f": resultText})
		if got, want := replay(t, "<{{lastResult.f}}>", &tool.Result{StructuredContent: field}), "<"+capped(strings.TrimRight(resultText, "\n"))+">"; got != want {
			t.Fatalf("{{lastResult.f}} = %q, want %q", got, want)
		}
	})
}

// replay streams one text step of the faux model after a tool result and returns the text,
// checking that the streamed chunks join into it.
func replay(t *testing.T, text string, result *tool.Result) string {
	t.Helper()
	var streamed strings.Builder
	f := &models.Faux{Script: &models.Script{Name: "fuzz", Steps: []models.Step{
		{StopReason: agent.ToolUse, Content: []agent.Block{{Type: "toolCall", ID: "c1", Name: "t", Arguments: json.RawMessage(`{}`)}}},
		{StopReason: agent.Stop, Content: []agent.Block{{Type: "text", Text: text}}},
	}}}
	msg, err := f.Stream(context.Background(), agent.Request{Messages: []agent.Message{
		{Role: agent.User, Content: []agent.Block{{Type: "text", Text: "go"}}},
		{Role: agent.Assistant, Content: []agent.Block{{Type: "toolCall", ID: "c1", Name: "t"}}},
		{Role: agent.ToolResult, ToolCallID: "c1", ToolName: "t", Result: result},
	}}, func(d agent.Delta) { streamed.WriteString(d.Text) })
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if streamed.String() != msg.Text() {
		t.Fatalf("streamed %q, message text %q", streamed.String(), msg.Text())
	}
	if len(msg.Content) != 1 {
		t.Fatalf("message content %+v, want one text block", msg.Content)
	}
	return msg.Text()
}

// capped is the faux model's cap on a quoted value: 2000 bytes, cut on a rune, then "…".
func capped(s string) string {
	if len(s) <= 2000 {
		return s
	}
	return strings.ToValidUTF8(s[:2000], "") + "…"
}
