package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/models"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// TestOnUpdateIsCoalesced: a tool that reports progress 100,000 times cannot flood subscribers,
// and the last report always arrives, before the call's end.
func TestOnUpdateIsCoalesced(t *testing.T) {
	const n = 100_000
	chatty := &tool.Tool{Name: "chatty", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(_ context.Context, _ json.RawMessage, onUpdate func(tool.Update), _ tool.Context) (tool.Result, error) {
			for i := 1; i <= n; i++ {
				onUpdate(tool.Update{Progress: float64(i), Total: n})
			}
			return tool.Result{Content: []tool.Content{tool.Text("done")}}, nil
		}}
	h := newHarness(t, `{"steps":[{"content":[{"type":"toolCall","id":"c","name":"chatty"}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`, nil, chatty)
	if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	var updates []float64
	timeout := time.After(20 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-h.events.C:
			switch ev.Type {
			case agent.ToolExecutionUpdate:
				updates = append(updates, ev.Update.Progress)
			case agent.ToolExecutionEnd:
				done = true
			}
		case <-timeout:
			t.Fatal("no tool_execution_end")
		}
	}
	if len(updates) == 0 || updates[len(updates)-1] != n {
		t.Fatalf("last update before the end = %v, want %d", updates[max(len(updates)-1, 0):], n)
	}
	// Coalesced: far fewer events than calls. The bound is loose on purpose (slow machines
	// take longer, so they may see more intervals), but nowhere near one event per call.
	if len(updates) > 1000 {
		t.Errorf("%d update events for %d onUpdate calls: not coalesced", len(updates), n)
	}
}

func TestToolResultHandlersPatchBeforeValidation(t *testing.T) {
	counter := &tool.Tool{Name: "counter", InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"count":{"type":"integer"}},"required":["count"]}`),
		Annotations:  tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{Content: []tool.Content{tool.Text("secret-token-123")}, StructuredContent: json.RawMessage(`{"count":"two"}`)}, nil
		}}
	var seen []string
	redact := func(_ context.Context, call tool.Call, res tool.Result) tool.Result {
		seen = append(seen, call.Name)
		res.Content = []tool.Content{tool.Text(strings.ReplaceAll(res.TextOf(), "secret-token-123", "[redacted]"))}
		res.StructuredContent = json.RawMessage(`{"count":2}`)
		return res
	}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"c","name":"counter"}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	h := newHarnessWith(t, script, agent.Config{ResultHandlers: []agent.ResultHandler{redact}}, counter)
	if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	h.await(agent.AgentEnd)
	res := h.toolResults()[0].Result
	if res.IsError || res.TextOf() != "[redacted]" || string(res.StructuredContent) != `{"count":2}` {
		t.Errorf("result %+v: want the patched, now valid result", res)
	}
	if !slices.Equal(seen, []string{"counter"}) {
		t.Errorf("tool_result handlers saw %v", seen)
	}
}

// recordingModel wraps the faux model and records the tools declared in each request.
type recordingModel struct {
	inner agent.Model
	mu    sync.Mutex
	tools [][]string
}

func (m *recordingModel) Stream(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
	var names []string
	for _, t := range req.Tools {
		names = append(names, t.Name)
	}
	m.mu.Lock()
	m.tools = append(m.tools, names)
	m.mu.Unlock()
	return m.inner.Stream(ctx, req, onDelta)
}

func TestSetActiveToolsAndExposure(t *testing.T) {
	ctx := context.Background()
	sc := testkit.Script(t, `{"steps":[
	  {"content":[{"type":"toolCall","id":"a","name":"lazy"},{"type":"toolCall","id":"b","name":"secret"},{"type":"toolCall","id":"c","name":"plain"}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"},
	  {"content":[{"type":"toolCall","id":"d","name":"lazy"},{"type":"toolCall","id":"e","name":"plain"}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`)
	ok := func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
		return tool.Result{Content: []tool.Content{tool.Text("ran")}}, nil
	}
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	tools := []*tool.Tool{
		{Name: "plain", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: ro, Execute: ok},
		{Name: "lazy", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: ro, Exposure: tool.Deferred, Execute: ok},
		{Name: "secret", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: ro, Exposure: tool.Hidden, Execute: ok},
	}
	env := testkit.New(t, testkit.Options{Tools: tools})
	rec := &recordingModel{inner: &models.Faux{Script: sc}}
	env.Scripts.Put("faux:test", rec)
	r := env.Runner
	sess := env.Session("t", "faux:test")
	sub := env.Broker.Subscribe(sess.ID)
	waitEnd := func() { testkit.Await(t, sub, agent.AgentEnd, 0, nil) }
	results := func() map[string]string {
		es := env.Entries(sess.ID)
		out := map[string]string{}
		for _, e := range es {
			if e.Message.Role == agent.ToolResult {
				out[e.Message.ToolCallID] = e.Message.Result.TextOf()
			}
		}
		return out
	}

	// Before activation: only the direct tool is declared and callable.
	if err := r.Send(ctx, sess.ID, "one"); err != nil {
		t.Fatal(err)
	}
	waitEnd()
	got := results()
	want := map[string]string{"a": `Tool "lazy" not found`, "b": `Tool "secret" not found`, "c": "ran"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("call %s: %q, want %q", k, got[k], v)
		}
	}

	active, ignored, err := r.SetActiveTools(ctx, sess.ID, []string{"lazy", "secret", "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(active, []string{"lazy"}) || !slices.Equal(ignored, []string{"secret", "nope"}) {
		t.Errorf("SetActiveTools = %v, ignored %v; want [lazy], ignored [secret nope]", active, ignored)
	}
	if _, _, err := r.SetActiveTools(ctx, "no-such-session", nil); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("unknown session: %v", err)
	}

	// After: the model is told (its next request declares lazy, not plain) and calls follow.
	if err := r.Send(ctx, sess.ID, "two"); err != nil {
		t.Fatal(err)
	}
	waitEnd()
	got = results()
	if got["d"] != "ran" || got["e"] != `Tool "plain" not found` {
		t.Errorf("after SetActiveTools: d=%q e=%q", got["d"], got["e"])
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !slices.Equal(rec.tools[0], []string{"plain"}) || !slices.Equal(rec.tools[2], []string{"lazy"}) {
		t.Errorf("declared tools per request %v: want [plain] before, [lazy] after", rec.tools)
	}
}
