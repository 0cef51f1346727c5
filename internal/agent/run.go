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
	// lease is the token of the session's lease this run holds (Replicas.Acquire), and leased
	// when it took it.
	lease  string
	leased time.Time
	// leaseLost is set once another replica took the session over: the run writes and
	// relays nothing more (its end included).
	leaseLost atomic.Bool
	// transcript is the session's transcript as committed: loaded from the store by the run's
	// first model request, then extended with each entry the run commits, so a turn does not
	// re-read (and re-decode) the whole transcript. The store stays the source of truth: a new
	// run, or a restart, loads it again. Only the run's goroutine uses it.
	transcript []Message
	loaded     bool
	// contextIndex measures the transcript for the context budget, each message once (see
	// contextIndex). Only the run's goroutine uses it.
	contextIndex contextIndex
	// active is the session's active tool set as of the last model request (nil: not computed
	// yet); see isActive.
	active atomic.Pointer[map[string]bool]
	// ceiling, when not 0, caps the context budget for the rest of the run, in tokens: the
	// target a request the provider refused for its length (ErrContextLength) was shortened to.
	// The provider counts more than the estimate; later requests are fitted to what it took,
	// rather than each being refused first. Only the run's goroutine uses it.
	ceiling int
	// sessionChanged is set when the session's stored settings change during the run (its
	// active tools): the next model request reads the session again. Only its active tools
	// can change; the rest (workspace, model) is fixed when the session is created.
	sessionChanged atomic.Bool
}

// publish updates the run's live snapshot, then broadcasts the event: Runner.publish without
// looking the run up under the Runner's lock, for the events the run itself emits.
func (rn *run) publish(ev Event) {
	rn.live.apply(ev)
	rn.r.broadcast(ev)
}

