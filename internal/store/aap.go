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

// AAPPendingRequests lists connection connectionID's requests whose approval is still pending.
func (db *SQL) AAPPendingRequests(ctx context.Context, connectionID string) (_ []aap.Request, err error) {
	defer apperr.Wrap(&err, "store.AAPPendingRequests")
	return queryAll(ctx, db, db.reads(), scanAAPRequest, `SELECT r.id, r.connection_id, r.idempotency_key, r.digest, r.approval_id,
		r.session_id, r.tool, r.arguments, r.timeout, r.agent_reasoning, r.context, r.created_at, r.deadline_at
		FROM aap_requests r JOIN approvals a ON a.id = r.approval_id
		WHERE r.connection_id = ? AND a.status = 'pending' ORDER BY r.created_at`, connectionID)
}

const aapInstanceColumns = `id, connection_id, name, url, registration_id, sealed_secret, delivery_since, provision_key, provision_digest, sealed_token, created_at, deleted_at`

// CreateAAPInstance stores in; apperr.Conflict when its provision key (or id, or connection) was
// used.
func (db *SQL) CreateAAPInstance(ctx context.Context, in aap.Instance) (err error) {
	defer apperr.Wrap(&err, "store.CreateAAPInstance(%s)", in.ID)
	_, err = db.exec1(ctx, 0, `INSERT INTO aap_instances (`+aapInstanceColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		in.ID, in.ConnectionID, in.Name, nullString(in.URL), nullString(in.RegistrationID), nullString(in.SealedSecret),
		nullTime(in.DeliverySince), in.ProvisionKey, in.ProvisionDigest, in.SealedToken, formatTime(in.CreatedAt), nullTime(in.DeletedAt))
	if db.isUnique(err) {
		return apperr.Errorf(apperr.Conflict, "the instance exists already")
	}
	return err
}

// AAPInstance returns instance id (deleted or not), or apperr.NotFound.
func (db *SQL) AAPInstance(ctx context.Context, id string) (aap.Instance, error) {
	return db.oneAAPInstance(ctx, `WHERE id = ?`, id)
}

// AAPInstanceByKey returns the instance provision key key created, or apperr.NotFound.
func (db *SQL) AAPInstanceByKey(ctx context.Context, key string) (aap.Instance, error) {
	return db.oneAAPInstance(ctx, `WHERE provision_key = ?`, key)
}

// AAPInstanceByConnection returns connection connectionID's instance, or apperr.NotFound.
func (db *SQL) AAPInstanceByConnection(ctx context.Context, connectionID string) (aap.Instance, error) {
	return db.oneAAPInstance(ctx, `WHERE connection_id = ?`, connectionID)
}

// DeleteAAPInstance marks instance id deleted at at (the first time stays) and ends its events'
// delivery; apperr.NotFound for an unknown id.
func (db *SQL) DeleteAAPInstance(ctx context.Context, id string, at time.Time) error {
	return db.write(ctx, 0, func(tx Querier) error {
		n, err := db.exec(ctx, tx, `UPDATE aap_instances SET deleted_at = COALESCE(deleted_at, ?) WHERE id = ?`, formatTime(at), id)
		if err != nil {
			return err
		}
		if n == 0 {
			return apperr.Errorf(apperr.NotFound, "instance %s not found", id)
		}
		_, err = db.exec(ctx, tx, `UPDATE aap_events SET ended_at = ? WHERE instance_id = ? AND delivered_at IS NULL AND ended_at IS NULL`, formatTime(at), id)
		return err
	})
}

// AAPEventsToMake lists, for live instances with delivery, their requests that became terminal
// since delivery began and have no event: RequestID, InstanceID and CreatedAt (the decision).
func (db *SQL) AAPEventsToMake(ctx context.Context) (_ []aap.Event, err error) {
	defer apperr.Wrap(&err, "store.AAPEventsToMake")
	return queryAll(ctx, db, db.reads(), func(r Row) (aap.Event, error) {
		var e aap.Event
		var decided string
		if err := r.Scan(&e.RequestID, &e.InstanceID, &decided); err != nil {
			return e, err
		}
		e.CreatedAt, err = parseTime(decided)
		return e, err
	}, `SELECT r.id, i.id, a.decided_at FROM aap_requests r
		JOIN aap_instances i ON i.connection_id = r.connection_id
		JOIN approvals a ON a.id = r.approval_id
		WHERE i.deleted_at IS NULL AND i.url IS NOT NULL AND a.status <> 'pending' AND a.decided_at IS NOT NULL
		AND a.decided_at >= i.delivery_since
		AND NOT EXISTS (SELECT 1 FROM aap_events e WHERE e.request_id = r.id)
		ORDER BY a.decided_at LIMIT 500`)
}

