// Package relay connects the servers sharing one PostgreSQL database (issue 21, issue 29; SPEC
// §16): session leases, so one replica at a time drives a session's run; the event relay over
// LISTEN/NOTIFY, so every replica's viewers see every session's events; the control messages
// (Stop a run, the rules changed, and topics of other packages' that it carries without knowing
// them, such as the web layer's "close these sockets"); the record of calls' starts; and the
// check that every replica uses the same key files.
//
// It works over the PostgreSQL store's pool (pg.DB.Pool) and on tables of its own that the
// store's migrations create (0004_replicas.sql, 0006_key_fingerprints.sql). A server alone on its
// database (a SQLite file) uses Single, which relays nothing.
package relay

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgxlisten"

	"countersign/internal/agent"
	"countersign/internal/apperr"
)

// Compile-time check: the relay is the agent's link to the other replicas.
var _ agent.Replicas = (*Relay)(nil)

// Channel is the NOTIFY channel the replicas of one database talk on.
const Channel = "countersign"

// Defaults of Relay.
const (
	// LeaseTTL is how long a session's lease lasts without renewal (agent.Replica.RunLeases
	// renews it every agent.LeaseEvery): a dead replica's sessions are taken over within it plus
	// a round.
	LeaseTTL = 8 * time.Second
	// EventRetention is how long a published event's row stays for replicas that missed its
	// notification; older rows are deleted every minute.
	EventRetention = 15 * time.Minute
	// ListenApplicationName is the LISTEN connection's application_name (pg_stat_activity).
	ListenApplicationName = "countersign-listen"
	// maxQueue bounds the events waiting for the writer (a database away for long): past it,
	// deltas and progress are dropped (the finished message and result carry them whole).
	maxQueue = 100_000
)

// Target is what the relay hands other replicas' messages to: this server's runner
// (agent.Runner.Replica).
type Target interface {
	// Deliver publishes another replica's event here, in its session's order.
	Deliver(ev agent.Event)
	// Drives reports whether this replica drives the session's run (a Stop is for it).
	Drives(sessionID string) bool
	// StopRun stops the session's run if this replica drives it.
	StopRun(sessionID, who string)
	// ReloadRules reads the stored rules again.
	ReloadRules(ctx context.Context) error
}