// publishCall is publish for an event of a nested call: slot, its invocation's, is where the
// call's LiveCall is kept if the event begins it (liveState.applyCall).
func (rn *run) publishCall(ev Event, slot *LiveCall) {
	rn.live.applyCall(ev, slot)
	rn.r.broadcast(ev)
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
		// Idle before the run lets go: a message sent meanwhile is refused as busy, never
		// started and then marked idle by this run's end.
		if !parked {
			// A database away at the run's end is waited for (untilAnswered): a session left
			// running, its lease renewed by this replica forever, would take no message again.
			if err := rn.untilAnswered(store, func() error { return r.setState(store, sid, Idle) }); err != nil {
				r.log.Error("set session state", "session", sid, "err", err)
			}
		}
		r.finishRun(rn)
		if rn.leaseLost.Load() {
			// Another replica drives the session now (SPEC §16): only this replica's own viewers
			// hear that this run ended; the others follow the replica that took it over.
			r.log.Error("a run ended without its lease: another server drives the session", "session", sid)
			r.cfg.Broker.Publish(Event{Type: AgentEnd, SessionID: sid, Error: runErr})
			return
		}
		// Then the lease (SPEC §16): a parked run's session goes to whichever replica takes it.
		if rn.lease != "" {
			if err := rn.untilAnswered(store, func() error { return r.replica.port.Release(store, sid, rn.lease) }); err != nil {
				r.log.Error("release a session's lease", "session", sid, "err", err)
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

// streamMessage sends the session's instructions, the transcript (shortened to fit the model's
// context window, SPEC §17) and the declared tools to the model, streams the assistant message to
// subscribers, and stores it. A provider failure or a Stop while streaming stores an assistant
// message with stopReason error / aborted that carries no half-written content; so does a
// request that does not fit the context window, which is never sent. For a toolUse message it
// also decides its calls up to their prompts (decideBatch) and stores the automatic records of
// those decisions with the message; it returns the calls' invocations.
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
		rn.contextIndex = contextIndex{}
		// Read again with the transcript: instructions set between Send's read of the session
		// and its first message being stored are the ones the first request sends.
		rn.sessionChanged.Store(true)
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
	tools := rn.declaredTools()
	window, budget := rn.contextBudget()
	if rn.ceiling > 0 && (budget <= 0 || rn.ceiling < budget) {
		budget = rn.ceiling
	}

	live := Message{ID: newID(), Role: Assistant, Model: sess.Model, Timestamp: time.Now().UTC()}
	// Clipped: a provider that appends to the list cannot write into the run's transcript.
	system := SystemPrompt(sess)
	fit, err := rn.contextIndex.fit(system, tools, slices.Clip(rn.transcript), budget, 0)
	live.ShortenedResults = fit.Shortened
	start := live // events carry copies: live keeps changing as the stream arrives
	rn.publish(Event{Type: MessageStart, SessionID: sid, MessageID: live.ID, Message: &start})
	var msg Message
	if err == nil {
		req := Request{SessionID: sid, System: system, Tools: tools, Messages: fit.Messages}
		msg, err = rn.attempt(req, &live)
		if err != nil && isContextLength(err) && rn.ctx.Err() == nil {
			// The provider counts otherwise than the estimate: shorten harder, once (SPEC §17).
			refused := err
			target := int(float64(fit.Estimate) * harderFactor)
			rn.ceiling = target
			harder, herr := rn.contextIndex.fit(system, tools, slices.Clip(rn.transcript), target, fit.Shortened+1)
			if herr != nil && harder.Shortened <= fit.Shortened {
				err = &ContextError{Estimate: fit.Estimate, Budget: budget, Shortened: fit.Shortened, Refused: refused}
			} else {
				r.log.Info("the provider refused the request as too long; shortening harder", "session", sid,
					"estimate", fit.Estimate, "target", target, "shortened", harder.Shortened, "err", refused)
				fit = harder
				live.Content, live.ShortenedResults = nil, fit.Shortened
				snap := live
				rn.publish(Event{Type: MessageUpdate, SessionID: sid, MessageID: live.ID, Message: &snap})
				req.Messages = fit.Messages
				msg, err = rn.attempt(req, &live)
				if err != nil && isContextLength(err) && rn.ctx.Err() == nil {
					err = &ContextError{Estimate: fit.Estimate, Budget: budget, Shortened: fit.Shortened, Refused: err}
				}
			}
		}
	} else {
		var ce *ContextError
		if errors.As(err, &ce) && window > 0 && budget == window-answerReserve(window) {
			// (A budget lowered by a refusal earlier in the run is not the window's.)
			ce.Window, ce.Reserve = window, answerReserve(window)
		}
	}
	msg.ID, msg.Role, msg.Model, msg.Timestamp = live.ID, Assistant, sess.Model, live.Timestamp
	msg.ShortenedResults = fit.Shortened
	switch {
	case rn.ctx.Err() != nil:
		// Stopped while streaming: keep the text so far, drop tool calls that will never run
		// (and reasoning cut short: a vendor takes back only whole, signed thinking blocks).
		// Its usage, if the provider got to report it, was spent all the same.
		msg.Content = textOnly(live.Content)
		msg.StopReason, msg.ErrorMessage = Aborted, context.Cause(rn.ctx).Error()
	case err != nil:
		msg.Content, msg.Usage = nil, nil
		msg.StopReason, msg.ErrorMessage = Error, err.Error()
	case msg.StopReason == "":
		msg.StopReason = Stop
	}
	if msg.StopReason != ToolUse {
		// Only a toolUse message's calls run (SPEC §2); a call that never runs is not kept. Its
		// thinking blocks are: the vendors want them back with the answer they led to.
		msg.Content = withoutCalls(msg.Content)
	}
	var invs []*invocation
	var records []gate.Approval
	if msg.StopReason == ToolUse {
		invs, records = rn.decideBatch(msg)
	}
	if err := rn.append(store, msg, records...); err != nil {
		return Message{}, nil, err
	}
	rn.committed(msg)
	rn.publish(Event{Type: MessageEnd, SessionID: sid, MessageID: msg.ID, Message: &msg})
	return msg, invs, nil
}

// contextBudget is the run's context window and the budget of one request, in tokens (SPEC
// §17): Config.ContextTokens, or the model's ContextWindow(), minus answerReserve. Both are 0
// when neither is known: no limit.
func (rn *run) contextBudget() (window, budget int) {
	window = rn.r.cfg.ContextTokens
	if window <= 0 {
		if cw, ok := rn.model.(ContextWindow); ok {
			window = cw.ContextWindow()
		}
	}
	if window <= 0 {
		return 0, 0
	}
	return window, window - answerReserve(window)
}

// attempt streams one model request into live (the message subscribers see), publishing
// message_update events at most once per updateInterval: the text and reasoning streamed since
// the previous one, the tool calls still streaming, and a retry's wait while one is on. It
// returns what the model returned.
func (rn *run) attempt(req Request, live *Message) (Message, error) {
	sid := rn.session.ID
	type snapshot struct {
		msg     Message
		partial []PartialCall
		retry   *Retry
	}
	// Deltas reach subscribers as message_update at most once per updateInterval, each with the
	// whole message so far and, as Delta and Thinking, all the text streamed since the previous
	// one: a model streams far more often than a page can show, and every event is sent to
	// every viewer.
	sentText, sentThinking := 0, 0 // bytes already published; only the throttle's publish touches them
	updates := newThrottle(func(snap snapshot) {
		text, thinking := snap.msg.Text(), snap.msg.Thinking()
		ev := Event{Type: MessageUpdate, SessionID: sid, MessageID: snap.msg.ID, Message: &snap.msg,
			Delta: text[min(sentText, len(text)):], Thinking: thinking[min(sentThinking, len(thinking)):],
			PartialCalls: snap.partial, Retry: snap.retry}
		rn.publish(ev)
		sentText, sentThinking = len(text), len(thinking)
	})
	var partial []PartialCall
	var retry *Retry
	msg, err := rn.model.Stream(rn.ctx, req, func(d Delta) {
		switch {
		case d.Text != "":
			live.Content = appendText(live.Content, d.Text)
		case d.Thinking != "":
			live.Content = appendThinking(live.Content, d.Thinking)
		case d.ToolCall != nil:
			live.Content = append(live.Content, *d.ToolCall)
			partial = withoutPartial(partial, *d.ToolCall)
		case d.Partial != nil:
			partial = withPartial(partial, *d.Partial)
		case d.Retry != nil:
			r := *d.Retry
			retry = &r
			updates.update(snapshot{msg: cloneMessage(*live), partial: slices.Clone(partial), retry: retry})
			return
		default:
			return
		}
		retry = nil // a delta after a retry: the wait is over
		updates.update(snapshot{msg: cloneMessage(*live), partial: slices.Clone(partial)})
	})
	updates.flush()
	return msg, err
}

// cloneMessage is m with its own copy of its content (events carry copies: the live message keeps
// changing as the stream arrives).
func cloneMessage(m Message) Message {
	m.Content = slices.Clone(m.Content)
	return m
}

// withPartial is partial with p in it, replacing the call with the same Index.
func withPartial(partial []PartialCall, p PartialCall) []PartialCall {
	for i := range partial {
		if partial[i].Index == p.Index {
			partial[i] = p
			return partial
		}
	}
	return append(partial, p)
}

// withoutPartial is partial without the call that c completes: the one with c's id, else the
// first one whose id is not known yet.
func withoutPartial(partial []PartialCall, c Block) []PartialCall {
	for i, p := range partial {
		if p.ID != "" && p.ID == c.ID {
			return slices.Delete(partial, i, i+1)
		}
	}
	for i, p := range partial {
		if p.ID == "" {
			return slices.Delete(partial, i, i+1)
		}
	}
	return partial
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

// appendThinking adds streamed reasoning text to the last block when it is a thinking block
// still being streamed, else as a new thinking block.
func appendThinking(blocks []Block, text string) []Block {
	if n := len(blocks); n > 0 && blocks[n-1].Type == "thinking" && blocks[n-1].Signature == "" && !blocks[n-1].Redacted {
		blocks[n-1].Thinking += text
		return blocks
	}
	return append(blocks, Block{Type: "thinking", Thinking: text})
}

// withoutCalls is blocks without their tool calls: the text and thinking a message keeps when
// its calls will not run.
func withoutCalls(blocks []Block) []Block {
	var out []Block
	for _, b := range blocks {
		if b.Type != "toolCall" {
			out = append(out, b)
		}
	}
	return out
}

// textOnly is blocks' text blocks only.
func textOnly(blocks []Block) []Block {
	var out []Block
	for _, b := range blocks {
		if b.Type == "text" {
			out = append(out, b)
		}
	}
	return out
}
