package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The write queue: the hot writes (transcript entries, approvals and their decisions, audit
// batches, session updates) wait their turn for SQLite's one writer in a FIFO queue, each
// returning only once its commit is done (commit before broadcast). Why a queue of our own:
// database/sql hands its one write connection to a random waiter, so under load (a burst of 100
// approvals, ten sessions streaming) some writes waited for many others and the p99s of the
// approval trip and the fan-out were several times their medians.
//
// The queue can also commit the writes waiting in it together (group commit): one transaction,
// each write in its own savepoint (a failing write is undone alone), one commit. It is off
// (committer.max 1): measured, grouping halved the time a burst took but made the delivery delay
// of events worse (the sessions then publish faster than in-process viewers read), and the
// issue's targets are those delays (bench/RESULTS.md, item 18). Tests run it with groups.

// committer is the queue of writes waiting to be committed and whether a goroutine is leading
// (writing). The leader writes the first write of the queue (up to max of them as one group),
// hands the lead to the first write still waiting, if any, and wakes the others it wrote.
type committer struct {
	mu      sync.Mutex
	queue   []*writeOp
	leading bool
	max     int // the most writes one transaction holds; 0 or 1: one write at a time
}

// writeOp is one write: fn runs its statements through the writeTx it is given.
type writeOp struct {
	ctx context.Context
	// atomic: fn runs more than one statement that must be committed together, so it runs
	// inside a transaction even when it is written alone. A single statement is atomic by
	// itself and, alone, runs without BEGIN and COMMIT.
	atomic bool
	// durable: the commit is synced to disk before it returns (synchronous=FULL; see
	// commitDurable).
	durable bool
	fn      func(w *writeTx) error
	queries []string
	stmts   []*sql.Stmt // queries prepared, same order
	err     error
	panic   any           // what fn panicked with, raised again in the write's own goroutine
	wake    chan struct{} // closed when the write is done, or when it is to lead the next group
	lead    bool
}

// writeTx is what a write's statements run through: prepared statements bound to the group's
// transaction, if there is one.
type writeTx struct {
	ctx context.Context // the write's context, without its cancellation (see DB.commit)
	tx  *sql.Tx         // nil for a single statement written alone (SQLite commits it itself)
	op  *writeOp
}

// stmt returns the prepared statement for query, which must be one of the write's queries.
func (w *writeTx) stmt(query string) *sql.Stmt {
	for i, q := range w.op.queries {
		if q == query {
			if w.tx == nil {
				return w.op.stmts[i]
			}
			return w.tx.StmtContext(w.ctx, w.op.stmts[i])
		}
	}
	panic(fmt.Sprintf("store: query not declared by the write: %s", query))
}

// commit runs fn as one write (see committer) and returns when its commit is done. queries are the
// statements fn uses (prepared here, before the write waits: preparing needs the write
// connection, which a group's transaction holds). atomic: see writeOp. A ctx that ends while the
// write waits in the queue makes it return ctx's error at once, without running fn; once a group
// has taken it, it runs to its end (cancelling a statement inside a transaction would make SQLite
// roll back the whole group).
func (db *DB) commit(ctx context.Context, atomic bool, fn func(w *writeTx) error, queries ...string) error {
	return db.enqueue(&writeOp{ctx: ctx, atomic: atomic, fn: fn, queries: queries})
}

// commitDurable is commit for the writes a power loss must not undo: decisions on approvals and
// session grants (issue 15). The database runs at synchronous=NORMAL, where a WAL commit survives a crash of
// the process but reaches the disk only at the next checkpoint, so a power loss can drop the
// last commits — and an approval that was dropped after its call ran would un-approve a call
// that did run. A durable write's group commits at synchronous=FULL instead: the WAL is synced
// before the commit returns (and so before the call can run), and with it every commit before
// it. The setting is per connection and cannot change inside a transaction, so the group's
// leader sets FULL on the one write connection before the group and NORMAL after it. Other
// writes keep NORMAL: a transcript entry lost to a power loss is what SPEC §8 allows, and a sync
// per entry would cost every model turn (so do the rules' records written with an entry; see
// AppendEntry). Measured here (BenchmarkCommitDurability): a one-row commit takes about 22 µs at
// NORMAL and 130 µs at FULL on a quiet disk, 35 µs and 950 µs while other processes write.
func (db *DB) commitDurable(ctx context.Context, atomic bool, fn func(w *writeTx) error, queries ...string) error {
	return db.enqueue(&writeOp{ctx: ctx, atomic: atomic, durable: true, fn: fn, queries: queries})
}

// enqueue prepares op's queries, queues op and returns when its commit is done (commit).
func (db *DB) enqueue(op *writeOp) error {
	ctx, queries := op.ctx, op.queries
	op.stmts, op.wake = make([]*sql.Stmt, len(queries)), make(chan struct{})
	for i, q := range queries {
		st, err := db.writes.stmt(ctx, q)
		if err != nil {
			return err
		}
		op.stmts[i] = st
	}
	c := &db.commits
	c.mu.Lock()
	c.queue = append(c.queue, op)
	if c.leading {
		c.mu.Unlock()
		select {
		case <-op.wake:
		case <-ctx.Done():
			// Gone from the queue before a group took it: nothing was written. Taken already
			// (being written, or handed the lead): it must run to its end like any other.
			c.mu.Lock()
			if i := slices.Index(c.queue, op); i >= 0 && !op.lead {
				c.queue = slices.Delete(c.queue, i, i+1)
				c.mu.Unlock()
				return ctx.Err()
			}
			c.mu.Unlock()
			<-op.wake
		}
		if !op.lead {
			return op.result()
		}
		c.mu.Lock()
	}
	// This goroutine leads now; op is the first write of the queue.
	c.leading = true
	n := min(len(c.queue), max(c.max, 1))
	group := append([]*writeOp(nil), c.queue[:n]...)
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	c.mu.Unlock()

	if db.OnCommit != nil {
		start := time.Now()
		db.commitGroup(group)
		db.OnCommit(time.Since(start), len(group))
	} else {
		db.commitGroup(group)
	}

	c.mu.Lock()
	if len(c.queue) > 0 {
		next := c.queue[0]
		next.lead = true
		close(next.wake)
	} else {
		c.leading = false
	}
	c.mu.Unlock()
	for _, o := range group[1:] {
		close(o.wake)
	}
	return op.result()
}

// result is the write's error, or its fn's panic raised again (in the goroutine that made the
// write, so a bug there does not take the committer, and every later write, with it).
func (op *writeOp) result() error {
	if op.panic != nil {
		panic(op.panic)
	}
	return op.err
}

// run runs the write's fn through w; a panic becomes an error for the group (its savepoint is
// rolled back like a failed write's) and is raised again by result.
func (op *writeOp) run(w *writeTx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			op.panic = p
			err = fmt.Errorf("store: a write panicked: %v", p)
		}
	}()
	return op.fn(w)
}

