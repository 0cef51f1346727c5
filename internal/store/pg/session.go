package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

const sessionColumns = `id, title, model, workspace, state, active_tools, created_at, mode, instructions`

// selectSession reads sessionColumns, the usage sums and the session's pending approvals
// (through the partial index approvals_pending).
const selectSession = `SELECT ` + sessionColumns + `, usage_input, usage_output, usage_cache_read, usage_cache_write,
	(SELECT count(*) FROM approvals a WHERE a.session_id = sessions.id AND a.status = 'pending')
	FROM sessions`

// CreateSession stores a new session, as store.DB.CreateSession does: a zero CreatedAt is
// db.Now(), an empty State agent.Idle, an empty Mode gate.ModeDefault; ActiveTools nil is NULL.
// Errors: apperr.Invalid for an empty id or an unknown mode, apperr.Conflict when the id exists.
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
	_, err = db.exec(ctx, `INSERT INTO sessions (`+sessionColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		s.ID, s.Title, s.Model, s.Workspace, string(s.State), tools, formatTime(s.CreatedAt), string(s.Mode), s.Instructions)
	switch {
	case isUnique(err):
		return apperr.Errorf(apperr.Conflict, "session %s already exists", s.ID)
	case pgCode(err) == "23514":
		return apperr.Errorf(apperr.Invalid, "mode must be default, plan or accept-edits, not %q", s.Mode)
	case isInvalid(err):
		return apperr.Errorf(apperr.Invalid, "session %s cannot be stored: a text holds a NUL byte or invalid UTF-8", s.ID)
	}
	return err
}

// Session returns the session with the given id, or apperr.NotFound; a running session with a
// pending approval reads back as agent.Waiting (store.DB.Session).
func (db *DB) Session(ctx context.Context, id string) (s agent.Session, err error) {
	defer apperr.Wrap(&err, "store.Session(%s)", id)
	s, err = scanSession(db.pool.QueryRow(ctx, selectSession+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return agent.Session{}, apperr.Errorf(apperr.NotFound, "session %s not found", id)
	}
	return s, err
}

// Sessions lists every session, newest first (by CreatedAt; equal times newest stored first).
func (db *DB) Sessions(ctx context.Context) (_ []agent.Session, err error) {
	defer apperr.Wrap(&err, "store.Sessions")
	return queryAll(ctx, db, scanSession, selectSession+` ORDER BY created_at DESC, ord DESC`)
}

// SessionsInState lists the sessions whose stored state is st, newest first.
func (db *DB) SessionsInState(ctx context.Context, st agent.State) (_ []agent.Session, err error) {
	defer apperr.Wrap(&err, "store.SessionsInState(%s)", st)
	return queryAll(ctx, db, scanSession, selectSession+` WHERE state = $1 ORDER BY created_at DESC, ord DESC`, string(st))
}

// SetSessionState sets a session's run state, idle or running; apperr.NotFound for an unknown
// id, apperr.Invalid for another state.
func (db *DB) SetSessionState(ctx context.Context, id string, st agent.State) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionState(%s, %s)", id, st)
	if st != agent.Idle && st != agent.Running {
		return apperr.Errorf(apperr.Invalid, "a session's stored state is idle or running, not %q", st)
	}
	return db.updateSession(ctx, id, `UPDATE sessions SET state = $1 WHERE id = $2`, string(st), id)
}

// SetSessionTitle renames a session; apperr.NotFound for an unknown id.
func (db *DB) SetSessionTitle(ctx context.Context, id, title string) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionTitle(%s)", id)
	return db.updateSession(ctx, id, `UPDATE sessions SET title = $1 WHERE id = $2`, title, id)
}

// SetSessionInstructions sets a session's instructions while it has no transcript entry:
// apperr.Conflict once it has one, apperr.NotFound for an unknown id. "No entry" is the
// session row's last_entry_seq = 0, checked in the UPDATE: an append at the same time holds
// the row's lock until it commits, and the UPDATE then re-checks the committed row, so the
// change either comes first or is refused.
func (db *DB) SetSessionInstructions(ctx context.Context, id, instructions string) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionInstructions(%s)", id)
	err = db.updateSession(ctx, id, `UPDATE sessions SET instructions = $1 WHERE id = $2 AND last_entry_seq = 0`, instructions, id)
	if apperr.CodeOf(err) != apperr.NotFound {
		return err
	}
	if _, serr := db.Session(ctx, id); serr != nil {
		return serr
	}
	return apperr.Errorf(apperr.Conflict, "The instructions can no longer change: the session has messages (they are fixed by the first one).")
}

// DeleteSession deletes a session with its entries, approvals, rules and share links (ON DELETE
// CASCADE), in one statement; apperr.NotFound for an unknown id.
func (db *DB) DeleteSession(ctx context.Context, id string) (err error) {
	defer apperr.Wrap(&err, "store.DeleteSession(%s)", id)
	return db.updateSession(ctx, id, `DELETE FROM sessions WHERE id = $1`, id)
}

// SetSessionMode sets a session's mode. Errors: apperr.Invalid for a mode that is not default,
// plan or accept-edits; apperr.NotFound for an unknown id.
func (db *DB) SetSessionMode(ctx context.Context, id string, mode gate.Mode) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionMode(%s)", id)
	switch mode {
	case gate.ModeDefault, gate.ModePlan, gate.ModeAcceptEdits:
	default:
		return apperr.Errorf(apperr.Invalid, "mode must be default, plan or accept-edits, not %q", mode)
	}
	return db.updateSession(ctx, id, `UPDATE sessions SET mode = $1 WHERE id = $2`, string(mode), id)
}