// Relay connects the servers sharing one PostgreSQL database (SPEC §16, issue 21):
//
//   - Leases (table session_leases, migrations/0004_replicas.sql): one replica at a time drives
//     a session's run; a lease lasts LeaseTTL from its last renewal, by the database's clock.
//   - Events: every event a replica publishes, except text deltas and progress, is stored in
//     session_events with the next number of its session's sequence, in a transaction whose
//     commit sends NOTIFY countersign with {o: replica, s: session, q: seq, t: published at
//     (Unix ns), w: signed at (Unix ms), e: the event, when it fits}, sealed and authenticated
//     under keys derived from the shared key (auth.go: a role that may LISTEN reads none of it,
//     one that may NOTIFY is not heard). Each replica LISTENs on a connection of its own
//     (github.com/jackc/pgxlisten, which reconnects) and delivers the others' events in order;
//     a gap in a session's numbers, an event too large for its notification, or a reconnect
//     (the rows after the last number delivered, and every row stored since the previous
//     connection was made for sessions it had heard nothing of) costs a read of session_events,
//     never an event. Deltas and progress go as notifications only (q 0), best effort.
//   - Control: Stop of a run another replica drives, "the rules changed", and the topics other
//     packages Send and Subscribe to (a topic and a key, e.g. the web layer's "close the
//     sockets under this key"), which the relay carries without knowing what they mean. A
//     control message is a pointer, never an order (issue 33): a Stop names its stored request
//     (relay_stops), whose row says the session and who; "the rules changed" makes the runner
//     read the stored rules; a topic's subscriber checks its key against the store.
//
// Only the replicas speak on the channel (auth.go): every notification is sealed and
// authenticated under keys derived from the shared key, and one that is not, is stale or was
// heard before is dropped and counted (OnReject). The rows of session_events are not: a role that
// may write the replicas' tables is inside the trust boundary (it could decide approvals too).
//
// Create it with New, pass it as agent.Config.Replicas, then Run it with the runner's Replica.
type Relay struct {
	pool *pgxpool.Pool
	id   string
	log  *slog.Logger

	// TTL is how long a lease lasts without renewal (LeaseTTL unless set before Run).
	TTL time.Duration
	// OnLag, when set before Run, is told how long each event another replica published took to
	// arrive here through its notification (that replica's clock to this one's: skewed clocks
	// skew it): SPEC §16's cross-replica notification lag.
	OnLag func(d time.Duration)
	// OnReread, when set before Run, is told of every read of session_events that a gap, a large
	// event or a reconnect cost, with the number of events it delivered.
	OnReread func(events int)
	// OnCommit, when set before Run, is told how long each of the relay's writes took (its
	// statement, or its transaction from BEGIN to COMMIT) and how many writes it held (always
	// 1), as the store's own writes are (pg.DB.OnCommit): SPEC §16's store commit latency.
	OnCommit func(d time.Duration, writes int)
	// OnReject, when set before Run, is told of every notification dropped unheard (issue 33,
	// SPEC §16 "Trust between replicas"), with its reason: one of the Reject* constants.
	OnReject func(reason string)

	// keys are the relay's (deriveKeys of the shared key file's): every notification is
	// sealed and authenticated under them (auth.go).
	keys keys
	seen seenMACs
	// rejectLogged is when each reason of rejection was last logged (reject).
	rejectMu     sync.Mutex
	rejectLogged map[string]time.Time

	target Target

	// Outgoing events and messages, in publication order (the writer's).
	mu    sync.Mutex
	queue []outgoing
	wake  chan struct{}

	// Incoming: the last sequence number delivered per session, and when the current LISTEN
	// connection was made (by the database's clock). Only the listener's goroutine uses them.
	last        map[string]int64
	connectedAt time.Time
	// streams are the messages being streamed by other replicas, by id: their last update
	// delivered, from which the next one sent as a patch is rebuilt (stream.go).
	streams     map[string]streamed
	streamBytes int

	// subscribers are told the keys of other replicas' messages on their topics (Subscribe).
	subMu       sync.Mutex
	subscribers map[string][]func(key string)

	listenPID atomic.Uint32
	listening chan struct{} // closed once the first LISTEN is in place
	listenOne sync.Once

	// The fence of takeovers (issue 33, SPEC §16 "Trust between replicas"): since when this
	// replica's renewals (Renew) have succeeded without a gap, and when the last one did, by
	// this process's monotonic clock. Zero before the first and after a failure.
	connMu               sync.Mutex
	connSince, lastRenew time.Time
}

// outgoing is one queued message: an event (sequenced or not) or a control message (payload).
type outgoing struct {
	ev        agent.Event
	at        time.Time
	control   *message // a control message (signed when sent)
	sequenced bool
}

// message is a notification's payload.
type message struct {
	Origin  string          `json:"o"`
	Session string          `json:"s,omitempty"`
	Seq     int64           `json:"q,omitempty"`
	At      int64           `json:"t,omitempty"`
	Event   json.RawMessage `json:"e,omitempty"`
	Kind    string          `json:"k,omitempty"`  // kindStop, kindRules or a topic for a control message
	By      string          `json:"by,omitempty"` // who stops (its stored row says it); a topic's key
	Signed  int64           `json:"w"`            // when the sender signed it (Unix ms): auth.go
	Stop    string          `json:"i,omitempty"`  // a Stop's request id (table relay_stops)
	Patch   *patch          `json:"p,omitempty"`  // Event's message is sent as a patch (stream.go)
}

// The relay's own kinds of control message; any other kind is a topic (Send, Subscribe).
const (
	kindStop  = "stop"
	kindRules = "rules"
)

// New returns a relay over pool (the store's: pg.DB.Pool) with a new random replica id. key is
// the key every replica shares (the share-link key file's, share.LoadKey: CheckKey makes sure
// the replicas' files are the same); the relay signs and checks every notification under a key
// derived from it, so a relay given another key hears none of the others'. logger nil logs to
// slog.Default.
func New(pool *pgxpool.Pool, key []byte, logger *slog.Logger) *Relay {
	if logger == nil {
		logger = slog.Default()
	}
	return &Relay{pool: pool, keys: deriveKeys(key), id: strings.ToLower(rand.Text()[:12]), log: logger, TTL: LeaseTTL,
		wake: make(chan struct{}, 1), last: map[string]int64{}, listening: make(chan struct{}),
		subscribers: map[string][]func(string){}}
}

