package store

import (
	"context"
	"database/sql"
	"encoding/json"
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

// agentColumns are an agent session's provenance (agent.AgentInfo, SPEC §18), all NULL for
// Countersign's own sessions: agent_kind is set exactly when the session is an agent session.
const agentColumns = `agent_kind, connection_id, agent_session_id, agent_permission_mode, agent_transcript_path,
	agent_model, agent_prompt_id, agent_state`

// selectSession reads sessionColumns and the session's pending approvals (through the partial
// index approvals_pending: the literal 'pending' lets the database use it).
const selectSession = `SELECT ` + sessionColumns + `, ` + usageColumns + `, ` + agentColumns + `,
	(SELECT COUNT(*) FROM approvals a WHERE a.session_id = sessions.id AND a.status = 'pending')
	FROM sessions`

// CreateSession stores a new session. A zero CreatedAt is stored as db.Now() and an empty State as
// agent.Idle; ActiveTools nil is stored as NULL (the registry's default), which is not the same as
// an empty set. It returns apperr.Invalid for an empty id and apperr.Conflict when the id exists.
func (db *SQL) CreateSession(ctx context.Context, s agent.Session) (err error) {
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
	ag := make([]any, 8)
	if a := s.Agent; a != nil {
		if a.Kind == "" || a.ConnectionID == "" || a.SessionID == "" {
			return apperr.Errorf(apperr.Invalid, "an agent session needs its kind, connection and agent session id")
		}
		ag = []any{a.Kind, a.ConnectionID, a.SessionID, a.PermissionMode, a.TranscriptPath, a.Model, a.PromptID, a.State}
	}
	_, err = db.exec1(ctx, 0,
		`INSERT INTO sessions (`+sessionColumns+`, `+agentColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		append([]any{s.ID, s.Title, s.Model, s.Workspace, string(s.State), tools, formatTime(s.CreatedAt), string(s.Mode), s.Instructions}, ag...)...)
	switch db.kind(err) {
	case ErrUnique:
		if s.Agent != nil {
			return apperr.Errorf(apperr.Conflict, "session %s, or an agent session of connection %s for agent session %s, already exists", s.ID, s.Agent.ConnectionID, s.Agent.SessionID)
		}
		return apperr.Errorf(apperr.Conflict, "session %s already exists", s.ID)
	case ErrCheck:
		return apperr.Errorf(apperr.Invalid, "mode must be default, plan or accept-edits, not %q", s.Mode)
	case ErrBadText:
		return badSessionText(s.ID)
	}
	return err
}

// Session returns the session with the given id, or apperr.NotFound. Its PendingApprovals is
// counted from the approvals, and a running session with one pending or more reads back as
// agent.Waiting: its run is parked on a person (the stored state stays running).
func (db *SQL) Session(ctx context.Context, id string) (s agent.Session, err error) {
	defer apperr.Wrap(&err, "store.Session(%s)", id)
	s, err = scanSession(db.queryRow(ctx, db.reads(), selectSession+` WHERE id = ?`, id))
	if isNoRows(err) {
		return agent.Session{}, apperr.Errorf(apperr.NotFound, "session %s not found", id)
	}
	return s, err
}

// Sessions lists every session, newest first (by CreatedAt; equal times newest stored first),
// each read as Session reads one.
func (db *SQL) Sessions(ctx context.Context) (_ []agent.Session, err error) {
	defer apperr.Wrap(&err, "store.Sessions")
	return db.querySessions(ctx,
		selectSession+` ORDER BY created_at DESC, {ord} DESC`)
}

// SessionsInState lists the sessions whose stored state is st, newest first. At restart, the
// sessions still marked agent.Running are the ones whose run the process lost (SPEC §8); those
// parked on an approval read back as agent.Waiting, as Session reads them.
func (db *SQL) SessionsInState(ctx context.Context, st agent.State) (_ []agent.Session, err error) {
	defer apperr.Wrap(&err, "store.SessionsInState(%s)", st)
	return db.querySessions(ctx,
		selectSession+` WHERE state = ? ORDER BY created_at DESC, {ord} DESC`,
		string(st))
}

// SetSessionState sets a session's run state, idle or running; apperr.NotFound for an unknown
// id, apperr.Invalid for another state (waiting is read, never stored: see Session).
func (db *SQL) SetSessionState(ctx context.Context, id string, st agent.State) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionState(%s, %s)", id, st)
	if st != agent.Idle && st != agent.Running {
		return apperr.Errorf(apperr.Invalid, "a session's stored state is idle or running, not %q", st)
	}
	return db.updateSession(ctx, id, `UPDATE sessions SET state = ? WHERE id = ?`, string(st), id)
}

// SetSessionTitle renames a session; apperr.NotFound for an unknown id. The caller validates
// the title (agent.Runner.RenameSession).
func (db *SQL) SetSessionTitle(ctx context.Context, id, title string) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionTitle(%s)", id)
	return db.updateSession(ctx, id, `UPDATE sessions SET title = ? WHERE id = ?`, title, id)
}

