package pg

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/notify"
)

// Webhook notifications (SPEC §15), as the SQLite store keeps them: the outbox rows and decision
// links are written in the transaction of the approval they are about.
//
// Not yet for several replicas: every replica's delivery worker reads the due rows, so two
// replicas would both send a row (the next session's work: claim rows with
// SELECT … FOR UPDATE SKIP LOCKED, or run the worker on one replica).

// notifySetup is what SetNotify configures.
type notifySetup struct {
	receivers []notify.Receiver
	linkHash  func(linkID string) string
	wake      func()
}

// SetNotify makes every pending approval stored from now on write, in its own transaction, an
// approval.requested outbox row and a decision link for each receiver, and every resolution of
// such an approval an approval.resolved or approval.timed_out row for the receivers told of it
// (store.DB.SetNotify). linkHash is the hash of a new link's token; wake is called, without
// blocking, after each commit that wrote rows. Call it once, before the store is used
// concurrently; no receivers turns notifications off.
func (db *DB) SetNotify(receivers []notify.Receiver, linkHash func(linkID string) string, wake func()) {
	if wake == nil {
		wake = func() {}
	}
	db.notify = notifySetup{receivers: receivers, linkHash: linkHash, wake: wake}
}

// outboxResolved queues the resolution event ($1) for every receiver told of the request: one
// row each, due at once ($2).
const outboxResolved = `INSERT INTO notify_outbox (id, approval_id, receiver_id, event, created_at, next_at)
	SELECT approval_id || '/' || receiver_id || '/' || $1::text, approval_id, receiver_id, $1::text, $2::text, $2::text
	FROM notify_outbox WHERE approval_id = $3 AND event = 'approval.requested'
	ORDER BY ord
	ON CONFLICT DO NOTHING`

// createNotifiedApproval is CreateApproval for a pending approval while receivers are set: the
// approval, a decision link and an approval.requested outbox row per receiver, in one
// transaction.
func (db *DB) createNotifiedApproval(ctx context.Context, a gate.Approval, args []any) error {
	now := formatTime(db.Now())
	digest := notify.ArgumentsDigest(a.Arguments)
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertApproval, args...); err != nil {
			return err
		}
		for _, r := range db.notify.receivers {
			linkID := "dl-" + rand.Text() // 130 random bits
			if _, err := tx.Exec(ctx, `INSERT INTO decision_links (id, token_hash, approval_id, receiver_id, recipient, arguments_sha256, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, linkID, db.notify.linkHash(linkID), a.ID, r.ID, r.Name, digest, now); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO notify_outbox (id, approval_id, receiver_id, event, link_id, created_at, next_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`, a.ID+"/"+r.ID+"/"+string(notify.Requested), a.ID, r.ID, string(notify.Requested),
				linkID, now, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		db.notify.wake()
	}
	return err
}

// outboxColumns are a delivery's columns, then its session's title and its approval's (a.).
var outboxColumns = `o.id, o.event, o.receiver_id, o.link_id, o.created_at, o.attempts, o.next_at, o.delivered_at, o.failed, s.title, ` +
	func() string {
		cols := strings.Split(approvalColumns, ",")
		for i, c := range cols {
			cols[i] = "a." + strings.TrimSpace(c)
		}
		return strings.Join(cols, ", ")
	}()

const outboxFrom = ` FROM notify_outbox o JOIN approvals a ON a.id = o.approval_id JOIN sessions s ON s.id = a.session_id`

func scanDelivery(r pgx.Row) (notify.Delivery, error) {
	var (
		d                 notify.Delivery
		event, createdAt  string
		nextAt, delivered *string
	)
	a, err := scanApproval(prefixRow{r: r, first: []any{&d.ID, &event, &d.ReceiverID, &d.LinkID, &createdAt,
		&d.Tries, &nextAt, &delivered, &d.Failed, &d.SessionTitle}})
	if err != nil {
		return d, err
	}
	d.Approval, d.Event = a, notify.Event(event)
	if d.CreatedAt, err = parseTime(createdAt); err != nil {
		return d, err
	}
	if d.NextAt, err = parseNullTime(nextAt); err != nil {
		return d, err
	}
	d.DeliveredAt, err = parseNullTime(delivered)
	return d, err
}

// DueDeliveries lists up to limit outbox rows whose next attempt is due at now, the earliest
// due first, each with its approval and its session's title (notify.Outbox).
func (db *DB) DueDeliveries(ctx context.Context, now time.Time, limit int) (_ []notify.Delivery, err error) {
	defer apperr.Wrap(&err, "store.DueDeliveries")
	return queryAll(ctx, db, scanDelivery, `SELECT `+outboxColumns+outboxFrom+`
		WHERE o.next_at IS NOT NULL AND o.next_at <= $1 ORDER BY o.next_at, o.ord LIMIT $2`, formatTime(now), limit)
}

// NextDeliveryAt is when the earliest undelivered outbox row is due; ok is false when none is.
func (db *DB) NextDeliveryAt(ctx context.Context) (at time.Time, ok bool, err error) {
	defer apperr.Wrap(&err, "store.NextDeliveryAt")
	var s *string
	if err := db.pool.QueryRow(ctx, `SELECT min(next_at) FROM notify_outbox WHERE next_at IS NOT NULL`).Scan(&s); err != nil {
		return time.Time{}, false, err
	}
	if s == nil {
		return time.Time{}, false, nil
	}
	at, err = parseTime(*s)
	return at, err == nil, err
}

