package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

const sessionColumns = `id, title, model, workspace, state, active_tools, created_at, mode, instructions`

// usageColumns are the sums of the usage of a session's assistant messages (agent.Session.Usage),
// kept by AppendEntry.
const usageColumns = `usage_input, usage_output, usage_cache_read, usage_cache_write`

// selectSession reads sessionColumns and the session's pending approvals (through the partial
// index approvals_pending: the literal 'pending' lets SQLite use it).
const selectSession = `SELECT ` + sessionColumns + `, ` + usageColumns + `,
	(SELECT COUNT(*) FROM approvals a WHERE a.session_id = sessions.id AND a.status = 'pending')
	FROM sessions`

// CreateSession stores a new session. A zero CreatedAt is stored as db.Now() and an empty State as
// agent.Idle; ActiveTools nil is stored as NULL (the registry's default), which is not the same as
// an empty set. It returns apperr.Invalid for an empty id and apperr.Conflict when the id exists.
func (db *DB) CreateSession(ctx context.Context, s agent.Session) (err error) {
	defer apperr.Wrap(&err, "store.CreateSession(%s)", s.ID)
	if s.ID == "" {
		return apperr.Errorf(apperr.Invalid, "a session needs an id")
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = db.Now()
	}
	if s.State == "" {
		s.State = agent.Idle
	}
	if s.Mode == "" {
		s.Mode = gate.ModeDefault
	}
	tools, err := activeToolsJSON(s.ActiveTools)
	if err != nil {
		return err
	}
	_, err = db.write.ExecContext(ctx,
		`INSERT INTO sessions (`+sessionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.ID, s.Title, s.Model, s.Workspace, string(s.State), tools, formatTime(s.CreatedAt), string(s.Mode), s.Instructions)
	switch {
	case isUnique(err):
		return apperr.Errorf(apperr.Conflict, "session %s already exists", s.ID)
	case isCheck(err):
		return apperr.Errorf(apperr.Invalid, "mode must be default, plan or accept-edits, not %q", s.Mode)
	}
	return err
}

