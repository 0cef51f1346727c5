package agent

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// EventType names an event streamed to browsers and API clients (SPEC §2, pi's names).
type EventType string

// The event types.
const (
	AgentStart          EventType = "agent_start"
	TurnStart           EventType = "turn_start"
	MessageStart        EventType = "message_start"
	MessageUpdate       EventType = "message_update"
	MessageEnd          EventType = "message_end"
	ToolExecutionStart  EventType = "tool_execution_start"
	ToolExecutionUpdate EventType = "tool_execution_update"
	ToolExecutionEnd    EventType = "tool_execution_end"
	ApprovalRequested   EventType = "approval_requested"
	ApprovalResolved    EventType = "approval_resolved"
	TurnEnd             EventType = "turn_end"
	AgentEnd            EventType = "agent_end"
	// SessionUpdated is Countersign's own: the session's state, title or active tools changed.
	SessionUpdated EventType = "session_updated"
	// SessionDeleted is Countersign's own: the session was deleted; its viewers' live
	// connections close.
	SessionDeleted EventType = "session_deleted"
	// ApprovalUpdated is Countersign's own (SPEC §15): a person's vote on an approval that needs
	// several approvers was counted and it stays pending; Approval carries it whole, Votes
	// included.
	ApprovalUpdated EventType = "approval_updated"
)

// Event is one streamed event. Which fields are set depends on Type: message events carry
// Message (the whole message so far) and, for message_update, Delta (answer text), Thinking
// (reasoning text), PartialCalls and Retry (see their fields); tool events carry
// ToolCallID, ParentToolCallID, ToolName and Arguments, Update (progress) or Result, and — on
// tool_execution_start and tool_execution_end of a call the gate decided — Approval, the
// decision as stored (a rule's automatic record, or the prompt's resolution); a nested call's
// tool_execution_end carries NestedCall; approval events carry Approval; agent_end carries Error
// when the run failed.
type Event struct {
	Type             EventType       `json:"type"`
	SessionID        string          `json:"sessionId"`
	MessageID        string          `json:"messageId,omitempty"`
	Message          *Message        `json:"message,omitempty"`
	Delta            string          `json:"delta,omitempty"`
	ToolCallID       string          `json:"toolCallId,omitempty"`
	ParentToolCallID string          `json:"parentToolCallId,omitempty"`
	ToolName         string          `json:"toolName,omitempty"`
	Arguments        json.RawMessage `json:"arguments,omitempty"`
	Update           *tool.Update    `json:"update,omitempty"`
	Result           *tool.Result    `json:"result,omitempty"`
	Approval         *gate.Approval  `json:"approval,omitempty"`
	Session          *Session        `json:"session,omitempty"`
	Error            string          `json:"error,omitempty"`

	// Thinking is, on message_update, the reasoning text streamed since the previous
	// message_update (the whole of it is in Message's thinking blocks): shown apart from the
	// answer, never as answer text (SPEC §17).
	Thinking string `json:"thinking,omitempty"`
	// PartialCalls are, on message_update, the message's tool calls whose arguments are still
	// streaming, each with its arguments so far (not valid JSON yet, usually). A call leaves the
	// list when it is complete (then it is a toolCall block of Message); none is gated or run
	// before that (SPEC §17).
	PartialCalls []PartialCall `json:"partialCalls,omitempty"`
	// Retry is, on message_update, set while the model request waits to be tried again after a
	// retryable failure (a 429, a 5xx): "retrying (429) in 2 s". The next message_update without
	// it means the wait is over (SPEC §17). Stop cancels the wait.
	Retry *Retry `json:"retry,omitempty"`

	// NestedCall is, on a nested call's tool_execution_end, the entry its parent's nestedCalls
	// record keeps for it (SPEC §4, bounded); nil when the record was full and left it out.
	NestedCall *tool.NestedCall `json:"nestedCall,omitempty"`

	// pub is what the copies every subscriber receives share (Broker.Publish sets it only when
	// the session has subscribers): the time of publication and the event's JSON encoding,
	// made once, on first need (the first viewer that writes it). A session with 100 viewers
	// costs one encoding per event, not 100, and one nobody watches costs none; what
	// subscribers derive from it alike is shared the same way (Shared). An event must not
	// change once published.
	pub *publication
}

// publication is what the copies of one published event share.
type publication struct {
	at   time.Time // when Broker.Publish sent the event
	once sync.Once
	b    []byte
	err  error

	// shared holds what Shared made for this event, by key.
	mu     sync.Mutex
	shared map[any]*sharedValue
}

// sharedValue is one value made by Shared, once.
type sharedValue struct {
	once sync.Once
	v    any
}

// PublishedAt is when Broker.Publish sent the event to its subscribers; zero for an event that
// was not published or whose session had no subscribers. Benchmarks measure delivery from it.
func (ev Event) PublishedAt() time.Time {
	if ev.pub == nil {
		return time.Time{}
	}
	return ev.pub.at
}

// eventFields is Event without its methods, for encoding/json.
type eventFields Event

// MarshalJSON encodes the event as {type, sessionId, ...}; a published event is encoded once and
// every call returns the same bytes, which the caller must not modify.
func (ev Event) MarshalJSON() ([]byte, error) {
	if ev.pub == nil {
		return json.Marshal(eventFields(ev))
	}
	ev.pub.once.Do(func() { ev.pub.b, ev.pub.err = json.Marshal(eventFields(ev)) })
	return ev.pub.b, ev.pub.err
}

