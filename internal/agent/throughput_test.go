package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// TestNestedAuditIsCommittedBeforeTheParentsResult: the automatic records of nested calls are
// written in the background (in batches), yet every one of them is in the store once the parent's
// result is: allowed ones approved by policy, grouped (issue 19) into one row that counts them
// all, blocked ones denied by the handler, a row each.
func TestNestedAuditIsCommittedBeforeTheParentsResult(t *testing.T) {
	const n = 300
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	leaf := &tool.Tool{Name: "leaf", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: ro,
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{Content: []tool.Content{tool.Text("ok")}}, nil
		}}
	parent := &tool.Tool{Name: "parent", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: ro,
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			for i := range n {
				tc.ExecuteTool(ctx, "leaf", map[string]int{"i": i})
			}
			return tool.Result{Content: []tool.Content{tool.Text("done")}}, nil
		}}
	block := func(_ context.Context, ev gate.CallEvent) (gate.Verdict, error) {
		if strings.Contains(string(ev.Input), `"i":7}`) {
			return gate.Verdict{Block: true, Reason: "not seven"}, nil
		}
		return gate.Verdict{}, nil
	}
	script := `{"steps":[
	  {"content":[{"type":"toolCall","id":"p1","name":"parent","arguments":{}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	h := newHarness(t, script, gate.Handlers{block}, leaf, parent)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	// The parent's end event is published once its result is committed.
	for h.await(agent.ToolExecutionEnd).ToolCallID != "p1" {
	}
	as, err := h.db.Approvals(ctx, h.sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	approved, denied, rows := 0, 0, 0
	rowOf := map[string]gate.Approval{}
	for _, a := range as {
		if a.ToolName != "leaf" {
			continue
		}
		rowOf[a.ID] = a
		if !a.Automatic || a.ParentToolCallID != "p1" || a.RequestedBy != "parent" {
			t.Errorf("nested record %+v: want automatic, parent p1, requested by parent", a)
		}
		switch {
		case a.Status == gate.Approved && a.DecidedBy == "policy":
			approved += a.Calls()
			rows++
		case a.Status == gate.Denied && a.DecidedBy == "tool_call handler" && a.Reason == "not seven" && !a.Grouped():
			denied++
		default:
			t.Errorf("unexpected record %+v", a)
		}
	}
	if approved != n-1 || denied != 1 {
		t.Fatalf("%d approved and %d denied calls recorded once the parent's result is stored, want %d and 1", approved, denied, n-1)
	}
	if rows != 1 {
		t.Errorf("the %d approved calls are in %d rows, want one grouped row", approved, rows)
	}
	// The parent's nestedCalls record names each kept call's row: the group's, or the denial's own.
	rs := h.toolResults()
	if len(rs) != 1 || rs[0].Result.NestedCalls == nil {
		t.Fatalf("tool results %+v, want the parent's with its nestedCalls", rs)
	}
	for _, c := range rs[0].Result.NestedCalls.Calls {
		row, ok := rowOf[c.ApprovalID]
		if !ok || (c.Status == "ok") != (row.Status == gate.Approved && row.Grouped()) || (c.Status == "blocked" && row.ToolCallID != c.ID) {
			t.Fatalf("nested call %s (%s) names row %q = %+v, want its decision's row", c.ID, c.Status, c.ApprovalID, row)
		}
	}
}

// TestMessageUpdatesAreThrottled: a model streaming hundreds of deltas at once reaches
// subscribers as a few message_update events; together their deltas are the whole text, and the
// last one carries the whole message, before message_end.
func TestMessageUpdatesAreThrottled(t *testing.T) {
	var words []string
	for i := range 400 {
		words = append(words, fmt.Sprintf("w%d", i))
	}
	text := strings.Join(words, " ")
	script := `{"steps":[{"content":[{"type":"text","text":"` + text + `"}],"stopReason":"stop"}]}`
	h := newHarness(t, script, nil)
	if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	var deltas strings.Builder
	updates, ended := 0, false
	for !ended {
		ev := <-h.events.C
		switch {
		case ev.Type == agent.MessageUpdate:
			if ended {
				t.Fatal("message_update after message_end")
			}
			updates++
			deltas.WriteString(ev.Delta)
			if got := ev.Message.Text(); got != deltas.String() {
				t.Fatalf("update %d: message text %q is not the deltas so far %q", updates, got, deltas.String())
			}
		case ev.Type == agent.MessageEnd && ev.Message.Role == agent.Assistant:
			ended = true
		case ev.Type == agent.AgentEnd:
			t.Fatal("agent_end before the assistant's message_end")
		}
	}
	if deltas.String() != text {
		t.Fatalf("the deltas add up to %d bytes, want the %d of the text", deltas.Len(), len(text))
	}
	if updates == 0 || updates > 20 {
		t.Fatalf("%d message_update events for a text streamed at once in hundreds of chunks, want a few", updates)
	}
}

// TestPublishedEventsEncodeOnceAndAlike: every subscriber's copy of a published event encodes to
// the same JSON as the event itself.
func TestPublishedEventsEncodeOnceAndAlike(t *testing.T) {
	b := agent.NewBroker()
	s1, s2 := b.Subscribe("s"), b.Subscribe("s")
	res := tool.Result{Content: []tool.Content{tool.Text("<b>&</b>")}, StructuredContent: json.RawMessage(`{"n":1}`)}
	ev := agent.Event{Type: agent.ToolExecutionEnd, SessionID: "s", ToolCallID: "c1", ToolName: "t", Result: &res}
	want, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	b.Publish(ev)
	for _, s := range []*agent.Subscription{s1, s2} {
		got, err := json.Marshal(<-s.C)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("published event encodes as\n%s\nwant\n%s", got, want)
		}
	}
	if !strings.Contains(string(want), `"type":"tool_execution_end","sessionId":"s"`) {
		t.Fatalf("encoding %s lost the field names or order", want)
	}
}

// TestActiveToolsChangedMidRunReachTheNextRequest: the run keeps its session in memory between
// model requests, yet a SetActiveTools during the run is seen by the run's next request.
func TestActiveToolsChangedMidRunReachTheNextRequest(t *testing.T) {
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	release, paused := make(chan struct{}), make(chan struct{})
	pause := &tool.Tool{Name: "pause", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: ro,
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			close(paused)
			<-release
			return tool.Result{Content: []tool.Content{tool.Text("paused")}}, nil
		}}
	lazy := &tool.Tool{Name: "lazy", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: ro, Exposure: tool.Deferred,
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{Content: []tool.Content{tool.Text("ran")}}, nil
		}}
	script := `{"steps":[
	  {"content":[{"type":"toolCall","id":"p","name":"pause"}],"stopReason":"toolUse"},
	  {"content":[{"type":"toolCall","id":"l","name":"lazy"}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	h := newHarness(t, script, nil, pause, lazy)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	<-paused
	if _, _, err := h.runner.SetActiveTools(ctx, h.sess.ID, []string{"pause", "lazy"}); err != nil {
		t.Fatal(err)
	}
	close(release)
	h.await(agent.AgentEnd)
	for _, m := range h.toolResults() {
		if m.ToolCallID == "l" && m.Result.TextOf() != "ran" {
			t.Fatalf("lazy, activated during the run, got %q at the next request", m.Result.TextOf())
		}
	}
}
