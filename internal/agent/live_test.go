package agent

import (
	"fmt"
	"testing"

	"countersign/internal/tool"
)

// TestLiveKeepsNestedCallsBounded: a tool making thousands of nested calls leaves at most
// maxNestedCalls finished ones per parent in the live snapshot — those its nestedCalls record
// kept, whose tool_execution_end carries the kept entry — while running ones are always there,
// and other parents are not affected.
func TestLiveKeepsNestedCallsBounded(t *testing.T) {
	var s liveState
	ev := func(typ EventType, parent, id string) Event {
		return Event{Type: typ, SessionID: "s", MessageID: "m", ToolCallID: id, ParentToolCallID: parent, ToolName: "t"}
	}
	// end is a nested call's tool_execution_end; the record kept the first maxNestedCalls.
	end := func(parent, id string, i int) Event {
		e := ev(ToolExecutionEnd, parent, id)
		if i <= maxNestedCalls {
			e.NestedCall = &tool.NestedCall{ID: id, Name: "t", Status: "ok"}
		}
		return e
	}
	s.apply(ev(ToolExecutionStart, "", "p"))
	s.apply(ev(ToolExecutionStart, "", "q"))
	const n = 5 * maxNestedCalls
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("p/%d", i)
		s.apply(ev(ToolExecutionStart, "p", id))
		s.apply(end("p", id, i))
	}
	s.apply(ev(ToolExecutionStart, "p", "p/running"))
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("q/%d", i)
		s.apply(ev(ToolExecutionStart, "q", id))
		s.apply(end("q", id, i))
	}
	live := s.snapshot()
	kids := live.Children("m", "p")
	if len(kids) != maxNestedCalls+1 {
		t.Fatalf("p has %d live nested calls, want %d finished + 1 running", len(kids), maxNestedCalls)
	}
	for i, c := range kids[:maxNestedCalls] {
		if want := fmt.Sprintf("p/%d", i+1); c.ToolCallID != want || c.Running {
			t.Fatalf("nested call %d = %s running=%v, want %s finished", i, c.ToolCallID, c.Running, want)
		}
		if c.NestedCall == nil || c.NestedCall.ID != c.ToolCallID {
			t.Fatalf("nested call %s lost its record entry: %+v", c.ToolCallID, c.NestedCall)
		}
	}
	if c := live.Call("m", "p/running"); c == nil || !c.Running {
		t.Errorf("the running nested call is missing or not running: %+v", c)
	}
	if got := len(live.Children("m", "q")); got != 3 {
		t.Errorf("q has %d live nested calls, want 3", got)
	}
	if len(s.live.Calls) > 4*maxNestedCalls {
		t.Errorf("live.Calls holds %d calls: dropped calls were not compacted", len(s.live.Calls))
	}
	if live.Call("m", "p") == nil || live.Call("m", "q") == nil {
		t.Error("a model-issued call is missing")
	}
	// A decision published after its call ended (the gate wakes the call first) does not bring a
	// dropped call back.
	late := ev(ApprovalRequested, "p", "p/late")
	s.apply(late)
	s.apply(ev(ToolExecutionEnd, "p", "p/late"))
	s.apply(ev(ApprovalResolved, "p", "p/late"))
	s.apply(ev(ToolExecutionUpdate, "p", "p/late"))
	if c := s.snapshot().Call("m", "p/late"); c != nil {
		t.Errorf("a dropped nested call came back after its end: %+v", c)
	}
	if got := len(s.snapshot().Children("m", "p")); got != maxNestedCalls+1 {
		t.Errorf("p has %d live nested calls after the late events, want %d", got, maxNestedCalls+1)
	}
}
