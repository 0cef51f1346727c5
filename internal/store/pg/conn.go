package pg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"countersign/internal/store"
)

// dialect is PostgreSQL's SQL (store.Dialect): $n placeholders; insertion order is the identity
// column ord (migrations/0001_init.sql); greatest() of two values; a write that reads a row it
// decides on locks it (FOR UPDATE), and the delivery claims take the rows no other replica is
// recording (SKIP LOCKED) under a per-receiver advisory lock (claimLockClass); a session has no
// entries while its counter row says so (last_entry_seq = 0: an append holds that row's lock
// until it commits, so the check sees every committed append); a transcript entry's seq comes
// from that counter.
var dialect = store.Dialect{
	Numbered: true,
	Forms: map[string]string{
		"ord":      "ord",
		"greatest": "greatest",
		// The database's clock in microseconds since the Unix epoch (store.SQL.FailToken).
		"nowMicros":    "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS bigint)",
		"forUpdate":    " FOR UPDATE",
		"skipLocked":   " FOR UPDATE SKIP LOCKED",
		"noEntries":    "last_entry_seq = 0",
		"pendingIndex": "",
	},
	Kind:       errKind,
	NoLimit:    nil, // LIMIT NULL
	SeqCounter: true,
	// DISTINCT keeps the volatile lock call out of the subquery: one try per receiver.
	// The database's clock, which every replica's webhook worker reads (store.SQL.Clock).
	Clock: "SELECT clock_timestamp()",
	ClaimLock: fmt.Sprintf(`SELECT receiver_id FROM (SELECT DISTINCT receiver_id FROM notify_outbox
		WHERE next_at IS NOT NULL AND next_at <= ?1) d WHERE pg_try_advisory_xact_lock(%d, hashtext(receiver_id))`, claimLockClass),
	RenewLock: fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d, hashtext(receiver_id)) FROM notify_outbox WHERE id = ?1`, claimLockClass),
}

// claimLockClass is the first key of the per-receiver advisory locks (the two-key form, apart
// from the one-key locks such as migrationLock) taken while claiming or renewing a receiver's
// delivery rows; the second is hashtext(receiver_id). "cs" "no" in ASCII.
const claimLockClass = 0x6373_6e6f

// errKind is what a server error means to the store (store.Dialect.Kind): its SQLSTATE.
func errKind(err error) store.ErrKind {
	switch pgCode(err) {
	case "23505":
		return store.ErrUnique
	case "23503":
		return store.ErrForeignKey // an unknown session
	case "23514":
		return store.ErrCheck
	case "22P02", "22021":
		// Text that is not JSON in a json column; a text PostgreSQL cannot hold (a NUL byte or
		// invalid UTF-8), which SQLite keeps byte for byte.
		return store.ErrBadText
	}
	return store.ErrOther
}

// conn is the PostgreSQL store's store.Conn on the pool: each write is one statement or one
// transaction at READ COMMITTED (inTx), timed for OnCommit.
type conn struct{ db *DB }

func (c conn) Query(ctx context.Context, query string, args ...any) (store.Rows, error) {
	return poolQuerier{c.db}.Query(ctx, query, args...)
}

func (c conn) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	return c.db.pool.QueryRow(ctx, query, args...)
}

// Write runs fn as one write: a statement on the pool, or (store.Atomic) a transaction. Every
// commit is durable (synchronous_commit), so store.Durable changes nothing.
func (c conn) Write(ctx context.Context, mode store.WriteMode, fn func(tx store.Querier) error) error {
	if mode&store.Atomic == 0 {
		start := time.Now()
		err := fn(poolQuerier{c.db})
		c.db.committed(start, err)
		return err
	}
	return c.db.inTx(ctx, func(tx pgx.Tx) error { return fn(txQuerier{tx}) })
}

// poolQuerier runs statements on the pool, each by itself.
type poolQuerier struct{ db *DB }

func (q poolQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.db.pool.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (q poolQuerier) Query(ctx context.Context, query string, args ...any) (store.Rows, error) {
	rows, err := q.db.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (q poolQuerier) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	return q.db.pool.QueryRow(ctx, query, args...)
}

// txQuerier runs statements in a transaction; it is a store.Batcher (one round trip for a
// batch).
type txQuerier struct{ tx pgx.Tx }

func (q txQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (q txQuerier) Query(ctx context.Context, query string, args ...any) (store.Rows, error) {
	rows, err := q.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (q txQuerier) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	return q.tx.QueryRow(ctx, query, args...)
}

func (q txQuerier) ExecBatch(ctx context.Context, queries []string, args [][]any) (int, error) {
	var b pgx.Batch
	for i := range queries {
		b.Queue(queries[i], args[i]...)
	}
	res := q.tx.SendBatch(ctx, &b)
	for i := range queries {
		if _, err := res.Exec(); err != nil {
			res.Close()
			return i, err
		}
	}
	return len(queries) - 1, res.Close()
}
