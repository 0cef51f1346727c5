package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"countersign/internal/gate"
)

// run is one agent run of a session: from the user's message to the model's final answer, an
// error, or Stop. Its context is cancelled with the Stop's cause.
type run struct {
	r       *Runner
	session Session
	model   Model
	ctx     context.Context
	cancel  context.CancelCauseFunc
	live    liveState
	// transcript is the session's transcript as committed: loaded from the store by the run's
	// first model request, then extended with each entry the run commits, so a turn does not
	// re-read (and re-decode) the whole transcript. The store stays the source of truth: a new
	// run, or a restart, loads it again. Only the run's goroutine uses it.
	transcript []Message
	loaded     bool
	// active is the session's active tool set as of the last model request (nil: not computed
	// yet); see isActive.
	active atomic.Pointer[map[string]bool]
	// sessionChanged is set when the session's stored settings change during the run (its
	// active tools): the next model request reads the session again. Only its active tools
	// can change; the rest (workspace, model) is fixed when the session is created.
	sessionChanged atomic.Bool
}

// publish updates the run's live snapshot, then broadcasts the event: Runner.publish without
// looking the run up under the Runner's lock, for the events the run itself emits.
func (rn *run) publish(ev Event) {
	rn.live.apply(ev)
	rn.r.cfg.Broker.Publish(ev)
}

// committed extends the in-memory transcript with an entry the store has just committed. Before
// the first load (a resumed batch) there is nothing to extend: the load will include it.
func (rn *run) committed(m Message) {
	if rn.loaded {
		rn.transcript = append(rn.transcript, m)
	}
}

// maxTurns bounds a run so a model that never stops calling tools cannot loop forever.
const maxTurns = 10_000

// loop is the agent loop of SPEC §2.
func (rn *run) loop() { rn.drive(nil) }

// drive runs the loop's turns; resume, when set, first finishes a batch parked by an earlier
// process (SPEC §8) and the loop goes on from there.
func (rn *run) drive(resume func(store context.Context) error) {
	r, sid := rn.r, rn.session.ID
	// The store's writes use a context that outlives Stop: a stopped run still records its end.
	store := context.WithoutCancel(rn.ctx)
	var runErr string
	parked := false // a graceful shutdown left the run parked: it stays running for Recover
	defer func() {
		rn.cancel(nil)
		r.finishRun(rn)
		if !parked {
			if err := r.setState(store, sid, Idle); err != nil {
				r.log.Error("set session state", "session", sid, "err", err)
			}
		}
		r.publish(Event{Type: AgentEnd, SessionID: sid, Error: runErr})
	}()
	rn.publish(Event{Type: AgentStart, SessionID: sid})
	if resume != nil {
		if err := resume(store); err != nil {
			runErr, parked = err.Error(), errors.Is(err, errParked)
			return
		}
		rn.publish(Event{Type: TurnEnd, SessionID: sid})
		if rn.ctx.Err() != nil {
			runErr = context.Cause(rn.ctx).Error()
			return
		}
	}
	for turn := 0; turn < maxTurns; turn++ {
		rn.publish(Event{Type: TurnStart, SessionID: sid})
		msg, invs, err := rn.streamMessage(store)
		if err != nil {
			runErr = err.Error()
			r.log.Error("run failed", "session", sid, "err", err)
			return
		}
		if msg.StopReason == Error || msg.StopReason == Aborted {
			runErr = msg.ErrorMessage
			rn.publish(Event{Type: TurnEnd, SessionID: sid})
			return
		}
		calls := msg.ToolCalls()
		if len(calls) > 0 {
			if err := rn.runBatch(store, msg, invs); err != nil {
				runErr, parked = err.Error(), errors.Is(err, errParked)
				return
			}
		}
		rn.publish(Event{Type: TurnEnd, SessionID: sid})
		if msg.StopReason != ToolUse || len(calls) == 0 {
			return
		}
		if rn.ctx.Err() != nil {
			runErr = context.Cause(rn.ctx).Error()
			return
		}
	}
	runErr = fmt.Sprintf("the run stopped after %d turns", maxTurns)
}

