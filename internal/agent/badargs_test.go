package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/models"
	"countersign/internal/tool"
)

// TestAnUnclosedToolCallJSONBecomesAnErrorResultAndTheRunGoesOn (issue 34, acceptance 2; SPEC §9):
// an OpenAI-compatible stream whose tool-call arguments are an unclosed JSON object does not end
// the run; the call does not run, the model's next request carries an error result that says the
// arguments are not valid JSON, and the run goes on to the model's next answer.
func TestAnUnclosedToolCallJSONBecomesAnErrorResultAndTheRunGoesOn(t *testing.T) {
	dialect := chatCompletions
	dialect.call = func(w io.Writer, n, prompt int) {
		chunk := func(delta map[string]any, finish any) map[string]any {
			return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake-gpt",
				"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		}
		sse(w, "", chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": fmt.Sprintf("call_%d", n),
			"type": "function", "function": map[string]any{"name": "big", "arguments": ""}}}}, nil))
		sse(w, "", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": `{"path": "README.md"`}}}}, nil))
		sse(w, "", chunk(map[string]any{}, "tool_calls"))
		io.WriteString(w, "data: [DONE]\n\n")
	}
	vendor := newFakeVendorAPI(t, dialect, 1<<20, 1)
	big := bigTool("big", 10)
	var ran atomic.Bool
	execute := big.Execute
	big.Execute = func(ctx context.Context, args json.RawMessage, up func(tool.Update), tc tool.Context) (tool.Result, error) {
		ran.Store(true)
		return execute(ctx, args, up, tc)
	}
	h := newModelHarness(t, models.NewOpenAI(models.OpenAIConfig{APIKey: "test", BaseURL: vendor.URL + "/v1", Model: "fake-gpt"}),
		agent.Config{Instructions: "Read what is asked."}, big)
	if end := h.run("read it"); end.Error != "" {
		t.Fatalf("the run ended with %q, want it to go on to the model's next answer", end.Error)
	}
	if ran.Load() {
		t.Error("the call with unreadable arguments ran")
	}
	bodies, _ := vendor.received()
	if len(bodies) != 2 {
		t.Fatalf("the vendor got %d requests, want 2 (the call, then the answer after its error result)", len(bodies))
	}
	var second struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			Content    any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(bodies[1]), &second); err != nil {
		t.Fatal(err)
	}
	var result string
	for _, m := range second.Messages {
		if m.Role == "tool" && m.ToolCallID == "call_1" {
			result = fmt.Sprint(m.Content)
		}
	}
	if !strings.Contains(result, "arguments are not valid JSON") || !strings.Contains(result, `{"path": "README.md"`) {
		t.Errorf("the tool result the model got: %q; want it to say the arguments are not valid JSON, quoting them", result)
	}
	entries, err := h.db.Entries(t.Context(), h.sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := entries[len(entries)-1].Message; last.Text() != "All read." {
		t.Errorf("the last entry: %+v, want the model's next answer", last)
	}
}

// TestTypedInstructionsKeepTheWorkspaceInTheSystemPrompt (issue 34, acceptance 3; SPEC §17): the
// person's own instructions, which do not name the workspace, are sent with the environment
// block Countersign always adds: the system prompt an OpenAI-compatible server receives holds
// both the typed text and the workspace path; so does a session with no instructions at all.
func TestTypedInstructionsKeepTheWorkspaceInTheSystemPrompt(t *testing.T) {
	for _, typed := range []string{"Answer like a pirate. Marker 5c1d.", ""} {
		t.Run(fmt.Sprintf("instructions %q", typed), func(t *testing.T) {
			vendor := newFakeVendorAPI(t, chatCompletions, 1<<20, 0)
			h := newModelHarness(t, models.NewOpenAI(models.OpenAIConfig{APIKey: "test", BaseURL: vendor.URL + "/v1", Model: "fake-gpt"}),
				agent.Config{})
			if _, err := h.runner.SetInstructions(t.Context(), h.sess.ID, typed); err != nil {
				t.Fatal(err)
			}
			if end := h.run("ahoy"); end.Error != "" {
				t.Fatal(end.Error)
			}
			bodies, _ := vendor.received()
			var body struct {
				Messages []struct {
					Role    string `json:"role"`
					Content any    `json:"content"`
				} `json:"messages"`
			}
			if err := json.Unmarshal([]byte(bodies[0]), &body); err != nil {
				t.Fatal(err)
			}
			system := ""
			for _, m := range body.Messages {
				if m.Role == "system" || m.Role == "developer" {
					system += fmt.Sprint(m.Content)
				}
			}
			if !strings.Contains(system, typed) || !strings.Contains(system, "Workspace: "+h.sess.Workspace) {
				t.Errorf("the system prompt the server got:\n%s\nwant the typed %q and the workspace %s", system, typed, h.sess.Workspace)
			}
		})
	}
}
