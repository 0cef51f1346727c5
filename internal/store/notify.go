package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/notify"
)

// Webhook notifications (SPEC §15): the outbox rows and decision links are written in the
// transaction of the approval they are about, so an approval is never stored without its events
// nor an event sent for an approval that is not stored; the delivery workers (notify.Worker, one
// per replica) read them back on their own goroutines. The outbox rules — which events make
// which delivery rows — are here, once: createNotifiedApproval (approval.requested, with a
// decision link, for every receiver) and outboxResolved (the resolution's event for every
// receiver told of the request).
//
// Several replicas (PostgreSQL): each replica's delivery worker claims the rows it attempts
// (ClaimDeliveries, RenewClaim), so each attempt is made on exactly one replica and a receiver's
// rows go through one replica at a time, in order.

// notifySetup is what SetNotify configures.
type notifySetup struct {
	receivers []notify.Receiver
	links     notify.LinkTokens
	wake      func()
}

// SetNotify makes every pending approval stored from now on write, in its own transaction, an
// approval.requested outbox row and a decision link for each receiver that may decide it (SPEC
// §15: a call whose rule names reviewers is announced only to receivers whose name is one of
// them, gate.Approval.MayDecide; the others get no event about it at all, so neither its
// arguments nor its diff), and every resolution of such an approval an approval.resolved or
// approval.timed_out row for the receivers that were told of it. links makes each link's random
// token, of which the link keeps the hash and the outbox row the sealed token until it is sent
// (notify.LinkTokens); wake is called, without blocking, after each commit that wrote rows
// (notify.Worker.Wake). Call it once, before the store is used concurrently; no receivers turns
// notifications off.
func (db *SQL) SetNotify(receivers []notify.Receiver, links notify.LinkTokens, wake func()) {
	if wake == nil {
		wake = func() {}
	}
	db.notify = notifySetup{receivers: receivers, links: links, wake: wake}
}

