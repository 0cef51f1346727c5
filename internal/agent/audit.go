package agent

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
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
// Grouping (issue 19): the allowed calls are grouped. An approved record is one of a group keyed
// by groupKey — the parent call (session, assistant message, parent tool call id), the tool, and
// how it was decided (source, rule, mode, decider, scope, reason) — and while the group's record
// waits in the queue, a further call of the group only adds to its Count and moves its LastAt.
// A group's record has a fixed id (groupID), so a record of the same group in a later batch is
// merged into the stored row (store: INSERT … ON CONFLICT(id) DO UPDATE): one audit row per
// group, whose count is every call it stands for. Blocked and denied records keep a row each,
// as do every record written elsewhere (model-issued calls, prompts, their decisions). Why:
// writing a row cost the writer about 27 µs of CPU per call (most of it SQLite's JSON
// extraction), four times a nested loop's own; a group costs one upsert per batch and, per
// call, a comparison with the groups its parent call knows (auditGroups: the group's id is
// computed once per parent, tool and decision, its key hashed once per batch). The per-call
// detail stays in the parent's nestedCalls record (SPEC §4), whose entries name their record
// (tool.NestedCall.ApprovalID).
//
// Durability: a record is committed within one batch of being queued (usually well under a
// millisecond), and always before the result of the model-issued call it descends from is
// committed (finishBatch calls flush first, which waits for every call queued before it,
// counted in calls, not records), so a stored result implies its nested audit. A crash can lose
// only the records still queued — for a group, the calls counted since its row was last written
// — all of calls whose model-issued ancestor had not finished, which restart marks "Interrupted
// by server restart" (it rebuilds their nestedCalls from the audit, a group as one entry, marked
// incomplete). Records of calls that need a person (pending approvals, session grants) and of
// model-issued calls are still written inline, before the call runs.
type auditLog struct {
	store Store
	log   *slog.Logger
	// hold, when set (replicas), says whether a run still holds its session's lease
	// (Replicas.Hold): a batch's records of a run that lost it are not written (fence).
	hold func(ctx context.Context, sessionID, lease string) (bool, error)

	mu      sync.Mutex
	cond    *sync.Cond        // broadcast when records are written or the queue has room
	queue   [][]gate.Approval // batches of at most auditBatchMax records, oldest first
	leases  [][]string        // queue's records' runs' lease tokens, batch by batch ("" unfenced)
	waiting int               // records in queue
	queued  uint64            // calls ever queued (a grouped record counts each call it stands for)
	written uint64            // calls ever taken by the writer and written (or logged as failed)
	writing bool              // a writer goroutine is running
	// groups finds a group whose record waits in queue (not yet taken by the writer): by key,
	// whatever parent call's auditGroups know it. The writer removes a batch's groups as it takes
	// it.
	groups map[groupKey]*auditGroup
	// spare holds written batches for reuse: a record is ~400 bytes, and a tool making
	// thousands of nested calls would otherwise allocate a new batch every 128 of them.
	spare [][]gate.Approval
}

// groupKey is what the calls a grouped record stands for have in common: the parent call they
// descend from (tool call ids repeat across messages, so the message too), the tool, and every
// column that says how the call was decided. The record's other columns (call id, arguments,
// times) are its first call's.
type groupKey struct {
	sessionID, messageID, parentToolCallID, toolName string
	source                                           gate.DecisionSource
	ruleID, ruleText                                 string
	ruleSource                                       gate.RuleSource
	mode                                             gate.Mode
	decidedBy, reason, derivedFrom                   string
	scope                                            gate.Scope
	status                                           gate.Status
}

// auditGroup is one group of grouped records: its key and id, computed once (issue 35: once per
// parent call, tool and decision, not once per call or batch), and its record while one waits
// in the queue.
type auditGroup struct {
	key groupKey
	id  string // groupID(key)
	// pending is the group's record in the queue, nil when none (auditLog.mu). The pointer is
	// into a batch's backing array, which never moves: a batch is made with capacity
	// auditBatchMax and never grows past it.
	pending *gate.Approval
}

