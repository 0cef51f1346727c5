package agent

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// outsideLog writes the records of outside calls that no person decided (a rule, the mode or an
// annotation default allowed or blocked them) after their answer, in the order they were queued,
// through one writer goroutine: Door 2's rule-decided path (issue 35: no commit on the answer's
// path of a call a rule allowed; the record commits in the next write, as nested calls' audit
// does). Each record is written and only then shown (commit before broadcast), so a page never
// shows a call the store does not hold.
//
// Order: a record queued after another is written after it, and a write that must be stored
// before it returns (RecordAgentCall, RecordAgentOutcome, RecordAgentMessage) first waits for
// the records of its session queued before it (flushSession), so one session's transcript keeps
// the order of its calls whichever way each was recorded; other sessions' records do not hold
// it (a hook of Door 1 never waits for the gateway's queue).
//
// Bound: at most outsideQueueMax records wait; past it, queueing waits for room (the writer is
// SQLite's one writer: a queue that only grows would hide an overloaded store).
//
// Durability: a crash loses only the records still queued, calls a rule decided whose answer
// was already sent; a call that asks a person is stored before it is shown, as always. A write
// that fails is logged and handed to the record's failed func; the call it records has run.
// After a write the store refused (not a session deleted meanwhile), the log is broken until a
// record is stored again: callers then store before answering (AgentRecordsQueued), so a store
// that refuses writes fails calls closed instead of letting them run unrecorded.
type outsideLog struct {
	log func(msg string, args ...any)

	mu      sync.Mutex
	broken  error      // the last write's error, while no record was stored since
	cond    *sync.Cond // broadcast when a record is written or the queue has room
	queue   []outsideRecord
	queued  uint64 // records ever queued
	written uint64 // records ever taken by the writer and written (or failed)
	// last is, by session, the number (queued, counted from 1) of its last record still to be
	// written: the session's records are all written once written reaches it.
	last    map[string]uint64
	writing bool // a writer goroutine is running
	// since is when the writer took the record it is writing (zero between records): a write
	// that takes longer than outsideStall means a store that hangs (a database unreachable, a
	// lock held), which must fail calls closed as one that refuses does (queueing).
	since time.Time
}

// outsideStall is how long one queued write may take before the log counts as broken (queueing):
// a store that takes no writes but does not refuse them either must not let the calls after it
// run unrecorded, up to outsideQueueMax of them.
const outsideStall = time.Second

// outsideRecord is one queued write: write stores it, show publishes it once stored, failed
// (may be nil) hears of a write that failed.
type outsideRecord struct {
	session string // the agent session it is of
	write   func(ctx context.Context) error
	show    func()
	failed  func(error)
}

// outsideQueueMax bounds the records waiting in an outsideLog.
const outsideQueueMax = 4096

func newOutsideLog(log func(msg string, args ...any)) *outsideLog {
	l := &outsideLog{log: log}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// add queues rec, waiting while the queue is full, and starts the writer if none runs.
func (l *outsideLog) add(rec outsideRecord) {
	l.mu.Lock()
	for len(l.queue) >= outsideQueueMax {
		l.cond.Wait()
	}
	l.queue = append(l.queue, rec)
	l.queued++
	if l.last == nil {
		l.last = map[string]uint64{}
	}
	l.last[rec.session] = l.queued
	if !l.writing {
		l.writing = true
		go l.write()
	}
	l.mu.Unlock()
}

// write takes the records in order until the queue is empty.
func (l *outsideLog) write() {
	ctx := context.Background()
	l.mu.Lock()
	for len(l.queue) > 0 {
		rec := l.queue[0]
		l.queue[0] = outsideRecord{}
		l.queue = l.queue[1:]
		if len(l.queue) == 0 {
			l.queue = nil // let the backing array go
		}
		l.cond.Broadcast() // room
		l.since = time.Now()
		l.mu.Unlock()
		err := rec.write(ctx)
		if err != nil {
			l.log("an outside call's record was not stored", "err", err)
			if rec.failed != nil {
				rec.failed(err)
			}
		} else if rec.show != nil {
			rec.show()
		}
		l.mu.Lock()
		switch {
		case err == nil:
			l.broken = nil
		case apperr.CodeOf(err) != apperr.NotFound: // a deleted session is no store failure
			l.broken = err
		}
		l.written++
		if l.last[rec.session] == l.written {
			delete(l.last, rec.session) // its last record queued: all of the session's are written
		}
		l.since = time.Time{}
		l.cond.Broadcast()
	}
	l.writing = false
	l.mu.Unlock()
}

// stored says a record was stored by a write that waited for it: the store takes writes again.
func (l *outsideLog) stored() {
	l.mu.Lock()
	l.broken = nil
	l.mu.Unlock()
}

// queueing says whether records may be queued: no queued write failed since the last stored,
// and none has been writing for longer than outsideStall.
func (l *outsideLog) queueing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.broken == nil && (l.since.IsZero() || time.Since(l.since) < outsideStall)
}