// ID is this replica's id (random per process).
func (r *Relay) ID() string { return r.id }

// Listening is closed once this replica's LISTEN is in place: from then on it hears every event.
func (r *Relay) Listening() <-chan struct{} { return r.listening }

// ListenPID is the server process id of the LISTEN connection (for tests that cut it with
// pg_terminate_backend); 0 before the first connection.
func (r *Relay) ListenPID() uint32 { return r.listenPID.Load() }

// Run relays events to and from the other replicas, for target, until ctx ends: the writer, the
// listener (reconnecting after 250 ms when its connection breaks) and the pruning of old event
// rows. It returns ctx's error.
func (r *Relay) Run(ctx context.Context, target Target) error {
	r.target = target
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.write(ctx) }()
	go func() { defer wg.Done(); r.prune(ctx) }()
	// Reconnecting: at once after a cut, then waits doubling to 5 s while the database stays
	// away, and a log line at the 1st, 2nd, 4th, 8th… failure in a row, not every attempt.
	var failures int
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			if failures > 0 {
				wait := min(250*time.Millisecond<<min(failures-1, 5), 5*time.Second)
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(wait):
				}
			}
			cc := r.pool.Config().ConnConfig.Copy()
			cc.RuntimeParams["application_name"] = ListenApplicationName // operators find it in pg_stat_activity
			c, err := pgx.ConnectConfig(ctx, cc)
			if err != nil {
				failures++
			} else {
				failures = 0
			}
			return c, err
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil && failures&(failures-1) == 0 {
				r.log.Warn("replica events: listen (reconnecting)", "err", err, "failures", failures)
			}
		},
		ReconnectDelay: 50 * time.Millisecond,
	}
	l.Handle(Channel, r)
	err := l.Listen(ctx)
	wg.Wait()
	return err
}

// Start runs the relay for target in the background (Run, with a context of its own: ctx bounds
// only the wait) and returns once it listens, with stop, which ends Run and waits for it to
// return. When ctx ends first, the relay is stopped and Start returns ctx's error. This is how a
// server starts it: listening before it recovers sessions, so what another replica publishes
// from then on reaches its viewers.
func (r *Relay) Start(ctx context.Context, target Target) (stop func(), err error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(runCtx, target) }()
	stop = func() { cancel(); <-done }
	select {
	case <-r.listening:
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}

// CheckKey records fingerprint as the key named name ("share", "notify") the first time a server
// starts on the database, and afterwards refuses a server whose key's fingerprint differs:
// apperr.Conflict naming the file to copy (SPEC §16: every replica uses the same key files).
// file is the key's file on this server, for the message.
func (r *Relay) CheckKey(ctx context.Context, name, fingerprint, file string) (err error) {
	defer apperr.Wrap(&err, "relay.CheckKey(%s)", name)
	var stored string
	err = r.pool.QueryRow(ctx, `
		WITH ins AS (INSERT INTO key_fingerprints (name, fingerprint) VALUES ($1, $2)
		             ON CONFLICT (name) DO NOTHING RETURNING fingerprint)
		SELECT fingerprint FROM ins UNION ALL SELECT fingerprint FROM key_fingerprints WHERE name = $1
		LIMIT 1`, name, fingerprint).Scan(&stored)
	if err != nil {
		return err
	}
	if stored != fingerprint {
		return apperr.Errorf(apperr.Conflict, "the %s key in %s is not the one the other servers of this database use: every replica needs the same file (copy it from a server that started first, then start this one again)", name, file)
	}
	return nil
}

// --- leases ---

// Acquire takes sessionID's lease for run (agent.Replicas): when nobody holds it, when this
// replica holds it (its runner runs nothing there: a run that ended and has not released yet),
// or when another replica's lease expired — that one only once this replica may take leases over
// (Connected: it has itself been connected for a whole lease period, issue 33), so that a
// replica that was cut off, as the holder was, never takes a lease before its holder is back and
// has renewed it. Expiry is by the database's clock. Errors: apperr.NotFound for an unknown
// session; the database's.
func (r *Relay) Acquire(ctx context.Context, sessionID, run string) (ok bool, err error) {
	defer apperr.Wrap(&err, "relay.Acquire(%s)", sessionID)
	var one int
	err = r.pool.QueryRow(ctx, `
		INSERT INTO session_leases (session_id, replica, run, expires_at)
		VALUES ($1, $2, $3, now() + make_interval(secs => $4))
		ON CONFLICT (session_id) DO UPDATE SET replica = EXCLUDED.replica, run = EXCLUDED.run, expires_at = EXCLUDED.expires_at
		WHERE (session_leases.expires_at < now() AND $5) OR session_leases.replica = EXCLUDED.replica
		RETURNING 1`, sessionID, r.id, run, r.TTL.Seconds(), r.Connected()).Scan(&one)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case isForeignKey(err):
		return false, apperr.Errorf(apperr.NotFound, "session %s not found", sessionID)
	case err != nil:
		return false, err
	}
	return true, nil
}