// streamMessage sends the transcript and the declared tools to the model, streams the assistant
// message to subscribers, and stores it. A provider failure or a Stop while streaming stores an
// assistant message with stopReason error / aborted that carries no half-written content. For a
// toolUse message it also decides its calls up to their prompts (decideBatch) and stores the
// automatic records of those decisions with the message; it returns the calls' invocations.
func (rn *run) streamMessage(store context.Context) (Message, []*invocation, error) {
	r, sid := rn.r, rn.session.ID
	if !rn.loaded {
		entries, err := r.cfg.Store.Entries(store, sid)
		if err != nil {
			return Message{}, nil, err
		}
		rn.transcript = make([]Message, 0, len(entries)+16)
		for _, e := range entries {
			rn.transcript = append(rn.transcript, e.Message)
		}
		rn.loaded = true
	}
	if rn.sessionChanged.Swap(false) {
		sess, err := r.cfg.Store.Session(store, sid)
		if err != nil {
			return Message{}, nil, err
		}
		rn.session = sess
	}
	sess := rn.session
	rn.active.Store(nil) // recomputed for this request: the registry's default set may have changed
	// Clipped: a provider that appends to the list cannot write into the run's transcript.
	req := Request{SessionID: sid, Tools: rn.declaredTools(), Messages: slices.Clip(rn.transcript)}

	live := Message{ID: newID(), Role: Assistant, Model: sess.Model, Timestamp: time.Now().UTC()}
	start := live // events carry copies: live keeps changing as the stream arrives
	rn.publish(Event{Type: MessageStart, SessionID: sid, MessageID: live.ID, Message: &start})
	// Text deltas reach subscribers as message_update at most once per updateInterval, each with
	// the whole message so far and, as Delta, all the text streamed since the previous one: a
	// model streams far more often than a page can show, and every event is sent to every viewer.
	sent := 0 // bytes of text already published; only the throttle's publish touches it
	updates := newThrottle(func(snap Message) {
		text := snap.Text()
		rn.publish(Event{Type: MessageUpdate, SessionID: sid, MessageID: snap.ID, Message: &snap, Delta: text[sent:]})
		sent = len(text)
	})
	msg, err := rn.model.Stream(rn.ctx, req, func(d Delta) {
		switch {
		case d.Text != "":
			live.Content = appendText(live.Content, d.Text)
			snap := live
			snap.Content = slices.Clone(live.Content)
			updates.update(snap)
		case d.ToolCall != nil:
			live.Content = append(live.Content, *d.ToolCall)
		}
	})
	updates.flush()
	msg.ID, msg.Role, msg.Model, msg.Timestamp = live.ID, Assistant, sess.Model, live.Timestamp
	switch {
	case rn.ctx.Err() != nil:
		// Stopped while streaming: keep the text so far, drop tool calls that will never run.
		msg.Content = textOnly(live.Content)
		msg.StopReason, msg.ErrorMessage = Aborted, context.Cause(rn.ctx).Error()
	case err != nil:
		msg.Content = nil
		msg.StopReason, msg.ErrorMessage = Error, err.Error()
	case msg.StopReason == "":
		msg.StopReason = Stop
	}
	if msg.StopReason != ToolUse {
		// Only a toolUse message's calls run (SPEC §2); a call that never runs is not kept.
		msg.Content = textOnly(msg.Content)
	}
	var invs []*invocation
	var records []gate.Approval
	if msg.StopReason == ToolUse {
		invs, records = rn.decideBatch(msg)
	}
	if _, err := r.cfg.Store.AppendEntry(store, sid, msg, records...); err != nil {
		return Message{}, nil, err
	}
	rn.committed(msg)
	rn.publish(Event{Type: MessageEnd, SessionID: sid, MessageID: msg.ID, Message: &msg})
	return msg, invs, nil
}

// declaredTools lists the session's active tools that the model may see (SPEC §1 table).
func (rn *run) declaredTools() []ToolSpec {
	var specs []ToolSpec
	for _, name := range rn.r.ActiveTools(rn.session) {
		t, ok := rn.r.cfg.Tools.Lookup(name)
		if !ok || t.Exposure == "hidden" {
			continue
		}
		specs = append(specs, ToolSpec{Name: t.Name, Title: t.Title, Description: t.Description, InputSchema: t.InputSchema})
	}
	return specs
}

func appendText(blocks []Block, text string) []Block {
	if n := len(blocks); n > 0 && blocks[n-1].Type == "text" {
		blocks[n-1].Text += text
		return blocks
	}
	return append(blocks, Block{Type: "text", Text: text})
}

func textOnly(blocks []Block) []Block {
	var out []Block
	for _, b := range blocks {
		if b.Type == "text" {
			out = append(out, b)
		}
	}
	return out
}
