package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"countersign/internal/agent"
	"countersign/internal/pgtest"
	"countersign/internal/relay"
	"countersign/internal/store/pg"
)

// target records what a replica's relay hands its runner.
type target struct {
	mu      sync.Mutex
	events  []agent.Event
	stops   []string
	reloads int
	changed chan struct{} // a value after each change
}

func newTarget() *target { return &target{changed: make(chan struct{}, 1)} }

func (t *target) Deliver(ev agent.Event) {
	t.mu.Lock()
	t.events = append(t.events, ev)
	t.mu.Unlock()
	t.poke()
}

// Drives: the test's targets drive every session (a Stop is theirs to act on).
func (t *target) Drives(string) bool { return true }

func (t *target) StopRun(sessionID, who string) {
	t.mu.Lock()
	t.stops = append(t.stops, sessionID+" by "+who)
	t.mu.Unlock()
	t.poke()
}

func (t *target) ReloadRules(context.Context) error {
	t.mu.Lock()
	t.reloads++
	t.mu.Unlock()
	t.poke()
	return nil
}

func (t *target) poke() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// await waits, up to a minute, until cond holds of what t received.
func (t *target) await(tb testing.TB, what string, cond func(t *target) bool) {
	tb.Helper()
	deadline := time.After(time.Minute)
	for {
		t.mu.Lock()
		ok := cond(t)
		t.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-t.changed:
		case <-time.After(100 * time.Millisecond): // a re-read may deliver without a poke race
		case <-deadline:
			t.mu.Lock()
			defer t.mu.Unlock()
			tb.Fatalf("waited a minute for %s; got %d events", what, len(t.events))
		}
	}
}

// replicas opens n stores on one fresh database, each with its own pool, as n replicas of the
// team service would; they are closed when t ends.
func replicas(t *testing.T, n int) []*pg.DB {
	t.Helper()
	return replicasOn(t, pgtest.Database(t), n)
}

// replicasOn opens n stores on the database at url, each with its own pool; they are closed
// when t ends.
func replicasOn(t *testing.T, url string, n int) []*pg.DB {
	t.Helper()
	dbs := make([]*pg.DB, n)
	for i := range dbs {
		db, err := pg.Open(context.Background(), url)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		dbs[i] = db
		t.Cleanup(func() { db.Close() })
	}
	return dbs
}

