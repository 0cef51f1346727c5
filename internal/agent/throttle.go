package agent

import (
	"sync"
	"time"
)

// updateInterval is the least time between two tool_execution_update events of one call, and
// between two message_update events of one streaming message. A tool may call onUpdate, and a
// model may stream deltas, as often as it likes; subscribers see at most one update per interval,
// and always the last one (flushed before tool_execution_end / message_end).
const updateInterval = 50 * time.Millisecond

// throttle coalesces a call's onUpdate reports, or a message's streamed text, to at most one
// publish per updateInterval.
type throttle[T any] struct {
	publish func(T)

	pubMu sync.Mutex // held while publishing, so flush waits for a publish in flight

	mu      sync.Mutex
	last    time.Time
	pending *T
	timer   *time.Timer
	closed  bool
}

func newThrottle[T any](publish func(T)) *throttle[T] { return &throttle[T]{publish: publish} }

// update is the onUpdate callback given to the tool; it never blocks on subscribers.
func (t *throttle[T]) update(u T) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	wait := updateInterval - time.Since(t.last)
	if wait <= 0 && t.timer == nil {
		t.last = time.Now()
		t.mu.Unlock()
		t.pubMu.Lock()
		t.publish(u)
		t.pubMu.Unlock()
		return
	}
	t.pending = &u
	if t.timer == nil {
		t.timer = time.AfterFunc(max(wait, 0), t.fire)
	}
	t.mu.Unlock()
}

func (t *throttle[T]) fire() {
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	t.mu.Lock()
	p := t.pending
	t.pending, t.timer, t.last = nil, nil, time.Now()
	closed := t.closed
	t.mu.Unlock()
	if p != nil && !closed {
		t.publish(*p)
	}
}

// flush publishes the last pending update, if any, and ignores later ones.
func (t *throttle[T]) flush() {
	t.pubMu.Lock()
	defer t.pubMu.Unlock()
	t.mu.Lock()
	p := t.pending
	t.pending, t.closed = nil, true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.mu.Unlock()
	if p != nil {
		t.publish(*p)
	}
}
