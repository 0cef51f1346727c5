package agent

import (
	"encoding/json"
	"slices"
	"sync"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// LiveCall is the in-memory state of a call of the running run: what a page reloaded mid-run
// needs besides the store (progress, nested calls not yet recorded in their parent's result).
type LiveCall struct {
	ToolCallID       string          `json:"toolCallId"`
	ParentToolCallID string          `json:"parentToolCallId,omitempty"`
	MessageID        string          `json:"messageId"`
	ToolName         string          `json:"toolName"`
	Arguments        json.RawMessage `json:"arguments,omitempty"`
	Running          bool            `json:"running"`
	Update           *tool.Update    `json:"update,omitempty"`
	Result           *tool.Result    `json:"result,omitempty"`
	// Approval is the call's latest approval, pending or decided.
	Approval *gate.Approval `json:"approval,omitempty"`
	// NestedCall is, for a finished nested call, the entry its parent's nestedCalls record keeps
	// for it: a page draws the finished call from it, live and after a reload alike.
	NestedCall *tool.NestedCall `json:"nestedCall,omitempty"`

	dropped bool // past the parent's maxNestedCalls finished calls: no longer in the snapshot
}

// Live is a snapshot of a session's run in progress: the assistant message being streamed (nil
// when none) and the calls seen so far, in the order they first appeared.
type Live struct {
	Running   bool     `json:"running"`
	Streaming *Message `json:"streaming,omitempty"`
	// Partial are the streaming message's tool calls whose arguments are still streaming, and
	// Retry the wait before its request is tried again, if one is on (as the last
	// message_update said).
	Partial []PartialCall `json:"partialCalls,omitempty"`
	Retry   *Retry        `json:"retry,omitempty"`
	Calls   []*LiveCall   `json:"calls,omitempty"`
}

// Call returns the live call with id toolCallID in message messageID, or nil.
func (l Live) Call(messageID, toolCallID string) *LiveCall {
	for _, c := range l.Calls {
		if c.MessageID == messageID && c.ToolCallID == toolCallID {
			return c
		}
	}
	return nil
}

// Children returns the live nested calls whose parent is parentID in message messageID.
func (l Live) Children(messageID, parentID string) []*LiveCall {
	var out []*LiveCall
	for _, c := range l.Calls {
		if c.MessageID == messageID && c.ParentToolCallID == parentID {
			out = append(out, c)
		}
	}
	return out
}

// liveState tracks a run's Live snapshot from the events the run publishes.
type liveState struct {
	mu   sync.Mutex
	live Live
	// byID finds a call of live.Calls by message and call id without a scan: a run may make
	// tens of thousands of nested calls, each with several events.
	byID map[liveKey]*LiveCall
	// kept counts, per parent call, its finished nested calls still in live.Calls; dropped
	// counts the calls of live.Calls marked dropped and not yet compacted away.
	kept    map[liveKey]int
	dropped int
}

type liveKey struct{ messageID, toolCallID string }

func (s *liveState) apply(ev Event) { s.applyCall(ev, nil) }

// applyCall is apply with slot, when not nil, as the storage of the LiveCall of ev's call if ev
// is the event that begins it: a nested call's invocation keeps one, so that showing the call
// allocates nothing (issue 35). A slot is used once.
func (s *liveState) applyCall(ev Event, slot *LiveCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &s.live
	switch ev.Type {
	case MessageStart, MessageUpdate:
		if ev.Message != nil && ev.Message.Role == Assistant {
			m := *ev.Message
			l.Streaming = &m
			// Shared, not copied: a published event never changes.
			l.Partial, l.Retry = ev.PartialCalls, ev.Retry
		}
	case MessageEnd:
		if ev.Message != nil && ev.Message.Role == Assistant {
			l.Streaming, l.Partial, l.Retry = nil, nil, nil
		}
	case ToolExecutionStart, ToolExecutionUpdate, ToolExecutionEnd, ApprovalRequested, ApprovalResolved, ApprovalUpdated:
		if s.late(ev) {
			return
		}
		c := s.call(ev, slot)
		if ev.Approval != nil {
			// Shared, not copied: a published event (its approval included) never changes.
			c.Approval = ev.Approval
		}
		switch ev.Type {
		case ToolExecutionStart:
			c.Running = true
		case ToolExecutionUpdate:
			c.Update = ev.Update
		case ToolExecutionEnd:
			c.Running, c.Result, c.NestedCall = false, ev.Result, ev.NestedCall
		}
		if len(ev.Arguments) > 0 {
			c.Arguments = ev.Arguments
		}
		if ev.Type == ToolExecutionEnd && c.ParentToolCallID != "" {
			s.finishNested(c)
		}
	}
}

// late reports whether ev is an update or a decision for a nested call finishNested dropped:
// the gate wakes a decided call before it publishes approval_resolved, so that event can come
// after the call's tool_execution_end, and must not bring the call back without its result.
// (A call is only added by the events that begin it: start, a prompt, or an end without a start.)
func (s *liveState) late(ev Event) bool {
	if ev.ParentToolCallID == "" || (ev.Type != ToolExecutionUpdate && ev.Type != ApprovalResolved) {
		return false
	}
	if s.byID[liveKey{ev.MessageID, ev.ToolCallID}] != nil {
		return false
	}
	return s.kept[liveKey{ev.MessageID, ev.ParentToolCallID}] >= maxNestedCalls
}

// finishNested keeps a finished nested call in the snapshot only when its parent's nestedCalls
// record kept it (SPEC §4: the first maxNestedCalls to finish): a tool may make tens of thousands
// of nested calls, and a page reloaded mid-run shows the same calls as after. Running calls and
// calls waiting for a person are always kept.
func (s *liveState) finishNested(c *LiveCall) {
	parent := liveKey{c.MessageID, c.ParentToolCallID}
	if s.kept == nil {
		s.kept = map[liveKey]int{}
	}
	if c.NestedCall != nil {
		s.kept[parent]++
		return
	}
	c.dropped = true
	delete(s.byID, liveKey{c.MessageID, c.ToolCallID})
	s.dropped++
	if s.dropped > 2*maxNestedCalls && s.dropped > len(s.live.Calls)/2 {
		s.live.Calls = slices.DeleteFunc(s.live.Calls, func(c *LiveCall) bool { return c.dropped })
		s.dropped = 0
	}
}

func (s *liveState) call(ev Event, slot *LiveCall) *LiveCall {
	k := liveKey{ev.MessageID, ev.ToolCallID}
	if c := s.byID[k]; c != nil {
		return c
	}
	c := slot
	if c == nil || c.ToolCallID != "" {
		c = new(LiveCall)
	}
	*c = LiveCall{ToolCallID: ev.ToolCallID, ParentToolCallID: ev.ParentToolCallID, MessageID: ev.MessageID, ToolName: ev.ToolName}
	if ev.Approval != nil {
		c.Arguments = ev.Approval.Arguments
	}
	if s.byID == nil {
		s.byID = map[liveKey]*LiveCall{}
	}
	s.byID[k] = c
	s.live.Calls = append(s.live.Calls, c)
	return c
}

func (s *liveState) snapshot() Live {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Live{Running: true}
	if s.live.Streaming != nil {
		m := *s.live.Streaming
		m.Content = slices.Clone(m.Content)
		out.Streaming = &m
		out.Partial, out.Retry = s.live.Partial, s.live.Retry
	}
	for _, c := range s.live.Calls {
		if c.dropped {
			continue
		}
		cc := *c
		out.Calls = append(out.Calls, &cc)
	}
	return out
}

// Live returns a snapshot of the session's run in progress; Running is false when there is none.
func (r *Runner) Live(sessionID string) Live {
	r.mu.Lock()
	rn := r.runs[sessionID]
	r.mu.Unlock()
	if rn != nil {
		return rn.live.snapshot()
	}
	if s := r.remote.get(sessionID); s != nil {
		return s.snapshot() // another replica drives it (SPEC §16)
	}
	return Live{}
}