// startReplicas runs a relay on each store, each with its own target, until the test ends, and
// waits until every one listens; configure, if any, sets each relay's hooks before it runs.
func startReplicas(t *testing.T, dbs []*pg.DB, configure ...func(i int, r *relay.Relay)) ([]*relay.Relay, []*target) {
	t.Helper()
	reps := make([]*relay.Relay, len(dbs))
	tgts := make([]*target, len(dbs))
	for i, db := range dbs {
		reps[i], tgts[i] = relay.New(db.Pool(), testKey, nil), newTarget()
		for _, f := range configure {
			f(i, reps[i])
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		stop, err := reps[i].Start(ctx, tgts[i])
		cancel()
		if err != nil {
			t.Fatal("a replica did not listen within a minute")
		}
		t.Cleanup(stop)
	}
	return reps, tgts
}

// eventTexts is each event's JSON, for comparing what one replica published with what another
// delivered.
func eventTexts(tb testing.TB, evs []agent.Event) []string {
	tb.Helper()
	out := make([]string, len(evs))
	for i, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}

// published is a run's worth of events of every kind a runner publishes, a large one included.
func published(sessionID string, n int) []agent.Event {
	var evs []agent.Event
	for i := range n {
		msg := agent.Message{ID: fmt.Sprintf("m%d", i), Role: agent.Assistant,
			Content: []agent.Block{{Type: "text", Text: fmt.Sprintf("answer %d <b>é</b>", i)}}}
		evs = append(evs,
			agent.Event{Type: agent.TurnStart, SessionID: sessionID},
			agent.Event{Type: agent.MessageEnd, SessionID: sessionID, MessageID: msg.ID, Message: &msg},
			agent.Event{Type: agent.ToolExecutionStart, SessionID: sessionID, ToolCallID: fmt.Sprintf("c%d", i),
				ToolName: "run_command", Arguments: json.RawMessage(`{"command":"echo \u0000 \"hi\""}`)})
	}
	big := agent.Message{ID: "big", Role: agent.Assistant, Content: []agent.Block{{Type: "text", Text: strings.Repeat("x", 20_000)}}}
	return append(evs, agent.Event{Type: agent.MessageEnd, SessionID: sessionID, MessageID: big.ID, Message: &big},
		agent.Event{Type: agent.AgentEnd, SessionID: sessionID})
}

// sequenced keeps the events a relay stores and numbers (not deltas or progress).
func sequenced(evs []agent.Event) []agent.Event {
	var out []agent.Event
	for _, ev := range evs {
		if ev.Type != agent.MessageUpdate && ev.Type != agent.ToolExecutionUpdate {
			out = append(out, ev)
		}
	}
	return out
}

// TestEventsReachTheOtherReplicasInOrder (SPEC §16): what one replica publishes reaches every
// other one whole and in order — a 20 KB event too (read from its row: too large for a
// notification) — and never comes back to its own replica; a delta goes as a notification.
func TestEventsReachTheOtherReplicasInOrder(t *testing.T) {
	dbs := replicas(t, 3)
	s := mkSession(t, dbs[0], "relay")
	reps, tgts := startReplicas(t, dbs)
	want := published(s.ID, 30)
	delta := agent.Event{Type: agent.MessageUpdate, SessionID: s.ID, Delta: "stream"}
	for i, ev := range want {
		reps[0].Publish(ev)
		if i == 3 {
			reps[0].Publish(delta)
		}
	}
	for i := 1; i < 3; i++ {
		tgts[i].await(t, "every event on replica "+fmt.Sprint(i), func(tg *target) bool { return len(sequenced(tg.events)) >= len(want) })
		tgts[i].mu.Lock()
		got := tgts[i].events
		tgts[i].mu.Unlock()
		if g, w := eventTexts(t, sequenced(got)), eventTexts(t, want); strings.Join(g, "\n") != strings.Join(w, "\n") {
			t.Fatalf("replica %d got (%d)\n%s\nwant (%d)\n%s", i, len(g), strings.Join(g, "\n"), len(w), strings.Join(w, "\n"))
		}
		if !hasDelta(got, "stream") {
			t.Errorf("replica %d never got the delta", i)
		}
	}
	// Its own events never come back: a marker from replica 1 reaches 0, and 0 has nothing else.
	reps[1].Publish(agent.Event{Type: agent.TurnEnd, SessionID: s.ID})
	tgts[0].await(t, "replica 1's marker", func(tg *target) bool { return len(tg.events) > 0 })
	tgts[0].mu.Lock()
	defer tgts[0].mu.Unlock()
	if len(tgts[0].events) != 1 || tgts[0].events[0].Type != agent.TurnEnd {
		t.Fatalf("replica 0 got %d events (%v), want only replica 1's turn_end", len(tgts[0].events), tgts[0].events[0].Type)
	}
}

func hasDelta(evs []agent.Event, text string) bool {
	for _, ev := range evs {
		if ev.Type == agent.MessageUpdate && ev.Delta == text {
			return true
		}
	}
	return false
}

// TestACutListenConnectionMissesNoEvent (issue 21 acceptance 5): a replica whose LISTEN
// connection is terminated (pg_terminate_backend) while another publishes reconnects, and its
// viewers get every committed event, in order, once each.
func TestACutListenConnectionMissesNoEvent(t *testing.T) {
	dbs := replicas(t, 2)
	s1, s2 := mkSession(t, dbs[0], "one"), mkSession(t, dbs[0], "two")
	reps, tgts := startReplicas(t, dbs)
	ctx := context.Background()
	admin := adminConn(t, dbs[0].URL())
	var want []agent.Event
	for round := range 4 {
		pid := reps[1].ListenPID()
		for i, ev := range append(published(s1.ID, 25), published(s2.ID, 25)...) {
			ev.Error = fmt.Sprintf("round %d #%d", round, i) // every event different
			want = append(want, ev)
			reps[0].Publish(ev)
			if i == 20 {
				if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, int32(pid)); err != nil {
					t.Fatal(err)
				}
			}
		}
		tgts[1].await(t, fmt.Sprintf("round %d's events", round), func(tg *target) bool { return len(tg.events) >= len(want) })
		if reps[1].ListenPID() == pid {
			t.Fatalf("round %d: the LISTEN connection was not replaced", round)
		}
	}
	tgts[1].mu.Lock()
	got := tgts[1].events
	tgts[1].mu.Unlock()
	for _, sid := range []string{s1.ID, s2.ID} {
		g, w := eventTexts(t, ofSession(got, sid)), eventTexts(t, ofSession(want, sid))
		if strings.Join(g, "\n") != strings.Join(w, "\n") {
			t.Fatalf("session %s: got %d events, want %d, in order, once each", sid, len(g), len(w))
		}
	}
}