// commitGroup writes group and sets each write's err. A group of one single-statement write runs
// it as it is (SQLite's own transaction); otherwise one transaction holds the group, each write
// of several inside a savepoint that is rolled back if it fails.
func (db *DB) commitGroup(group []*writeOp) {
	if slices.ContainsFunc(group, func(op *writeOp) bool { return op.durable }) {
		// Outside any transaction: SQLite refuses to change the safety level inside one.
		if _, err := db.writes.ExecContext(context.Background(), `PRAGMA synchronous = FULL`); err != nil {
			for _, op := range group {
				op.err = err // never written less durably than asked
			}
			return
		}
		// Should this fail, the connection stays at FULL: slower, never less safe.
		defer db.writes.ExecContext(context.Background(), `PRAGMA synchronous = NORMAL`)
	}
	if len(group) == 1 && !group[0].atomic {
		op := group[0]
		if op.err = op.ctx.Err(); op.err == nil {
			op.err = op.run(&writeTx{ctx: context.WithoutCancel(op.ctx), op: op})
		}
		return
	}
	fail := func(err error) {
		for _, op := range group {
			op.err = err
		}
	}
	tx, err := db.write.BeginTx(context.Background(), nil)
	if err != nil {
		fail(err)
		return
	}
	if len(group) == 1 {
		op := group[0]
		if op.err = op.ctx.Err(); op.err == nil {
			op.err = op.run(&writeTx{ctx: context.WithoutCancel(op.ctx), tx: tx, op: op})
		}
		if op.err != nil {
			tx.Rollback()
			return
		}
		if err := tx.Commit(); err != nil {
			op.err = err
		}
		return
	}
	for _, op := range group {
		if op.err = op.ctx.Err(); op.err != nil {
			continue // cancelled while it waited: never ran
		}
		if _, err := tx.Exec(`SAVEPOINT write`); err != nil {
			tx.Rollback()
			fail(err)
			return
		}
		op.err = op.run(&writeTx{ctx: context.WithoutCancel(op.ctx), tx: tx, op: op})
		if op.err != nil {
			// Undo this write alone. If SQLite has already rolled the whole transaction back
			// (an I/O error, a full disk), the savepoint is gone and so is the group.
			if _, err := tx.Exec(`ROLLBACK TO write`); err != nil {
				tx.Rollback()
				fail(errors.Join(op.err, err))
				return
			}
		}
		if _, err := tx.Exec(`RELEASE write`); err != nil {
			tx.Rollback()
			fail(err)
			return
		}
	}
	if err := tx.Commit(); err != nil {
		// Nothing of the group is stored: every write gets the commit's error, also one that had
		// failed on its own (a conflict with a write of the group that is now undone too).
		fail(err)
	}
}