// SetActiveTools sets a session's active tool names, kept in order; nil means the registry's
// default (NULL), an empty slice no tools. apperr.NotFound for an unknown id.
func (db *DB) SetActiveTools(ctx context.Context, id string, names []string) (err error) {
	defer apperr.Wrap(&err, "store.SetActiveTools(%s)", id)
	tools, err := activeToolsJSON(names)
	if err != nil {
		return err
	}
	return db.updateSession(ctx, id, `UPDATE sessions SET active_tools = $1 WHERE id = $2`, tools, id)
}

// AppendEntry stores m as the session's next transcript entry and returns it with its Seq (1 for
// the first), adds its usage to the session's sums, and stores records (approvals, as
// CreateApprovals does) in the same transaction: all or nothing. The seq comes from the session
// row's counter, incremented in the transaction's first statement: the row stays locked until the
// commit, so concurrent appends to one session take 1, 2, 3… in turn. Errors: apperr.NotFound for
// an unknown session; CreateApproval's codes for a bad record; apperr.Invalid for a message
// that cannot be stored.
func (db *DB) AppendEntry(ctx context.Context, sessionID string, m agent.Message, records ...gate.Approval) (e agent.Entry, err error) {
	defer apperr.Wrap(&err, "store.AppendEntry(%s)", sessionID)
	body, err := json.Marshal(m)
	if err != nil {
		return agent.Entry{}, apperr.Errorf(apperr.Invalid, "message cannot be stored: %v", err)
	}
	var u agent.Usage
	if m.Usage != nil {
		u = *m.Usage
	}
	var seq int64
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `UPDATE sessions SET last_entry_seq = last_entry_seq + 1,
			usage_input = usage_input + $2, usage_output = usage_output + $3,
			usage_cache_read = usage_cache_read + $4, usage_cache_write = usage_cache_write + $5
			WHERE id = $1 RETURNING last_entry_seq`, sessionID, u.Input, u.Output, u.CacheRead, u.CacheWrite).Scan(&seq)
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.Errorf(apperr.NotFound, "session %s not found", sessionID)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO entries (session_id, seq, role, tool_call_id, message, created_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, sessionID, seq, string(m.Role), m.ToolCallID, string(body), formatTime(db.Now())); err != nil {
			if isInvalid(err) {
				return apperr.Errorf(apperr.Invalid, "message cannot be stored: a text holds a NUL byte or invalid UTF-8")
			}
			return err
		}
		return db.insertApprovals(ctx, tx, records)
	})
	if err != nil {
		return agent.Entry{}, err
	}
	return agent.Entry{Seq: seq, SessionID: sessionID, Message: m}, nil
}

// Entries returns the session's transcript in Seq order; empty for an unknown session.
func (db *DB) Entries(ctx context.Context, sessionID string) (_ []agent.Entry, err error) {
	defer apperr.Wrap(&err, "store.Entries(%s)", sessionID)
	return queryAll(ctx, db, func(r pgx.Row) (agent.Entry, error) {
		e := agent.Entry{SessionID: sessionID}
		var body string
		if err := r.Scan(&e.Seq, &body); err != nil {
			return e, err
		}
		if err := json.Unmarshal([]byte(body), &e.Message); err != nil {
			return e, fmt.Errorf("entry %d: %w", e.Seq, err)
		}
		return e, nil
	}, `SELECT seq, message FROM entries WHERE session_id = $1 ORDER BY seq`, sessionID)
}

// IdleSessions lists the ids of the sessions idle since before (-retain, SPEC §16): nothing was
// added to their transcript after it, and they were created before it. Oldest activity first
// (then by id).
func (db *DB) IdleSessions(ctx context.Context, before time.Time) (_ []string, err error) {
	defer apperr.Wrap(&err, "store.IdleSessions")
	return queryAll(ctx, db, func(r pgx.Row) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, `SELECT id FROM (
			SELECT s.id, greatest(s.created_at, (SELECT max(e.created_at) FROM entries e WHERE e.session_id = s.id)) AS last
			FROM sessions s) AS activity
		WHERE last < $1 ORDER BY last, id`, formatTime(before))
}

// updateSession runs a write of one session row; apperr.NotFound when it touched none.
func (db *DB) updateSession(ctx context.Context, id, query string, args ...any) error {
	n, err := db.exec(ctx, query, args...)
	if isInvalid(err) {
		return apperr.Errorf(apperr.Invalid, "session %s cannot be stored: a text holds a NUL byte or invalid UTF-8", id)
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return apperr.Errorf(apperr.NotFound, "session %s not found", id)
	}
	return nil
}

// queryAll runs query and scans every row with scan, in order.
func queryAll[T any](ctx context.Context, db *DB, scan func(pgx.Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.pool.Query(ctx, query, args...)
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

func scanSession(r pgx.Row) (agent.Session, error) {
	var (
		s               agent.Session
		state, at, mode string
		tools           *string
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
	if tools != nil {
		s.ActiveTools = []string{}
		if err := json.Unmarshal([]byte(*tools), &s.ActiveTools); err != nil {
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