// Shared returns what build returns for key, made once for the published event and returned to
// every subscriber's copy of it: the first caller builds it (later callers of the same key wait
// for it), the others get the same value, which nobody may modify. Subscribers use it for what
// they derive from the event alike, as MarshalJSON shares the encoding: the web pages' live
// fragment per viewer's rights, say. For an event that was not published, build is called every
// time. key must be comparable; use a type of the caller's own package, as for context keys.
func (ev Event) Shared(key any, build func() any) any {
	if ev.pub == nil {
		return build()
	}
	p := ev.pub
	p.mu.Lock()
	if p.shared == nil {
		p.shared = map[any]*sharedValue{}
	}
	sv := p.shared[key]
	if sv == nil {
		sv = &sharedValue{}
		p.shared[key] = sv
	}
	p.mu.Unlock()
	sv.once.Do(func() { sv.v = build() })
	return sv.v
}

// Broker fans events out to subscribers per session. Publish never blocks: each subscriber has a
// bounded buffer, and a subscriber that falls behind is dropped (its channel closed) and must
// re-sync from the store, as a reloaded page does.
type Broker struct {
	mu   sync.RWMutex
	subs map[string]map[*Subscription]struct{}
	// approvals are the subscribers of every session's approval events (SubscribeApprovals).
	approvals map[*Subscription]struct{}
	// subscribers counts the subscriptions in subs and approvals, so that Publish returns at
	// once, without the lock or a lookup, while nobody subscribes at all (issue 35: every
	// nested call publishes two events). Changed under mu.
	subscribers atomic.Int64
}

// Subscription is one subscriber's event channel. C is closed when the subscriber is dropped or
// unsubscribed. Every subscriber of a session receives the same *Event: it must not be changed.
// (Pointers, not values: a buffered channel holds its whole buffer from the start, and an Event
// is a few hundred bytes; 1,000 viewers with values would hold ~230 MB of buffers for the
// garbage collector to scan.)
type Subscription struct {
	C         <-chan *Event
	c         chan *Event
	sessionID string
	approvals bool // a SubscribeApprovals subscriber, of every session
	once      sync.Once
}

// NewBroker returns a broker with no subscribers.
func NewBroker() *Broker { return &Broker{subs: map[string]map[*Subscription]struct{}{}} }

// subscriberBuffer bounds how far a subscriber may fall behind before it is dropped.
const subscriberBuffer = 1024

// Subscribe registers a subscriber for one session's events.
func (b *Broker) Subscribe(sessionID string) *Subscription {
	c := make(chan *Event, subscriberBuffer)
	s := &Subscription{C: c, c: c, sessionID: sessionID}
	b.mu.Lock()
	if b.subs[sessionID] == nil {
		b.subs[sessionID] = map[*Subscription]struct{}{}
	}
	b.subs[sessionID][s] = struct{}{}
	b.subscribers.Add(1)
	b.mu.Unlock()
	return s
}

// SubscribeApprovals registers a subscriber for the approval events of every session: each
// event whose type starts with "approval_" (IsApproval: approval_requested, approval_resolved and
// any added later), whatever its session — the inbox's one socket per page (SPEC §15). Like
// Subscribe's, its buffer is bounded and a subscriber that falls behind is dropped (C closed).
func (b *Broker) SubscribeApprovals() *Subscription {
	c := make(chan *Event, subscriberBuffer)
	s := &Subscription{C: c, c: c, approvals: true}
	b.mu.Lock()
	if b.approvals == nil {
		b.approvals = map[*Subscription]struct{}{}
	}
	b.approvals[s] = struct{}{}
	b.subscribers.Add(1)
	b.mu.Unlock()
	return s
}

// IsApproval reports whether t is an approval event (its name starts with "approval_"): the
// events SubscribeApprovals forwards.
func (t EventType) IsApproval() bool { return strings.HasPrefix(string(t), "approval_") }

// Unsubscribe removes s and closes its channel. It is safe to call more than once.
func (b *Broker) Unsubscribe(s *Subscription) {
	b.mu.Lock()
	if s.approvals {
		if _, ok := b.approvals[s]; ok {
			delete(b.approvals, s)
			b.subscribers.Add(-1)
		}
		b.mu.Unlock()
		s.once.Do(func() { close(s.c) })
		return
	}
	if _, ok := b.subs[s.sessionID][s]; ok {
		delete(b.subs[s.sessionID], s)
		b.subscribers.Add(-1)
	}
	if len(b.subs[s.sessionID]) == 0 {
		delete(b.subs, s.sessionID)
	}
	b.mu.Unlock()
	s.once.Do(func() { close(s.c) })
}

// Publish sends ev to every subscriber of ev.SessionID, and an approval event also to every
// SubscribeApprovals subscriber, without blocking.
func (b *Broker) Publish(ev Event) {
	if b.subscribers.Load() == 0 {
		return
	}
	var slow []*Subscription
	b.mu.RLock()
	subs := b.subs[ev.SessionID]
	var all map[*Subscription]struct{}
	if ev.Type.IsApproval() {
		all = b.approvals
	}
	var shared *Event
	if len(subs)+len(all) > 0 {
		// Allocated here only: a session nobody watches costs no allocation.
		e := ev
		e.pub = &publication{at: time.Now()}
		shared = &e
	}
	for s := range subs {
		select {
		case s.c <- shared:
		default:
			slow = append(slow, s)
		}
	}
	for s := range all {
		select {
		case s.c <- shared:
		default:
			slow = append(slow, s)
		}
	}
	b.mu.RUnlock()
	for _, s := range slow {
		b.Unsubscribe(s)
	}
}