// CreateAAPEvent stores e unless its request has an event already.
func (db *SQL) CreateAAPEvent(ctx context.Context, e aap.Event) error {
	_, err := db.exec1(ctx, 0, `INSERT INTO aap_events (id, instance_id, request_id, created_at, attempts, next_at)
		VALUES (?, ?, ?, ?, 0, ?) ON CONFLICT (request_id) DO NOTHING`,
		e.ID, e.InstanceID, e.RequestID, formatTime(e.CreatedAt), formatTime(e.NextAt))
	return err
}

// DueAAPEvents lists up to limit events of live instances neither delivered nor ended whose next
// attempt is at or before now, the earliest first.
func (db *SQL) DueAAPEvents(ctx context.Context, now time.Time, limit int) (_ []aap.Event, err error) {
	defer apperr.Wrap(&err, "store.DueAAPEvents")
	return queryAll(ctx, db, db.reads(), func(r Row) (aap.Event, error) {
		var e aap.Event
		var created, next string
		if err := r.Scan(&e.ID, &e.InstanceID, &e.RequestID, &created, &e.Attempts, &next); err != nil {
			return e, err
		}
		if e.CreatedAt, err = parseTime(created); err != nil {
			return e, err
		}
		e.NextAt, err = parseTime(next)
		return e, err
	}, `SELECT e.id, e.instance_id, e.request_id, e.created_at, e.attempts, e.next_at FROM aap_events e
		JOIN aap_instances i ON i.id = e.instance_id
		WHERE e.delivered_at IS NULL AND e.ended_at IS NULL AND e.next_at <= ? AND i.deleted_at IS NULL
		ORDER BY e.next_at LIMIT ?`, formatTime(now), limit)
}

// RecordAAPAttempt stores an attempt on event id at at: delivered, or its next attempt's time,
// or (next nil) the end of its delivery.
func (db *SQL) RecordAAPAttempt(ctx context.Context, id string, at time.Time, delivered bool, next *time.Time) error {
	switch {
	case delivered:
		_, err := db.exec1(ctx, 0, `UPDATE aap_events SET attempts = attempts + 1, delivered_at = ?, next_at = NULL WHERE id = ?`, formatTime(at), id)
		return err
	case next != nil:
		_, err := db.exec1(ctx, 0, `UPDATE aap_events SET attempts = attempts + 1, next_at = ? WHERE id = ?`, formatTime(*next), id)
		return err
	}
	_, err := db.exec1(ctx, 0, `UPDATE aap_events SET attempts = attempts + 1, ended_at = ?, next_at = NULL WHERE id = ?`, formatTime(at), id)
	return err
}

func (db *SQL) oneAAPInstance(ctx context.Context, where string, arg string) (aap.Instance, error) {
	var (
		in                               aap.Instance
		url, reg, secret, since, deleted sql.NullString
		created                          string
	)
	err := db.queryRow(ctx, db.reads(), `SELECT `+aapInstanceColumns+` FROM aap_instances `+where, arg).Scan(&in.ID, &in.ConnectionID,
		&in.Name, &url, &reg, &secret, &since, &in.ProvisionKey, &in.ProvisionDigest, &in.SealedToken, &created, &deleted)
	if isNoRows(err) {
		return aap.Instance{}, apperr.Errorf(apperr.NotFound, "instance not found")
	}
	if err != nil {
		return aap.Instance{}, err
	}
	in.URL, in.RegistrationID, in.SealedSecret = url.String, reg.String, secret.String
	if in.CreatedAt, err = parseTime(created); err != nil {
		return aap.Instance{}, err
	}
	if in.DeliverySince, err = parseNullTime(since); err != nil {
		return aap.Instance{}, err
	}
	in.DeletedAt, err = parseNullTime(deleted)
	return in, err
}

