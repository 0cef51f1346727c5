package agent

import (
	"sync"
	"time"

	"countersign/internal/tool"
)

// updateInterval is the least time between two tool_execution_update events of one call. A tool
// may call onUpdate as often as it likes; subscribers see at most one update per interval, and
// always the last one (flushed before tool_execution_end).
const updateInterval = 50 * time.Millisecond

// throttle coalesces a call's onUpdate reports.
type throttle struct {
	publish func(tool.Update)

	pubMu sync.Mutex // held while publishing, so flush waits for a publish in flight

	mu      sync.Mutex
	last    time.Time
	pending *tool.Update
	timer   *time.Timer
	closed  bool
}

func newThrottle(publish func(tool.Update)) *throttle { return &throttle{publish: publish} }

// update is the onUpdate callback given to the tool; it never blocks on subscribers.
func (t *throttle) update(u tool.Update) {
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

func (t *throttle) fire() {
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
func (t *throttle) flush() {
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
