package agent

import (
	"context"
	"encoding/json"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// Agent sessions (SPEC §18): what an outside agent reports lands in its session's transcript as
// the loop's own messages would, so the session page, share links, exports and retention serve
// it unchanged: the person's prompt as a user message, each call the agent asked about as an
// assistant message with that one tool call, and the outcome the agent reported as the call's
// result. The Runner stores and shows them; it never runs a loop there (Send refuses, Recover
// skips agent sessions).

// RecordAgentMessage stores m in agent session sessionID and shows it (message_end). A zero
// Timestamp is now; an empty ID a new one. It returns the message as stored. Errors:
// apperr.Invalid for a session that is not an agent session; apperr.NotFound; the store's.
func (r *Runner) RecordAgentMessage(ctx context.Context, sessionID string, m Message) (_ Message, err error) {
	defer apperr.Wrap(&err, "RecordAgentMessage(%s)", sessionID)
	// After its records queued before it (QueueAgentCall).
	if err := r.outside.flushSession(ctx, sessionID); err != nil {
		return Message{}, err
	}
	if err := r.agentSession(ctx, sessionID); err != nil {
		return Message{}, err
	}
	if m.ID == "" {
		m.ID = newID()
	}
	if m.Timestamp.IsZero() {
		m.Timestamp = time.Now().UTC()
	}
	if _, err := r.cfg.Store.AppendEntry(ctx, sessionID, m); err != nil {
		return Message{}, err
	}
	r.publish(Event{Type: MessageEnd, SessionID: sessionID, MessageID: m.ID, Message: &m})
	return m, nil
}

// RecordAgentCall stores m, the assistant message that shows one outside call, in agent session
// sess (as the caller has just read it) and shows it, as RecordAgentMessage does; with decided (a call a rule, the mode or a
// default decided: gate.OutsideRequest.Record), its approval, whose MessageID becomes m's, and
// its outside call are stored in the same transaction, not synced (store AppendOutsideCall). It
// returns the message as stored. Errors as RecordAgentMessage's, and the store's codes for the
// approval and the outside call.
func (r *Runner) RecordAgentCall(ctx context.Context, sess Session, m Message, decided *gate.OutsideDecided) (_ Message, err error) {
	if decided == nil {
		return r.RecordAgentMessage(ctx, sess.ID, m)
	}
	sessionID := sess.ID
	defer apperr.Wrap(&err, "RecordAgentCall(%s)", sessionID)
	if !sess.IsAgent() {
		return Message{}, apperr.Errorf(apperr.Invalid, "session %s is not an agent session", sessionID)
	}
	if m.ID == "" {
		m.ID = newID()
	}
	if m.Timestamp.IsZero() {
		m.Timestamp = time.Now().UTC()
	}
	decided.Approval.MessageID = m.ID
	if err := r.outside.flushSession(ctx, sessionID); err != nil { // after its records queued before it
		return Message{}, err
	}
	if _, err := r.cfg.Store.AppendOutsideCall(ctx, sessionID, m, decided.Approval, decided.Call); err != nil {
		return Message{}, err
	}
	r.outside.stored()
	r.publish(Event{Type: MessageEnd, SessionID: sessionID, MessageID: m.ID, Message: &m})
	return m, nil
}

// RecordAgentOutcome stores res, the outcome the agent reported of the call approval a decided,
// as the call's result, with outcome — the report as the agent sent it — on the call's outside
// call, in one transaction (store AppendOutsideOutcome, not synced), and shows it
// (tool_execution_end, with the call's arguments and decision, as the card draws them). Errors:
// apperr.Invalid for an outcome that is not JSON; apperr.NotFound for a call with no outside call
// in a.SessionID (only agent sessions have outside calls, so the session is not read first: one
// query less on every gateway and PostToolUse call); the store's.
func (r *Runner) RecordAgentOutcome(ctx context.Context, a gate.Approval, res tool.Result, outcome json.RawMessage) (err error) {
	defer apperr.Wrap(&err, "RecordAgentOutcome(%s, %s)", a.SessionID, a.ToolCallID)
	now := time.Now().UTC()
	m := Message{ID: newID(), Role: ToolResult, ToolCallID: a.ToolCallID, ToolName: a.ToolName, Result: &res, Timestamp: now}
	// After its records queued before it (QueueAgentCall, QueueAgentOutcome).
	if err := r.outside.flushSession(ctx, a.SessionID); err != nil {
		return err
	}
	if _, err := r.cfg.Store.AppendOutsideOutcome(ctx, a.SessionID, m, a.ID, outcome, now); err != nil {
		return err
	}
	r.outside.stored()
	r.showOutcome(a, res)
	return nil
}

// showOutcome shows res, the stored result of the call approval a decided (tool_execution_end,
// with the call's arguments and decision, as the card draws them).
func (r *Runner) showOutcome(a gate.Approval, res tool.Result) {
	r.publish(Event{Type: ToolExecutionEnd, SessionID: a.SessionID, MessageID: a.MessageID, ToolCallID: a.ToolCallID,
		ToolName: a.ToolName, Arguments: a.EffectiveArguments(), Result: &res, Approval: &a})
}

// AgentSessionChanged tells agent session id's viewers that its provenance or state changed
// (session_updated).
func (r *Runner) AgentSessionChanged(ctx context.Context, id string) { r.sessions.Changed(ctx, id) }

func (r *Runner) agentSession(ctx context.Context, id string) error {
	s, err := r.cfg.Store.Session(ctx, id)
	if err != nil {
		return err
	}
	if !s.IsAgent() {
		return apperr.Errorf(apperr.Invalid, "session %s is not an agent session", id)
	}
	return nil
}