// Connected reports whether this replica may take other replicas' expired leases over (issue
// 33, SPEC §16 "Trust between replicas"): its renewals (Renew, every agent.LeaseEvery from the
// lease loop) have succeeded for at least a whole lease period (TTL), none more than TTL/2 after
// the one before, the last one less than TTL/2 ago. A database outage is seen by every replica
// alike, and a holder's leases expire during it although the holder is alive: after it, no
// replica takes a lease over for a lease period, while each holder renews its own within a
// round. A replica that has just started is not connected yet either.
func (r *Relay) Connected() bool {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	now := time.Now()
	return !r.connSince.IsZero() && now.Sub(r.connSince) >= r.TTL && now.Sub(r.lastRenew) <= r.TTL/2
}

// renewed records how a renewal went, for Connected: a failure, or a success later than TTL/2
// after the previous one (a database that hung, a process that stalled), starts the count again.
func (r *Relay) renewed(err error) {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	now := time.Now()
	switch {
	case err != nil:
		r.connSince, r.lastRenew = time.Time{}, time.Time{}
		return
	case r.lastRenew.IsZero() || now.Sub(r.lastRenew) > r.TTL/2:
		r.connSince = now
	}
	r.lastRenew = now
}

// Hold renews sessionID's lease by TTL if this replica's run run holds it, and reports whether
// it does (agent.Replicas): the fence a run passes before each write.
func (r *Relay) Hold(ctx context.Context, sessionID, run string) (bool, error) {
	n, err := r.exec(ctx, `UPDATE session_leases SET expires_at = now() + make_interval(secs => $4)
		WHERE session_id = $1 AND replica = $2 AND run = $3`, sessionID, r.id, run, r.TTL.Seconds())
	return n == 1, err
}

// Release deletes sessionID's lease if run holds it (agent.Replicas).
func (r *Relay) Release(ctx context.Context, sessionID, run string) error {
	_, err := r.pool.Exec(ctx, `DELETE FROM session_leases WHERE session_id = $1 AND run = $2`, sessionID, run)
	return err
}