// Session returns the session with the given id, or apperr.NotFound. Its PendingApprovals is
// counted from the approvals, and a running session with one pending or more reads back as
// agent.Waiting: its run is parked on a person (the stored state stays running).
func (db *DB) Session(ctx context.Context, id string) (s agent.Session, err error) {
	defer apperr.Wrap(&err, "store.Session(%s)", id)
	s, err = scanSession(db.reads.QueryRowContext(ctx,
		selectSession+` WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return agent.Session{}, apperr.Errorf(apperr.NotFound, "session %s not found", id)
	}
	return s, err
}

// Sessions lists every session, newest first (by CreatedAt; equal times newest stored first),
// each read as Session reads one.
func (db *DB) Sessions(ctx context.Context) (_ []agent.Session, err error) {
	defer apperr.Wrap(&err, "store.Sessions")
	return db.querySessions(ctx,
		selectSession+` ORDER BY created_at DESC, rowid DESC`)
}

// SessionsInState lists the sessions whose stored state is st, newest first. At restart, the
// sessions still marked agent.Running are the ones whose run the process lost (SPEC §8); those
// parked on an approval read back as agent.Waiting, as Session reads them.
func (db *DB) SessionsInState(ctx context.Context, st agent.State) (_ []agent.Session, err error) {
	defer apperr.Wrap(&err, "store.SessionsInState(%s)", st)
	return db.querySessions(ctx,
		selectSession+` WHERE state = ? ORDER BY created_at DESC, rowid DESC`,
		string(st))
}

// SetSessionState sets a session's run state, idle or running; apperr.NotFound for an unknown
// id, apperr.Invalid for another state (waiting is read, never stored: see Session).
func (db *DB) SetSessionState(ctx context.Context, id string, st agent.State) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionState(%s, %s)", id, st)
	if st != agent.Idle && st != agent.Running {
		return apperr.Errorf(apperr.Invalid, "a session's stored state is idle or running, not %q", st)
	}
	return db.updateSession(ctx, id, `UPDATE sessions SET state = ? WHERE id = ?`, string(st), id)
}

// SetSessionTitle renames a session; apperr.NotFound for an unknown id. The caller validates
// the title (agent.Runner.RenameSession).
func (db *DB) SetSessionTitle(ctx context.Context, id, title string) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionTitle(%s)", id)
	return db.updateSession(ctx, id, `UPDATE sessions SET title = ? WHERE id = ?`, title, id)
}

// SetSessionInstructions sets a session's instructions (SPEC §17) while it has no transcript
// entry: the check and the update are one statement, so a first message stored at the same time
// either comes after the new instructions or makes this apperr.Conflict. apperr.NotFound for an
// unknown id.
func (db *DB) SetSessionInstructions(ctx context.Context, id, instructions string) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionInstructions(%s)", id)
	err = db.updateSession(ctx, id, setInstructions, instructions, id, id)
	if apperr.CodeOf(err) != apperr.NotFound {
		return err
	}
	if _, serr := db.Session(ctx, id); serr != nil {
		return serr
	}
	return apperr.Errorf(apperr.Conflict, "The instructions can no longer change: the session has messages (they are fixed by the first one).")
}

const setInstructions = `UPDATE sessions SET instructions = ?
	WHERE id = ? AND NOT EXISTS (SELECT 1 FROM entries WHERE session_id = ?)`

// DeleteSession deletes a session with everything that belongs to it, in one statement: its
// transcript entries, approvals (the audit), grants and share links go with it (ON DELETE
// CASCADE; foreign_keys is on for every connection). Synced like a decision (commitDurable): a
// deletion the owner was told about is not undone by a power loss. apperr.NotFound for an
// unknown id.
func (db *DB) DeleteSession(ctx context.Context, id string) (err error) {
	defer apperr.Wrap(&err, "store.DeleteSession(%s)", id)
	var n int64
	err = db.commitDurable(ctx, false, func(w *writeTx) error {
		res, err := w.stmt(deleteSession).ExecContext(w.ctx, id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	}, deleteSession)
	if err != nil {
		return err
	}
	if n == 0 {
		return apperr.Errorf(apperr.NotFound, "session %s not found", id)
	}
	return nil
}

const deleteSession = `DELETE FROM sessions WHERE id = ?`

// SetSessionMode sets a session's mode (SPEC §14). Errors: apperr.Invalid for a mode that is not
// default, plan or accept-edits; apperr.NotFound for an unknown id.
func (db *DB) SetSessionMode(ctx context.Context, id string, mode gate.Mode) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionMode(%s)", id)
	switch mode {
	case gate.ModeDefault, gate.ModePlan, gate.ModeAcceptEdits:
	default:
		return apperr.Errorf(apperr.Invalid, "mode must be default, plan or accept-edits, not %q", mode)
	}
	return db.updateSession(ctx, id, `UPDATE sessions SET mode = ? WHERE id = ?`, string(mode), id)
}

// SetActiveTools sets a session's active tool names, kept in the given order. nil means the
// registry's default (stored as NULL); an empty, non-nil slice means no tools. apperr.NotFound
// for an unknown id.
func (db *DB) SetActiveTools(ctx context.Context, id string, names []string) (err error) {
	defer apperr.Wrap(&err, "store.SetActiveTools(%s)", id)
	tools, err := activeToolsJSON(names)
	if err != nil {
		return err
	}
	return db.updateSession(ctx, id, `UPDATE sessions SET active_tools = ? WHERE id = ?`, tools, id)
}

// AppendEntry stores m as the session's next transcript entry and returns it with its Seq (1 for
// the first entry of a session), and adds its usage, if any, to the session's (Session.Usage). The entry is committed when it returns. records, if any, are
// approvals stored in the same transaction, as CreateApprovals does (the automatic audit records
// of the message's tool calls): the entry and all of them, or nothing. Errors: apperr.NotFound
// for an unknown session; CreateApproval's codes for a bad record.
func (db *DB) AppendEntry(ctx context.Context, sessionID string, m agent.Message, records ...gate.Approval) (e agent.Entry, err error) {
	defer apperr.Wrap(&err, "store.AppendEntry(%s)", sessionID)
	body, err := json.Marshal(m)
	if err != nil {
		return agent.Entry{}, apperr.Errorf(apperr.Invalid, "message cannot be stored: %v", err)
	}
	args := []any{sessionID, string(m.Role), m.ToolCallID, string(body), formatTime(db.Now()), sessionID}
	// One statement (one transaction with the records): seq is computed and used under the write
	// lock, and the single write connection means no other insert of ours can interleave anyway.
	var seq int64
	// At synchronous=NORMAL even with records, unlike the other approval writes (commitDurable):
	// these are rules' decisions (policy, a handler, a session grant, itself durable) committed in
	// one transaction with the assistant message that made the calls, so a power loss keeps or
	// drops both; the transcript never shows a call without its decision, and nobody is asked
	// again for a call that ran. A sync here would cost every model turn with tool calls
	// (measured with BenchmarkDirect: +50 to +100% per faux turn on a loaded machine).
	// An assistant message's usage is added to its session's sums in the same transaction.
	usage := m.Usage != nil && !m.Usage.IsZero()
	err = db.commit(ctx, len(records) > 0 || usage, func(w *writeTx) error {
		if err := w.stmt(insertEntry).QueryRowContext(w.ctx, args...).Scan(&seq); err != nil {
			return err
		}
		if usage {
			u := m.Usage
			if _, err := w.stmt(addUsage).ExecContext(w.ctx, u.Input, u.Output, u.CacheRead, u.CacheWrite, sessionID); err != nil {
				return err
			}
		}
		if len(records) == 0 {
			return nil
		}
		return db.insertApprovals(w, records)
	}, insertEntry, addUsage, insertApproval, insertApprovalsJSON)
	if isForeignKey(err) {
		return agent.Entry{}, apperr.Errorf(apperr.NotFound, "session %s not found", sessionID)
	}
	if err != nil {
		return agent.Entry{}, err
	}
	return agent.Entry{Seq: seq, SessionID: sessionID, Message: m}, nil
}

const insertEntry = `
		INSERT INTO entries (session_id, seq, role, tool_call_id, message, created_at)
		SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ? FROM entries WHERE session_id = ?
		RETURNING seq`

const addUsage = `UPDATE sessions SET usage_input = usage_input + ?, usage_output = usage_output + ?,
	usage_cache_read = usage_cache_read + ?, usage_cache_write = usage_cache_write + ? WHERE id = ?`

// Entries returns the session's transcript in Seq order; empty for an unknown session.
func (db *DB) Entries(ctx context.Context, sessionID string) (_ []agent.Entry, err error) {
	defer apperr.Wrap(&err, "store.Entries(%s)", sessionID)
	rows, err := db.read.QueryContext(ctx,
		`SELECT seq, message FROM entries WHERE session_id = ? ORDER BY seq`, sessionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var entries []agent.Entry
	for rows.Next() {
		e := agent.Entry{SessionID: sessionID}
		var body string
		if err := rows.Scan(&e.Seq, &body); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(body), &e.Message); err != nil {
			return nil, fmt.Errorf("entry %d: %w", e.Seq, err)
		}
		entries = append(entries, e)
	}
	return entries, rows.Err()
}

func (db *DB) updateSession(ctx context.Context, id, query string, args ...any) error {
	var n int64
	err := db.commit(ctx, false, func(w *writeTx) error {
		res, err := w.stmt(query).ExecContext(w.ctx, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	}, query)
	if err != nil {
		return err
	}
	if n == 0 {
		return apperr.Errorf(apperr.NotFound, "session %s not found", id)
	}
	return nil
}

func (db *DB) querySessions(ctx context.Context, query string, args ...any) ([]agent.Session, error) {
	return queryAll(ctx, db.read, scanSession, query, args...)
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// queryAll runs query on conn and scans every row with scan, in order.
func queryAll[T any](ctx context.Context, conn *sql.DB, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := conn.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func scanSession(r scanner) (agent.Session, error) {
	var (
		s         agent.Session
		state, at string
		tools     sql.NullString
		mode      string
	)
	u := &s.Usage
	if err := r.Scan(&s.ID, &s.Title, &s.Model, &s.Workspace, &state, &tools, &at, &mode, &s.Instructions,
		&u.Input, &u.Output, &u.CacheRead, &u.CacheWrite, &s.PendingApprovals); err != nil {
		return agent.Session{}, err
	}
	s.State, s.Mode = agent.State(state), gate.Mode(mode)
	if s.State == agent.Running && s.PendingApprovals > 0 {
		s.State = agent.Waiting
	}
	var err error
	if s.CreatedAt, err = parseTime(at); err != nil {
		return agent.Session{}, err
	}
	if tools.Valid {
		s.ActiveTools = []string{}
		if err := json.Unmarshal([]byte(tools.String), &s.ActiveTools); err != nil {
			return agent.Session{}, fmt.Errorf("session %s active_tools: %w", s.ID, err)
		}
	}
	return s, nil
}

// activeToolsJSON is the stored form of an active tool set: NULL for nil, a JSON array otherwise.
func activeToolsJSON(names []string) (any, error) {
	if names == nil {
		return nil, nil
	}
	b, err := json.Marshal(names)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// IdleSessions lists the ids of the sessions idle since before (-retain, SPEC §16): nothing was
// added to their transcript after it, and they were created before it. Oldest activity first.
func (db *DB) IdleSessions(ctx context.Context, before time.Time) (_ []string, err error) {
	defer apperr.Wrap(&err, "store.IdleSessions")
	rows, err := db.read.QueryContext(ctx, `
		SELECT id FROM (
			SELECT s.id, max(s.created_at, COALESCE((SELECT max(e.created_at) FROM entries e WHERE e.session_id = s.id), '')) AS last
			FROM sessions s)
		WHERE last < ? ORDER BY last`, formatTime(before))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
