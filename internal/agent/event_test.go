package agent

import (
	"encoding/json"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// TestPublishEncodesOnceForAllSubscribers: the copies every subscriber receives share one
// encoding, made on first need, equal to the event's own.
func TestPublishEncodesOnceForAllSubscribers(t *testing.T) {
	b := NewBroker()
	s1, s2 := b.Subscribe("s"), b.Subscribe("s")
	ev := Event{Type: ToolExecutionStart, SessionID: "s", ToolCallID: "c1", ToolName: "t",
		Arguments: json.RawMessage(`{"a":"<b>"}`)}
	want, err := json.Marshal(eventFields(ev))
	if err != nil {
		t.Fatal(err)
	}
	b.Publish(ev)
	e1, e2 := <-s1.C, <-s2.C
	b1, err1 := e1.MarshalJSON()
	b2, err2 := e2.MarshalJSON()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if string(b1) != string(want) || string(b2) != string(want) {
		t.Fatalf("encodings\n%s\n%s\nwant\n%s", b1, b2, want)
	}
	if unsafe.SliceData(b1) != unsafe.SliceData(b2) {
		t.Error("each subscriber's copy was encoded on its own")
	}
}

// TestPublishWithoutSubscribersCostsNothing: an event published to a session nobody watches is
// neither encoded nor copied (the nested benchmark publishes tens of thousands).
// TestSharedIsBuiltOncePerPublishedEventAndKey: every subscriber's copy of a published event
// gets the value the first caller built for a key, concurrently too; another key builds its
// own; an event that was not published builds it at each call.
func TestSharedIsBuiltOncePerPublishedEventAndKey(t *testing.T) {
	type key struct{ class string }
	b := NewBroker()
	subs := []*Subscription{b.Subscribe("s"), b.Subscribe("s"), b.Subscribe("s")}
	b.Publish(Event{Type: MessageEnd, SessionID: "s"})
	var built atomic.Int32
	build := func() any { return built.Add(1) }
	got := make(chan any, len(subs))
	for _, s := range subs {
		ev := <-s.C
		go func() { got <- ev.Shared(key{"owner"}, build) }()
	}
	for range subs {
		if v := <-got; v != int32(1) {
			t.Errorf("a subscriber got %v, want the first build's 1", v)
		}
	}
	if n := built.Load(); n != 1 {
		t.Errorf("built %d times for 3 subscribers, want once", n)
	}
	ev := Event{Type: MessageEnd, SessionID: "s"}
	ev.Shared(key{"owner"}, build)
	ev.Shared(key{"owner"}, build)
	if n := built.Load(); n != 3 {
		t.Errorf("an unpublished event: built %d times in all, want 3 (once per call)", n)
	}
}

func TestPublishWithoutSubscribersCostsNothing(t *testing.T) {
	b := NewBroker()
	other := b.Subscribe("other")
	defer b.Unsubscribe(other)
	ev := Event{Type: ToolExecutionEnd, SessionID: "s", ToolCallID: "c1", ToolName: "t",
		Arguments: json.RawMessage(`{"a":1}`)}
	if n := testing.AllocsPerRun(100, func() { b.Publish(ev) }); n != 0 {
		t.Errorf("Publish to a session with no subscribers allocated %v times per event, want 0", n)
	}
	if len(other.C) != 0 {
		t.Errorf("another session's subscriber received %d events", len(other.C))
	}
}

// TestPublishedAtIsTheTimeOfPublish: every subscriber's copy carries the time it was published.
func TestPublishedAtIsTheTimeOfPublish(t *testing.T) {
	b := NewBroker()
	s1, s2 := b.Subscribe("s"), b.Subscribe("s")
	ev := Event{Type: TurnStart, SessionID: "s"}
	if !ev.PublishedAt().IsZero() {
		t.Fatal("an event not published has a publication time")
	}
	before := time.Now()
	b.Publish(ev)
	after := time.Now()
	e1, e2 := <-s1.C, <-s2.C
	at := e1.PublishedAt()
	if at.Before(before) || at.After(after) || !e2.PublishedAt().Equal(at) {
		t.Errorf("published at %v and %v, want the same time within [%v, %v]", at, e2.PublishedAt(), before, after)
	}
}

// TestSubscriptionsHoldPointers: a subscription's buffer holds pointers to events shared by all
// subscribers, not copies: 1,000 viewers must not reserve hundreds of MB of buffers up front.
func TestSubscriptionsHoldPointers(t *testing.T) {
	b := NewBroker()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	subs := make([]*Subscription, 100)
	for i := range subs {
		subs[i] = b.Subscribe("s")
	}
	runtime.ReadMemStats(&after)
	perSub := (after.TotalAlloc - before.TotalAlloc) / uint64(len(subs))
	if limit := uint64(subscriberBuffer*8 + 4096); perSub > limit {
		t.Errorf("a subscription allocates %d bytes, want at most %d (a buffer of pointers)", perSub, limit)
	}
	b.Publish(Event{Type: AgentStart, SessionID: "s"})
	first := <-subs[0].C
	for _, s := range subs[1:] {
		if ev := <-s.C; ev != first {
			t.Fatal("subscribers received different copies of one event")
		}
	}
}
