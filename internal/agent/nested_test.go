package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// TestExecuteToolOutcomes: every way a nested call can fail comes back as an isError outcome
// with a clear text, never as a Go error or a panic (SPEC §4); model-only and hidden tools are
// not reachable through ExecuteTool.
func TestExecuteToolOutcomes(t *testing.T) {
	type outcome struct {
		id, text string
		isError  bool
	}
	var got []outcome
	obj := json.RawMessage(`{"type":"object"}`)
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	ok := func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
		return tool.Result{Content: []tool.Content{tool.Text("fine")}}, nil
	}
	stopped, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("custom stop"))
	probe := &tool.Tool{Name: "probe", InputSchema: obj, Annotations: ro,
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			calls := []struct {
				ctx  context.Context
				name string
				args any
			}{
				{ctx, "nope", nil},
				{ctx, "modelonly", nil},
				{ctx, "hiddentool", nil},
				{ctx, "strict", map[string]any{"n": "not a number"}},
				{ctx, "guarded", nil},
				{ctx, "risky", nil},
				{ctx, "forgotten", nil},
				{ctx, "panicky", nil},
				{stopped, "plain", nil},
				{ctx, "plain", []int{1, 2}},
				{ctx, "plain", nil},
			}
			for _, c := range calls {
				o := tc.ExecuteTool(c.ctx, c.name, c.args)
				got = append(got, outcome{o.ToolCall.ID, o.Result.TextOf(), o.IsError})
			}
			return tool.Result{Content: []tool.Content{tool.Text("probed")}}, nil
		}}
	tools := []*tool.Tool{probe,
		{Name: "modelonly", InputSchema: obj, Annotations: ro, Exposure: tool.ModelOnly, Execute: ok},
		{Name: "hiddentool", InputSchema: obj, Annotations: ro, Exposure: tool.Hidden, Execute: ok},
		{Name: "strict", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`), Annotations: ro, Execute: ok},
		{Name: "guarded", InputSchema: obj, Annotations: ro, Execute: ok},
		{Name: "risky", InputSchema: obj, Execute: ok},
		{Name: "forgotten", InputSchema: obj, Execute: ok},
		{Name: "panicky", InputSchema: obj, Annotations: ro, Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			panic("kaboom")
		}},
		{Name: "plain", InputSchema: obj, Annotations: ro, Execute: ok},
	}
	block := func(_ context.Context, ev gate.CallEvent) (gate.Verdict, error) {
		if ev.ToolName == "guarded" {
			return gate.Verdict{Block: true, Reason: "guarded stays shut"}, nil
		}
		return gate.Verdict{}, nil
	}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"p","name":"probe"}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	h := newHarnessWith(t, script, agent.Config{CallHandlers: gate.Handlers{block}, ApprovalTimeout: 500 * time.Millisecond}, tools...)
	if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(15 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-h.events.C:
			if ev.Type == agent.ApprovalRequested && ev.ToolName == "risky" {
				if ev.Approval.RequestedBy != "probe" || ev.Approval.ParentToolCallID != "p" {
					t.Errorf("nested approval asked by %q for %q, want probe / p", ev.Approval.RequestedBy, ev.Approval.ParentToolCallID)
				}
				if _, err := h.runner.Gate().Decide(context.Background(), h.sess.ID, ev.Approval.ID, gate.Answer{Decision: "deny", Reason: "no", By: gate.Owner()}); err != nil {
					t.Fatal(err)
				}
			}
			done = ev.Type == agent.AgentEnd
		case <-timeout:
			t.Fatal("the run did not end")
		}
	}
	want := []outcome{
		{"p/1", `Tool "nope" not found`, true},
		{"p/2", `Tool "modelonly" not found`, true},
		{"p/3", `Tool "hiddentool" not found`, true},
		{"p/4", `Invalid arguments for tool "strict"`, true},
		{"p/5", "guarded stays shut", true},
		{"p/6", "Denied by owner: no", true},
		{"p/7", "Approval timed out", true},
		{"p/8", "tool panicky panicked: kaboom", true},
		{"p/9", "custom stop", true},
		{"p/10", `Arguments for tool "plain" are not a JSON object`, true},
		{"p/11", "fine", false},
	}
	if len(got) != len(want) {
		t.Fatalf("%d outcomes, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.id != w.id || g.isError != w.isError || !strings.Contains(g.text, w.text) {
			t.Errorf("outcome %d = %+v, want id %s isError %v text containing %q", i, g, w.id, w.isError, w.text)
		}
	}
	// Nested calls add no transcript entries; the parent's result records them.
	rs := h.toolResults()
	if len(rs) != 1 || rs[0].ToolCallID != "p" {
		t.Fatalf("tool results %+v, want only the parent's", rs)
	}
	nc := rs[0].Result.NestedCalls
	if nc == nil || len(nc.Calls) != len(want) || !nc.Complete {
		t.Fatalf("nestedCalls %+v", nc)
	}
	statuses := make([]string, len(nc.Calls))
	for i, c := range nc.Calls {
		statuses[i] = string(c.Status)
	}
	if got, want := strings.Join(statuses, ","), "error,error,error,error,blocked,denied,denied,error,unfinished,error,ok"; got != want {
		t.Errorf("nested statuses %s, want %s", got, want)
	}
}

// TestNestedContextEndsWithTheCall: a nested call's context is cancelled when ExecuteTool
// returns, so nothing the nested tool left running outlives the call, also when the parent
// passes its own context (the usual case).
func TestNestedContextEndsWithTheCall(t *testing.T) {
	obj := json.RawMessage(`{"type":"object"}`)
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	var childCtx context.Context
	var afterReturn, parentAlive error
	child := &tool.Tool{Name: "child", InputSchema: obj, Annotations: ro,
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			childCtx = ctx
			return tool.Result{Content: []tool.Content{tool.Text("ok")}}, nil
		}}
	parent := &tool.Tool{Name: "parent", InputSchema: obj, Annotations: ro,
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			if o := tc.ExecuteTool(ctx, "child", nil); o.IsError {
				return tool.Result{}, errors.New(o.Result.TextOf())
			}
			afterReturn, parentAlive = childCtx.Err(), ctx.Err()
			return tool.Result{Content: []tool.Content{tool.Text("done")}}, nil
		}}
	h := newHarness(t, `{"steps": [
  {"content": [{"type": "toolCall", "id": "c1", "name": "parent", "arguments": {}}], "stopReason": "toolUse"},
  {"content": [{"type": "text", "text": "end"}], "stopReason": "stop"}
]}`, nil, parent, child)
	if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	h.await(agent.AgentEnd)
	if childCtx == nil {
		t.Fatal("the nested call did not run")
	}
	if afterReturn == nil {
		t.Error("the nested call's context was still live after ExecuteTool returned")
	}
	if parentAlive != nil {
		t.Errorf("the parent's context ended with its nested call: %v", parentAlive)
	}
}

// TestNestedEndCarriesItsRecordEntryAndDecision: a nested call's tool_execution_end carries the
// entry its parent's nestedCalls record keeps (its result text included) and its decision as the
// audit stores it, so a live page can draw the finished call from the same data a reloaded one
// reads (issue 16, item 4).
func TestNestedEndCarriesItsRecordEntryAndDecision(t *testing.T) {
	var peeks, shells atomic.Int32
	probe := &tool.Tool{Name: "probe", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			tc.ExecuteTool(ctx, "peek", map[string]any{"path": "a"})
			tc.ExecuteTool(ctx, "shell", map[string]any{"command": "b"})
			return tool.Result{Content: []tool.Content{tool.Text("probed")}}, nil
		}}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"p","name":"probe"}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	h := newHarness(t, script, nil, probe, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	ends := map[string]agent.Event{}
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case ev := <-h.events.C:
			switch {
			case ev.Type == agent.ApprovalRequested:
				if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
					t.Fatal(err)
				}
			case ev.Type == agent.ToolExecutionEnd && ev.ParentToolCallID == "p":
				ends[ev.ToolCallID] = *ev
			}
			done = ev.Type == agent.AgentEnd
		case <-timeout:
			t.Fatal("the run did not end")
		}
	}
	rs := h.toolResults()
	if len(rs) != 1 || rs[0].Result.NestedCalls == nil || len(rs[0].Result.NestedCalls.Calls) != 2 {
		t.Fatalf("tool results %+v, want the parent's with 2 nested calls", rs)
	}
	stored, err := h.db.Approvals(ctx, h.sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	byCall := map[string]gate.Approval{}
	for _, a := range stored {
		byCall[a.ToolCallID] = a
	}
	for i, want := range []struct{ id, result, decidedBy string }{
		{"p/1", `read {"path":"a"}`, gate.ByPolicy},
		{"p/2", `ran {"command":"b"}`, gate.ByOwner},
	} {
		ev, ok := ends[want.id]
		if !ok {
			t.Fatalf("no tool_execution_end for %s", want.id)
		}
		entry := rs[0].Result.NestedCalls.Calls[i]
		if ev.NestedCall == nil || !reflect.DeepEqual(*ev.NestedCall, entry) {
			t.Errorf("%s: the event's entry %+v differs from the stored one %+v", want.id, ev.NestedCall, entry)
		}
		if entry.Result != want.result || entry.Truncated {
			t.Errorf("%s: record result %q (truncated %v), want %q", want.id, entry.Result, entry.Truncated, want.result)
		}
		a := byCall[want.id]
		if ev.Approval == nil || ev.Approval.ID != a.ID || ev.Approval.DecidedBy != want.decidedBy || ev.Approval.Status != a.Status {
			t.Errorf("%s: the event's decision %+v, want the stored %+v by %s", want.id, ev.Approval, a, want.decidedBy)
		}
	}
}

// TestGrantReleasedCallCarriesItsDecisionLive: a call a session grant lets through never
// prompts, yet its tool_execution_start and tool_execution_end carry the automatic decision the
// audit stores, so a live page shows the same decision line a reloaded one does.
func TestGrantReleasedCallCarriesItsDecisionLive(t *testing.T) {
	script := `{"steps":[
	  {"content":[{"type":"toolCall","id":"s1","name":"shell","arguments":{"command":"one"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"toolCall","id":"s2","name":"shell","arguments":{"command":"two"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	var shells atomic.Int32
	h := newHarness(t, script, nil, riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := h.await(agent.ApprovalRequested)
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, asked.Approval.ID, gate.Answer{Decision: "approve_session", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	var start, end agent.Event
	for start.ToolCallID != "s2" {
		start = h.await(agent.ToolExecutionStart)
	}
	for end.ToolCallID != "s2" {
		end = h.await(agent.ToolExecutionEnd)
	}
	stored, err := h.db.Approvals(ctx, h.sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	var granted gate.Approval
	for _, a := range stored {
		if a.ToolCallID == "s2" {
			granted = a
		}
	}
	if granted.DecidedBy != gate.ByGrant || !granted.Automatic {
		t.Fatalf("stored decision for s2 %+v, want an automatic one by the session grant", granted)
	}
	for _, ev := range []agent.Event{start, end} {
		if ev.Approval == nil || ev.Approval.ID != granted.ID || ev.Approval.DecidedBy != gate.ByGrant || !ev.Approval.Automatic {
			t.Errorf("%s carries %+v, want the stored decision %s", ev.Type, ev.Approval, granted.ID)
		}
	}
}
