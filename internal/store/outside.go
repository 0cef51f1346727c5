package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// Agent sessions and their outside calls (SPEC §18, issue 30).

// AgentSession returns the agent session of connection connectionID for the agent's session id
// agentSessionID (one per pair, SPEC §18), or apperr.NotFound.
func (db *SQL) AgentSession(ctx context.Context, connectionID, agentSessionID string) (s agent.Session, err error) {
	defer apperr.Wrap(&err, "store.AgentSession(%s, %s)", connectionID, agentSessionID)
	s, err = scanSession(db.queryRow(ctx, db.reads(), selectSession+
		` WHERE connection_id = ? AND agent_session_id = ? AND agent_kind IS NOT NULL`, connectionID, agentSessionID))
	if isNoRows(err) {
		return agent.Session{}, apperr.Errorf(apperr.NotFound, "no agent session %s for connection %s", agentSessionID, connectionID)
	}
	return s, err
}

// UpdateAgentSession stores what the agent reported of agent session id since it was created:
// its permission mode, transcript path, model, last prompt or turn id and state (info's Kind,
// ConnectionID and SessionID never change). Errors: apperr.NotFound for an unknown id or a
// session that is not an agent session.
func (db *SQL) UpdateAgentSession(ctx context.Context, id string, info agent.AgentInfo) (err error) {
	defer apperr.Wrap(&err, "store.UpdateAgentSession(%s)", id)
	return db.updateSession(ctx, id, `UPDATE sessions SET agent_permission_mode = ?, agent_transcript_path = ?,
		agent_model = ?, agent_prompt_id = ?, agent_state = ? WHERE id = ? AND agent_kind IS NOT NULL`,
		info.PermissionMode, info.TranscriptPath, info.Model, info.PromptID, info.State, id)
}

const outsideCallColumns = `approval_id, session_id, tool_use_id, match_key, edited_key, event, editable, stopped_waiting_at, outcome, outcome_at, created_at, deadline, claimed_at, cwd`

// CreateOutsideCall stores c beside its approval (c.ApprovalID, already stored). A zero
// CreatedAt is stored as db.Now(). Errors: apperr.Conflict when the approval has one already;
// apperr.NotFound for an unknown approval or session; apperr.Invalid for an outcome that is not
// JSON.
func (db *SQL) CreateOutsideCall(ctx context.Context, c gate.OutsideCall) (err error) {
	defer apperr.Wrap(&err, "store.CreateOutsideCall(%s)", c.ApprovalID)
	if c.CreatedAt.IsZero() {
		c.CreatedAt = db.Now()
	}
	if c.Outcome != nil && !json.Valid(c.Outcome) {
		return apperr.Errorf(apperr.Invalid, "an outside call's outcome must be JSON")
	}
	_, err = db.exec1(ctx, 0, insertOutsideCall, outsideCallArgs(c)...)
	return db.outsideCallError(c, err)
}

const insertOutsideCall = `INSERT INTO outside_calls (` + outsideCallColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func outsideCallArgs(c gate.OutsideCall) []any {
	return []any{c.ApprovalID, c.SessionID, c.ToolUseID, c.MatchKey, nullString(c.EditedKey), c.Event, c.Editable, nullTime(c.StoppedWaitingAt),
		nullJSON(c.Outcome), nullTime(c.OutcomeAt), formatTime(c.CreatedAt), nullTime(c.Deadline), nullTime(c.ClaimedAt), nullString(c.Cwd)}
}

// AppendOutsideCall stores, in one transaction, an outside call a rule, the mode or a default
// decided (SPEC §18; no person waits on it): m, the assistant message that shows the call, as
// the session's next entry (AppendEntry), a, its automatic approval (a.MessageID is m's), and c,
// its outside call. Like AppendEntry's records it is not synced (SQLite synchronous=NORMAL, issue
// 35: no fsync on the answer's path of a call a rule decided): a power loss keeps or drops the
// three together, and Countersign ran nothing on it. A zero c.CreatedAt is a's. Errors:
// AppendEntry's, CreateApproval's and CreateOutsideCall's codes.
func (db *SQL) AppendOutsideCall(ctx context.Context, sessionID string, m agent.Message, a gate.Approval, c gate.OutsideCall) (e agent.Entry, err error) {
	defer apperr.Wrap(&err, "store.AppendOutsideCall(%s, %s)", sessionID, a.ID)
	if a.Status == gate.Pending {
		return agent.Entry{}, apperr.Errorf(apperr.Invalid, "AppendOutsideCall stores a decided call, not a pending one")
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = a.CreatedAt
	}
	if c.Outcome != nil && !json.Valid(c.Outcome) {
		return agent.Entry{}, apperr.Errorf(apperr.Invalid, "an outside call's outcome must be JSON")
	}
	e, err = db.appendEntry(ctx, sessionID, m, []gate.Approval{a}, func(tx Querier) error {
		_, err := db.exec(ctx, tx, insertOutsideCall, outsideCallArgs(c)...)
		return db.outsideCallError(c, err)
	})
	return e, err
}

