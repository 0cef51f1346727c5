package sqlite

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"countersign/internal/store"
)

// The write queue: every write (transcript entries, approvals and their decisions, audit
// batches, session updates…) waits its turn for SQLite's one writer in a FIFO queue, and returns
// only once its commit is done (commit before broadcast). Why a queue of our own: database/sql
// hands its one write connection to a random waiter, so under load (a burst of 100 approvals, ten
// sessions streaming) some writes waited for many others and the p99s of the approval trip and
// the fan-out were several times their medians.
//
// The queue once could also commit the writes waiting in it together (group commit). Measured,
// grouping halved the time a burst took but made the delivery delay of events worse, and it was
// never turned on in production (bench/RESULTS.md, item 18), so it is gone (issue 29): each write
// is committed alone, in its turn.

// committer is the queue of writes waiting to be committed and whether a goroutine is leading
// (writing). The leader writes the first write of the queue, hands the lead to the next write
// still waiting, if any, and returns.
type committer struct {
	mu      sync.Mutex
	queue   []*writeOp
	leading bool
}

// writeOp is one write: fn runs its statements through the Querier it is given.
type writeOp struct {
	ctx   context.Context
	mode  store.WriteMode
	fn    func(tx store.Querier) error
	err   error
	panic any           // what fn panicked with, raised again in the write's own goroutine
	wake  chan struct{} // closed when the write is done, or when it is to lead
	lead  bool
	// missed are the statements the write ran in its transaction that were not prepared yet;
	// they are prepared after its commit, for the next write that runs them.
	missed []string
}

// Write runs fn as one write (store.Conn): it waits its turn in the queue, and returns when its
// commit is done. A write that is not store.Atomic runs its one statement without BEGIN and
// COMMIT (SQLite commits it itself). A store.Durable write is synced before it returns (see
// writeDurable). A ctx that ends while the write waits in the queue makes it return ctx's error
// at once, without running fn; once taken, it runs to its end (its statements run without ctx's
// cancellation: cancelling one inside a transaction would roll the transaction back halfway).
func (c conn) Write(ctx context.Context, mode store.WriteMode, fn func(tx store.Querier) error) error {
	return c.db.enqueue(&writeOp{ctx: ctx, mode: mode, fn: fn})
}

// enqueue queues op and returns when its commit is done (Write).
func (db *DB) enqueue(op *writeOp) error {
	ctx := op.ctx
	op.wake = make(chan struct{})
	c := &db.commits
	c.mu.Lock()
	c.queue = append(c.queue, op)
	if c.leading {
		c.mu.Unlock()
		select {
		case <-op.wake:
		case <-ctx.Done():
			// Gone from the queue before it was taken: nothing was written. Taken already
			// (handed the lead): it must run to its end like any other.
			c.mu.Lock()
			if i := slices.Index(c.queue, op); i >= 0 && !op.lead {
				c.queue = slices.Delete(c.queue, i, i+1)
				c.mu.Unlock()
				return ctx.Err()
			}
			c.mu.Unlock()
			<-op.wake
		}
		c.mu.Lock()
	}
	// This goroutine leads now; op is the first write of the queue.
	c.leading = true
	c.queue = slices.Delete(c.queue, 0, 1)
	c.mu.Unlock()

	if db.OnCommit != nil {
		start := time.Now()
		db.commitOne(op)
		db.OnCommit(time.Since(start), 1)
	} else {
		db.commitOne(op)
	}
	// Prepared now, while no transaction holds the write connection.
	for _, q := range op.missed {
		_, _ = db.writes.stmt(context.Background(), q)
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
	return op.result()
}

// result is the write's error, or its fn's panic raised again (in the goroutine that made the
// write, so a bug there does not take the queue, and every later write, with it).
func (op *writeOp) result() error {
	if op.panic != nil {
		panic(op.panic)
	}
	return op.err
}

// run runs the write's fn through tx; a panic becomes the write's error (its transaction is
// rolled back like a failed write's) and is raised again by result.
func (op *writeOp) run(tx store.Querier) (err error) {
	defer func() {
		if p := recover(); p != nil {
			op.panic = p
			err = fmt.Errorf("store: a write panicked: %v", p)
		}
	}()
	return op.fn(tx)
}

// commitOne writes op and sets its err.
//
// A durable write (store.Durable) is committed at synchronous=FULL: the decisions on approvals,
// session grants and deletions a power loss must not undo (issue 15). The database runs at
// synchronous=NORMAL, where a WAL commit survives a crash of the process but reaches the disk
// only at the next checkpoint, so a power loss can drop the last commits — and an approval that
// was dropped after its call ran would un-approve a call that did run. At FULL the WAL is synced
// before the commit returns (and so before the call can run), and with it every commit before
// it. The setting is per connection and cannot change inside a transaction, so FULL is set on
// the one write connection before the write and NORMAL after it. Other writes keep NORMAL: a
// transcript entry lost to a power loss is what SPEC §8 allows, and a sync per entry would cost
// every model turn. Measured here (BenchmarkCommitDurability): a one-row commit takes about
// 22 µs at NORMAL and 130 µs at FULL on a quiet disk, 35 µs and 950 µs while other processes
// write.
func (db *DB) commitOne(op *writeOp) {
	if op.err = op.ctx.Err(); op.err != nil {
		return // cancelled as it was taken: never ran
	}
	ctx := context.WithoutCancel(op.ctx)
	db.written.Add(1)
	if op.mode&store.Durable != 0 {
		db.synced.Add(1)
		// Outside any transaction: SQLite refuses to change the safety level inside one.
		if _, op.err = db.execCached(ctx, `PRAGMA synchronous = FULL`); op.err != nil {
			return // never written less durably than asked
		}
		// Should this fail, the connection stays at FULL: slower, never less safe.
		defer db.execCached(ctx, `PRAGMA synchronous = NORMAL`)
	}
	if op.mode&store.Atomic == 0 {
		op.err = op.run(writeConn{db})
		return
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		op.err = err
		return
	}
	if op.err = op.run(&writeTx{db: db, tx: tx, op: op}); op.err != nil {
		tx.Rollback()
		op.missed = nil
		return
	}
	op.err = tx.Commit()
}