const insertOutbox = `INSERT INTO notify_outbox (id, approval_id, receiver_id, event, link_id, link_token, created_at, next_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

const insertDecisionLink = `INSERT INTO decision_links (id, token_hash, approval_id, receiver_id, recipient, arguments_sha256, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?)`

// insertOutboxResolved queues the resolution event (?1) for every receiver told of the request:
// one row each, due at once (?2), in the order the requests were written. A resolution is
// written once (first wins), so a conflict cannot happen but would be skipped.
const insertOutboxResolved = `INSERT INTO notify_outbox (id, approval_id, receiver_id, event, created_at, next_at)
	SELECT approval_id || '/' || receiver_id || '/' || CAST(?1 AS TEXT), approval_id, receiver_id, CAST(?1 AS TEXT), CAST(?2 AS TEXT), CAST(?2 AS TEXT)
	FROM notify_outbox WHERE approval_id = ?3 AND event = 'approval.requested'
	ORDER BY {ord}
	ON CONFLICT DO NOTHING`

// outboxResolved writes, within tx, the events of a's resolution at at for the receivers told of
// its request (SPEC §15), when receivers are set, and returns how many rows it wrote.
func (db *SQL) outboxResolved(ctx context.Context, tx Querier, a gate.Approval, at time.Time) (int64, error) {
	if len(db.notify.receivers) == 0 {
		return 0, nil
	}
	return db.exec(ctx, tx, insertOutboxResolved, string(notify.EventOf(a.Status)), formatTime(at), a.ID)
}

// createNotifiedApproval is CreateApproval for a pending approval while receivers are set: the
// approval, and a decision link and an approval.requested outbox row for each receiver that may
// decide it (SetNotify), in one transaction.
func (db *SQL) createNotifiedApproval(ctx context.Context, a gate.Approval, args []any) error {
	now := formatTime(db.Now())
	digest := notify.ArgumentsDigest(a.Arguments)
	type row struct{ link, outbox []any }
	var rows []row
	for _, r := range db.notify.receivers {
		linkID := "dl-" + rand.Text() // 130 random bits
		l := notify.Link{ID: linkID, ReceiverID: r.ID, Recipient: r.Name}
		if a.MayDecide(l.Decider()) != nil {
			continue // not among the call's reviewers: told nothing of it
		}
		secret, err := db.notify.links.New(linkID)
		if err != nil {
			return err
		}
		rows = append(rows, row{
			link:   []any{linkID, secret.Hash, a.ID, r.ID, r.Name, digest, now},
			outbox: []any{a.ID + "/" + r.ID + "/" + string(notify.Requested), a.ID, r.ID, string(notify.Requested), linkID, secret.Sealed, now, now},
		})
	}
	err := db.write(ctx, Atomic, func(tx Querier) error {
		if _, err := db.exec(ctx, tx, insertApproval, args...); err != nil {
			return err
		}
		for _, r := range rows {
			if _, err := db.exec(ctx, tx, insertDecisionLink, r.link...); err != nil {
				return err
			}
			if _, err := db.exec(ctx, tx, insertOutbox, r.outbox...); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && len(rows) > 0 {
		db.notify.wake()
	}
	return err
}

// outboxColumns are a delivery's columns, then its approval's (prefixed a.) and session title.
var outboxColumns = `o.id, o.event, o.receiver_id, o.link_id, o.link_token, o.created_at, o.attempts, o.next_at, o.delivered_at, o.failed, s.title, ` +
	func() string {
		cols := strings.Split(approvalColumns, ",")
		for i, c := range cols {
			cols[i] = "a." + strings.TrimSpace(c)
		}
		return strings.Join(cols, ", ")
	}()

const outboxFrom = ` FROM notify_outbox o JOIN approvals a ON a.id = o.approval_id JOIN sessions s ON s.id = a.session_id`

func scanDelivery(r Row) (notify.Delivery, error) {
	var (
		d                 notify.Delivery
		event, createdAt  string
		nextAt, delivered sql.NullString
	)
	// The approval's columns follow; scanApproval reads them through a scanner that first
	// hands the delivery's columns here.
	a, err := scanApproval(prefixRow{r: r, first: []any{&d.ID, &event, &d.ReceiverID, &d.LinkID, &d.SealedToken, &createdAt,
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

// claimable is the condition on an outbox row o for worker ?1 at time ?2 (notify.Outbox): due,
// not under another worker's live claim, and its receiver's rows under no other worker's live
// claim (so a receiver's rows go through one worker at a time, in order).
const claimable = `o.next_at IS NOT NULL AND o.next_at <= ?2
	AND (o.claimed_by IS NULL OR o.claimed_by = ?1 OR o.claimed_until <= ?2)
	AND NOT EXISTS (SELECT 1 FROM notify_outbox p WHERE p.receiver_id = o.receiver_id
		AND p.next_at IS NOT NULL AND p.claimed_by <> ?1 AND p.claimed_until > ?2)`

// ClaimDeliveries claims for c.By, until c.Until, up to limit outbox rows claimable at c.Now
// (due, and neither they nor their receiver's rows under another worker's live claim), the
// earliest due first, and returns them with their approvals (with their votes) and sessions' titles
// (notify.Outbox). One write transaction: two claims never return the same row to two workers.
//
// Where several processes share the database (PostgreSQL, at READ COMMITTED), the dialect's
// ClaimLock first takes, without waiting, the lock of each receiver with due rows (a receiver
// another replica is claiming or renewing right now is skipped): under it, claimable's "no
// other live claim on the receiver" reads every claim committed before, so two replicas never
// hold one receiver's rows at once; the rows themselves are taken with {skipLocked} (FOR UPDATE SKIP LOCKED
// there: a row being recorded is left for the next claim).
func (db *SQL) ClaimDeliveries(ctx context.Context, c notify.Claim, limit int) (ds []notify.Delivery, err error) {
	defer apperr.Wrap(&err, "store.ClaimDeliveries(%s)", c.By)
	now, until := formatTime(c.Now), formatTime(c.Until)
	err = db.write(ctx, Atomic, func(tx Querier) error {
		ds = nil
		args := []any{c.By, now, until, limit}
		only := ""
		if db.d.ClaimLock != "" {
			receivers, err := queryAll(ctx, db, tx, scanString, db.d.ClaimLock, now)
			if err != nil || len(receivers) == 0 {
				return err
			}
			only = ` AND o.receiver_id IN (` + placeholders(5, len(receivers)) + `)`
			for _, r := range receivers {
				args = append(args, r)
			}
		}
		ids, err := queryAll(ctx, db, tx, scanAny, `UPDATE notify_outbox SET claimed_by = ?1, claimed_until = ?3
			WHERE id IN (SELECT o.id FROM notify_outbox o WHERE `+claimable+only+` ORDER BY o.next_at, o.{ord} LIMIT ?4{skipLocked})
			RETURNING id`, args...)
		if err != nil || len(ids) == 0 {
			return err
		}
		ds, err = queryAll(ctx, db, tx, scanDelivery, `SELECT `+outboxColumns+outboxFrom+`
			WHERE o.id IN (`+placeholders(1, len(ids))+`) ORDER BY o.next_at, o.{ord}`, ids...)
		return err
	})
	if err != nil || len(ds) == 0 {
		return ds, err
	}
	// The votes of approvals that need several approvers (approval.resolved carries them),
	// read after the claim's commit: a resolved approval's votes no longer change.
	// One approval may be in several rows (its request and its resolution): each read once.
	var as []gate.Approval
	at := map[string]int{}
	for _, d := range ds {
		if _, ok := at[d.Approval.ID]; !ok {
			at[d.Approval.ID] = len(as)
			as = append(as, d.Approval)
		}
	}
	if err := db.withVotes(ctx, as); err != nil {
		return nil, err
	}
	for i, d := range ds {
		ds[i].Approval.Votes = as[at[d.Approval.ID]].Votes
	}
	return ds, nil
}

// placeholders is n numbered placeholders from ?first on: "?5, ?6, ?7".
func placeholders(first, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("?" + strconv.Itoa(first+i))
	}
	return b.String()
}

func scanString(r Row) (string, error) {
	var s string
	return s, r.Scan(&s)
}

func scanAny(r Row) (any, error) {
	s, err := scanString(r)
	return s, err
}

// RenewClaim extends c.By's claim on outbox row id to c.Until: true when the row is still
// c.By's, not yet recorded, and no other worker holds a live claim on its receiver's rows at
// c.Now; false otherwise, the row untouched (notify.Outbox). Where the dialect has a RenewLock,
// it first waits for the receiver's lock, so it never interleaves with another replica's claim
// of that receiver.
func (db *SQL) RenewClaim(ctx context.Context, id string, c notify.Claim) (held bool, err error) {
	defer apperr.Wrap(&err, "store.RenewClaim(%s)", id)
	err = db.write(ctx, Atomic, func(tx Querier) error {
		if db.d.RenewLock != "" {
			if _, err := tx.Exec(ctx, db.q(db.d.RenewLock), id); err != nil {
				return err
			}
		}
		n, err := db.exec(ctx, tx, `UPDATE notify_outbox SET claimed_until = ?3
			WHERE id = ?4 AND claimed_by = ?1 AND next_at IS NOT NULL
			AND NOT EXISTS (SELECT 1 FROM notify_outbox p WHERE p.receiver_id = notify_outbox.receiver_id
				AND p.next_at IS NOT NULL AND p.claimed_by <> ?1 AND p.claimed_until > ?2)`,
			c.By, formatTime(c.Now), formatTime(c.Until), id)
		held = n > 0
		return err
	})
	return held, err
}

// ReleaseClaims ends every claim worker by holds, so the rows are claimable at once
// (notify.Outbox).
func (db *SQL) ReleaseClaims(ctx context.Context, by string) (err error) {
	defer apperr.Wrap(&err, "store.ReleaseClaims(%s)", by)
	_, err = db.exec1(ctx, 0, `UPDATE notify_outbox SET claimed_by = NULL, claimed_until = NULL WHERE claimed_by = ?`, by)
	return err
}

// NextDeliveryAt is the earliest time worker by may claim a pending outbox row, as seen at now:
// the row's due time, or the end of another worker's live claim on the row or on its
// receiver's rows when later; ok is false when no row is pending (notify.Outbox).
func (db *SQL) NextDeliveryAt(ctx context.Context, by string, now time.Time) (at time.Time, ok bool, err error) {
	defer apperr.Wrap(&err, "store.NextDeliveryAt")
	var s sql.NullString
	if err := db.queryRow(ctx, db.reads(), `SELECT min({greatest}(o.next_at, coalesce((SELECT max(p.claimed_until) FROM notify_outbox p
			WHERE p.receiver_id = o.receiver_id AND p.next_at IS NOT NULL AND p.claimed_by <> ?1 AND p.claimed_until > ?2), o.next_at)))
		FROM notify_outbox o WHERE o.next_at IS NOT NULL`, by, formatTime(now)).Scan(&s); err != nil {
		return time.Time{}, false, err
	}
	if !s.Valid {
		return time.Time{}, false, nil
	}
	at, err = parseTime(s.String)
	return at, err == nil, err
}

// RecordAttempt stores attempt a of outbox row id and when the next is due, and ends the row's
// claim: next nil ends the row, delivered when a.OK(), given up otherwise (notify.Outbox). Errors: apperr.NotFound for an
// unknown row (its approval's session was deleted meanwhile).
func (db *SQL) RecordAttempt(ctx context.Context, id string, a notify.Attempt, next *time.Time) (err error) {
	defer apperr.Wrap(&err, "store.RecordAttempt(%s)", id)
	var delivered any
	if a.OK() {
		delivered = formatTime(a.At)
	}
	failed := !a.OK() && next == nil
	return db.write(ctx, Atomic, func(tx Querier) error {
		// A row that is done forgets its link's sealed token: from then on the database holds
		// only the token's hash.
		n, err := db.exec(ctx, tx, `UPDATE notify_outbox SET attempts = attempts + 1, next_at = ?, delivered_at = ?, failed = ?,
			claimed_by = NULL, claimed_until = NULL, link_token = CASE WHEN ? THEN link_token ELSE '' END WHERE id = ?`,
			nullTime(next), delivered, failed, next != nil, id)
		if err != nil {
			return err
		}
		if n == 0 {
			return apperr.Errorf(apperr.NotFound, "delivery %s not found", id)
		}
		_, err = db.exec(ctx, tx, `INSERT INTO notify_attempts (outbox_id, n, at, status, error, duration_ns)
			VALUES (?, ?, ?, ?, ?, ?)`, id, a.N, formatTime(a.At), a.Status, a.Error, int64(a.Duration))
		return err
	})
}

// Deliveries lists a session's outbox rows, in the order they were written, each with its
// attempts, for the audit page. Empty for an unknown session or when there are none.
func (db *SQL) Deliveries(ctx context.Context, sessionID string) (_ []notify.Delivery, err error) {
	defer apperr.Wrap(&err, "store.Deliveries(%s)", sessionID)
	ds, err := queryAll(ctx, db, db.reads(), scanDelivery, `SELECT `+outboxColumns+outboxFrom+`
		WHERE a.session_id = ? ORDER BY o.created_at, o.{ord}`, sessionID)
	if err != nil || len(ds) == 0 {
		return ds, err
	}
	type att struct {
		id string
		a  notify.Attempt
	}
	rows, err := queryAll(ctx, db, db.reads(), func(r Row) (att, error) {
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
		WHERE a.session_id = ? ORDER BY t.outbox_id, t.n`, sessionID)
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