// CreateDecidedOutsideCall stores a, an outside call's automatic approval, and c, its outside
// call, in one transaction, not synced: AppendOutsideCall for a caller that records no message
// (gate.Service.DecideOutside with no OutsideRequest.Record). Errors as AppendOutsideCall's.
func (db *SQL) CreateDecidedOutsideCall(ctx context.Context, a gate.Approval, c gate.OutsideCall) (err error) {
	defer apperr.Wrap(&err, "store.CreateDecidedOutsideCall(%s)", a.ID)
	if a.Status == gate.Pending {
		return apperr.Errorf(apperr.Invalid, "CreateDecidedOutsideCall stores a decided call, not a pending one")
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = a.CreatedAt
	}
	if c.Outcome != nil && !json.Valid(c.Outcome) {
		return apperr.Errorf(apperr.Invalid, "an outside call's outcome must be JSON")
	}
	err = db.write(ctx, Atomic, func(tx Querier) error {
		if err := db.insertApprovals(ctx, tx, []gate.Approval{a}); err != nil {
			return err
		}
		_, err := db.exec(ctx, tx, insertOutsideCall, outsideCallArgs(c)...)
		return db.outsideCallError(c, err)
	})
	return db.approvalError(a, err)
}

// outsideCallError is err, an insert of c's row, with CreateOutsideCall's codes.
func (db *SQL) outsideCallError(c gate.OutsideCall, err error) error {
	switch db.kind(err) {
	case ErrUnique:
		return apperr.Errorf(apperr.Conflict, "approval %s has an outside call already", c.ApprovalID)
	case ErrForeignKey:
		return apperr.Errorf(apperr.NotFound, "approval %s or session %s not found", c.ApprovalID, c.SessionID)
	}
	return err
}

// OutsideCall returns approval approvalID's outside call, or apperr.NotFound.
func (db *SQL) OutsideCall(ctx context.Context, approvalID string) (c gate.OutsideCall, err error) {
	defer apperr.Wrap(&err, "store.OutsideCall(%s)", approvalID)
	return db.oneOutsideCall(ctx, `WHERE approval_id = ?`, approvalID)
}

// OutsideCallByKey returns session sessionID's latest outside call whose match key is key
// (hooks.MatchKey), or else whose edited key is, or apperr.NotFound.
func (db *SQL) OutsideCallByKey(ctx context.Context, sessionID, key string) (c gate.OutsideCall, err error) {
	defer apperr.Wrap(&err, "store.OutsideCallByKey(%s)", sessionID)
	// One statement, on the hook's path: a match key's own call first, then the latest. Each
	// half is its own index seek, the latest read in the index's order (outside_calls_key): an
	// OR of the two keys made SQLite read every outside call of the session and sort them, on
	// every hook (issue 30's hooks bench).
	const latest = ` ORDER BY created_at DESC, approval_id DESC LIMIT 1`
	c, err = scanOutsideCall(db.queryRow(ctx, db.reads(), `SELECT `+outsideCallColumns+` FROM (
		SELECT *, 0 AS pri FROM (SELECT `+outsideCallColumns+` FROM outside_calls WHERE session_id = ? AND match_key = ?`+latest+`) k
		UNION ALL
		SELECT *, 1 AS pri FROM (SELECT `+outsideCallColumns+` FROM outside_calls WHERE session_id = ? AND edited_key = ?`+latest+`) e
	) c ORDER BY pri LIMIT 1`,
		sessionID, key, sessionID, key))
	if isNoRows(err) {
		return gate.OutsideCall{}, apperr.Errorf(apperr.NotFound, "outside call not found")
	}
	return c, err
}