func ofSession(evs []agent.Event, sid string) []agent.Event {
	var out []agent.Event
	for _, ev := range evs {
		if ev.SessionID == sid {
			out = append(out, ev)
		}
	}
	return out
}

// TestGarbageOnTheChannelStopsNothing: notifications that are not a replica's (not JSON, an
// unknown session, a number far ahead with no row) are logged and skipped; the next real event
// still arrives.
func TestGarbageOnTheChannelStopsNothing(t *testing.T) {
	dbs := replicas(t, 2)
	s := mkSession(t, dbs[0], "garbage")
	reps, tgts := startReplicas(t, dbs)
	admin := adminConn(t, dbs[0].URL())
	for _, payload := range []string{"not json", `{"o":"x","s":"no-such-session","q":7}`, `{"o":"x","s":"` + s.ID + `","q":99}`, `{"o":"x","k":"stop"}`} {
		if _, err := admin.Exec(context.Background(), `SELECT pg_notify($1, $2)`, relay.Channel, payload); err != nil {
			t.Fatal(err)
		}
	}
	reps[0].Publish(agent.Event{Type: agent.TurnEnd, SessionID: s.ID, Error: "real"})
	tgts[1].await(t, "the real event after the garbage", func(tg *target) bool {
		for _, ev := range tg.events {
			if ev.Error == "real" {
				return true
			}
		}
		return false
	})
}

