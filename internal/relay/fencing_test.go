package relay_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/pgtest"
	"countersign/internal/relay"
	"countersign/internal/store/pg"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// fenceScript makes one call of the tool "cmd", which the gate asks a person about, then ends.
const fenceScript = `{"steps":[
 {"content":[{"type":"toolCall","id":"call-1","name":"cmd","arguments":{"command":"work"}}],"stopReason":"toolUse"},
 {"content":[{"type":"text","text":"Done: {{lastResult.text}}"}],"stopReason":"stop"}]}`

// commands is the tool "cmd" of a test's replicas: each call says it started and then runs
// until the test releases its session.
type commands struct {
	mu       sync.Mutex
	runs     map[string]int           // session → calls that started
	started  map[string]chan struct{} // closed when the session's call starts
	released map[string]chan struct{} // closed by release
}

func newCommands() *commands {
	return &commands{runs: map[string]int{}, started: map[string]chan struct{}{}, released: map[string]chan struct{}{}}
}

func (c *commands) chans(sessionID string) (started, released chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started[sessionID] == nil {
		c.started[sessionID], c.released[sessionID] = make(chan struct{}), make(chan struct{})
	}
	return c.started[sessionID], c.released[sessionID]
}

func (c *commands) release(sessionID string) { _, r := c.chans(sessionID); close(r) }

func (c *commands) count(sessionID string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[sessionID]
}

