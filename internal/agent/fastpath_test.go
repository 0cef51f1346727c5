package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// The nested fast path (issue 35) keeps a nested call's live state, record, result and entry in
// its invocation, finds its audit group through its parent and makes its context lazily; these
// tests hold it to what a viewer, the audit and the parent's record saw before.

// fanTool is a tool that calls, n times each and in turn, the tools named, with arguments
// {"path": "<i>"}, from workers goroutines at once; after the loop it calls done (nil: none).
func fanTool(name string, n, workers int, done func(), names ...string) *tool.Tool {
	return &tool.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			var wg sync.WaitGroup
			var failed atomic.Value
			for w := range workers {
				wg.Go(func() {
					for i := w; i < n; i += workers {
						for _, callee := range names {
							if o := tc.ExecuteTool(ctx, callee, map[string]any{"path": fmt.Sprint(i)}); o.IsError {
								failed.Store(o.Result.TextOf())
							}
						}
					}
				})
			}
			wg.Wait()
			if f := failed.Load(); f != nil {
				return tool.Result{}, errors.New(f.(string))
			}
			if done != nil {
				done()
			}
			return tool.Result{Content: []tool.Content{tool.Text("fanned")}}, nil
		}}
}

// TestAViewerJoiningARunOfNestedCallsSeesItsState: a viewer that joins while a tool makes 300
// nested calls — before its nestedCalls record is full (call 100) and after (call 280) — reads
// a live snapshot with the running call and its decision, and the finished calls the record
// kept with their entries and results, and no others; from then on it gets every event of the
// calls. The audit counts every call in the group the snapshot names.
func TestAViewerJoiningARunOfNestedCallsSeesItsState(t *testing.T) {
	const n, kept = 300, 256 // kept: SPEC §4's bound on the nestedCalls record
	type view struct {
		at   int
		live agent.Live
		sub  *agent.Subscription
	}
	var (
		h     *harness
		views []view
		peeks atomic.Int32
		atEnd agent.Live
	)
	peek := &tool.Tool{Name: "peek", InputSchema: objectSchema, Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(_ context.Context, args json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			if k := int(peeks.Add(1)); k == 100 || k == 280 {
				// A viewer connects: it subscribes, then reads the live state.
				sub := h.broker.Subscribe(h.sess.ID)
				views = append(views, view{k, h.runner.Live(h.sess.ID), sub})
			}
			return tool.Result{Content: []tool.Content{tool.Text("read " + string(args))}}, nil
		}}
	fan := fanTool("fan", n, 1, func() { atEnd = h.runner.Live(h.sess.ID) }, "peek")
	h = newHarness(t, `{"steps": [
  {"content": [{"type": "toolCall", "id": "f", "name": "fan", "arguments": {}}], "stopReason": "toolUse"},
  {"content": [{"type": "text", "text": "end"}], "stopReason": "stop"}
]}`, nil, fan, peek)
	if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	h.await(agent.AgentEnd)
	if len(views) != 2 {
		t.Fatalf("%d viewers joined, want 2", len(views))
	}
	group := ""
	for _, v := range views {
		var running *agent.LiveCall
		var finished []*agent.LiveCall
		for _, c := range v.live.Calls {
			switch {
			case c.ParentToolCallID != "f":
			case c.Running:
				if running != nil {
					t.Fatalf("joined at call %d: two running nested calls, %s and %s", v.at, running.ToolCallID, c.ToolCallID)
				}
				running = c
			default:
				finished = append(finished, c)
			}
		}
		if c := v.live.Calls[0]; c.ToolCallID != "f" || !c.Running {
			t.Errorf("joined at call %d: the first live call is %s (running %v), want the parent f running", v.at, c.ToolCallID, c.Running)
		}
		id := fmt.Sprintf("f/%d", v.at)
		if running == nil {
			t.Fatalf("joined at call %d: no running nested call in the snapshot, want %s", v.at, id)
		}
		a := running.Approval
		if running.ToolCallID != id || string(running.Arguments) != fmt.Sprintf(`{"path":"%d"}`, v.at-1) ||
			a == nil || a.Status != gate.Approved || !a.Automatic || a.ToolCallID != id || a.DecidedAt == nil || !strings.HasPrefix(a.ID, "G") {
			t.Fatalf("joined at call %d: running nested call %+v (decision %+v), want %s with its arguments and its automatic grouped record", v.at, running, a, id)
		}
		if group == "" {
			group = a.ID
		} else if a.ID != group {
			t.Errorf("joined at call %d: the call's group is %s, was %s", v.at, a.ID, group)
		}
		if want := min(v.at-1, kept); len(finished) != want {
			t.Fatalf("joined at call %d: %d finished nested calls in the snapshot, want %d", v.at, len(finished), want)
		}
		for i, c := range finished {
			if id := fmt.Sprintf("f/%d", i+1); c.ToolCallID != id || c.NestedCall == nil || c.NestedCall.ID != id ||
				c.Result == nil || c.Result.TextOf() != fmt.Sprintf(`read {"path":"%d"}`, i) || c.NestedCall.Result != c.Result.TextOf() ||
				c.Approval == nil || c.Approval.ID != group {
				t.Fatalf("joined at call %d: finished nested call %d = %+v (entry %+v), want %s with its entry, result and group", v.at, i, c, c.NestedCall, id)
			}
		}
		// Every event of the calls from then on: the end of the running call, then a start and
		// an end for each later one; an end carries its entry while the record keeps calls.
		var starts, ends, entries int
		for ev := range v.sub.C {
			if ev.Type == agent.AgentEnd {
				break
			}
			if ev.ParentToolCallID != "f" {
				continue
			}
			switch ev.Type {
			case agent.ToolExecutionStart:
				starts++
			case agent.ToolExecutionEnd:
				ends++
				if ev.NestedCall != nil {
					entries++
				}
				if ev.Approval == nil || ev.Approval.ID != group || ev.Result == nil {
					t.Fatalf("joined at call %d: tool_execution_end of %s carries decision %+v and result %+v, want the group's and one", v.at, ev.ToolCallID, ev.Approval, ev.Result)
				}
			}
		}
		h.broker.Unsubscribe(v.sub)
		if starts != n-v.at || ends != n-v.at+1 || entries != max(kept-v.at+1, 0) {
			t.Errorf("joined at call %d: %d starts, %d ends (%d with an entry); want %d, %d (%d)", v.at, starts, ends, entries, n-v.at, n-v.at+1, max(kept-v.at+1, 0))
		}
	}
	if kids := atEnd.Children(atEnd.Calls[0].MessageID, "f"); len(kids) != kept {
		t.Errorf("after the loop the snapshot holds %d nested calls, want the %d the record kept", len(kids), kept)
	}
	res := h.toolResults()
	if len(res) != 1 || res[0].Result.NestedCalls == nil || len(res[0].Result.NestedCalls.Calls) != kept || res[0].Result.NestedCalls.Complete {
		t.Fatalf("the parent's result %+v: want a nestedCalls record of %d calls, incomplete", res, kept)
	}
	var rows []gate.Approval
	as, err := h.db.Approvals(context.Background(), h.sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.ParentToolCallID == "f" {
			rows = append(rows, a)
		}
	}
	if len(rows) != 1 || rows[0].ID != group || rows[0].Count != n {
		t.Errorf("audit rows of f's nested calls %+v: want one, %s, counting %d", rows, group, n)
	}
}

