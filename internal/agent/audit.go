package agent

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"countersign/internal/gate"
)

// auditLog writes the automatic audit records of nested calls that a rule decided without
// anyone waiting — the policy allowed the call, or a tool_call handler blocked it (SPEC §3:
// "decisions made by rules are recorded too") — in the background, in batches, through one
// writer at a time.
//
// Why: a record is an INSERT and a commit, tens of µs in SQLite, and a tool may make thousands of
// nested calls; written inline, the audit would cost more than the call. These records are audit
// rows, not transcript entries, and nothing waits on them: no event is broadcast for them, and
// the call they describe never needs a person.
//
// Durability: a record is committed within one batch of being queued (usually well under a
// millisecond), and always before the result of the model-issued call it descends from is
// committed (finishBatch calls flush first), so a stored result implies its nested audit. A
// crash can lose only the records still queued, all of calls whose model-issued ancestor had not
// finished — which restart marks "Interrupted by server restart". Records of calls that need a
// person (pending approvals, session grants) and of model-issued calls are still written inline,
// before the call runs.
type auditLog struct {
	store Store
	log   *slog.Logger

	mu      sync.Mutex
	cond    *sync.Cond        // broadcast when records are written or the queue has room
	queue   [][]gate.Approval // batches of at most auditBatchMax records, oldest first
	waiting int               // records in queue
	queued  uint64            // records ever queued
	written uint64            // records ever taken by the writer and written (or logged as failed)
	writing bool              // a writer goroutine is running
	// spare holds written batches for reuse: a record is ~400 bytes, and a tool making
	// thousands of nested calls would otherwise allocate a new batch every 128 of them.
	spare [][]gate.Approval
}

// auditSpareBatches bounds the batches kept for reuse (~50 KiB each).
const auditSpareBatches = 4

// newBatch returns an empty batch, reused if one is spare; l.mu is held.
func (l *auditLog) newBatch() []gate.Approval {
	if n := len(l.spare); n > 0 {
		b := l.spare[n-1]
		l.spare[n-1] = nil
		l.spare = l.spare[:n-1]
		return b
	}
	return make([]gate.Approval, 0, auditBatchMax)
}

// auditQueueMax bounds the records waiting to be written (about 400 bytes each): a tool that
// makes nested calls faster than SQLite takes their records waits for room, so memory stays
// bounded. It is large enough that a burst of a few tens of thousands of calls is not slowed.
const auditQueueMax = 1 << 15

// auditBatchMax bounds one transaction, so a transcript commit waiting for the single write
// connection waits for at most one short batch.
const auditBatchMax = 128

func newAuditLog(store Store, log *slog.Logger) *auditLog {
	l := &auditLog{store: store, log: log}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// add stamps a as an automatic decision made now (as gate.Record does), queues it and returns it
// as stamped. It blocks only while the queue is full.
func (l *auditLog) add(a gate.Approval) gate.Approval {
	now := time.Now().UTC()
	a.ID, a.CreatedAt, a.DecidedAt, a.Automatic = recordID(now), now, &now, true
	l.mu.Lock()
	for l.waiting >= auditQueueMax {
		l.cond.Wait()
	}
	if n := len(l.queue); n == 0 || len(l.queue[n-1]) == auditBatchMax {
		l.queue = append(l.queue, l.newBatch())
	}
	last := &l.queue[len(l.queue)-1]
	*last = append(*last, a)
	l.waiting++
	l.queued++
	if !l.writing {
		l.writing = true
		go l.write()
	}
	l.mu.Unlock()
	return a
}

// write takes batches off the queue and stores them until the queue is empty.
func (l *auditLog) write() {
	for {
		l.mu.Lock()
		if len(l.queue) == 0 {
			l.writing = false
			l.cond.Broadcast()
			l.mu.Unlock()
			return
		}
		batch := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.waiting -= len(batch)
		l.cond.Broadcast() // room in the queue
		l.mu.Unlock()

		l.store1(batch)

		l.mu.Lock()
		l.written += uint64(len(batch))
		if len(l.spare) < auditSpareBatches {
			clear(batch)
			l.spare = append(l.spare, batch[:0])
		}
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

// store1 writes one batch in one transaction; if the batch fails, each record is tried alone so
// one bad record cannot take the others with it. Failures are logged, not fatal (as gate.Record's).
func (l *auditLog) store1(batch []gate.Approval) {
	ctx := context.Background()
	if err := l.store.CreateApprovals(ctx, batch); err == nil {
		return
	}
	for _, a := range batch {
		if err := l.store.CreateApproval(ctx, a); err != nil {
			l.log.Error("record automatic decision", "session", a.SessionID, "call", a.ToolCallID, "err", err)
		}
	}
}

// flush waits until every record queued before it was called has been written.
func (l *auditLog) flush() {
	l.mu.Lock()
	target := l.queued
	for l.written < target {
		l.cond.Wait()
	}
	l.mu.Unlock()
}

// recordID is an id for an automatic record: 26 characters like gate.NewID's, but the first 13
// encode the time (base32hex, so text order is time order) and only the last 13 are random
// (64 bits). Why: the approvals' primary key is a B-tree on the id; random ids scatter each
// batch of thousands of records over the whole tree, time-ordered ones append to its end (about
// half the cost of a record). Records are decided already, so an id that can be guessed gives
// nothing away: a decision on one is refused as already resolved.
func recordID(t time.Time) string {
	const hex32 = "0123456789ABCDEFGHIJKLMNOPQRSTUV"
	var b [26]byte
	n := uint64(t.UnixNano())
	for i := 12; i >= 0; i-- {
		b[i] = hex32[n&31]
		n >>= 5
	}
	// The random half comes from math/rand/v2 (the runtime's ChaCha8, seeded from the OS), not
	// crypto/rand: these ids are not secrets (see above), and crypto/rand costs a system call.
	r := rand.Uint64()
	for i := 25; i >= 13; i-- {
		b[i] = hex32[r&31]
		r >>= 5
	}
	return string(b[:])
}