// TestStopAndRulesReachTheOtherReplicas: Stop of a run another replica drives, "the rules
// changed" and "close these sockets" (a revoked link) reach the other replicas, not the sender.
func TestStopAndRulesReachTheOtherReplicas(t *testing.T) {
	dbs := replicas(t, 2)
	reps, tgts := startReplicas(t, dbs)
	closed := make(chan string, 2)
	for i := range reps {
		reps[i].Subscribe("close", func(key string) { closed <- fmt.Sprint(i, " ", key) })
	}
	reps[0].Stop("sess", "owner")
	reps[0].RulesChanged()
	reps[0].Send("close", "link:abc")
	tgts[1].await(t, "the stop and the reload", func(tg *target) bool { return len(tg.stops) == 1 && tg.reloads == 1 })
	select {
	case got := <-closed:
		if got != "1 link:abc" {
			t.Fatalf("closed %q, want replica 1 to close link:abc", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("the other replica was never asked to close the link's sockets")
	}
	if tgts[1].stops[0] != "sess by owner" {
		t.Fatalf("stop = %q", tgts[1].stops[0])
	}
	reps[1].RulesChanged()
	tgts[0].await(t, "replica 1's reload", func(tg *target) bool { return tg.reloads == 1 })
	if len(tgts[0].stops) != 0 {
		t.Fatalf("the sender got its own stop: %v", tgts[0].stops)
	}
}

// TestLeases (SPEC §16): a session's lease is one replica's at a time; its run's release frees
// it; an expired one is taken by a replica that renews (a connected one: TestATakeoverWaits…);
// Renew keeps it and Orphans lists running sessions nobody leases.
func TestLeases(t *testing.T) {
	ctx := context.Background()
	dbs := replicas(t, 2)
	a, b := relay.New(dbs[0].Pool(), testKey, nil), relay.New(dbs[1].Pool(), testKey, nil)
	a.TTL, b.TTL = time.Second, time.Second
	s := mkSession(t, dbs[0], "leased")
	if err := dbs[0].SetSessionState(ctx, s.ID, agent.Running); err != nil {
		t.Fatal(err)
	}
	if ids, err := b.Orphans(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("Orphans of a replica not connected for a lease yet = %v, %v; want none", ids, err)
	}
	connect(t, a, b)
	if ids, err := b.Orphans(ctx); err != nil || len(ids) != 1 || ids[0] != s.ID {
		t.Fatalf("Orphans of a running session nobody leases = %v, %v", ids, err)
	}
	mustAcquire := func(r *relay.Relay, run string, want bool) {
		t.Helper()
		ok, err := r.Acquire(ctx, s.ID, run)
		if err != nil || ok != want {
			t.Fatalf("Acquire(%s) by %s = %v, %v; want %v", run, r.ID(), ok, err, want)
		}
	}
	mustAcquire(a, "run1", true)
	mustAcquire(b, "runB", false)
	if ids, _ := b.Orphans(ctx); len(ids) != 0 {
		t.Fatalf("Orphans with a live lease = %v", ids)
	}
	mustAcquire(a, "run2", true) // the same replica: its ended run had not released yet
	if err := a.Release(ctx, s.ID, "run1"); err != nil {
		t.Fatal(err)
	}
	mustAcquire(b, "runB", false) // run1's release did not free run2's lease
	if held, err := a.Renew(ctx); err != nil || len(held) != 1 || held[0] != s.ID {
		t.Fatalf("Renew = %v, %v", held, err)
	}
	if err := a.Release(ctx, s.ID, "run2"); err != nil {
		t.Fatal(err)
	}
	mustAcquire(b, "runB", true)
	// b stops renewing (it died): once its lease expires, a, which renews, takes it.
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := a.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		ok, err := a.Acquire(ctx, s.ID, "run3")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an expired lease was never taken")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if held, _ := b.Renew(ctx); len(held) != 0 {
		t.Fatalf("the dead replica still renews %v", held)
	}
	if _, err := a.Acquire(ctx, "no-such-session", "x"); err == nil {
		t.Fatal("Acquire of an unknown session = nil error")
	}
}

// connect renews each of reps' leases every 100 ms until each is Connected (a lease period).
func connect(t *testing.T, reps ...*relay.Relay) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		all := true
		for _, r := range reps {
			if _, err := r.Renew(context.Background()); err != nil {
				t.Fatal(err)
			}
			all = all && r.Connected()
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the replicas were not connected within a minute")
		}
	}
}

