package models_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/models"
)

func TestParseScriptRefusals(t *testing.T) {
	tests := []struct {
		name       string
		src        string
		line, col  int
		wantReason string
	}{
		{"syntax error", "{\"steps\": [\n  {\"content\": [], \"stopReason\": \"stop\",}\n]}", 2, 40, "invalid JSON"},
		{"unknown stop reason", "{\"steps\": [\n  {\"content\": [{\"type\": \"text\", \"text\": \"hi\"}], \"stopReason\": \"halt\"}\n]}", 2, 3, `unknown stopReason "halt"`},
		{"error without message", `{"steps": [{"content": [], "stopReason": "error"}]}`, 1, 12, "needs an errorMessage"},
		{"unknown field in a step", `{"steps": [{"content": [], "stopReason": "stop", "colour": 1}]}`, 1, 12, `unknown field "colour"`},
		{"tool call without name", `{"steps": [{"content": [{"type": "toolCall"}], "stopReason": "toolUse"}]}`, 1, 12, "needs a name"},
		{"arguments not an object", `{"steps": [{"content": [{"type": "toolCall", "name": "x", "arguments": [1]}], "stopReason": "toolUse"}]}`, 1, 12, "must be a JSON object"},
		{"no steps", `{"steps": []}`, 1, 1, "no steps"},
		{"not an object", `[1, 2]`, 1, 1, "invalid JSON"},
		{"truncated", `{"steps": [`, 1, 12, "unexpected end"},
		{"unknown top-level field", `{"stepz": []}`, 1, 9, `unknown field "stepz"`},
		{"negative usage", `{"steps": [{"content": [], "stopReason": "stop", "usage": {"input": -1, "output": 3}}]}`, 1, 12, "usage counts must not be negative"},
		{"unknown usage field", `{"steps": [{"content": [], "stopReason": "stop", "usage": {"inputTokens": 5}}]}`, 1, 12, `unknown field "inputTokens"`},
		{"usage not an object", `{"steps": [{"content": [], "stopReason": "stop", "usage": 12}]}`, 1, 12, "usage"},
		{"thinking without text", `{"steps": [{"content": [{"type": "thinking"}], "stopReason": "stop"}]}`, 1, 12, "a thinking block needs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := models.ParseScript("scripts/bad.json", []byte(tt.src))
			var se *models.ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("error %v, want a *ScriptError", err)
			}
			if se.File != "scripts/bad.json" || !strings.Contains(se.Reason, tt.wantReason) {
				t.Errorf("got %q, want file scripts/bad.json and a reason containing %q", err, tt.wantReason)
			}
			if se.Line != tt.line || se.Column != tt.col {
				t.Errorf("position %d:%d, want %d:%d (%v)", se.Line, se.Column, tt.line, tt.col, err)
			}
			if !strings.HasPrefix(err.Error(), "scripts/bad.json:") {
				t.Errorf("message %q does not start with the file", err)
			}
		})
	}
}

