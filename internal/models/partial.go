package models

import (
	"countersign/internal/agent"
)

// partials reports the agent.Delta{Partial} of one streamed message (SPEC §17: a tool call's
// arguments appear in its card while they stream): a call when it starts (its card appears at
// once), then every fragment, each with the whole argument text so far. Nothing is held back
// here: the agent throttles what it publishes (at most one message_update per interval, and the
// latest one always sent when the interval ends), so a model that pauses in the middle of a
// call's arguments leaves its card showing everything that has arrived. A throttle here, without
// a timer, dropped the last fragments before such a pause. The complete call follows as
// Delta{ToolCall}.
type partials struct {
	onDelta func(agent.Delta)
	last    map[int]string // call index → the arguments last reported
}

func newPartials(onDelta func(agent.Delta)) *partials {
	return &partials{onDelta: onDelta, last: map[int]string{}}
}

// update reports call index with its arguments so far, unless they are what was last reported
// for it (a fragment that added nothing, such as an empty delta).
func (p *partials) update(index int, id, name, arguments string) {
	if last, ok := p.last[index]; ok && last == arguments {
		return
	}
	p.last[index] = arguments
	p.onDelta(agent.Delta{Partial: &agent.PartialCall{Index: index, ID: id, Name: name, Arguments: arguments}})
}