// mkSession stores a new idle session named title.
func mkSession(t *testing.T, db *pg.DB, title string) agent.Session {
	t.Helper()
	s := agent.Session{ID: "s-" + title, Title: title, Model: "m", Workspace: "/w", State: agent.Idle}
	if err := db.CreateSession(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// adminConn is a connection of the test's own to url, closed when t ends.
func adminConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// testKey is the key the tests' replicas share (a server's is its share-link key file's).
var testKey = []byte("the replicas' shared key, 32 by!")

// streamUpdates is a stream as a runner publishes it: n message_updates of one message (a
// thinking block, then a text block growing by about 700 bytes a step, past any notification),
// each with the whole message so far and, as Delta and Thinking, what is new since the previous.
func streamUpdates(sessionID, id string, n int) []agent.Event {
	var evs []agent.Event
	text, thinking := "", ""
	for i := range n {
		dt := ""
		if i < 3 {
			dt = fmt.Sprintf("thought %d é; ", i)
		}
		d := fmt.Sprintf("step %d «%s» ", i, strings.Repeat("ü", 340))
		thinking, text = thinking+dt, text+d
		m := agent.Message{ID: id, Role: agent.Assistant, Content: []agent.Block{{Type: "thinking", Thinking: thinking}, {Type: "text", Text: text}}}
		evs = append(evs, agent.Event{Type: agent.MessageUpdate, SessionID: sessionID, MessageID: id, Message: &m, Delta: d, Thinking: dt})
	}
	return evs
}

// TestStreamedTextCrossesReplicasPastANotificationsSize (issue 33): a message streamed past
// 8 KB reaches the other replica update by update, each with the whole message as sent — the
// updates too large whole go as deltas and are rebuilt; an update that does not follow from
// the previous one (a lost notification) is dropped with the rest of its stream, never shown
// wrong.
func TestStreamedTextCrossesReplicasPastANotificationsSize(t *testing.T) {
	dbs := replicas(t, 2)
	s := mkSession(t, dbs[0], "stream")
	reps, tgts := startReplicas(t, dbs)
	evs := streamUpdates(s.ID, "m1", 40)
	if n := len(evs[len(evs)-1].Message.Text()); n < 20_000 {
		t.Fatalf("the stream ends at %d bytes; the test needs it far past a notification", n)
	}
	// A second stream with a gap: its 15th update is never published, as if its notification
	// were lost; the 16th cannot follow from the 14th.
	gappy := streamUpdates(s.ID, "m2", 30)
	for i := range evs {
		reps[0].Publish(evs[i])
		if i < len(gappy) && i != 14 {
			reps[0].Publish(gappy[i])
		}
	}
	end := agent.Event{Type: agent.MessageEnd, SessionID: s.ID, MessageID: "m1", Message: evs[len(evs)-1].Message}
	reps[0].Publish(end)
	tgts[1].await(t, "the stream's end", func(tg *target) bool {
		for _, ev := range tg.events {
			if ev.Type == agent.MessageEnd && ev.MessageID == "m1" {
				return true
			}
		}
		return false
	})
	tgts[1].mu.Lock()
	got := append([]agent.Event(nil), tgts[1].events...)
	tgts[1].mu.Unlock()
	want := map[string][]agent.Event{"m1": evs, "m2": gappy}
	seen := map[string]int{}
	for _, ev := range got {
		if ev.Type != agent.MessageUpdate {
			continue
		}
		k := seen[ev.MessageID]
		for k < len(want[ev.MessageID]) && want[ev.MessageID][k].Delta != ev.Delta {
			k++ // an update left out (m2's gap and what follows it)
		}
		if k == len(want[ev.MessageID]) {
			t.Fatalf("%s: an update that was never published arrived (delta %.40q…)", ev.MessageID, ev.Delta)
		}
		w := want[ev.MessageID][k]
		if ev.Message == nil || ev.Message.Text() != w.Message.Text() || ev.Message.Thinking() != w.Message.Thinking() ||
			len(ev.Message.Content) != 2 || ev.Message.Content[0].Type != "thinking" {
			t.Fatalf("%s update %d arrived otherwise than sent", ev.MessageID, k)
		}
		seen[ev.MessageID] = k + 1
	}
	count := func(id string) int {
		n := 0
		for _, ev := range got {
			if ev.Type == agent.MessageUpdate && ev.MessageID == id {
				n++
			}
		}
		return n
	}
	if n := count("m1"); n != len(evs) {
		t.Errorf("%d of m1's %d updates arrived; the ones past 8 KB were not relayed", n, len(evs))
	}
	if n := count("m2"); n >= len(gappy)-1 || n < 10 {
		t.Errorf("%d of m2's %d updates arrived: want the ones before the gap that fit or follow, none past it that cannot", n, len(gappy)-1)
	}
}