// auditGroups are the groups one parent call's nested calls were counted in (the parent's
// invocation keeps them), found again by comparing keys — without hashing them, and with no
// allocation — so that a further call of a known group costs a comparison and a count. A
// group's record that the writer took is followed by a new one, found by key in auditLog.groups
// once per batch. Guarded by auditLog.mu.
type auditGroups struct {
	list []*auditGroup
}

// maxParentGroups bounds the groups an auditGroups keeps: a parent calling more tools, or
// decided in more ways, finds the others by key in auditLog.groups.
const maxParentGroups = 8

// find returns the group of key k it keeps, or nil; nil gs keeps none.
func (gs *auditGroups) find(k *groupKey) *auditGroup {
	if gs == nil {
		return nil
	}
	for _, g := range gs.list {
		if g.key == *k {
			return g
		}
	}
	return nil
}

// keep remembers g, in the place of a group of the same key, or else if there is room.
func (gs *auditGroups) keep(g *auditGroup) {
	if gs == nil {
		return
	}
	for i, o := range gs.list {
		if o.key == g.key {
			gs.list[i] = g
			return
		}
	}
	if len(gs.list) < maxParentGroups {
		gs.list = append(gs.list, g)
	}
}

func keyOf(a *gate.Approval) groupKey {
	return groupKey{sessionID: a.SessionID, messageID: a.MessageID, parentToolCallID: a.ParentToolCallID,
		toolName: a.ToolName, source: a.DecisionSource, ruleID: a.RuleID, ruleText: a.RuleText, ruleSource: a.RuleSource,
		mode: a.Mode, decidedBy: a.DecidedBy, reason: a.Reason, derivedFrom: a.DerivedFrom, scope: a.Scope, status: a.Status}
}

