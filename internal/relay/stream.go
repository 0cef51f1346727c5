package relay

import (
	"encoding/json"
	"slices"

	"countersign/internal/agent"
)

// Streamed text crosses replicas as deltas (issue 33): a message_update carries the whole
// message so far (and, as Delta and Thinking, what was streamed since the previous update), so
// past about 7.9 KB it no longer fits a notification. Such an update is sent as a patch: its
// event with the message's text and thinking blocks emptied, and the blocks' lengths; the
// receiver rebuilds the blocks from the previous update it delivered of the same message plus
// the event's Delta and Thinking. Both sides see every update of a stream in order (one writer
// sends them, one listener delivers them), so the previous update the sender published is the
// one the receiver holds — unless a notification was lost, which the lengths catch: an update
// that cannot be rebuilt exactly is dropped with the rest of its stream, and the message's end
// (stored, read from its row when large) carries it whole, as before.

// patch is a message_update's message as a patch: Lens are its content blocks' lengths of text
// or thinking, in order (0 for any other block, which the event carries whole); Text and
// Thinking the whole message's lengths, which the rebuild must reach exactly.
type patch struct {
	Lens     []int `json:"l"`
	Text     int   `json:"t"`
	Thinking int   `json:"h"`
}

// streamed is what a receiver keeps of a message's last update: its text and thinking.
type streamed struct{ text, thinking string }

// Bounds of what a receiver keeps of streams in progress (Relay.streams): past either, it
// forgets them all, and those streams' next patches are dropped until their messages end.
const (
	maxStreams     = 256
	maxStreamBytes = 32 << 20
)

// asPatch returns o's event as a patch (the event to send and its patch), when o is a
// message_update; ok is false otherwise.
func asPatch(o outgoing) (body json.RawMessage, p *patch, ok bool) {
	ev := o.ev
	if ev.Type != agent.MessageUpdate || ev.Message == nil {
		return nil, nil, false
	}
	m := *ev.Message
	m.Content = slices.Clone(m.Content)
	p = &patch{Lens: make([]int, len(m.Content))}
	for i := range m.Content {
		b := &m.Content[i]
		switch b.Type {
		case "text":
			p.Lens[i], p.Text, b.Text = len(b.Text), p.Text+len(b.Text), ""
		case "thinking":
			p.Lens[i], p.Thinking, b.Thinking = len(b.Thinking), p.Thinking+len(b.Thinking), ""
		}
	}
	ev.Message = &m
	body, err := json.Marshal(ev)
	if err != nil {
		return nil, nil, false
	}
	return body, p, true
}

// rebuild fills ev's message (sent as patch p) from the previous update of the same message
// (r.streams) and ev's Delta and Thinking; false when it cannot be rebuilt exactly.
func (r *Relay) rebuild(ev *agent.Event, p patch) bool {
	prev, ok := r.streams[ev.MessageID]
	if !ok || ev.Message == nil || len(p.Lens) != len(ev.Message.Content) {
		return false
	}
	text, thinking := prev.text+ev.Delta, prev.thinking+ev.Thinking
	if len(text) != p.Text || len(thinking) != p.Thinking {
		return false
	}
	m := *ev.Message
	m.Content = slices.Clone(m.Content)
	t, h := 0, 0
	for i := range m.Content {
		b, n := &m.Content[i], p.Lens[i]
		switch {
		case n < 0:
			return false
		case b.Type == "text" && n <= len(text)-t: // never t+n: a forged length overflows it
			b.Text, t = text[t:t+n], t+n
		case b.Type == "thinking" && n <= len(thinking)-h:
			b.Thinking, h = thinking[h:h+n], h+n
		case b.Type != "text" && b.Type != "thinking" && n == 0:
		default:
			return false
		}
	}
	if t != len(text) || h != len(thinking) {
		return false
	}
	ev.Message = &m
	return true
}

// deliverUnstored delivers m, an event that is not stored (a delta, progress, a deletion): a
// message_update sent as a patch is rebuilt first (and dropped, with its stream, when it cannot
// be); every message_update delivered is kept for the next patch of its message.
func (r *Relay) deliverUnstored(m message) {
	if r.target == nil || len(m.Event) == 0 {
		return
	}
	var ev agent.Event
	if err := json.Unmarshal(m.Event, &ev); err != nil {
		r.log.Error("replica events: decode", "err", err)
		return
	}
	if ev.Type == agent.MessageUpdate && ev.MessageID != "" {
		if m.Patch != nil && !r.rebuild(&ev, *m.Patch) {
			r.forgetStream(ev.MessageID)
			return
		}
		if ev.Message != nil {
			r.keepStream(ev.MessageID, streamed{ev.Message.Text(), ev.Message.Thinking()})
		}
	}
	r.target.Deliver(ev)
}

// keepStream keeps s as message id's last update, within the bounds.
func (r *Relay) keepStream(id string, s streamed) {
	if r.streams == nil {
		r.streams = map[string]streamed{}
	}
	r.forgetStream(id)
	n := len(s.text) + len(s.thinking)
	if len(r.streams) >= maxStreams || r.streamBytes+n > maxStreamBytes {
		clear(r.streams)
		r.streamBytes = 0
	}
	r.streams[id] = s
	r.streamBytes += n
}

// forgetStream forgets message id's stream (it ended, or a patch of it could not be rebuilt).
func (r *Relay) forgetStream(id string) {
	if s, ok := r.streams[id]; ok {
		r.streamBytes -= len(s.text) + len(s.thinking)
		delete(r.streams, id)
	}
}