// Renew extends every lease this replica holds by TTL and returns their sessions (agent.Replicas).
// A holder back from an outage renews its leases whether or not they expired meanwhile: nobody
// took them (Acquire waits until the taker is Connected), so they are still its own. Each call
// counts towards Connected.
func (r *Relay) Renew(ctx context.Context) (held []string, err error) {
	defer func() { r.renewed(err) }()
	rows, err := r.pool.Query(ctx, `UPDATE session_leases SET expires_at = now() + make_interval(secs => $2)
		WHERE replica = $1 RETURNING session_id`, r.id, r.TTL.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Orphans lists, at most 100 at a time, the sessions that are running or have a
// pending approval and whose lease is missing or expired (agent.Replicas).
//
// None until this replica is Connected: it may take none of them over yet.
func (r *Relay) Orphans(ctx context.Context) ([]string, error) {
	if !r.Connected() {
		return nil, nil
	}
	// Two indexed reads (sessions_state, approvals_pending_all), not a scan of every session:
	// every replica asks every second.
	rows, err := r.pool.Query(ctx, `
		SELECT c.id FROM (
			SELECT id FROM sessions WHERE state = 'running'
			UNION SELECT session_id FROM approvals WHERE status = 'pending'
		) c
		WHERE NOT EXISTS (SELECT 1 FROM session_leases l WHERE l.session_id = c.id AND l.expires_at >= now())
		ORDER BY c.id LIMIT 100`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// MarkStarted records that approvalID's call starts (agent.Replicas). Recording it twice is
// one record.
func (r *Relay) MarkStarted(ctx context.Context, approvalID string) error {
	_, err := r.exec(ctx, `INSERT INTO call_starts (approval_id) VALUES ($1) ON CONFLICT DO NOTHING`, approvalID)
	return err
}

// Started reports which of approvalIDs have a MarkStarted record (agent.Replicas).
func (r *Relay) Started(ctx context.Context, approvalIDs []string) (map[string]bool, error) {
	rows, err := r.pool.Query(ctx, `SELECT approval_id FROM call_starts WHERE approval_id = ANY($1)`, approvalIDs)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = true
	}
	return out, err
}

// --- outgoing ---

// Publish queues ev for the other replicas (agent.Replicas); it never blocks.
func (r *Relay) Publish(ev agent.Event) {
	switch ev.Type {
	case agent.MessageUpdate, agent.ToolExecutionUpdate, agent.SessionDeleted:
		// Deltas and progress are never stored; a deleted session has no row to number from.
		r.enqueue(outgoing{ev: ev, at: time.Now()})
	default:
		r.enqueue(outgoing{ev: ev, at: time.Now(), sequenced: true})
	}
}

// Stop asks the replica driving sessionID's run to stop it (agent.Replicas): the request is
// stored (table relay_stops, with who asked) and its id notified in the same transaction; the
// receiver acts on the stored row only.
func (r *Relay) Stop(sessionID, who string) {
	r.control(message{Kind: kindStop, Session: sessionID, By: who, Stop: strings.ToLower(rand.Text())})
}

// RulesChanged tells the other replicas to read the rules again (agent.Replicas).
func (r *Relay) RulesChanged() { r.control(message{Kind: kindRules}) }

// Send tells the other replicas key on topic (web.Peers): their subscribers to topic are told
// key (Subscribe); this replica's are not. The relay does not know what a topic means; "stop"
// and "rules" are its own (Stop, RulesChanged), and Send drops them. It never blocks.
func (r *Relay) Send(topic, key string) {
	if topic == kindStop || topic == kindRules || topic == "" {
		r.log.Error("replica events: a topic may not be empty or one of the relay's own", "topic", topic)
		return
	}
	r.control(message{Kind: topic, By: key})
}

// Subscribe adds f to what is told the key of every message another replica Sends on topic (the
// web layer: close the live sockets under that key). It may be called while Run runs; f runs on
// the listener's goroutine, so it must not block. f hears only authenticated messages, but the
// key is a pointer: f acts only as far as the store agrees (the link is revoked, the login ended).
func (r *Relay) Subscribe(topic string, f func(key string)) {
	r.subMu.Lock()
	r.subscribers[topic] = append(r.subscribers[topic], f)
	r.subMu.Unlock()
}

// control queues control message m (its Kind set), from this replica, in publication order.
func (r *Relay) control(m message) {
	m.Origin = r.id
	r.enqueue(outgoing{control: &m})
}

func (r *Relay) enqueue(o outgoing) {
	r.mu.Lock()
	if len(r.queue) >= maxQueue && !o.sequenced && o.control == nil {
		r.mu.Unlock()
		return // a delta while the database is away: best effort
	}
	r.queue = append(r.queue, o)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// maxBatch bounds the events one transaction of the writer carries.
const maxBatch = 256

// write sends the queue in order, a batch per transaction, until ctx ends. A batch the database
// refuses is tried again a few times, then dropped and logged: the other replicas' viewers miss
// those events until they reload. While the database is away, the batch waits for it (send).
func (r *Relay) write(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			// What the runner published last (a stopped run's end) still goes, briefly.
			flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			r.drain(flush)
			cancel()
			return
		case <-r.wake:
		}
		r.drain(ctx)
	}
}

// drain sends the queue until it is empty.
func (r *Relay) drain(ctx context.Context) {
	for {
		r.mu.Lock()
		n := min(len(r.queue), maxBatch)
		batch := r.queue[:n:n]
		r.queue = r.queue[n:]
		if len(r.queue) == 0 {
			r.queue = nil
		}
		r.mu.Unlock()
		if n == 0 {
			return
		}
		r.send(ctx, batch)
	}
}

// signed returns m's notification, signed now and sealed under the relay keys; when it would
// exceed maxPayload with its event, a stored event is left out (the receiver reads its row) and
// an event that is not stored is not sent (false; send then tries a message_update as a patch).
func (r *Relay) signed(m message) (string, bool) {
	m.Signed = time.Now().UnixMilli()
	b, err := json.Marshal(m)
	if err != nil {
		return "", false
	}
	if p := r.keys.seal(b); p != "" {
		return p, true
	}
	if m.Event == nil || m.Seq == 0 {
		return "", false
	}
	m.Event = nil
	b, _ = json.Marshal(m)
	return r.keys.seal(b), true
}

// send stores and notifies batch in one transaction, in order. Each event's number is taken
// first (its session's counter row, locked in id order: two replicas' batches over the same
// sessions never deadlock), so that its notification, number included, can be signed here; a
// session that no longer exists has its events dropped.
func (r *Relay) send(ctx context.Context, batch []outgoing) {
	bodies := make([][]byte, len(batch))
	counts := map[string]int64{}
	var ids []string
	for i, o := range batch {
		if o.control != nil {
			continue
		}
		body, err := json.Marshal(o.ev)
		if err != nil {
			r.log.Error("replica events: encode", "type", o.ev.Type, "err", err)
			continue
		}
		bodies[i] = body
		if o.sequenced {
			if counts[o.ev.SessionID] == 0 {
				ids = append(ids, o.ev.SessionID)
			}
			counts[o.ev.SessionID]++
		}
	}
	slices.Sort(ids)
	delay := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		n := 0
		err := r.inTx(ctx, func(tx pgx.Tx) error {
			next := map[string]int64{} // session → its next event's number
			if len(ids) > 0 {
				var nb pgx.Batch
				for _, id := range ids {
					nb.Queue(`UPDATE sessions SET last_event_seq = last_event_seq + $2 WHERE id = $1 RETURNING last_event_seq`,
						id, counts[id]).QueryRow(func(row pgx.Row) error {
						var last int64
						if err := row.Scan(&last); errors.Is(err, pgx.ErrNoRows) {
							return nil // deleted: its events go nowhere
						} else if err != nil {
							return err
						}
						next[id] = last - counts[id] + 1
						return nil
					})
				}
				if err := tx.SendBatch(ctx, &nb).Close(); err != nil {
					return err
				}
			}
			var b pgx.Batch
			for i, o := range batch {
				switch {
				case o.control != nil:
					p, ok := r.signed(*o.control)
					if !ok {
						continue
					}
					if o.control.Kind == kindStop {
						b.Queue(`INSERT INTO relay_stops (id, session_id, by_name) VALUES ($1, $2, $3)`,
							o.control.Stop, o.control.Session, o.control.By)
					}
					b.Queue(`SELECT pg_notify($1, $2)`, Channel, p)
				case bodies[i] == nil:
				case o.sequenced:
					seq, ok := next[o.ev.SessionID]
					if !ok {
						continue
					}
					next[o.ev.SessionID] = seq + 1
					p, _ := r.signed(message{Origin: r.id, Session: o.ev.SessionID, Seq: seq, At: o.at.UnixNano(), Event: bodies[i]})
					b.Queue(`INSERT INTO session_events (session_id, seq, origin, body) VALUES ($1, $2, $3, $4::json)`,
						o.ev.SessionID, seq, r.id, string(bodies[i]))
					b.Queue(`SELECT pg_notify($1, $2)`, Channel, p)
				default:
					p, ok := r.signed(message{Origin: r.id, Session: o.ev.SessionID, At: o.at.UnixNano(), Event: bodies[i]})
					if !ok {
						// Too large whole: a message_update's streamed text goes as a delta
						// (stream.go); anything else too large is not sent.
						if body, pt, isUpdate := asPatch(o); isUpdate {
							p, ok = r.signed(message{Origin: r.id, Session: o.ev.SessionID, At: o.at.UnixNano(), Event: body, Patch: pt})
						}
					}
					if !ok {
						continue
					}
					b.Queue(`SELECT pg_notify($1, $2)`, Channel, p)
				}
			}
			n = b.Len()
			if n == 0 {
				return nil
			}
			return tx.SendBatch(ctx, &b).Close()
		})
		if err == nil || ctx.Err() != nil {
			return
		}
		// A database that is away (databaseAway: unreachable, cut, timed out, shutting down) is
		// waited for, however long, in order (issue 33: an outage loses nothing); a batch refused
		// otherwise is dropped after 5 attempts.
		away := databaseAway(err)
		if attempt == 5 && !away {
			r.log.Error("replica events: dropped after 5 attempts; other replicas' pages miss them until reloaded", "statements", n, "err", err)
			return
		}
		if attempt == 5 {
			r.log.Warn("replica events: the database is away; the events wait for it", "statements", n, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*4, time.Second)
	}
}

// prune deletes event rows older than EventRetention, every minute until ctx ends.
func (r *Relay) prune(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := r.pool.Exec(ctx, `DELETE FROM session_events WHERE created_at < now() - make_interval(secs => $1)`,
			EventRetention.Seconds()); err != nil && ctx.Err() == nil {
			r.log.Warn("replica events: prune", "err", err)
		}
		if _, err := r.pool.Exec(ctx, `DELETE FROM relay_stops WHERE created_at < now() - make_interval(secs => $1)`,
			EventRetention.Seconds()); err != nil && ctx.Err() == nil {
			r.log.Warn("replica events: prune stops", "err", err)
		}
	}
}

// --- incoming ---

// HandleBacklog runs once LISTEN is in place on a new connection (pgxlisten.BacklogHandler):
// after a reconnect, it delivers what the notifications lost — every row after the last number
// delivered of each session heard of, and every row stored since the previous connection was
// made for the others.
func (r *Relay) HandleBacklog(ctx context.Context, _ string, conn *pgx.Conn) error {
	r.listenPID.Store(conn.PgConn().PID())
	var now time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return err
	}
	prev := r.connectedAt
	r.connectedAt = now
	defer r.listenOne.Do(func() { close(r.listening) })
	if prev.IsZero() {
		return nil // the first connection: nothing was heard, nothing was missed
	}
	// A second before the previous connection: a row stored just before it whose notification
	// came after is read again, and skipped by its number. Rows before that window were
	// notified, or read, while the previous connection listened.
	delivered, err := r.readEvents(ctx, conn, `SELECT session_id, seq, origin, body::text FROM session_events
		WHERE created_at > $1 ORDER BY session_id, seq`, prev.Add(-time.Second))
	if err != nil {
		return err
	}
	if r.OnReread != nil {
		r.OnReread(delivered)
	}
	return nil
}

