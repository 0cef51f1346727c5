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
// Several replicas: each replica's delivery worker claims the rows it attempts
// (ClaimDeliveries, RenewClaim; migrations/0005_notify_claims.sql), so each attempt is made on
// exactly one replica and a receiver's rows go through one replica at a time, in order.

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

// claimLockClass is the first key of the per-receiver advisory locks (the two-key form, apart
// from the one-key locks such as migrationLock) taken while claiming or renewing a receiver's
// rows; the second is hashtext(receiver_id). "cs" "no" in ASCII.
const claimLockClass = 0x6373_6e6f

// claimable is the condition on an outbox row o for worker $1 at time $2 (notify.Outbox): due,
// not under another worker's live claim, and its receiver's rows under no other worker's live
// claim (so a receiver's rows go through one worker at a time, in order).
const claimable = `o.next_at IS NOT NULL AND o.next_at <= $2
	AND (o.claimed_by IS NULL OR o.claimed_by = $1 OR o.claimed_until <= $2)
	AND NOT EXISTS (SELECT 1 FROM notify_outbox p WHERE p.receiver_id = o.receiver_id
		AND p.next_at IS NOT NULL AND p.claimed_by <> $1 AND p.claimed_until > $2)`

// ClaimDeliveries claims for c.By, until c.Until, up to limit outbox rows claimable at c.Now
// (due, and neither they nor their receiver's rows under another worker's live claim), the
// earliest due first, and returns them with their approvals and sessions' titles
// (notify.Outbox).
//
// One transaction at READ COMMITTED. It first takes, without waiting, the advisory lock of
// each receiver with due rows (pg_try_advisory_xact_lock; a receiver another replica is
// claiming or renewing right now is skipped, as SKIP LOCKED skips a row): under it, the
// claimable condition's "no other live claim on the receiver" reads every claim committed
// before, so two replicas never hold one receiver's rows at once. The rows themselves are
// taken with SELECT … FOR UPDATE SKIP LOCKED (a row being recorded is left for the next claim).
func (db *DB) ClaimDeliveries(ctx context.Context, c notify.Claim, limit int) (ds []notify.Delivery, err error) {
	defer apperr.Wrap(&err, "store.ClaimDeliveries(%s)", c.By)
	now, until := formatTime(c.Now), formatTime(c.Until)
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		ds = nil
		// DISTINCT keeps the volatile lock call out of the subquery: one try per receiver.
		rows, err := tx.Query(ctx, `SELECT receiver_id FROM (SELECT DISTINCT receiver_id FROM notify_outbox
			WHERE next_at IS NOT NULL AND next_at <= $1) d WHERE pg_try_advisory_xact_lock($2::int4, hashtext(receiver_id))`,
			now, int32(claimLockClass))
		if err != nil {
			return err
		}
		receivers, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(receivers) == 0 {
			return err
		}
		rows, err = tx.Query(ctx, `UPDATE notify_outbox SET claimed_by = $1, claimed_until = $3
			WHERE id IN (SELECT o.id FROM notify_outbox o WHERE o.receiver_id = ANY($5) AND `+claimable+`
				ORDER BY o.next_at, o.ord LIMIT $4 FOR UPDATE SKIP LOCKED)
			RETURNING id`, c.By, now, until, limit, receivers)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT `+outboxColumns+outboxFrom+` WHERE o.id = ANY($1) ORDER BY o.next_at, o.ord`, ids)
		if err != nil {
			return err
		}
		ds, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (notify.Delivery, error) { return scanDelivery(r) })
		return err
	})
	return ds, err
}

// RenewClaim extends c.By's claim on outbox row id to c.Until: true when the row is still
// c.By's, not yet recorded, and no other worker holds a live claim on its receiver's rows at
// c.Now; false otherwise, the row untouched (notify.Outbox). It waits for the receiver's
// advisory lock, so it never interleaves with another replica's claim of that receiver.
func (db *DB) RenewClaim(ctx context.Context, id string, c notify.Claim) (held bool, err error) {
	defer apperr.Wrap(&err, "store.RenewClaim(%s)", id)
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, hashtext(receiver_id)) FROM notify_outbox WHERE id = $2`,
			int32(claimLockClass), id); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE notify_outbox SET claimed_until = $3
			WHERE id = $4 AND claimed_by = $1 AND next_at IS NOT NULL
			AND NOT EXISTS (SELECT 1 FROM notify_outbox p WHERE p.receiver_id = notify_outbox.receiver_id
				AND p.next_at IS NOT NULL AND p.claimed_by <> $1 AND p.claimed_until > $2)`,
			c.By, formatTime(c.Now), formatTime(c.Until), id)
		held = tag.RowsAffected() > 0
		return err
	})
	return held, err
}

// ReleaseClaims ends every claim worker by holds, so the rows are claimable at once by any
// replica (notify.Outbox).
func (db *DB) ReleaseClaims(ctx context.Context, by string) (err error) {
	defer apperr.Wrap(&err, "store.ReleaseClaims(%s)", by)
	_, err = db.exec(ctx, `UPDATE notify_outbox SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = $1`, by)
	return err
}

// NextDeliveryAt is the earliest time worker by may claim a pending outbox row, as seen at now:
// the row's due time, or the end of another worker's live claim on the row or on its
// receiver's rows when later; ok is false when no row is pending (notify.Outbox).
func (db *DB) NextDeliveryAt(ctx context.Context, by string, now time.Time) (at time.Time, ok bool, err error) {
	defer apperr.Wrap(&err, "store.NextDeliveryAt")
	var s *string
	if err := db.pool.QueryRow(ctx, `SELECT min(greatest(o.next_at, (SELECT max(p.claimed_until) FROM notify_outbox p
			WHERE p.receiver_id = o.receiver_id AND p.next_at IS NOT NULL AND p.claimed_by <> $1 AND p.claimed_until > $2)))
		FROM notify_outbox o WHERE o.next_at IS NOT NULL`, by, formatTime(now)).Scan(&s); err != nil {
		return time.Time{}, false, err
	}
	if s == nil {
		return time.Time{}, false, nil
	}
	at, err = parseTime(*s)
	return at, err == nil, err
}

// RecordAttempt stores attempt a of outbox row id and when the next is due, and ends the row's
// claim: next nil ends the row, delivered when a.OK(), given up otherwise. Errors: apperr.NotFound for an unknown row.
func (db *DB) RecordAttempt(ctx context.Context, id string, a notify.Attempt, next *time.Time) (err error) {
	defer apperr.Wrap(&err, "store.RecordAttempt(%s)", id)
	var delivered any
	if a.OK() {
		delivered = formatTime(a.At)
	}
	failed := !a.OK() && next == nil
	return db.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE notify_outbox SET attempts = attempts + 1, next_at = $1, delivered_at = $2, failed = $3,
			claimed_by = NULL, claimed_until = NULL WHERE id = $4`, nullTime(next), delivered, failed, id)
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