// groupID is the fixed id of a group's record: "G" and the first 125 bits of a SHA-256 of the
// key, in base32 (26 characters, like gate.NewID's and recordID's). Fixed, so a later batch's
// record of the group merges into the stored row; "G" never starts a recordID (base32hex of a
// time, "1" until the 2090s), and a gate.NewID (random, 130 bits) that matched one would need
// 125 bits to agree.
func groupID(k groupKey) string {
	h := sha256.New()
	for _, f := range [...]string{k.sessionID, k.messageID, k.parentToolCallID, k.toolName, string(k.source), k.ruleID,
		k.ruleText, string(k.ruleSource), string(k.mode), k.decidedBy, k.reason, k.derivedFrom, string(k.scope), string(k.status)} {
		// Each field length-prefixed, so no two keys hash the same text.
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
		h.Write([]byte(f))
	}
	sum := h.Sum(nil)
	return "G" + base32.StdEncoding.EncodeToString(sum)[:25]
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
	l := &auditLog{store: store, log: log, groups: map[groupKey]*auditGroup{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// add stamps a, the record of a nested call, as an automatic decision made now (as gate.Record
// does), queues it and returns it as stamped. An approved record joins its group (auditLog): when
// the group's record waits in the queue the call is counted in it, else a: queued as the group's
// record (Count 1, LastAt its time). Either way the record returned has the group's id and this
// call's own times, and Count 0 (the group may count further calls); it goes on the call's
// tool_execution events. It blocks only while the queue is full.
func (l *auditLog) add(a gate.Approval) gate.Approval { return l.addFor(a, "") }

// addFor is add for a call of the run holding lease (its session's lease token: the record is
// written only while the run holds it, as its transcript entries are; "" for no check).
func (l *auditLog) addFor(a gate.Approval, lease string) gate.Approval {
	l.addTo(&a, new(time.Time), nil, lease)
	return a
}

// addTo is addFor stamping *a in place, for the pipeline (issue 35): a.DecidedAt points to at,
// storage that lives as long as *a (the call's invocation keeps both), and an approved record's
// group is looked for first in groups, its parent call's (nil: by key only). A call of a group
// whose record waits in the queue allocates nothing.
func (l *auditLog) addTo(a *gate.Approval, at *time.Time, groups *auditGroups, lease string) {
	now := time.Now().UTC()
	*at = now
	a.CreatedAt, a.DecidedAt, a.Automatic = now, at, true
	if a.Status != gate.Approved || a.ParentToolCallID == "" {
		a.ID = recordID(now)
		l.mu.Lock()
		l.queued++
		l.waitRoom()
		l.enqueue(*a, lease)
		l.mu.Unlock()
		return
	}
	k := keyOf(a)
	l.mu.Lock()
	l.queued++
	g := groups.find(&k)
	for {
		if g == nil || g.pending == nil {
			// The group's record was taken by the writer, or the parent does not know the
			// group: one of the key may wait in the queue all the same.
			if o := l.groups[k]; o != nil {
				g = o
				groups.keep(g)
			}
		}
		if g != nil && g.pending != nil {
			g.pending.Count++
			*g.pending.LastAt = now
			a.ID = g.id
			l.mu.Unlock()
			return
		}
		if l.waiting < auditQueueMax {
			break
		}
		l.cond.Wait() // the group's record may be queued meanwhile: look again
		g = groups.find(&k)
	}
	if g == nil {
		g = &auditGroup{key: k, id: groupID(k)}
		groups.keep(g)
	}
	a.ID = g.id
	rec := *a
	lastAt := now
	rec.Count, rec.LastAt = 1, &lastAt
	g.pending = l.enqueue(rec, lease)
	l.groups[k] = g
	l.mu.Unlock()
}

// waitRoom waits until the queue has room; l.mu is held.
func (l *auditLog) waitRoom() {
	for l.waiting >= auditQueueMax {
		l.cond.Wait()
	}
}

// enqueue appends rec, of a run holding lease, to the queue's last batch (a new one when it is
// full) and starts the writer if none runs; it returns the record as queued. l.mu is held and
// the queue has room.
func (l *auditLog) enqueue(rec gate.Approval, lease string) *gate.Approval {
	if n := len(l.queue); n == 0 || len(l.queue[n-1]) == auditBatchMax {
		l.queue = append(l.queue, l.newBatch())
		l.leases = append(l.leases, make([]string, 0, auditBatchMax))
	}
	last := &l.queue[len(l.queue)-1]
	l.leases[len(l.leases)-1] = append(l.leases[len(l.leases)-1], lease)
	*last = append(*last, rec)
	l.waiting++
	if !l.writing {
		l.writing = true
		go l.write()
	}
	return &(*last)[len(*last)-1]
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
		batch, leases := l.queue[0], l.leases[0]
		l.queue[0], l.leases[0] = nil, nil
		l.queue, l.leases = l.queue[1:], l.leases[1:]
		l.waiting -= len(batch)
		// Taken: its groups count no further calls (a further call starts a new record of the
		// group, merged into the same row when stored).
		calls := uint64(0)
		for i := range batch {
			if a := &batch[i]; a.Grouped() {
				k := keyOf(a)
				if g := l.groups[k]; g != nil && g.pending == a {
					g.pending = nil
					delete(l.groups, k)
				}
			}
			calls += uint64(batch[i].Calls())
		}
		l.cond.Broadcast() // room in the queue
		l.mu.Unlock()

		if l.hold != nil {
			batch = l.fence(batch, leases)
		}
		l.store1(batch)

		l.mu.Lock()
		l.written += calls
		if len(l.spare) < auditSpareBatches {
			clear(batch)
			l.spare = append(l.spare, batch[:0])
		}
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

// fence returns batch without the records of runs that no longer hold their session's lease
// (issue 33, SPEC §16): a replica that stalled past its lease and was taken over writes no
// audit rows for its nested calls when it wakes, as it writes no transcript entries (run.append).
// A lease that cannot be checked (the database away) keeps its records: the write is tried.
// One check per run in the batch.
func (l *auditLog) fence(batch []gate.Approval, leases []string) []gate.Approval {
	type run struct{ session, lease string }
	held := map[run]bool{}
	out := batch[:0]
	for i, a := range batch {
		k := run{a.SessionID, leases[i]}
		ok, checked := held[k]
		if k.lease == "" {
			ok, checked = true, true
		}
		if !checked {
			h, err := l.hold(context.Background(), k.session, k.lease)
			ok = h || err != nil
			held[k] = ok
			if !ok {
				l.log.Warn("audit records of a run whose session another server took over were not written", "session", k.session)
			}
		}
		if ok {
			out = append(out, a)
		}
	}
	return out
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
			l.log.Error("record automatic decision", "session", a.SessionID, "call", a.ToolCallID, "calls", a.Calls(), "err", err)
		}
	}
}

// flush waits until every call queued before it was called has been written.
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