// HandleNotification handles one notification on Channel (pgxlisten.Handler).
// Nothing in a notification is used before its MAC, signing time and novelty are checked
// (auth.go); what fails is dropped and counted (OnReject). A Stop is then acted on only as its
// stored row (relay_stops) says.
func (r *Relay) HandleNotification(ctx context.Context, n *pgconn.Notification, conn *pgx.Conn) error {
	body, mac, reason := r.keys.open(n.Payload)
	if reason != "" {
		r.reject(reason)
		return nil
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		r.reject(RejectMalformed)
		return nil
	}
	if d := time.Since(time.UnixMilli(m.Signed)); d > maxAge || d < -maxAge {
		r.reject(RejectStale)
		return nil
	}
	if !r.seen.add(mac, time.Now()) {
		r.reject(RejectReplay)
		return nil
	}
	own := m.Origin == r.id
	switch {
	case m.Kind == kindStop:
		if own || r.target == nil || !r.target.Drives(m.Session) {
			return nil
		}
		// The stored request, not the notification, says which session and who. The replica
		// driving the run consumes it: heard again (after a restart emptied seen), it is gone.
		var session, by string
		err := conn.QueryRow(ctx, `DELETE FROM relay_stops
			WHERE id = $1 AND created_at > now() - make_interval(secs => $2) RETURNING session_id, by_name`,
			m.Stop, maxAge.Seconds()).Scan(&session, &by)
		switch {
		case errors.Is(err, pgx.ErrNoRows) || (err == nil && session != m.Session):
			r.reject(RejectNotStored)
			return nil
		case err != nil:
			return err
		}
		r.target.StopRun(session, by)
		return nil
	case m.Kind == kindRules:
		if !own && r.target != nil {
			return r.target.ReloadRules(ctx)
		}
		return nil
	case m.Kind != "":
		if !own {
			r.subMu.Lock()
			fs := r.subscribers[m.Kind]
			r.subMu.Unlock()
			for _, f := range fs {
				f(m.By)
			}
		}
		return nil
	case m.Seq == 0: // a delta, progress, a deletion: notifications only
		if !own {
			r.lag(m)
			r.deliverUnstored(m)
		}
		var head struct {
			Type agent.EventType `json:"type"`
		}
		if json.Unmarshal(m.Event, &head) == nil && head.Type == agent.SessionDeleted {
			delete(r.last, m.Session)
		}
		return nil
	}
	last, heard := r.last[m.Session]
	switch {
	case heard && m.Seq <= last:
		return nil // delivered already (by a re-read)
	case (!heard || m.Seq == last+1) && len(m.Event) > 0 && string(m.Event) != "null":
		r.last[m.Session] = m.Seq
		if !own {
			r.lag(m)
			r.deliver(m.Event)
		}
		return nil
	}
	// A gap (a notification lost) or an event too large for its notification: read the rows.
	from := last
	if !heard {
		from = m.Seq - 1
	}
	delivered, err := r.reread(ctx, m.Session, from)
	if r.OnReread != nil {
		r.OnReread(delivered)
	}
	return err
}