// SetSessionInstructions sets a session's instructions (SPEC §17) while it has no transcript
// entry: the check and the update are one statement, so a first message stored at the same time
// either comes after the new instructions or makes this apperr.Conflict. apperr.NotFound for an
// unknown id. PostgreSQL: "no entry" is the session row's last_entry_seq = 0 ({noEntries}),
// checked in the UPDATE: an append at the same time holds the row's lock until it commits, and
// the UPDATE then re-checks the committed row.
func (db *SQL) SetSessionInstructions(ctx context.Context, id, instructions string) (err error) {
	defer apperr.Wrap(&err, "store.SetSessionInstructions(%s)", id)
	err = db.updateSession(ctx, id, setInstructions, instructions, id)
	if apperr.CodeOf(err) != apperr.NotFound {
		return err
	}
	if _, serr := db.Session(ctx, id); serr != nil {
		return serr
	}
	return apperr.Errorf(apperr.Conflict, "The instructions can no longer change: the session has messages (they are fixed by the first one).")
}

const setInstructions = `UPDATE sessions SET instructions = ? WHERE id = ? AND {noEntries}`

// DeleteSession deletes a session with everything that belongs to it, in one statement: its
// transcript entries, approvals (the audit), grants and share links go with it (ON DELETE
// CASCADE; SQLite's foreign_keys is on for every connection). Durable like a decision: a
// deletion the owner was told about is not undone by a power loss. apperr.NotFound for an
// unknown id.
func (db *SQL) DeleteSession(ctx context.Context, id string) (err error) {
	defer apperr.Wrap(&err, "store.DeleteSession(%s)", id)
	return db.writeSession(ctx, Durable, id, `DELETE FROM sessions WHERE id = ?`, id)
}