// flushSession waits until every record of session sessionID queued before it is written (or
// failed): the barrier that keeps a write stored before returning after them. It returns ctx's
// error if ctx ends first (the request that waits hung up while the store hangs).
func (l *outsideLog) flushSession(ctx context.Context, sessionID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	target := l.last[sessionID]
	if l.written >= target {
		return nil
	}
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer stop()
	for l.written < target {
		if err := ctx.Err(); err != nil {
			return err
		}
		l.cond.Wait()
	}
	return nil
}

// flush waits until every record queued before it is written (or failed), whatever its session:
// a shutdown's last step before the store closes (Runner.Wait).
func (l *outsideLog) flush() {
	l.mu.Lock()
	target := l.queued
	for l.written < target {
		l.cond.Wait()
	}
	l.mu.Unlock()
}

// QueueAgentCall records a call a rule, the mode or a default decided (decided, from
// gate.OutsideRequest.Record with OutsideRequest.Later) in agent session sess — m, the assistant
// message with the one call, its automatic approval and its outside call, in one transaction as
// RecordAgentCall stores them — after the caller's answer: it returns m (with its ID and
// Timestamp set) at once, and the record is stored and then shown (message_end, then the
// approval's event) in the order of the queue. failed, when set, hears of a write that failed
// (apperr.NotFound: the session was deleted). Issue 35: no commit on the answer's path of a call
// a rule allowed.
func (r *Runner) QueueAgentCall(sess Session, m Message, decided gate.OutsideDecided, failed func(error)) Message {
	if m.ID == "" {
		m.ID = newID()
	}
	if m.Timestamp.IsZero() {
		m.Timestamp = time.Now().UTC()
	}
	decided.Approval.MessageID = m.ID
	r.outside.add(outsideRecord{
		session: sess.ID,
		write: func(ctx context.Context) (err error) {
			defer apperr.Wrap(&err, "QueueAgentCall(%s)", sess.ID)
			if !sess.IsAgent() {
				return apperr.Errorf(apperr.Invalid, "session %s is not an agent session", sess.ID)
			}
			_, err = r.cfg.Store.AppendOutsideCall(ctx, sess.ID, m, decided.Approval, decided.Call)
			return err
		},
		show: func() {
			r.publish(Event{Type: MessageEnd, SessionID: sess.ID, MessageID: m.ID, Message: &m})
			r.sessions.approvalChanged(decided.Approval)
		},
		failed: failed,
	})
	return m
}

// QueueAgentOutcome records res, the result of the call approval a decided, with outcome on its
// outside call, as RecordAgentOutcome does, after the caller's answer, in the order of the queue
// (so after the call's own record when that was queued: QueueAgentCall). failed as for
// QueueAgentCall.
func (r *Runner) QueueAgentOutcome(a gate.Approval, res tool.Result, outcome json.RawMessage, failed func(error)) {
	now := time.Now().UTC()
	m := Message{ID: newID(), Role: ToolResult, ToolCallID: a.ToolCallID, ToolName: a.ToolName, Result: &res, Timestamp: now}
	r.outside.add(outsideRecord{
		session: a.SessionID,
		write: func(ctx context.Context) (err error) {
			defer apperr.Wrap(&err, "QueueAgentOutcome(%s, %s)", a.SessionID, a.ToolCallID)
			_, err = r.cfg.Store.AppendOutsideOutcome(ctx, a.SessionID, m, a.ID, outcome, now)
			return err
		},
		show:   func() { r.showOutcome(a, res) },
		failed: failed,
	})
}

// AgentRecordsQueued says whether a call decided without a person may be recorded after its
// answer (QueueAgentCall): false while a queued record's write takes longer than outsideStall
// (the store hangs), and after a queued record the store refused, until RecordAgentCall
// or RecordAgentOutcome stores one again — the caller then records before answering, and a store
// that refuses writes fails the call instead of letting it run unrecorded.
func (r *Runner) AgentRecordsQueued() bool { return r.outside.queueing() }

// FlushAgentRecords waits until every record queued by QueueAgentCall and QueueAgentOutcome
// before it is stored (or failed).
func (r *Runner) FlushAgentRecords() { r.outside.flush() }