// reread delivers sessionID's stored events after number after, in order, and returns how many
// it delivered (other replicas' only).
func (r *Relay) reread(ctx context.Context, sessionID string, after int64) (int, error) {
	return r.readEvents(ctx, r.pool, `SELECT session_id, seq, origin, body::text FROM session_events
		WHERE session_id = $1 AND seq > $2 ORDER BY seq`, sessionID, after)
}

// readEvents runs query (rows of session_id, seq, origin, body, each session's in seq order) on
// q and delivers each row after its session's last delivered number, other replicas' only,
// moving that number on; it returns how many it delivered.
func (r *Relay) readEvents(ctx context.Context, q querier, query string, args ...any) (int, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	var session, origin, body string
	var seq int64
	delivered := 0
	_, err = pgx.ForEachRow(rows, []any{&session, &seq, &origin, &body}, func() error {
		if last, ok := r.last[session]; ok && seq <= last {
			return nil
		}
		r.last[session] = seq
		if origin != r.id {
			r.deliver(json.RawMessage(body))
			delivered++
		}
		return nil
	})
	return delivered, err
}

// reject counts a dropped notification (OnReject) and logs it, once a minute per reason at most
// (a role flooding the channel fills no log).
func (r *Relay) reject(reason string) {
	if r.OnReject != nil {
		r.OnReject(reason)
	}
	now := time.Now()
	r.rejectMu.Lock()
	if r.rejectLogged == nil {
		r.rejectLogged = map[string]time.Time{}
	}
	log := now.Sub(r.rejectLogged[reason]) >= time.Minute
	if log {
		r.rejectLogged[reason] = now
	}
	r.rejectMu.Unlock()
	if log {
		r.log.Warn("replica events: a notification that is not an authentic, new replica message was dropped (countersign_relay_rejected_total counts them all)", "reason", reason)
	}
}