// RecordAttempt stores attempt a of outbox row id and when the next is due: next nil ends the
// row, delivered when a.OK(), given up otherwise. Errors: apperr.NotFound for an unknown row.
func (db *DB) RecordAttempt(ctx context.Context, id string, a notify.Attempt, next *time.Time) (err error) {
	defer apperr.Wrap(&err, "store.RecordAttempt(%s)", id)
	var delivered any
	if a.OK() {
		delivered = formatTime(a.At)
	}
	failed := !a.OK() && next == nil
	return db.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE notify_outbox SET attempts = attempts + 1, next_at = $1, delivered_at = $2, failed = $3
			WHERE id = $4`, nullTime(next), delivered, failed, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return apperr.Errorf(apperr.NotFound, "delivery %s not found", id)
		}
		_, err = tx.Exec(ctx, `INSERT INTO notify_attempts (outbox_id, n, at, status, error, duration_ns)
			VALUES ($1, $2, $3, $4, $5, $6)`, id, a.N, formatTime(a.At), a.Status, a.Error, int64(a.Duration))
		return err
	})
}

// Deliveries lists a session's outbox rows in the order they were written, each with its
// attempts, for the audit page. Empty for an unknown session or when there are none.
func (db *DB) Deliveries(ctx context.Context, sessionID string) (_ []notify.Delivery, err error) {
	defer apperr.Wrap(&err, "store.Deliveries(%s)", sessionID)
	ds, err := queryAll(ctx, db, scanDelivery, `SELECT `+outboxColumns+outboxFrom+`
		WHERE a.session_id = $1 ORDER BY o.created_at, o.ord`, sessionID)
	if err != nil || len(ds) == 0 {
		return ds, err
	}
	type att struct {
		id string
		a  notify.Attempt
	}
	rows, err := queryAll(ctx, db, func(r pgx.Row) (att, error) {
		var x att
		var at string
		var ns int64
		if err := r.Scan(&x.id, &x.a.N, &at, &x.a.Status, &x.a.Error, &ns); err != nil {
			return x, err
		}
		x.a.Duration = time.Duration(ns)
		var err error
		x.a.At, err = parseTime(at)
		return x, err
	}, `SELECT t.outbox_id, t.n, t.at, t.status, t.error, t.duration_ns FROM notify_attempts t
		JOIN notify_outbox o ON o.id = t.outbox_id JOIN approvals a ON a.id = o.approval_id
		WHERE a.session_id = $1 ORDER BY t.outbox_id, t.n`, sessionID)
	if err != nil {
		return nil, err
	}
	byID := map[string][]notify.Attempt{}
	for _, x := range rows {
		byID[x.id] = append(byID[x.id], x.a)
	}
	for i := range ds {
		ds[i].Attempts = byID[ds[i].ID]
	}
	return ds, nil
}

// DecisionLink returns the decision link whose token has hash tokenHash. Errors:
// apperr.NotFound, with no detail, for any other hash.
func (db *DB) DecisionLink(ctx context.Context, tokenHash string) (l notify.Link, err error) {
	defer apperr.Wrap(&err, "store.DecisionLink")
	var createdAt string
	var used *string
	err = db.pool.QueryRow(ctx, `SELECT id, approval_id, receiver_id, recipient, arguments_sha256, created_at, used_at
		FROM decision_links WHERE token_hash = $1`, tokenHash).Scan(&l.ID, &l.ApprovalID, &l.ReceiverID, &l.Recipient,
		&l.ArgumentsSHA256, &createdAt, &used)
	if errors.Is(err, pgx.ErrNoRows) {
		return notify.Link{}, apperr.Errorf(apperr.NotFound, "Not found")
	}
	if err != nil {
		return notify.Link{}, err
	}
	if l.CreatedAt, err = parseTime(createdAt); err != nil {
		return notify.Link{}, err
	}
	l.UsedAt, err = parseNullTime(used)
	return l, err
}

// UseDecisionLink marks link id used at (db.Now() when zero): the one use it has. One
// conditional UPDATE, so of two racing uses (on any replicas) exactly one gets nil. Errors:
// apperr.Conflict ("This link was already used.") when it was used before; apperr.NotFound for
// an unknown id.
func (db *DB) UseDecisionLink(ctx context.Context, id string, at time.Time) (err error) {
	defer apperr.Wrap(&err, "store.UseDecisionLink(%s)", id)
	if at.IsZero() {
		at = db.Now()
	}
	n, err := db.exec(ctx, `UPDATE decision_links SET used_at = $1 WHERE id = $2 AND used_at IS NULL`, formatTime(at), id)
	if err != nil || n > 0 {
		return err
	}
	var k int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM decision_links WHERE id = $1`, id).Scan(&k); err != nil {
		return err
	}
	if k == 0 {
		return apperr.Errorf(apperr.NotFound, "Not found")
	}
	return apperr.Errorf(apperr.Conflict, "This link was already used.")
}
