package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/relay"
	"countersign/internal/store/pg"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// The replicas case (issue 21, acceptance 7; SPEC §16): two replicas of the server sharing one
// fresh PostgreSQL database, both in this process, each wired as cmd/web wires one — its own
// pg.DB pool, its own relay.Relay (the LISTEN connection, the event writer), its own agent.Broker
// and agent.Runner with the relay running (Relay.Run) and the lease loop (Replica.RunLeases every
// agent.LeaseEvery). Nothing is shared between the two but the database, the faux models'
// scripts (two servers started with the same -scripts folder) and the workspace folder; what
// one replica tells the other goes through PostgreSQL (NOTIFY, session_events), as between two
// processes. Being in one process gives both sides one clock, so cross-replica delays are
// differences of two time.Now() readings.
//
// It needs a PostgreSQL server: COUNTERSIGN_TEST_POSTGRES (the URL scripts/with-postgres.sh
// exports; `make bench` runs under it when BENCH_CASES names replicas). Each step creates a
// database of its own on that server and drops it afterwards. Without the variable the case
// prints a line saying it was skipped (and fails under CI=true, as internal/pgtest does).

// replicaEnvURL names the PostgreSQL server the replicas case creates its databases on.
const replicaEnvURL = "COUNTERSIGN_TEST_POSTGRES"

// replicasSkipped is the line the case prints when it cannot run, or an error under CI=true.
func replicasSkipped() (line, error) {
	why := replicaEnvURL + " is not set: the replicas case needs a PostgreSQL server (make bench starts a throwaway one with scripts/with-postgres.sh when Debian's postgresql is installed)"
	if os.Getenv("CI") == "true" {
		return nil, errors.New(why)
	}
	return line{}.add("peer", "countersign").add("case", "replicas").add("mode", "skipped").add("skipped", why), nil
}

// replica is one server of the pair.
type replica struct {
	name   string
	db     *pg.DB
	link   *relay.Relay
	broker *agent.Broker
	runner *agent.Runner
	stop   func()
}

// replicaPair is two replicas, A and B, on one fresh database.
type replicaPair struct {
	a, b      *replica
	models    *testkit.Scripts
	workspace string

	mu    sync.Mutex
	gated map[string][]gatedRun // tool call id → every execution of the gated tool

	close func()
}

// gatedRun is one execution of the gated tool: on which replica, when its first line ran.
type gatedRun struct {
	replica string
	at      time.Time
}

// newReplicaPair creates a database on server and starts replicas A and B on it, each listening
// before it is returned (as cmd/web waits for Relay.Listening before Recover).
func newReplicaPair(ctx context.Context, server string) (_ *replicaPair, err error) {
	dbURL, drop, err := createBenchDatabase(ctx, server)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "countersign-bench-replicas-")
	if err != nil {
		drop()
		return nil, err
	}
	p := &replicaPair{models: testkit.NewScripts(), workspace: dir, gated: map[string][]gatedRun{}}
	var started []*replica
	p.close = func() {
		for i := len(started) - 1; i >= 0; i-- {
			started[i].stop()
		}
		os.RemoveAll(dir)
		drop()
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	// Warnings and errors of the runners and relays go to stderr: a relay that cannot write or
	// listen says so there while the numbers look wrong.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, name := range []string{"A", "B"} {
		r, err := p.startReplica(ctx, name, dbURL, logger.With("replica", name))
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", name, err)
		}
		started = append(started, r)
	}
	p.a, p.b = started[0], started[1]
	return p, nil
}