func TestRegistryReadsTheScriptsFolderAndRefusesBadScripts(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("good.json", `{"steps":[{"content":[{"type":"text","text":"hello there"}],"stopReason":"stop"}]}`)
	write("broken.json", `{"steps":[`)
	var logs strings.Builder
	reg, err := models.NewRegistry(dir, 0, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Join(reg.Names(), ",")
	if !strings.HasPrefix(names, "faux:demo") || !strings.Contains(names, "faux:good") || strings.Contains(names, "broken") {
		t.Errorf("names %s: want demo first, good, and not the broken script", names)
	}
	if !strings.Contains(logs.String(), "broken.json:1:") {
		t.Errorf("the refused script was not logged with its position: %s", logs.String())
	}
	// A script dropped in later appears without a restart.
	write("later.json", `{"steps":[{"content":[{"type":"text","text":"late"}],"stopReason":"stop"}]}`)
	if !strings.Contains(strings.Join(reg.Names(), ","), "faux:later") {
		t.Error("a new script did not appear")
	}
	if _, err := reg.Model("faux:nope"); err == nil || !strings.Contains(err.Error(), "faux:good") {
		t.Errorf("unknown model error %v should name what is offered", err)
	}

	// The faux model streams the text in chunks and then reports a clear error when exhausted.
	m, err := reg.Model("faux:good")
	if err != nil {
		t.Fatal(err)
	}
	var deltas []string
	msg, err := m.Stream(context.Background(), agent.Request{}, func(d agent.Delta) { deltas = append(deltas, d.Text) })
	if err != nil || msg.Text() != "hello there" || len(deltas) < 2 || strings.Join(deltas, "") != "hello there" {
		t.Errorf("stream = %q, %v, deltas %q", msg.Text(), err, deltas)
	}
	_, err = m.Stream(context.Background(), agent.Request{Messages: []agent.Message{msg}}, func(agent.Delta) {})
	if err == nil || !strings.Contains(err.Error(), "no step left") {
		t.Errorf("exhausted script: %v", err)
	}
	_ = io.Discard
}

func TestEmbeddedDemoScriptParses(t *testing.T) {
	reg, err := models.NewRegistry("", 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Model("faux:demo"); err != nil {
		t.Fatal(err)
	}
}

// A faux script's step is the count of delivered assistant messages: an aborted one (the
// placeholder a restart leaves for a message that was streaming, or a Stop mid-stream) is not a
// step, so the next request streams the step that was cut, not the one after it (issue 16
// item 9).
func TestAnAbortedMessageIsNotAFauxStep(t *testing.T) {
	sc, err := models.ParseScript("steps.json", []byte(`{"steps":[
	  {"content":[{"type":"text","text":"one"}],"stopReason":"stop"},
	  {"content":[{"type":"text","text":"two"}],"stopReason":"stop"},
	  {"content":[{"type":"text","text":"three"}],"stopReason":"stop"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	user := agent.Message{Role: agent.User, Content: []agent.Block{{Type: "text", Text: "go"}}}
	said := func(text string) agent.Message {
		return agent.Message{Role: agent.Assistant, StopReason: agent.Stop, Content: []agent.Block{{Type: "text", Text: text}}}
	}
	restarted := agent.Message{Role: agent.Assistant, StopReason: agent.Aborted, ErrorMessage: agent.InterruptedText}
	stopped := agent.Message{Role: agent.Assistant, StopReason: agent.Aborted, ErrorMessage: "Run stopped by owner",
		Content: []agent.Block{{Type: "text", Text: "tw"}}}
	failed := agent.Message{Role: agent.Assistant, StopReason: agent.Error, ErrorMessage: "scripted failure"}
	tests := []struct {
		name       string
		transcript []agent.Message
		want       string
	}{
		{"first request", []agent.Message{user}, "one"},
		{"after a delivered step", []agent.Message{user, said("one"), user}, "two"},
		{"after a restart's placeholder", []agent.Message{user, restarted, user}, "one"},
		{"after a delivered step and a restart", []agent.Message{user, said("one"), user, restarted, user}, "two"},
		{"after a Stop mid-stream", []agent.Message{user, said("one"), user, stopped, user}, "two"},
		{"an error step was delivered", []agent.Message{user, failed, user}, "two"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &models.Faux{Script: sc}
			msg, err := f.Stream(context.Background(), agent.Request{Messages: tt.transcript}, func(agent.Delta) {})
			if err != nil {
				t.Fatal(err)
			}
			if got := msg.Text(); got != tt.want {
				t.Errorf("streamed %q, want %q", got, tt.want)
			}
		})
	}
}

// A step's usage is the message's usage; its thinking streams as Thinking deltas, apart from the
// text, and stays in the message as a thinking block (SPEC §17).
func TestFauxReportsUsageAndThinking(t *testing.T) {
	sc, err := models.ParseScript("usage.json", []byte(`{"steps":[
	  {"content":[{"type":"thinking","thinking":"The README first."},{"type":"text","text":"Let me look."}],
	   "stopReason":"stop","usage":{"input":1234,"output":56,"cacheRead":1024}},
	  {"content":[{"type":"text","text":"Done."}],"stopReason":"stop"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	user := agent.Message{Role: agent.User, Content: []agent.Block{{Type: "text", Text: "go"}}}
	tests := []struct {
		name         string
		transcript   []agent.Message
		wantUsage    *agent.Usage
		wantThinking string
		wantText     string
		wantContent  []agent.Block
	}{
		{"a step with usage and thinking", []agent.Message{user},
			&agent.Usage{Input: 1234, Output: 56, CacheRead: 1024}, "The README first.", "Let me look.",
			[]agent.Block{{Type: "thinking", Thinking: "The README first."}, {Type: "text", Text: "Let me look."}}},
		{"a step without", []agent.Message{user, {Role: agent.Assistant, StopReason: agent.Stop}, user},
			nil, "", "Done.", []agent.Block{{Type: "text", Text: "Done."}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var thinking, text strings.Builder
			msg, err := (&models.Faux{Script: sc}).Stream(context.Background(), agent.Request{Messages: tt.transcript}, func(d agent.Delta) {
				thinking.WriteString(d.Thinking)
				text.WriteString(d.Text)
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(msg.Usage, tt.wantUsage) {
				t.Errorf("usage: got %+v, want %+v", msg.Usage, tt.wantUsage)
			}
			if thinking.String() != tt.wantThinking || text.String() != tt.wantText || msg.Text() != tt.wantText {
				t.Errorf("streamed thinking %q and text %q, message text %q; want %q and %q", thinking.String(), text.String(), msg.Text(), tt.wantThinking, tt.wantText)
			}
			if !reflect.DeepEqual(msg.Content, tt.wantContent) {
				t.Errorf("content: got %+v, want %+v", msg.Content, tt.wantContent)
			}
		})
	}
	// The message's usage is its own: changing it leaves the script as it was.
	msg, _ := (&models.Faux{Script: sc}).Stream(context.Background(), agent.Request{Messages: []agent.Message{user}}, func(agent.Delta) {})
	msg.Usage.Input = 1
	if sc.Steps[0].Usage.Input != 1234 {
		t.Error("the message shares its usage with the script")
	}
}

// Every step of the embedded demo reports usage, so `make run` shows it (SPEC §17).
func TestTheDemoScriptReportsUsageOnEveryStep(t *testing.T) {
	reg, err := models.NewRegistry("", 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := reg.Model("faux:demo")
	if err != nil {
		t.Fatal(err)
	}
	sc := m.(*models.Faux).Script
	for i, st := range sc.Steps {
		if st.Usage == nil || st.Usage.Input <= 0 || st.Usage.Output <= 0 {
			t.Errorf("step %d: usage %+v, want input and output", i+1, st.Usage)
		}
	}
}
