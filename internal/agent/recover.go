package agent

import (
	"context"
	"strings"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// InterruptedText is the error result of a call that was executing when the process died. Such
// a call is never run again: it may have had side effects (SPEC §8). The model reads this text;
// the page says what happened from the result's Interrupted record.
const InterruptedText = "Interrupted by server restart"

// RestartedText ends a run whose model had not answered when the process died: the assistant
// message of SPEC §8's "the run ends as interrupted", as the page shows it.
const RestartedText = "The server restarted before the model answered, so the run ended here. Send a message to go on."

// Recover applies SPEC §8 at start, before any request is served. The store decides, never
// memory:
//   - a run parked on a pending approval of a model-issued call stays parked: the approval stays
//     pending, and when someone decides it the call runs (or is denied) and the run continues;
//   - a call that was executing (no result, no pending approval) gets the error result
//     "Interrupted by server restart", and pending approvals of nested calls are cancelled with
//     that reason;
//   - a model message that was still streaming was never stored: the run ends as interrupted;
//   - sessions that have nothing parked are idle again and accept new messages.
func (r *Runner) Recover(ctx context.Context) (err error) {
	defer apperr.Wrap(&err, "Recover")
	if r.loadErr != nil {
		return r.loadErr // the rules could not be read: refuse to start rather than skip a deny
	}
	running, err := r.cfg.Store.SessionsInState(ctx, Running)
	if err != nil {
		return err
	}
	pending, err := r.cfg.Store.PendingApprovals(ctx)
	if err != nil {
		return err
	}
	ids := map[string]bool{}
	var order []string
	for _, s := range running {
		if !ids[s.ID] {
			ids[s.ID] = true
			order = append(order, s.ID)
		}
	}
	bySession := map[string][]gate.Approval{}
	for _, a := range pending {
		bySession[a.SessionID] = append(bySession[a.SessionID], a)
		if !ids[a.SessionID] {
			ids[a.SessionID] = true
			order = append(order, a.SessionID)
		}
	}
	for _, id := range order {
		// An agent session (SPEC §18) has no loop to recover: its pending calls belong to an
		// outside agent whose hook request died with the process (gate.Service.RecoverOutside
		// marks them "the agent stopped waiting"); none is cancelled or resumed here.
		if sess, err := r.cfg.Store.Session(ctx, id); err == nil && sess.IsAgent() {
			continue
		} else if err != nil && apperr.CodeOf(err) != apperr.NotFound {
			return err
		}
		// With replicas (SPEC §16), only the sessions no live replica drives: the others' leases
		// hold theirs. A lease another replica let expire is not taken here either: only once
		// this replica has been connected for a whole lease period (relay.Relay.Connected,
		// issue 33), by the lease loop (RunLeases), as a holder cut off by a database outage
		// may be renewing it right now.
		if err := r.replica.recover(ctx, id, bySession[id]); err != nil {
			return err
		}
	}
	return nil
}

// recoverSession applies SPEC §8 to one session whose lease (token lease) this replica holds
// (Replica.recover); started reports whether a parked run resumed (and now holds the lease).
func (r *Runner) recoverSession(ctx context.Context, sessionID string, pending []gate.Approval, lease string) (started bool, _ error) {
	sess, err := r.cfg.Store.Session(ctx, sessionID)
	if err != nil {
		return false, err
	}
	if sess.IsAgent() {
		// An agent session (SPEC §18) never has a loop: nothing to resume, and its pending
		// calls are held by an outside agent's hook request, maybe on another replica —
		// never cancelled here (a replica taking orphans over comes through here too).
		return false, nil
	}
	entries, err := r.cfg.Store.Entries(ctx, sessionID)
	if err != nil {
		return false, err
	}
	// The last assistant message and the calls of it that have no result yet.
	var last *Message
	answered := map[string]bool{}
	for i := range entries {
		m := &entries[i].Message
		switch m.Role {
		case Assistant:
			last, answered = m, map[string]bool{}
		case ToolResult:
			answered[m.ToolCallID] = true
		}
	}
	var open []Block
	if last != nil && last.StopReason == ToolUse {
		for _, c := range last.ToolCalls() {
			if !answered[c.ID] {
				open = append(open, c)
			}
		}
	}
	// Model-issued calls parked on a pending approval; every other pending approval belongs to
	// a call that was executing (a nested call's parent) and is cancelled.
	parked := map[string]gate.Approval{}
	for _, a := range pending {
		if last != nil && a.MessageID == last.ID && a.ParentToolCallID == "" && isOpen(open, a.ToolCallID) {
			parked[a.ToolCallID] = a
			continue
		}
		_, err := r.gate.Decide(ctx, a.ID, gate.Resolution{Status: gate.Cancelled, DecidedBy: gate.BySystem,
			Automatic: true, Reason: InterruptedText})
		if err != nil && apperr.CodeOf(err) != apperr.Conflict {
			return false, err
		}
	}
	// With replicas: calls a person decided while no replica drove the session never started;
	// they get their decision now (approved ones run), as if it had just been made.
	decided, err := r.replica.decidedNotStarted(ctx, sessionID, lastID(last), open)
	if err != nil {
		return false, err
	}
	for call, a := range decided {
		parked[call] = a
	}
	// A run another replica drove (and this one showed from its events) is over, whatever
	// happens next: its live state goes (SPEC §16).
	r.remote.apply(Event{Type: AgentEnd, SessionID: sessionID})
	if len(parked) == 0 {
		// Nothing to wait for: interrupted calls get their results and the session is idle.
		// Each is shown as stored: a replica taking the session over has viewers already.
		ended := false
		for _, c := range open {
			res := r.interrupted(ctx, sessionID, last.ID, c.ID)
			m := Message{ID: newID(), Role: ToolResult, ToolCallID: c.ID, ToolName: c.Name, Result: &res, Timestamp: time.Now().UTC()}
			if _, err := r.cfg.Store.AppendEntry(ctx, sessionID, m); err != nil {
				return false, err
			}
			r.publish(Event{Type: ToolExecutionEnd, SessionID: sessionID, MessageID: last.ID, ToolCallID: c.ID,
				ToolName: c.Name, Arguments: c.Arguments, Result: &res, Message: &m})
			ended = true
		}
		if sess.State.Active() && runWasCut(entries) {
			// The model was answering (its message was never stored) or about to be asked:
			// the run ends as interrupted, and says so in the transcript.
			m := Message{ID: newID(), Role: Assistant, StopReason: Aborted, Model: sess.Model,
				ErrorMessage: RestartedText, Timestamp: time.Now().UTC()}
			if _, err := r.cfg.Store.AppendEntry(ctx, sessionID, m); err != nil {
				return false, err
			}
			r.publish(Event{Type: MessageEnd, SessionID: sessionID, MessageID: m.ID, Message: &m})
			ended = true
		}
		if sess.State != Idle {
			if err := r.setState(ctx, sessionID, Idle); err != nil {
				return false, err
			}
		}
		if ended && !r.replica.alone {
			// Taken over from a replica that died mid-run: its viewers see the run end here.
			r.publish(Event{Type: AgentEnd, SessionID: sessionID, Error: InterruptedText})
		}
		return false, nil
	}
	model, err := r.cfg.Models.Model(sess.Model)
	if err != nil {
		// The model is gone (a script removed): the parked calls still resolve, but the run
		// cannot continue after them; it ends with this error.
		r.log.Error("recover: model unavailable", "session", sessionID, "model", sess.Model, "err", err)
	}
	wsErr := r.replica.workspaceMissing(sess)
	runCtx, cancel := context.WithCancelCause(context.Background())
	rn := &run{r: r, session: sess, model: model, ctx: runCtx, cancel: cancel, lease: lease, leased: time.Now()}
	invs := make([]*invocation, len(open))
	for i, c := range open {
		inv := &invocation{call: tool.Call{ID: c.ID, Name: c.Name, Arguments: c.Arguments},
			messageID: last.ID, requestedBy: gate.RequestedByModel, start: time.Now(), args: c.Arguments}
		a, isParked := parked[c.ID]
		t, found := r.cfg.Tools.Lookup(c.Name)
		switch {
		case !isParked:
			inv.stop(r.interrupted(ctx, sessionID, last.ID, c.ID), tool.NestedUnfinished)
		case wsErr != nil:
			// Taken over by a replica that lacks the session's workspace (SPEC §16): the call
			// cannot run here; its approval is cancelled saying why, and the run ends so.
			_, _ = r.gate.Decide(ctx, a.ID, gate.Resolution{Status: gate.Cancelled, DecidedBy: gate.BySystem,
				Automatic: true, Reason: wsErr.Error()})
			inv.stop(tool.ErrorResult("%s", wsErr.Error()), tool.NestedError)
		case !found:
			_, _ = r.gate.Decide(ctx, a.ID, gate.Resolution{Status: gate.Cancelled, DecidedBy: gate.BySystem,
				Automatic: true, Reason: "the tool is no longer registered"})
			inv.stop(tool.NotFound(c.Name), tool.NestedError)
		default:
			inv.tool = t
			inv.ticket = r.gate.Attach(a)
			// Decided on another replica since it was read (SPEC §16): that decision stands.
			if err := r.gate.Wake(ctx, a.ID); err != nil {
				r.log.Error("recover: read a parked approval", "approval", a.ID, "err", err)
			}
		}
		invs[i] = inv
	}
	r.mu.Lock()
	r.runs[sessionID] = rn
	if r.cfg.Observer != nil {
		r.cfg.Observer.RunStarted()
	}
	r.mu.Unlock()
	if err := r.setState(ctx, sessionID, Running); err != nil {
		r.finishRun(rn)
		cancel(nil)
		return false, err
	}
	msg := *last
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		rn.drive(func(store context.Context) error {
			if err := rn.finishBatch(store, msg, invs); err != nil {
				return err
			}
			if wsErr != nil {
				return wsErr
			}
			if rn.model == nil {
				return apperr.Errorf(apperr.Invalid, "the session's model %q is no longer offered", sess.Model)
			}
			return nil
		})
	}()
	return true, nil
}