// AAPInstanceUpdate returns instance instanceID's update made with idempotency key key: the
// digest of its input and its original response; apperr.NotFound.
func (db *SQL) AAPInstanceUpdate(ctx context.Context, instanceID, key string) (digest string, response []byte, err error) {
	var resp string
	err = db.queryRow(ctx, db.reads(), `SELECT digest, response FROM aap_instance_updates WHERE instance_id = ? AND idempotency_key = ?`,
		instanceID, key).Scan(&digest, &resp)
	if isNoRows(err) {
		return "", nil, apperr.Errorf(apperr.NotFound, "no such update")
	}
	return digest, []byte(resp), err
}

// UpdateAAPInstance stores in's name and delivery (URL "" removes it: its outstanding events
// end) with the update's key, digest and response, in one write. Errors: apperr.NotFound for an
// unknown or deleted instance; apperr.Conflict when the key was used.
func (db *SQL) UpdateAAPInstance(ctx context.Context, in aap.Instance, key, digest string, response []byte, at time.Time) error {
	return db.write(ctx, 0, func(tx Querier) error {
		n, err := db.exec(ctx, tx, `UPDATE aap_instances SET name = ?, url = ?, registration_id = ?, sealed_secret = ?, delivery_since = ?
			WHERE id = ? AND deleted_at IS NULL`, in.Name, nullString(in.URL), nullString(in.RegistrationID), nullString(in.SealedSecret),
			nullTime(in.DeliverySince), in.ID)
		if err != nil {
			return err
		}
		if n == 0 {
			return apperr.Errorf(apperr.NotFound, "instance %s not found", in.ID)
		}
		if in.URL == "" {
			if _, err := db.exec(ctx, tx, `UPDATE aap_events SET ended_at = ? WHERE instance_id = ? AND delivered_at IS NULL AND ended_at IS NULL`,
				formatTime(at), in.ID); err != nil {
				return err
			}
		}
		_, err = db.exec(ctx, tx, `INSERT INTO aap_instance_updates (instance_id, idempotency_key, digest, response, created_at) VALUES (?, ?, ?, ?, ?)`,
			in.ID, key, digest, string(response), formatTime(at))
		if db.isUnique(err) {
			return apperr.Errorf(apperr.Conflict, "the update's key was used")
		}
		return err
	})
}

// ClaimAAPEvent takes event id's next attempt for one sender until until (its next_at moves
// there, so no other replica's worker sends it meanwhile: at most one outstanding attempt per
// event, AAP v1 §7); false when another took it first (its next_at is no longer next).
func (db *SQL) ClaimAAPEvent(ctx context.Context, id string, next, until time.Time) (bool, error) {
	n, err := db.exec1(ctx, 0, `UPDATE aap_events SET next_at = ? WHERE id = ? AND next_at = ? AND delivered_at IS NULL AND ended_at IS NULL`,
		formatTime(until), id, formatTime(next))
	return n == 1, err
}

// AAPRequestByApproval returns the approval request whose approval is approvalID, or
// apperr.NotFound.
func (db *SQL) AAPRequestByApproval(ctx context.Context, approvalID string) (aap.Request, error) {
	return db.oneAAPRequest(ctx, `SELECT `+aapRequestColumns+` FROM aap_requests WHERE approval_id = ?`, approvalID)
}

// AAPRetainedSessions lists the agent sessions that hold an approval request still pending or
// decided after since (AAP v1 §5 "Retention": a request and its key are kept whilst pending and
// at least seven days after the decision): -retain keeps them.
func (db *SQL) AAPRetainedSessions(ctx context.Context, since time.Time) (_ []string, err error) {
	defer apperr.Wrap(&err, "store.AAPRetainedSessions")
	return queryAll(ctx, db, db.reads(), scanString, `SELECT DISTINCT r.session_id FROM aap_requests r JOIN approvals a ON a.id = r.approval_id
		WHERE a.status = 'pending' OR a.decided_at IS NULL OR a.decided_at > ? ORDER BY r.session_id`, formatTime(since))
}