// ClaimOutsideCall takes the decision of approval approvalID's outside call, in agent session
// sessionID, to run (or refuse) the call now (Door 2): true for the one request that takes it;
// false when it was taken before (by another request, on this replica or another: SPEC §16) or
// the call already has an outcome, or when there is no such call. One conditional update,
// synced (Durable) before the call runs, so a decision is used once even when two requests find
// it at the same instant and across a crash. at is stored as claimed_at.
func (db *SQL) ClaimOutsideCall(ctx context.Context, sessionID, approvalID string, at time.Time) (_ bool, err error) {
	defer apperr.Wrap(&err, "store.ClaimOutsideCall(%s)", approvalID)
	n, err := db.exec1(ctx, Durable, `UPDATE outside_calls SET claimed_at = ? WHERE approval_id = ? AND session_id = ?
		AND claimed_at IS NULL AND outcome IS NULL`, formatTime(at), approvalID, sessionID)
	return n == 1, err
}

// SetOutsideEditedKey records the match key of the input a person's edit approved for approval
// approvalID's call: the agent's later events about the call carry the edited input
// (OutsideCallByKey finds it by it). apperr.NotFound for an approval with no outside call.
func (db *SQL) SetOutsideEditedKey(ctx context.Context, approvalID, key string) (err error) {
	defer apperr.Wrap(&err, "store.SetOutsideEditedKey(%s)", approvalID)
	n, err := db.exec1(ctx, 0, `UPDATE outside_calls SET edited_key = ? WHERE approval_id = ?`, key, approvalID)
	if err == nil && n == 0 {
		return apperr.Errorf(apperr.NotFound, "outside call %s not found", approvalID)
	}
	return err
}

// OutsideCallByToolUse returns session sessionID's latest outside call whose tool_use_id is
// toolUseID, or apperr.NotFound ("" finds nothing).
func (db *SQL) OutsideCallByToolUse(ctx context.Context, sessionID, toolUseID string) (c gate.OutsideCall, err error) {
	defer apperr.Wrap(&err, "store.OutsideCallByToolUse(%s, %s)", sessionID, toolUseID)
	if toolUseID == "" {
		return gate.OutsideCall{}, apperr.Errorf(apperr.NotFound, "no tool_use_id")
	}
	return db.oneOutsideCall(ctx, `WHERE session_id = ? AND tool_use_id = ?`, sessionID, toolUseID)
}

func (db *SQL) oneOutsideCall(ctx context.Context, where string, args ...any) (gate.OutsideCall, error) {
	c, err := scanOutsideCall(db.queryRow(ctx, db.reads(), `SELECT `+outsideCallColumns+` FROM outside_calls `+where+
		` ORDER BY created_at DESC, approval_id DESC LIMIT 1`, args...))
	if isNoRows(err) {
		return gate.OutsideCall{}, apperr.Errorf(apperr.NotFound, "outside call not found")
	}
	return c, err
}

// OutsideCalls lists session sessionID's outside calls in creation order.
func (db *SQL) OutsideCalls(ctx context.Context, sessionID string) (_ []gate.OutsideCall, err error) {
	defer apperr.Wrap(&err, "store.OutsideCalls(%s)", sessionID)
	return queryAll(ctx, db, db.reads(), scanOutsideCall, `SELECT `+outsideCallColumns+` FROM outside_calls
		WHERE session_id = ? ORDER BY created_at, approval_id`, sessionID)
}

// MarkStoppedWaiting records that the agent stopped waiting for approval approvalID's decision at
// *at (its hook's deadline passed, or the server restarted under it); nil clears the mark (the
// agent asks again about the same call and waits anew). apperr.NotFound for an approval with no
// outside call.
func (db *SQL) MarkStoppedWaiting(ctx context.Context, approvalID string, at *time.Time) (err error) {
	defer apperr.Wrap(&err, "store.MarkStoppedWaiting(%s)", approvalID)
	n, err := db.exec1(ctx, Durable, `UPDATE outside_calls SET stopped_waiting_at = ? WHERE approval_id = ?`,
		nullTime(at), approvalID)
	if err == nil && n == 0 {
		return apperr.Errorf(apperr.NotFound, "outside call %s not found", approvalID)
	}
	return err
}

// WaitAgain records that the agent asks again about approval approvalID's call, still pending,
// and waits for it anew until deadline: the mark that it stopped waiting is cleared and its
// deadline replaced (a zero deadline stores none). apperr.NotFound for an approval with no outside call.
func (db *SQL) WaitAgain(ctx context.Context, approvalID string, deadline time.Time) (err error) {
	defer apperr.Wrap(&err, "store.WaitAgain(%s)", approvalID)
	var dl *time.Time
	if !deadline.IsZero() {
		dl = &deadline
	}
	n, err := db.exec1(ctx, Durable, `UPDATE outside_calls SET stopped_waiting_at = NULL, deadline = ? WHERE approval_id = ?`,
		nullTime(dl), approvalID)
	if err == nil && n == 0 {
		return apperr.Errorf(apperr.NotFound, "outside call %s not found", approvalID)
	}
	return err
}