// lastID is m's id, or "" for nil.
func lastID(m *Message) string {
	if m == nil {
		return ""
	}
	return m.ID
}

func isOpen(open []Block, id string) bool {
	for _, c := range open {
		if c.ID == id {
			return true
		}
	}
	return false
}

// runWasCut reports whether a run's transcript stops where the model was still to answer:
// after the user's message or after tool results, not after an assistant message that ended.
func runWasCut(entries []Entry) bool {
	if len(entries) == 0 {
		return false
	}
	return entries[len(entries)-1].Message.Role != Assistant
}

// interrupted is the error result of a call that was executing when the process died; what the
// call left running is killed first (Config.KillOrphans), so that its record is true. What ran
// beneath it is rebuilt from the audit (every nested call passed the gate and was recorded),
// marked incomplete: its results died with the process (SPEC §4, §8). The calls a grouped record
// counts (issue 19) are one entry, its first call's, naming the record (ApprovalID) whose count
// says how many there were; their other ids are not stored. Its Interrupted record
// says when the call started — when its approval let it run, a person's decision or a rule's,
// which every executed call has — and its duration runs from then to now, the restart.
func (r *Runner) interrupted(ctx context.Context, sessionID, messageID, callID string) tool.Result {
	if r.cfg.KillOrphans != nil {
		if err := r.cfg.KillOrphans(ctx, sessionID, callID); err != nil {
			r.log.Error("recover: what an interrupted call started may still run", "session", sessionID, "toolCallId", callID, "err", err)
		}
	}
	res := tool.ErrorResult("%s", InterruptedText)
	now := time.Now().UTC()
	res.Interrupted = &tool.Interruption{At: now}
	as, err := r.cfg.Store.Approvals(ctx, sessionID, "")
	if err != nil {
		return res
	}
	var own *gate.Approval // the call's own approval: a person's decision says more than a rule's record
	for i, a := range as {
		if a.MessageID == messageID && a.ToolCallID == callID && (own == nil || own.Automatic) {
			own = &as[i]
		}
	}
	if own != nil && own.Status == gate.Approved && own.DecidedAt != nil {
		started := own.DecidedAt.UTC()
		res.Interrupted.StartedAt = &started
		res.DurationMs = max(now.Sub(started).Milliseconds(), 0)
	}
	var calls nestedLog // bounded as a live record is
	for _, a := range as {
		if a.MessageID != messageID || !strings.HasPrefix(a.ToolCallID, callID+"/") {
			continue
		}
		status := tool.NestedUnfinished
		switch a.Status {
		case gate.Denied:
			status = tool.NestedDenied
			if a.Automatic && (a.DecisionSource == gate.FromHandler || a.DecisionSource == "" && a.DecidedBy == gate.ByHandler) {
				status = tool.NestedBlocked
			}
		case gate.TimedOut:
			status = tool.NestedDenied
		}
		nc := tool.NestedCall{ID: a.ToolCallID, Name: a.ToolName, Arguments: a.EffectiveArguments(), Status: status, ApprovalID: a.ID}
		if status != tool.NestedUnfinished {
			nc.Error = a.Reason
		}
		_, _ = calls.add(nc)
	}
	if rec := calls.record(); rec != nil {
		rec.Complete = false
		res.NestedCalls = rec
	}
	return res
}
