package store

import (
	"context"
	"database/sql"
	"time"

	"countersign/internal/aap"
	"countersign/internal/apperr"
)

// Door 3's approval requests (SPEC §18, issue 32: the Agent Approval Protocol v1).

const aapRequestColumns = `id, connection_id, idempotency_key, digest, approval_id, session_id, tool, arguments, timeout, agent_reasoning, context, created_at, deadline_at`

// CreateAAPRequest stores r beside its approval (r.ApprovalID, already stored). Errors:
// apperr.Conflict when r's connection used r.IdempotencyKey already (or r.ID exists);
// apperr.NotFound for an unknown approval.
func (db *SQL) CreateAAPRequest(ctx context.Context, r aap.Request) (err error) {
	defer apperr.Wrap(&err, "store.CreateAAPRequest(%s)", r.ID)
	var reasoning any
	if r.AgentReasoning != nil {
		reasoning = *r.AgentReasoning
	}
	_, err = db.exec1(ctx, 0, `INSERT INTO aap_requests (`+aapRequestColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.ConnectionID, r.IdempotencyKey, r.Digest, r.ApprovalID, r.SessionID, r.Tool, string(r.Arguments), r.Timeout,
		reasoning, nullJSON(r.Context), formatTime(r.CreatedAt), formatTime(r.DeadlineAt))
	switch db.kind(err) {
	case ErrUnique:
		return apperr.Errorf(apperr.Conflict, "the idempotency key was used already")
	case ErrForeignKey:
		return apperr.Errorf(apperr.NotFound, "approval %s not found", r.ApprovalID)
	}
	return err
}

// AAPRequest returns approval request id, or apperr.NotFound.
func (db *SQL) AAPRequest(ctx context.Context, id string) (aap.Request, error) {
	return db.oneAAPRequest(ctx, `SELECT `+aapRequestColumns+` FROM aap_requests WHERE id = ?`, id)
}

// AAPRequestByKey returns connection connectionID's approval request with idempotency key key,
// or apperr.NotFound.
func (db *SQL) AAPRequestByKey(ctx context.Context, connectionID, key string) (aap.Request, error) {
	return db.oneAAPRequest(ctx, `SELECT `+aapRequestColumns+` FROM aap_requests WHERE connection_id = ? AND idempotency_key = ?`, connectionID, key)
}

// AAPRequestsDue lists the approval requests whose approval is still pending and whose deadline
// is at or before at, earliest deadline first.
func (db *SQL) AAPRequestsDue(ctx context.Context, at time.Time) (_ []aap.Request, err error) {
	defer apperr.Wrap(&err, "store.AAPRequestsDue")
	return queryAll(ctx, db, db.reads(), scanAAPRequest, `SELECT r.id, r.connection_id, r.idempotency_key, r.digest, r.approval_id,
		r.session_id, r.tool, r.arguments, r.timeout, r.agent_reasoning, r.context, r.created_at, r.deadline_at
		FROM aap_requests r JOIN approvals a ON a.id = r.approval_id
		WHERE r.deadline_at <= ? AND a.status = 'pending' ORDER BY r.deadline_at`, formatTime(at))
}

func (db *SQL) oneAAPRequest(ctx context.Context, query string, args ...any) (aap.Request, error) {
	r, err := scanAAPRequest(db.queryRow(ctx, db.reads(), query, args...))
	if isNoRows(err) {
		return aap.Request{}, apperr.Errorf(apperr.NotFound, "approval request not found")
	}
	return r, err
}

func scanAAPRequest(row Row) (aap.Request, error) {
	var (
		r                  aap.Request
		args               string
		reasoning, context sql.NullString
		created, deadline  string
	)
	if err := row.Scan(&r.ID, &r.ConnectionID, &r.IdempotencyKey, &r.Digest, &r.ApprovalID, &r.SessionID, &r.Tool, &args,
		&r.Timeout, &reasoning, &context, &created, &deadline); err != nil {
		return aap.Request{}, err
	}
	r.Arguments = []byte(args)
	if reasoning.Valid {
		s := reasoning.String
		r.AgentReasoning = &s
	}
	r.Context = rawJSON(context)
	var err error
	if r.CreatedAt, err = parseTime(created); err != nil {
		return aap.Request{}, err
	}
	if r.DeadlineAt, err = parseTime(deadline); err != nil {
		return aap.Request{}, err
	}
	return r, nil
}