func (c *commands) tool() *tool.Tool {
	return &tool.Tool{Name: "cmd", InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`),
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			started, released := c.chans(tc.SessionID())
			c.mu.Lock()
			c.runs[tc.SessionID()]++
			c.mu.Unlock()
			close(started)
			select {
			case <-released:
				return tool.Result{Content: []tool.Content{tool.Text("finished")}}, nil
			case <-ctx.Done():
				return tool.Result{}, context.Cause(ctx)
			}
		}}
}

// fencedReplica is one server of a fencing test: its store (through the test's proxy), its
// relay, its runner and the runner's events.
type fencedReplica struct {
	db     *pg.DB
	relay  *relay.Relay
	runner *agent.Runner
	broker *agent.Broker
}

// startFencedReplica starts a replica on url as cmd/web's run does (relay listening before the
// lease loop), with leases of ttl renewed every `every`; it stops when t ends.
func startFencedReplica(t *testing.T, url string, ttl, every time.Duration, cmds *commands) *fencedReplica {
	t.Helper()
	ctx := context.Background()
	db, err := pg.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	reg := tool.NewRegistry()
	if err := reg.Register(cmds.tool()); err != nil {
		t.Fatal(err)
	}
	scripts := testkit.NewScripts()
	scripts.Add("fence", testkit.Script(t, fenceScript))
	x := &fencedReplica{db: db, relay: relay.New(db.Pool(), testKey, nil), broker: agent.NewBroker()}
	x.relay.TTL = ttl
	x.runner = agent.New(agent.Config{Store: db, Models: scripts, Tools: reg, Broker: x.broker,
		ApprovalTimeout: 10 * time.Minute, Replicas: x.relay})
	stop, err := x.relay.Start(ctx, x.runner.Replica())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if err := x.runner.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	leases, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); x.runner.Replica().RunLeases(leases, every) }()
	t.Cleanup(func() {
		cancel()
		<-done
		x.runner.Shutdown("test cleanup")
		x.runner.Wait()
	})
	return x
}

// start creates a session on x and sends it a message; it returns the session's id and the
// pending approval of its call.
func (x *fencedReplica) start(t *testing.T, title string) (string, gate.Approval) {
	t.Helper()
	ctx := context.Background()
	s, err := x.runner.CreateSession(ctx, title, "faux:fence", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sub := x.broker.Subscribe(s.ID)
	defer x.broker.Unsubscribe(sub)
	if err := x.runner.Send(ctx, s.ID, "go"); err != nil {
		t.Fatal(err)
	}
	ev := testkit.Await(t, sub, agent.ApprovalRequested, 0, nil)
	return s.ID, *ev.Approval
}

// transcript is session id's stored transcript as text.
func (x *fencedReplica) transcript(t *testing.T, id string) string {
	t.Helper()
	es, err := x.db.Entries(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(es)
	return string(b)
}

func (x *fencedReplica) session(t *testing.T, id string) agent.Session {
	t.Helper()
	s, err := x.db.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestADatabaseOutageLongerThanALeaseKillsNoLiveWork (issue 33 acceptance 2, SPEC §16 "Trust
// between replicas"): the database stops for longer than a lease lasts while each of two
// replicas executes a command and holds a run parked on an approval. Both commands finish — A's
// while the database is still away, B's after it is back — and each result is stored once; the
// parked runs stay with their replicas (their leases, their approvals, and a decision then runs
// the call there); nothing says "interrupted", and no session was taken over.
//
// The case is an 8 s lease and a 15 s stop, renewals every second. "fast" scales it to a
// 2 s lease renewed every 250 ms and a 4 s stop (the stop a little under twice the lease, as
// 15 s is to 8 s); "fast hung" is the same with a database that stops answering without closing
// anything (every query waits, the lease loop's rounds time out); "real" keeps the issue's
// numbers (about 40 s; skipped with -short).
func TestADatabaseOutageLongerThanALeaseKillsNoLiveWork(t *testing.T) {
	cases := []struct {
		name               string
		ttl, every, outage time.Duration
		hang               bool // the database stops answering, closing nothing (pgtest.Proxy.Hang)
	}{
		{"fast", 2 * time.Second, 250 * time.Millisecond, 4 * time.Second, false},
		{"fast hung", 2 * time.Second, 250 * time.Millisecond, 4 * time.Second, true},
		{"real", relay.LeaseTTL, agent.LeaseEvery, 15 * time.Second, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "real" && testing.Short() {
				t.Skip("the issue's proportions take about 40 s")
			}
			outage(t, c.ttl, c.every, c.outage, c.hang)
		})
	}
}

func outage(t *testing.T, ttl, every, stop time.Duration, hang bool) {
	ctx := context.Background()
	dbURL := pgtest.Database(t)
	proxy := pgtest.NewProxy(t, dbURL)
	admin := adminConn(t, dbURL)
	cmds := newCommands()
	a := startFencedReplica(t, proxy.URL(), ttl, every, cmds)
	b := startFencedReplica(t, proxy.URL(), ttl, every, cmds)
	reps := []*fencedReplica{a, b}

	// On each replica: a command executing, and a run parked on its approval.
	executing := make([]string, 2)
	parked := make([]string, 2)
	parkedAsk := make([]gate.Approval, 2)
	for i, x := range reps {
		id, ask := x.start(t, "executing")
		if _, err := x.runner.Gate().Decide(ctx, id, ask.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
			t.Fatal(err)
		}
		started, _ := cmds.chans(id)
		<-started
		executing[i] = id
		parked[i], parkedAsk[i] = x.start(t, "parked")
	}

	if hang {
		proxy.Hang()
	} else {
		proxy.Down()
	}
	time.Sleep(stop / 2)
	cmds.release(executing[0]) // A's command ends while the database is away
	time.Sleep(stop - stop/2)
	proxy.Up()
	cmds.release(executing[1]) // B's once it is back

	for i, x := range reps {
		id := executing[i]
		testkit.Eventually(t, "the executing run of replica "+string(rune('A'+i))+" to end", func() bool {
			return x.session(t, id).State == agent.Idle && strings.Contains(x.transcript(t, id), "Done: finished")
		})
	}
	// Two leases after the database came back, a takeover would have happened: the parked runs
	// are still their replicas'.
	time.Sleep(2*ttl + 2*every)
	for i, x := range reps {
		other := reps[1-i]
		if !x.runner.Busy(parked[i]) || other.runner.Busy(parked[i]) {
			t.Errorf("replica %c's parked run: busy here %v, on the other %v; want here only", 'A'+i,
				x.runner.Busy(parked[i]), other.runner.Busy(parked[i]))
		}
		var holder string
		if err := admin.QueryRow(ctx, `SELECT replica FROM session_leases WHERE session_id = $1`, parked[i]).Scan(&holder); err != nil || holder != x.relay.ID() {
			t.Errorf("replica %c's parked session is leased by %q (%v), want %q", 'A'+i, holder, err, x.relay.ID())
		}
	}
	// Decided now, each parked call runs on its own replica, once.
	for i, x := range reps {
		if _, err := x.runner.Gate().Decide(ctx, parked[i], parkedAsk[i].ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
			t.Fatal(err)
		}
		cmds.release(parked[i])
		id := parked[i]
		testkit.Eventually(t, "the parked run to end", func() bool {
			return x.session(t, id).State == agent.Idle && strings.Contains(x.transcript(t, id), "Done: finished")
		})
	}
	for _, id := range append(executing, parked...) {
		tr := a.transcript(t, id)
		if n := strings.Count(tr, `"role":"toolResult"`); n != 1 {
			t.Errorf("session %s has %d tool results, want 1: %s", id, n, tr)
		}
		if strings.Contains(strings.ToLower(tr), "interrupted") {
			t.Errorf("session %s says interrupted: %s", id, tr)
		}
		if n := cmds.count(id); n != 1 {
			t.Errorf("session %s's command ran %d times, want 1", id, n)
		}
	}
}

// TestATakeoverWaitsUntilTheTakerWasConnectedForALease (issue 33, SPEC §16 "Trust between
// replicas"): after a database outage longer than a lease, the lease of a holder that is alive
// has expired, but another replica, cut off as well, takes nothing over: it may take leases over
// only once it has itself been connected for a whole lease period (Connected), and by then the
// holder is back and has renewed first. A renewal that hung longer than half a lease counts as
// an outage too. When the holder really died, the lease is taken once it expired and the taker
// was connected for a lease period.
func TestATakeoverWaitsUntilTheTakerWasConnectedForALease(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.Database(t)
	proxy := pgtest.NewProxy(t, dbURL)
	dbs := replicasOn(t, proxy.URL(), 2)
	a, b := relay.New(dbs[0].Pool(), testKey, nil), relay.New(dbs[1].Pool(), testKey, nil)
	const ttl = time.Second
	a.TTL, b.TTL = ttl, ttl
	s := mkSession(t, dbs[0], "held")
	if err := dbs[0].SetSessionState(ctx, s.ID, agent.Running); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Acquire(ctx, s.ID, "runB"); err != nil || !ok {
		t.Fatalf("b's Acquire = %v, %v", ok, err)
	}
	connect(t, a, b)
	admin := adminConn(t, dbURL)
	expired := func() bool {
		var yes bool
		if err := admin.QueryRow(ctx, `SELECT expires_at < now() FROM session_leases WHERE session_id = $1`, s.ID).Scan(&yes); err != nil {
			t.Fatal(err)
		}
		return yes
	}

	// The database stops for twice a lease: both replicas' renewals fail.
	proxy.Down()
	for _, r := range []*relay.Relay{a, b} {
		if _, err := r.Renew(ctx); err == nil {
			t.Fatal("a renewal succeeded with the database down")
		}
	}
	time.Sleep(2 * ttl)
	proxy.Up()
	if !expired() {
		t.Fatal("b's lease did not expire during the outage")
	}
	if _, err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Connected() {
		t.Fatal("a is Connected right after an outage")
	}
	if ids, err := a.Orphans(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("a's Orphans right after the outage = %v, %v; want none", ids, err)
	}
	if ok, err := a.Acquire(ctx, s.ID, "runA"); err != nil || ok {
		t.Fatalf("a's Acquire of b's expired lease right after the outage = %v, %v; want false", ok, err)
	}
	// b comes back and renews first: its lease is its own again.
	if held, err := b.Renew(ctx); err != nil || len(held) != 1 || held[0] != s.ID {
		t.Fatalf("b's first renewal after the outage = %v, %v; want its lease", held, err)
	}
	connect(t, a, b)
	if ok, err := a.Acquire(ctx, s.ID, "runA"); err != nil || ok {
		t.Fatalf("a's Acquire of the lease b renewed = %v, %v; want false", ok, err)
	}

	// A renewal that hangs for longer than half a lease is an outage too.
	proxy.Hang()
	hung := make(chan error, 1)
	go func() { _, err := a.Renew(ctx); hung <- err }()
	time.Sleep(ttl)
	proxy.Up()
	if err := <-hung; err == nil && a.Connected() {
		t.Fatal("a is Connected after a renewal that hung for a lease")
	}

	// b dies (no more renewals): a, connected for a lease, takes it once it expired.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := a.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		ok, err := a.Acquire(ctx, s.ID, "runA")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if !a.Connected() {
				t.Fatal("taken by a replica not connected for a lease")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a dead replica's expired lease was never taken")
		}
	}
	if held, err := b.Renew(ctx); err != nil || len(held) != 0 {
		t.Fatalf("the dead replica's renewal after the takeover = %v, %v; want nothing", held, err)
	}
}

// TestEventsPublishedWhileTheDatabaseIsAwayArriveOnceItIsBack (issue 33: an outage loses
// nothing): what a replica publishes while the database is away for longer than the writer's
// five attempts take (about 4 s) reaches the other replica, in order, once the database is back.
func TestEventsPublishedWhileTheDatabaseIsAwayArriveOnceItIsBack(t *testing.T) {
	dbURL := pgtest.Database(t)
	proxy := pgtest.NewProxy(t, dbURL)
	dbs := replicasOn(t, proxy.URL(), 2)
	s := mkSession(t, dbs[0], "away")
	reps, tgts := startReplicas(t, dbs)
	want := published(s.ID, 3)
	proxy.Down()
	for _, ev := range want {
		reps[0].Publish(ev)
	}
	time.Sleep(6 * time.Second)
	proxy.Up()
	tgts[1].await(t, "the events published while the database was away", func(tg *target) bool {
		return len(ofSession(tg.events, s.ID)) >= len(sequenced(want))
	})
	tgts[1].mu.Lock()
	got := ofSession(tgts[1].events, s.ID)
	tgts[1].mu.Unlock()
	if g, w := eventTexts(t, got), eventTexts(t, sequenced(want)); strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Fatalf("got %d events, want %d, in order, once each", len(g), len(w))
	}
}