// TestNestedAuditCountsStayExact: two parent calls of one message, each calling two tools 300
// times from four goroutines at once, leave one audit row per parent and tool, counting exactly
// its calls, whose id every entry of the parent's record names — however the writer cut them
// into batches, and although each parent finds its groups by itself.
func TestNestedAuditCountsStayExact(t *testing.T) {
	const n = 300
	var peeks, looks atomic.Int32
	h := newHarness(t, `{"steps": [
  {"content": [{"type": "toolCall", "id": "a", "name": "fan", "arguments": {}},
               {"type": "toolCall", "id": "b", "name": "fan", "arguments": {}}], "stopReason": "toolUse"},
  {"content": [{"type": "text", "text": "end"}], "stopReason": "stop"}
]}`, nil, fanTool("fan", n, 4, nil, "peek", "look"), readOnlyTool("peek", &peeks), readOnlyTool("look", &looks))
	// The harness's viewer would fall behind 2,400 events and be dropped: wait for the run.
	h.broker.Unsubscribe(h.events)
	if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	h.runner.Wait()
	if peeks.Load() != 2*n || looks.Load() != 2*n {
		t.Fatalf("peek ran %d times, look %d; want %d each", peeks.Load(), looks.Load(), 2*n)
	}
	as, err := h.db.Approvals(context.Background(), h.sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]gate.Approval{} // by "parent tool"
	for _, a := range as {
		if a.ParentToolCallID == "" {
			continue
		}
		k := a.ParentToolCallID + " " + a.ToolName
		if _, dup := rows[k]; dup {
			t.Fatalf("two audit rows for %s", k)
		}
		rows[k] = a
	}
	if len(rows) != 4 {
		t.Fatalf("audit rows %v, want one per parent and tool (4)", rows)
	}
	for k, r := range rows {
		if r.Count != n || r.Status != gate.Approved || !strings.HasPrefix(r.ID, "G") {
			t.Errorf("row %s: %s %s counting %d, want a grouped approved row counting %d", k, r.ID, r.Status, r.Count, n)
		}
	}
	for _, m := range h.toolResults() {
		rec := m.Result.NestedCalls
		if rec == nil || len(rec.Calls) != 256 {
			t.Fatalf("%s's record %+v: want 256 calls", m.ToolCallID, rec)
		}
		for _, c := range rec.Calls {
			if want := rows[m.ToolCallID+" "+c.Name].ID; c.ApprovalID != want {
				t.Fatalf("%s's entry %s names record %s, want its group's row %s", m.ToolCallID, c.ID, c.ApprovalID, want)
			}
		}
	}
}