// SetSessionMode sets a session's mode (SPEC §14). Errors: apperr.Invalid for a mode that is not
// default, plan or accept-edits; apperr.NotFound for an unknown id.
func (db *SQL) SetSessionMode(ctx context.Context, id string, mode gate.Mode) (err error) {
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
func (db *SQL) SetActiveTools(ctx context.Context, id string, names []string) (err error) {
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
func (db *SQL) AppendEntry(ctx context.Context, sessionID string, m agent.Message, records ...gate.Approval) (e agent.Entry, err error) {
	defer apperr.Wrap(&err, "store.AppendEntry(%s)", sessionID)
	return db.appendEntry(ctx, sessionID, m, records, nil)
}

// appendEntry is AppendEntry, with more, when set, written in the same transaction after the
// records (AppendOutsideCall's outside calls).
func (db *SQL) appendEntry(ctx context.Context, sessionID string, m agent.Message, records []gate.Approval, more func(Querier) error) (e agent.Entry, err error) {
	body, err := json.Marshal(m)
	if err != nil {
		return agent.Entry{}, apperr.Errorf(apperr.Invalid, "message cannot be stored: %v", err)
	}
	now := formatTime(db.Now())
	var seq int64
	// SQLite: at synchronous=NORMAL even with records, unlike the other approval writes
	// (Durable): these are rules' decisions (policy, a handler, a session grant, itself durable)
	// committed in one transaction with the assistant message that made the calls, so a power
	// loss keeps or drops both; the transcript never shows a call without its decision, and
	// nobody is asked again for a call that ran. A sync here would cost every model turn with
	// tool calls (measured with BenchmarkDirect: +50 to +100% per faux turn on a loaded machine).
	// An assistant message's usage is added to its session's sums in the same transaction.
	usage := m.Usage != nil && !m.Usage.IsZero()
	var u agent.Usage
	if usage {
		u = *m.Usage
	}
	var mode WriteMode
	if len(records) > 0 || usage || db.d.SeqCounter || more != nil {
		mode = Atomic
	}
	err = db.write(ctx, mode, func(tx Querier) error {
		if db.d.SeqCounter {
			// The session row's counter: the row stays locked until the commit, so concurrent
			// appends to one session take 1, 2, 3… in turn.
			err := db.queryRow(ctx, tx, nextEntrySeq, u.Input, u.Output, u.CacheRead, u.CacheWrite, sessionID).Scan(&seq)
			if isNoRows(err) {
				return apperr.Errorf(apperr.NotFound, "session %s not found", sessionID)
			}
			if err != nil {
				return err
			}
			if _, err := db.exec(ctx, tx, insertEntryAt, sessionID, seq, string(m.Role), m.ToolCallID, string(body), now); err != nil {
				return err
			}
		} else {
			// One statement: seq is computed and used under the write lock, and the single write
			// connection means no other insert of ours can interleave anyway.
			if err := db.queryRow(ctx, tx, insertEntry, sessionID, string(m.Role), m.ToolCallID, string(body), now, sessionID).Scan(&seq); err != nil {
				return err
			}
			if usage {
				if _, err := db.exec(ctx, tx, addUsage, u.Input, u.Output, u.CacheRead, u.CacheWrite, sessionID); err != nil {
					return err
				}
			}
		}
		if len(records) > 0 {
			if err := db.insertApprovals(ctx, tx, records); err != nil {
				return err
			}
		}
		if more != nil {
			return more(tx)
		}
		return nil
	})
	switch db.kind(err) {
	case ErrForeignKey:
		return agent.Entry{}, apperr.Errorf(apperr.NotFound, "session %s not found", sessionID)
	case ErrBadText:
		return agent.Entry{}, apperr.Errorf(apperr.Invalid, "message cannot be stored: a text holds a NUL byte or invalid UTF-8")
	}
	if err != nil {
		return agent.Entry{}, err
	}
	return agent.Entry{Seq: seq, SessionID: sessionID, Message: m}, nil
}

// insertEntry stores an entry with the next seq of its session (the one writer's form).
const insertEntry = `
		INSERT INTO entries (session_id, seq, role, tool_call_id, message, created_at)
		SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ? FROM entries WHERE session_id = ?
		RETURNING seq`

const addUsage = `UPDATE sessions SET usage_input = usage_input + ?, usage_output = usage_output + ?,
	usage_cache_read = usage_cache_read + ?, usage_cache_write = usage_cache_write + ? WHERE id = ?`

// nextEntrySeq takes the session's next seq from its counter row and adds the usage
// (Dialect.SeqCounter); insertEntryAt then stores the entry with it.
const (
	nextEntrySeq = `UPDATE sessions SET last_entry_seq = last_entry_seq + 1,
		usage_input = usage_input + ?, usage_output = usage_output + ?,
		usage_cache_read = usage_cache_read + ?, usage_cache_write = usage_cache_write + ?
		WHERE id = ? RETURNING last_entry_seq`
	insertEntryAt = `INSERT INTO entries (session_id, seq, role, tool_call_id, message, created_at) VALUES (?, ?, ?, ?, ?, ?)`
)

// Entries returns the session's transcript in Seq order; empty for an unknown session.
func (db *SQL) Entries(ctx context.Context, sessionID string) (_ []agent.Entry, err error) {
	defer apperr.Wrap(&err, "store.Entries(%s)", sessionID)
	return queryAll(ctx, db, db.reads(), func(r Row) (agent.Entry, error) {
		e := agent.Entry{SessionID: sessionID}
		var body string
		if err := r.Scan(&e.Seq, &body); err != nil {
			return e, err
		}
		if err := json.Unmarshal([]byte(body), &e.Message); err != nil {
			return e, fmt.Errorf("entry %d: %w", e.Seq, err)
		}
		return e, nil
	}, `SELECT seq, message FROM entries WHERE session_id = ? ORDER BY seq`, sessionID)
}

// updateSession runs a write of one session row; apperr.NotFound when it touched none.
func (db *SQL) updateSession(ctx context.Context, id, query string, args ...any) error {
	return db.writeSession(ctx, 0, id, query, args...)
}

func (db *SQL) writeSession(ctx context.Context, mode WriteMode, id, query string, args ...any) error {
	n, err := db.exec1(ctx, mode, query, args...)
	if db.kind(err) == ErrBadText {
		return badSessionText(id)
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return apperr.Errorf(apperr.NotFound, "session %s not found", id)
	}
	return nil
}

// badSessionText is the error for a session text PostgreSQL cannot hold.
func badSessionText(id string) error {
	return apperr.Errorf(apperr.Invalid, "session %s cannot be stored: a text holds a NUL byte or invalid UTF-8", id)
}

func (db *SQL) querySessions(ctx context.Context, query string, args ...any) ([]agent.Session, error) {
	return queryAll(ctx, db, db.reads(), scanSession, query, args...)
}

func scanSession(r Row) (agent.Session, error) {
	var (
		s         agent.Session
		state, at string
		tools     sql.NullString
		mode      string
	)
	u := &s.Usage
	var ag [8]sql.NullString
	if err := r.Scan(&s.ID, &s.Title, &s.Model, &s.Workspace, &state, &tools, &at, &mode, &s.Instructions,
		&u.Input, &u.Output, &u.CacheRead, &u.CacheWrite,
		&ag[0], &ag[1], &ag[2], &ag[3], &ag[4], &ag[5], &ag[6], &ag[7], &s.PendingApprovals); err != nil {
		return agent.Session{}, err
	}
	if ag[0].Valid {
		s.Agent = &agent.AgentInfo{Kind: ag[0].String, ConnectionID: ag[1].String, SessionID: ag[2].String,
			PermissionMode: ag[3].String, TranscriptPath: ag[4].String, Model: ag[5].String, PromptID: ag[6].String, State: ag[7].String}
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
func (db *SQL) IdleSessions(ctx context.Context, before time.Time) (_ []string, err error) {
	defer apperr.Wrap(&err, "store.IdleSessions")
	return queryAll(ctx, db, db.reads(), scanString, `
		SELECT id FROM (
			SELECT s.id, {greatest}(s.created_at, COALESCE((SELECT max(e.created_at) FROM entries e WHERE e.session_id = s.id), '')) AS last
			FROM sessions s) AS activity
		WHERE last < ? ORDER BY last, id`, formatTime(before))
}