// DecisionLink returns the decision link whose token has hash tokenHash (notify.HashToken).
// Errors: apperr.NotFound, with no detail, for any other hash.
func (db *SQL) DecisionLink(ctx context.Context, tokenHash string) (l notify.Link, err error) {
	defer apperr.Wrap(&err, "store.DecisionLink")
	var createdAt string
	var used sql.NullString
	err = db.queryRow(ctx, db.reads(), `SELECT id, approval_id, receiver_id, recipient, arguments_sha256, created_at, used_at
		FROM decision_links WHERE token_hash = ?`, tokenHash).Scan(&l.ID, &l.ApprovalID, &l.ReceiverID, &l.Recipient,
		&l.ArgumentsSHA256, &createdAt, &used)
	if isNoRows(err) {
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

// UseDecisionLink marks link id used at (db.Now() when zero): the one use it has. Atomic, so of
// two racing uses exactly one gets nil. Errors: apperr.Conflict ("This link was already used.")
// when it was used before; apperr.NotFound for an unknown id.
func (db *SQL) UseDecisionLink(ctx context.Context, id string, at time.Time) (err error) {
	defer apperr.Wrap(&err, "store.UseDecisionLink(%s)", id)
	if at.IsZero() {
		at = db.Now()
	}
	return db.write(ctx, Atomic|Durable, func(tx Querier) error {
		n, err := db.exec(ctx, tx, `UPDATE decision_links SET used_at = ? WHERE id = ? AND used_at IS NULL`, formatTime(at), id)
		if err != nil || n > 0 {
			return err
		}
		var k int
		if err := db.queryRow(ctx, tx, `SELECT COUNT(*) FROM decision_links WHERE id = ?`, id).Scan(&k); err != nil {
			return err
		}
		if k == 0 {
			return apperr.Errorf(apperr.NotFound, "Not found")
		}
		return apperr.Errorf(apperr.Conflict, "This link was already used.")
	})
}

// ForgetReceivers ends what the store keeps for webhook receivers that are no longer configured
// (SPEC §15; issue 33: removing a receiver kills its links): every unused decision link of a
// receiver whose id is not in keep is deleted (its token answers 404 from now on), and each of
// their outbox rows still pending is given up — recorded as one failed attempt at now ("receiver
// … is no longer configured"), its sealed token forgotten — so no worker sends it later. keep
// empty forgets every receiver (notifications turned off). The server calls it at start with its
// -notify-webhook receivers; replicas of one database are expected to have the same entries. It
// returns how many links it deleted.
func (db *SQL) ForgetReceivers(ctx context.Context, keep []string, now time.Time) (links int64, err error) {
	defer apperr.Wrap(&err, "store.ForgetReceivers")
	// gone(first) is the condition "the receiver is not kept", its placeholders numbered from
	// first; ids are keep's as arguments.
	var ids []any
	for _, id := range keep {
		ids = append(ids, id)
	}
	gone := func(first int) string {
		if len(keep) == 0 {
			return ""
		}
		return ` AND receiver_id NOT IN (` + placeholders(first, len(keep)) + `)`
	}
	err = db.write(ctx, Atomic|Durable, func(tx Querier) error {
		var err error
		if links, err = db.exec(ctx, tx, `DELETE FROM decision_links WHERE used_at IS NULL`+gone(1), ids...); err != nil {
			return err
		}
		if _, err := db.exec(ctx, tx, `INSERT INTO notify_attempts (outbox_id, n, at, status, error, duration_ns)
			SELECT id, attempts + 1, CAST(?1 AS TEXT), 0, 'receiver ' || receiver_id || ' is no longer configured (-notify-webhook)', 0
			FROM notify_outbox WHERE next_at IS NOT NULL`+gone(2), append([]any{formatTime(now)}, ids...)...); err != nil {
			return err
		}
		_, err = db.exec(ctx, tx, `UPDATE notify_outbox SET attempts = attempts + 1, next_at = NULL, failed = TRUE, link_token = '',
			claimed_by = NULL, claimed_until = NULL WHERE next_at IS NOT NULL`+gone(1), ids...)
		return err
	})
	return links, err
}

// OutboxPending counts the webhook deliveries neither delivered nor given up, of every receiver
// (the webhook_outbox_pending_shared metric, SPEC §16).
func (db *SQL) OutboxPending(ctx context.Context) (n int, err error) {
	defer apperr.Wrap(&err, "OutboxPending")
	err = db.queryRow(ctx, db.reads(), `SELECT COUNT(*) FROM notify_outbox WHERE next_at IS NOT NULL`).Scan(&n)
	return n, err
}

// Clock reads the database's clock (Dialect.Clock; the store's Now where the dialect has none):
// the one clock every replica's webhook worker compares claims by (notify.WorkerConfig.Clock,
// SPEC §16).
func (db *SQL) Clock(ctx context.Context) (t time.Time, err error) {
	defer apperr.Wrap(&err, "Clock")
	if db.d.Clock == "" {
		return db.Now(), nil
	}
	err = db.conn.QueryRow(ctx, db.d.Clock).Scan(&t)
	return t.UTC(), err
}