// startReplica opens a pool on dbURL and starts a runner with its relay and lease loop, as
// cmd/web's run does for -db postgres://… .
func (p *replicaPair) startReplica(ctx context.Context, name, dbURL string, logger *slog.Logger) (*replica, error) {
	db, err := pg.Open(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	reg := tool.NewRegistry()
	for _, t := range p.tools(name) {
		if err := reg.Register(t); err != nil {
			db.Close()
			return nil, err
		}
	}
	r := &replica{name: name, db: db, link: relay.New(db.Pool(), benchKey, logger), broker: agent.NewBroker()}
	r.runner = agent.New(agent.Config{Store: db, Models: p.models, Tools: reg, Broker: r.broker,
		ApprovalTimeout: time.Hour, Logger: logger, Replicas: r.link})
	listenCtx, cancel := context.WithTimeout(ctx, time.Minute)
	stopRelay, err := r.link.Start(listenCtx, r.runner.Replica())
	cancel()
	if err != nil {
		r.runner.Shutdown("benchmark end")
		r.runner.Wait()
		db.Close()
		if ctx.Err() == nil {
			return nil, errors.New("the relay did not listen within a minute")
		}
		return nil, ctx.Err()
	}
	leaseCtx, stopLeases := context.WithCancel(context.Background())
	leased := make(chan struct{})
	r.stop = func() {
		// As cmd/web stops: the lease loop, the runs, then the relay (after the runner's last
		// event), then the pool.
		stopLeases()
		<-leased
		r.runner.Shutdown("benchmark end")
		r.runner.Wait()
		stopRelay()
		db.Close()
	}
	if err := r.runner.Recover(ctx); err != nil {
		close(leased)
		r.stop()
		return nil, err
	}
	go func() { defer close(leased); r.runner.Replica().RunLeases(leaseCtx, agent.LeaseEvery) }()
	return r, nil
}

// tools are a replica's tools: the benchmarks' gated tool (no annotations, so a person must
// approve it; its first line records where and when it ran) and echo (read-only: runs unasked).
func (p *replicaPair) tools(name string) []*tool.Tool {
	return []*tool.Tool{
		{
			Name: "gated", Title: "Gated", Description: "A call that needs approval",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
			Execute: func(_ context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
				at := time.Now()
				p.mu.Lock()
				p.gated[tc.ToolCallID()] = append(p.gated[tc.ToolCallID()], gatedRun{name, at})
				p.mu.Unlock()
				return tool.Result{Content: []tool.Content{tool.Text("ran")}}, nil
			},
		},
		{
			Name: "echo", Title: "Echo", Description: "Echo the input back",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true), OpenWorldHint: tool.Bool(false)},
			Execute: func(_ context.Context, args json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
				var in struct{ Text string }
				if err := json.Unmarshal(args, &in); err != nil {
					return tool.Result{}, err
				}
				return tool.Result{Content: []tool.Content{tool.Text(in.Text)}}, nil
			},
		},
	}
}

// runs returns the executions of the gated call toolCallID.
func (p *replicaPair) runs(toolCallID string) []gatedRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]gatedRun(nil), p.gated[toolCallID]...)
}

// pgFsync is the server's fsync setting ("on" or "off"; scripts/with-postgres.sh starts its
// throwaway cluster with PG_FSYNC, off unless set), or "unknown".
func pgFsync(ctx context.Context, server string) string {
	c, err := pgx.Connect(ctx, server)
	if err != nil {
		return "unknown"
	}
	defer c.Close(context.Background())
	var v string
	if c.QueryRow(ctx, "SHOW fsync").Scan(&v) != nil {
		return "unknown"
	}
	return v
}