func (r *Relay) lag(m message) {
	if r.OnLag != nil && m.At != 0 {
		r.OnLag(time.Since(time.Unix(0, m.At)))
	}
}

func (r *Relay) deliver(body json.RawMessage) {
	if r.target == nil || len(body) == 0 {
		return
	}
	var ev agent.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		r.log.Error("replica events: decode", "err", err)
		return
	}
	if ev.Type == agent.MessageEnd {
		r.forgetStream(ev.MessageID)
	}
	r.target.Deliver(ev)
}

// querier is what readEvents reads through: the pool, or the LISTEN connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// exec runs one write statement (committed by itself) and returns the rows it affected.
func (r *Relay) exec(ctx context.Context, query string, args ...any) (int64, error) {
	start := time.Now()
	tag, err := r.pool.Exec(ctx, query, args...)
	r.committed(start, err)
	return tag.RowsAffected(), err
}

// inTx runs fn in one transaction, committed when fn returns nil and rolled back otherwise.
func (r *Relay) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	start := time.Now()
	err := pgx.BeginFunc(ctx, r.pool, fn)
	r.committed(start, err)
	return err
}

func (r *Relay) committed(start time.Time, err error) {
	if r.OnCommit != nil && err == nil {
		r.OnCommit(time.Since(start), 1)
	}
}

// databaseAway reports whether err says the database did not answer — it could not be reached,
// the connection broke or timed out, or the server is shutting down or starting (SQLSTATE classes
// 08 and 57P) — rather than that it refused the statement: what waiting for it may cure.
func databaseAway(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")
	}
	var connect *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connect) || errors.As(err, &netErr) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "conn closed")
}

// isForeignKey reports whether err is a FOREIGN KEY violation (an unknown session).
func isForeignKey(err error) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == "23503"
}