// SetOutsideOutcome stores the outcome the agent reported (PostToolUse's tool_response, any JSON
// value) of approval approvalID's call at at. apperr.NotFound for an approval with no outside
// call; apperr.Invalid for an outcome that is not JSON.
func (db *SQL) SetOutsideOutcome(ctx context.Context, approvalID string, outcome json.RawMessage, at time.Time) (err error) {
	defer apperr.Wrap(&err, "store.SetOutsideOutcome(%s)", approvalID)
	if !json.Valid(outcome) {
		return apperr.Errorf(apperr.Invalid, "an outside call's outcome must be JSON")
	}
	n, err := db.exec1(ctx, Durable, `UPDATE outside_calls SET outcome = ?, outcome_at = ? WHERE approval_id = ?`,
		string(outcome), formatTime(at), approvalID)
	if err == nil && n == 0 {
		return apperr.Errorf(apperr.NotFound, "outside call %s not found", approvalID)
	}
	return err
}

// AppendOutsideOutcome stores, in one transaction, m — the call's result as the session shows
// it, its next entry (AppendEntry) — and outcome, what the agent or the upstream reported, on
// approval approvalID's outside call (SetOutsideOutcome's row), at at. Not synced, like any
// transcript entry (SPEC §8): a power loss keeps or drops both. A call's outcome is written once:
// a second report (an agent's or a proxy's, even at the same instant as the first) never replaces
// it. Errors: apperr.Invalid for an outcome that is not JSON; apperr.NotFound for an approval
// with no outside call or an unknown session; apperr.Conflict for a call that has its outcome;
// then nothing is stored.
func (db *SQL) AppendOutsideOutcome(ctx context.Context, sessionID string, m agent.Message, approvalID string, outcome json.RawMessage, at time.Time) (e agent.Entry, err error) {
	defer apperr.Wrap(&err, "store.AppendOutsideOutcome(%s)", approvalID)
	if !json.Valid(outcome) {
		return agent.Entry{}, apperr.Errorf(apperr.Invalid, "an outside call's outcome must be JSON")
	}
	return db.appendEntry(ctx, sessionID, m, nil, func(tx Querier) error {
		n, err := db.exec(ctx, tx, `UPDATE outside_calls SET outcome = ?, outcome_at = ? WHERE approval_id = ? AND session_id = ?
			AND outcome IS NULL`, string(outcome), formatTime(at), approvalID, sessionID)
		if err != nil || n == 1 {
			return err
		}
		var one int
		err = db.queryRow(ctx, tx, `SELECT 1 FROM outside_calls WHERE approval_id = ? AND session_id = ?`, approvalID, sessionID).Scan(&one)
		switch {
		case isNoRows(err):
			return apperr.Errorf(apperr.NotFound, "outside call %s not found in session %s", approvalID, sessionID)
		case err == nil:
			return apperr.Errorf(apperr.Conflict, "outside call %s has its outcome already", approvalID)
		}
		return err
	})
}

func scanOutsideCall(r Row) (gate.OutsideCall, error) {
	var (
		c                  gate.OutsideCall
		edited, cwd        sql.NullString
		stopped, outcomeAt sql.NullString
		deadline, claimed  sql.NullString
		outcome            sql.NullString
		created            string
	)
	if err := r.Scan(&c.ApprovalID, &c.SessionID, &c.ToolUseID, &c.MatchKey, &edited, &c.Event, &c.Editable, &stopped, &outcome, &outcomeAt, &created, &deadline, &claimed, &cwd); err != nil {
		return gate.OutsideCall{}, err
	}
	var err error
	if c.StoppedWaitingAt, err = parseNullTime(stopped); err != nil {
		return c, err
	}
	if c.OutcomeAt, err = parseNullTime(outcomeAt); err != nil {
		return c, err
	}
	if c.Deadline, err = parseNullTime(deadline); err != nil {
		return c, err
	}
	if c.ClaimedAt, err = parseNullTime(claimed); err != nil {
		return c, err
	}
	c.Outcome, c.EditedKey, c.Cwd = rawJSON(outcome), edited.String, cwd.String
	c.CreatedAt, err = parseTime(created)
	return c, err
}

// nullString stores "" as SQL NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