// createBenchDatabase creates an empty database on server and returns its URL and a function
// that drops it (terminating what is still connected).
func createBenchDatabase(ctx context.Context, server string) (string, func(), error) {
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", replicaEnvURL, err)
	}
	defer admin.Close(context.Background())
	name := "bench_replicas_" + strings.ToLower(rand.Text()[:10])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			fmt.Fprintf(os.Stderr, "load: drop database %s: %v\n", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "load: drop database %s: %v\n", name, err)
		}
	}
	u, err := url.Parse(server)
	if err != nil {
		drop()
		return "", nil, fmt.Errorf("%s is not a URL", replicaEnvURL)
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

// nextEvent returns the first event on sub that match accepts, skipping the others, within the
// case's context; a dropped subscription is an error.
func nextEvent(ctx context.Context, sub *agent.Subscription, what string, match func(*agent.Event) bool) (*agent.Event, error) {
	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				return nil, fmt.Errorf("waiting for %s: the subscription was dropped", what)
			}
			if match(ev) {
				return ev, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// replicasRoundTrip is the approval round trip across replicas: n sessions (after warm
// unreported ones), one at a time, each created and started on replica A, whose run parks on
// the gated call; replica B's broker shows the prompt (relayed), and B decides it
// (gate.Service.Decide, approve, as the owner) at once; the call waits on A, and A's relay hears the
// decision and wakes it. The target (p50_us, p99_us): from the start of B's Decide to the gated
// tool's first line on A. The split, every stamp in this process:
//   - decide: B's Decide call (the approval read, the resolution's commit, publishing it);
//   - relay: approval_resolved published on B → the same event published on A by its relay
//     (B's writer: a transaction storing the event and NOTIFY; A's listener: decode, Deliver);
//   - wake: published on A → the tool's first line (gate.Wake reads the approval, the call
//     resumes, tool_execution_start);
//   - start (start_p50_us …): B's Decide start → A publishing tool_execution_start;
//   - shown: approval_requested published on A → on B (the prompt's way to B's viewers).
//
// Every call is checked to have run exactly once, on A.
func replicasRoundTrip(ctx context.Context, server string, n, warm int) (line, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	p, err := newReplicaPair(ctx, server)
	if err != nil {
		return nil, err
	}
	defer p.close()
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
	var total, decide, relay, wake, start, shown []float64
	t0 := time.Now()
	for i := range warm + n {
		name := fmt.Sprintf("gated-%d", i)
		p.models.Add(name, testkit.GatedScript())
		s, err := p.a.runner.CreateSession(ctx, name, "faux:"+name, p.workspace)
		if err != nil {
			return nil, err
		}
		trip, err := p.roundTrip(ctx, s.ID)
		if err != nil {
			return nil, fmt.Errorf("approval %d: %w", i+1, err)
		}
		if i < warm {
			continue
		}
		total = append(total, us(trip.ran.Sub(trip.decideStart)))
		decide = append(decide, us(trip.decideEnd.Sub(trip.decideStart)))
		relay = append(relay, us(trip.resolvedA.Sub(trip.resolvedB)))
		wake = append(wake, us(trip.ran.Sub(trip.resolvedA)))
		start = append(start, us(trip.startedA.Sub(trip.decideStart)))
		shown = append(shown, us(trip.askedB.Sub(trip.askedA)))
	}
	elapsed := time.Since(t0)
	const goalUs = 20_000
	return line{}.add("peer", "countersign").add("case", "replicas").add("mode", "round_trip").add("n", n).add("pg_fsync", pgFsync(ctx, server)).
		add("p50_us", percentile(total, 50)).add("p99_us", percentile(total, 99)).add("max_us", percentile(total, 100)).
		add("decide_p50_us", percentile(decide, 50)).add("decide_p99_us", percentile(decide, 99)).
		add("relay_p50_us", percentile(relay, 50)).add("relay_p99_us", percentile(relay, 99)).
		add("wake_p50_us", percentile(wake, 50)).add("wake_p99_us", percentile(wake, 99)).
		add("start_p50_us", percentile(start, 50)).add("start_p99_us", percentile(start, 99)).
		add("shown_p50_us", percentile(shown, 50)).add("shown_p99_us", percentile(shown, 99)).
		add("total_ms", ms(elapsed)).add("goal_p99_us", goalUs).add("under_goal", percentile(total, 99) < goalUs), nil
}

// trip is one cross-replica approval's stamps.
type trip struct {
	askedA, askedB         time.Time // approval_requested published on A, on B
	decideStart, decideEnd time.Time // B's gate.Service.Decide call
	resolvedB, resolvedA   time.Time // approval_resolved published on B, on A
	startedA               time.Time // tool_execution_start published on A
	ran                    time.Time // the gated tool's first line (on A)
}

// roundTrip runs sessionID (created, idle) on A, decides its one approval on B and waits until
// the run has ended on both replicas.
func (p *replicaPair) roundTrip(ctx context.Context, sessionID string) (trip, error) {
	// A relay that loses the prompt or the decision fails the case here, not after minutes.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var t trip
	subA, subB := p.a.broker.Subscribe(sessionID), p.b.broker.Subscribe(sessionID)
	defer p.a.broker.Unsubscribe(subA)
	defer p.b.broker.Unsubscribe(subB)
	if err := p.a.runner.Send(ctx, sessionID, "go"); err != nil {
		return t, err
	}
	isType := func(typ agent.EventType) func(*agent.Event) bool {
		return func(ev *agent.Event) bool { return ev.Type == typ }
	}
	askedB, err := nextEvent(ctx, subB, "the prompt on B", isType(agent.ApprovalRequested))
	if err != nil {
		return t, err
	}
	a := askedB.Approval
	if a == nil || a.Status != gate.Pending {
		return t, fmt.Errorf("B's approval_requested carries no pending approval: %+v", a)
	}
	t.askedB = askedB.PublishedAt()
	t.decideStart = time.Now()
	if _, err := p.b.runner.Gate().Decide(ctx, sessionID, a.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		return t, fmt.Errorf("Decide on B: %w", err)
	}
	t.decideEnd = time.Now()
	// A's events, in order: the prompt, the decision its relay delivered, the call's start.
	askedA, err := nextEvent(ctx, subA, "the prompt on A", isType(agent.ApprovalRequested))
	if err != nil {
		return t, err
	}
	t.askedA = askedA.PublishedAt()
	resolvedA, err := nextEvent(ctx, subA, "the decision relayed to A", isType(agent.ApprovalResolved))
	if err != nil {
		return t, err
	}
	t.resolvedA = resolvedA.PublishedAt()
	startedA, err := nextEvent(ctx, subA, "the call's start on A", func(ev *agent.Event) bool {
		return ev.Type == agent.ToolExecutionStart && ev.ToolCallID == a.ToolCallID
	})
	if err != nil {
		return t, err
	}
	t.startedA = startedA.PublishedAt()
	if _, err := nextEvent(ctx, subA, "the run's end on A", isType(agent.AgentEnd)); err != nil {
		return t, err
	}
	resolvedB, err := nextEvent(ctx, subB, "the decision on B", isType(agent.ApprovalResolved))
	if err != nil {
		return t, err
	}
	t.resolvedB = resolvedB.PublishedAt()
	if _, err := nextEvent(ctx, subB, "the run's end relayed to B", isType(agent.AgentEnd)); err != nil {
		return t, err
	}
	runs := p.runs(a.ToolCallID)
	if len(runs) != 1 || runs[0].replica != "A" {
		return t, fmt.Errorf("the gated call %s ran %d times (%+v), want once on A", a.ToolCallID, len(runs), runs)
	}
	t.ran = runs[0].at
	return t, nil
}

// replicasFanout is the fan-out of one session's events to viewers subscribers split evenly over
// the two replicas (Broker.Subscribe on each: the server's live sockets' source, without the
// sockets). The session runs on A, streaming testkit.StreamScript(10, 300) (the fanout case's
// script: ten turns of ~300 bytes of text in word-sized chunks chunkDelay apart, an echo call
// each); B's subscribers get it through the relay. A probe subscriber on A records each event's
// publication there (Event.PublishedAt, keyed as the fanout case keys them); each viewer stamps
// every event it receives; the delay is receipt − A's publication (one process, one clock), over
// every event of the run except tool_execution_update (none here). p50/p99/max over all
// viewers' events (the goal: p99 under 100 ms), and apart for A's and B's viewers.
func replicasFanout(ctx context.Context, server string, viewers int, chunkDelay time.Duration) (line, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // the paced run takes about 8 s
	defer cancel()
	p, err := newReplicaPair(ctx, server)
	if err != nil {
		return nil, err
	}
	defer p.close()
	p.models.ChunkDelay = chunkDelay
	const turns, textBytes = 10, 300
	p.models.Add("stream", testkit.StreamScript(turns, textBytes))
	s, err := p.a.runner.CreateSession(ctx, "stream", "faux:stream", p.workspace)
	if err != nil {
		return nil, err
	}
	// evKey names one event of the session: its type, ids, text length (message_update) and
	// how many events with the same name came before it.
	type evKey struct {
		typ, messageID, toolCallID string
		textBytes, nth             int
	}
	keyOf := func(ev *agent.Event) evKey {
		k := evKey{typ: string(ev.Type), messageID: ev.MessageID, toolCallID: ev.ToolCallID}
		if ev.Type == agent.MessageUpdate && ev.Message != nil {
			k.textBytes = len(ev.Message.Text())
		}
		return k
	}
	published := map[evKey]time.Time{}
	probe := p.a.broker.Subscribe(s.ID)
	defer p.a.broker.Unsubscribe(probe)
	probed := make(chan error, 1)
	go func() {
		seen := map[evKey]int{}
		for {
			ev, err := nextEvent(ctx, probe, "the run's end (probe on A)", func(*agent.Event) bool { return true })
			if err != nil {
				probed <- err
				return
			}
			base := keyOf(ev)
			k := base
			k.nth = seen[base]
			seen[base]++
			published[k] = ev.PublishedAt()
			if ev.Type == agent.AgentEnd {
				probed <- nil
				return
			}
		}
	}()
	type arrival struct {
		key evKey
		at  time.Time
	}
	type viewer struct {
		onB      bool
		arrivals []arrival
		err      error
	}
	vs := make([]*viewer, viewers)
	var wg sync.WaitGroup
	for i := range vs {
		v := &viewer{onB: i%2 == 1}
		vs[i] = v
		r := p.a
		if v.onB {
			r = p.b
		}
		sub := r.broker.Subscribe(s.ID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.broker.Unsubscribe(sub)
			v.arrivals = make([]arrival, 0, 512)
			for {
				select {
				case ev, ok := <-sub.C:
					if !ok {
						v.err = errDropped // the broker dropped it: it fell 1,024 events behind
						return
					}
					at := time.Now()
					if ev.Type == agent.ToolExecutionUpdate {
						continue
					}
					v.arrivals = append(v.arrivals, arrival{keyOf(ev), at})
					if ev.Type == agent.AgentEnd {
						return
					}
				case <-ctx.Done():
					v.err = fmt.Errorf("a viewer on %s did not see the run's end: %w", r.name, ctx.Err())
					return
				}
			}
		}()
	}
	runtime.GC() // as fanout: the subscriptions' buffers are settled before the stream starts
	c0, t0 := testkit.CPU(), time.Now()
	if err := p.a.runner.Send(ctx, s.ID, "go"); err != nil {
		return nil, err
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), testkit.CPU()-c0
	if err := <-probed; err != nil {
		return nil, err
	}
	var all, onA, onB []float64
	unmatched, dropped, framesA, framesB := 0, 0, 0, 0
	seqA := len(published)
	seen := map[evKey]int{}
	for _, v := range vs {
		if v.err == errDropped {
			dropped++
			continue
		}
		if v.err != nil {
			return nil, v.err
		}
		clear(seen)
		for _, ar := range v.arrivals {
			k := ar.key
			k.nth = seen[ar.key]
			seen[ar.key]++
			pub, ok := published[k]
			if !ok {
				unmatched++
				continue
			}
			d := float64(ar.at.Sub(pub).Microseconds()) / 1e3
			all = append(all, d)
			if v.onB {
				onB = append(onB, d)
				framesB++
			} else {
				onA = append(onA, d)
				framesA++
			}
		}
	}
	// Every viewer of B must have got every stored (sequenced) event A published: a missing one
	// is a relay bug, not a slow delivery.
	sequenced := 0
	for k := range published {
		if k.typ != string(agent.MessageUpdate) {
			sequenced++
		}
	}
	for _, v := range vs {
		if !v.onB || v.err != nil {
			continue
		}
		got := 0
		var types []string
		for _, ar := range v.arrivals {
			if ar.key.typ != string(agent.MessageUpdate) {
				got++
				types = append(types, ar.key.typ)
			}
		}
		if got != sequenced {
			return nil, fmt.Errorf("a viewer on B got %d of the %d stored events A published (%s): the relay lost events",
				got, sequenced, strings.Join(types, ", "))
		}
	}
	mode := "fanout_paced"
	if chunkDelay == 0 {
		mode = "fanout_burst"
	}
	const goalMs = 100
	p99 := round2(percentile(all, 99))
	return line{}.add("peer", "countersign").add("case", "replicas").add("mode", mode).add("n", viewers).add("pg_fsync", pgFsync(ctx, server)).
		add("chunk_delay_ms", ms(chunkDelay)).add("viewers_a", viewers-viewers/2).add("viewers_b", viewers/2).
		add("events_published", seqA).add("stored_events", sequenced).
		add("received_a", framesA).add("received_b", framesB).
		add("p50_ms", round2(percentile(all, 50))).add("p99_ms", p99).add("max_ms", round2(percentile(all, 100))).
		add("a_p50_ms", round2(percentile(onA, 50))).add("a_p99_ms", round2(percentile(onA, 99))).
		add("b_p50_ms", round2(percentile(onB, 50))).add("b_p99_ms", round2(percentile(onB, 99))).
		add("b_max_ms", round2(percentile(onB, 100))).
		add("dropped_viewers", dropped).add("unmatched", unmatched).
		add("total_ms", ms(elapsed)).add("cpu_ms", ms(cpu)).
		add("goal_p99_ms", goalMs).add("under_goal", p99 < goalMs && dropped == 0), nil
}

// benchKey is the key the benchmark's replicas share (cmd/web's is the share-link key file's):
// their relays sign and check every notification under a key derived from it (issue 33).
var benchKey = []byte("countersign benchmark replicas' shared key")
