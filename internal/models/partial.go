package models

import (
	"time"

	"countersign/internal/agent"
)

// PartialInterval is the least time between two agent.Delta{Partial} of one tool call. A vendor
// streams a call's arguments in many small fragments (often a few bytes each) and the agent
// publishes every Partial to every viewer, each with the whole argument text so far; so a call
// is reported when it starts (its card appears at once, SPEC §17) and then at most once per
// interval, with the text that has arrived by then. The complete call always follows as
// Delta{ToolCall}, so no fragment is lost to the throttle.
const PartialInterval = 50 * time.Millisecond

// partials throttles the Partial deltas of one streamed message.
type partials struct {
	now     func() time.Time
	onDelta func(agent.Delta)
	last    map[int]time.Time // call index → when its last Partial was sent
}

func newPartials(now func() time.Time, onDelta func(agent.Delta)) *partials {
	if now == nil {
		now = time.Now
	}
	return &partials{now: now, onDelta: onDelta, last: map[int]time.Time{}}
}

// update reports call index with its arguments so far, unless its last report is younger than
// PartialInterval.
func (p *partials) update(index int, id, name, arguments string) {
	t := p.now()
	if last, ok := p.last[index]; ok && t.Sub(last) < PartialInterval {
		return
	}
	p.last[index] = t
	p.onDelta(agent.Delta{Partial: &agent.PartialCall{Index: index, ID: id, Name: name, Arguments: arguments}})
}
