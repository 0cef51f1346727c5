package pg_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/notify"
	"countersign/internal/store/pg"
)

// hooks is a webhook receiver server for several receivers (one path each) that counts, by
// webhook-id, the requests it saw and the ones it answered 200, and which replica sent each.
type hooks struct {
	srv  *httptest.Server
	want int           // answered ids at which done closes
	done chan struct{} // closed once want distinct ids were answered
	// hold, when set, is asked of each request first: true hangs it until its sender gives
	// up (no answer); its id and sender are sent on held.
	hold func(r *http.Request) bool
	held chan [2]string
	// names are the receivers' paths by receiver id (set by receivers).
	names map[string]string

	mu       sync.Mutex
	seen     map[string]int      // webhook-id → requests
	answered map[string]int      // webhook-id → 200 answers
	by       map[string][]string // webhook-id → the replicas whose requests were answered 200
	order    map[string][]string // receiver path → webhook-ids answered the first time, in order
}

func newHooks(t *testing.T, want int) *hooks {
	t.Helper()
	h := &hooks{want: want, done: make(chan struct{}), held: make(chan [2]string, 10),
		names: map[string]string{}, seen: map[string]int{}, answered: map[string]int{}, by: map[string][]string{}, order: map[string][]string{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get("webhook-id")
		h.mu.Lock()
		h.seen[id]++
		hold := h.hold
		h.mu.Unlock()
		if hold != nil && hold(r) {
			h.held <- [2]string{id, r.Header.Get("X-Test-Replica")}
			<-r.Context().Done()
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.answered[id]++
		h.by[id] = append(h.by[id], r.Header.Get("X-Test-Replica"))
		if h.answered[id] == 1 {
			h.order[r.URL.Path] = append(h.order[r.URL.Path], id)
		}
		if len(h.answered) == h.want {
			close(h.done)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hooks) receivers(t *testing.T, names ...string) []notify.Receiver {
	t.Helper()
	var rs []notify.Receiver
	for _, n := range names {
		r, err := notify.ParseReceiver(n + "=" + h.srv.URL + "/" + n)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
		h.names[r.ID] = "/" + n
	}
	return rs
}

// wait waits, with a generous deadline for a slow machine, until every expected id was answered.
func (h *hooks) wait(t *testing.T) {
	t.Helper()
	select {
	case <-h.done:
	case <-time.After(2 * time.Minute):
		h.mu.Lock()
		defer h.mu.Unlock()
		t.Fatalf("after 2 minutes %d of %d events answered", len(h.answered), h.want)
	}
}

// waitRecorded waits, polling db with a generous deadline, until no row of session s1 is
// pending any more (an answer reaches the receiver a moment before its attempt is recorded).
func waitRecorded(t *testing.T, db *pg.DB) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ds, err := db.Deliveries(context.Background(), "s1")
		if err != nil {
			t.Fatal(err)
		}
		pending := 0
		for _, d := range ds {
			if d.NextAt != nil {
				pending++
			}
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes %d rows still pending", pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tagged marks each request with the replica that sent it.
type tagged string

func (tg tagged) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-Replica", string(tg))
	return http.DefaultTransport.RoundTrip(r)
}

// replica is one replica's delivery worker on its own store.
type replica struct {
	db   *pg.DB
	stop func() // cancels the worker and waits for Run to return
}

// startWorker runs a delivery worker named name on db for receivers, woken by db's commits,
// until the test ends or stop is called.
func startWorker(t *testing.T, db *pg.DB, name string, receivers []notify.Receiver, claimFor, timeout time.Duration) replica {
	t.Helper()
	key, err := notify.NewKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	links, err := notify.NewLinkTokens([]byte("a test server key of 32 bytes!!!"))
	if err != nil {
		t.Fatal(err)
	}
	w := notify.NewWorker(notify.WorkerConfig{Outbox: db, Receivers: receivers, Key: key, Links: links, PublicURL: "https://cs.example.com",
		ID: name, ClaimFor: claimFor, Timeout: timeout, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Client: &http.Client{Transport: tagged(name)}})
	db.SetNotify(receivers, links, w.Wake)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return replica{db: db, stop: stop}
}

func createPending(t *testing.T, db *pg.DB, id string) {
	t.Helper()
	a := gate.Approval{ID: id, SessionID: "s1", MessageID: "m1", ToolCallID: "call-" + id, ToolName: "run_command",
		Arguments: json.RawMessage(`{"command":"ls"}`), RequestedBy: "model", Status: gate.Pending}
	if err := db.CreateApproval(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

func resolve(t *testing.T, db *pg.DB, id string) {
	t.Helper()
	if _, err := db.ResolveApproval(context.Background(), id, gate.Resolution{Status: gate.Approved, DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
}

// checkDelivered checks that every outbox row of session s1 was answered, was recorded
// delivered after exactly one attempt, and reached its receiver (the first time) in the order
// the rows fell due; it returns how many rows each replica's answered requests delivered.
func checkDelivered(t *testing.T, db *pg.DB, h *hooks) map[string]int {
	t.Helper()
	ds, err := db.Deliveries(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(ds) != h.want {
		t.Fatalf("%d outbox rows, want %d", len(ds), h.want)
	}
	wantOrder := map[string][]string{}
	sent := map[string]int{}
	for _, d := range ds {
		if h.answered[d.ID] == 0 {
			t.Errorf("%s never answered", d.ID)
		}
		if d.DeliveredAt == nil || d.Tries != 1 || d.NextAt != nil {
			t.Errorf("%s: delivered %v after %d attempts (next %v); want delivered after one", d.ID, d.DeliveredAt, d.Tries, d.NextAt)
		}
		path := h.names[d.ReceiverID]
		wantOrder[path] = append(wantOrder[path], d.ID)
		for _, r := range h.by[d.ID] {
			sent[r]++
		}
	}
	for path, want := range wantOrder {
		if got := h.order[path]; !slices.Equal(got, want) {
			t.Errorf("receiver %s got\n%v\nwant the order the rows fell due\n%v", path, got, want)
		}
	}
	return sent
}

// newSession stores session s1 through db.
func newSession(t *testing.T, db *pg.DB) {
	t.Helper()
	if err := db.CreateSession(context.Background(), agent.Session{ID: "s1", Title: "team", Model: "faux:x", Workspace: "/w"}); err != nil {
		t.Fatal(err)
	}
}

// TestTwoReplicasDeliverEachWebhookOnce: two replicas' delivery workers on one database, each
// woken by the approvals its own store writes (requests on one replica, decisions on the
// other): every outbox row reaches its receiver exactly once, recorded after one attempt, each
// receiver's in the order they fell due (SPEC §15, §16).
func TestTwoReplicasDeliverEachWebhookOnce(t *testing.T) {
	dbs := replicas(t, 2)
	const approvals = 30
	h := newHooks(t, approvals*2*3)
	rs := h.receivers(t, "r1", "r2", "r3")
	a := startWorker(t, dbs[0], "A", rs, 0, 0)
	b := startWorker(t, dbs[1], "B", rs, 0, 0)
	newSession(t, dbs[0])
	for i := range approvals {
		id := fmt.Sprintf("A%02d", i)
		createPending(t, dbs[i%2], id)
		resolve(t, dbs[(i+1)%2], id)
	}
	h.wait(t)
	waitRecorded(t, dbs[0])
	// Both workers stopped: an attempt either made it was made before Run returned.
	a.stop()
	b.stop()
	sent := checkDelivered(t, dbs[0], h)
	for id, n := range h.seen {
		if n != 1 {
			t.Errorf("%s was sent %d times, want once", id, n)
		}
	}
	t.Logf("rows delivered by replica: %v", sent)
}

// TestAReplicaThatDiesMidDeliveryLeavesTheRestToTheOther: the replica that sent the first
// request (kept hanging) dies — its store closes, so nothing it does from then on reaches the
// database, as when the process is killed — while it holds claims; the other replica delivers
// every other row, and the dead one's rows once its claims expire, the hung one again (which
// the receiver answers once). Each row is recorded delivered after one attempt. The only other
// row sent twice can be the one the dead replica's other lane had in flight as it died (its
// answer never recorded): at-least-once for that row, as for any replica killed mid-attempt.
func TestAReplicaThatDiesMidDeliveryLeavesTheRestToTheOther(t *testing.T) {
	dbs := replicas(t, 2)
	// 13 approvals for two receivers, the first 5 decided: 36 rows.
	h := newHooks(t, 13*2+5*2)
	var once sync.Once
	h.hold = func(*http.Request) bool {
		hold := false
		once.Do(func() { hold = true })
		return hold
	}
	rs := h.receivers(t, "r1", "r2")
	const claimFor = 2 * time.Second // short, so the test does not wait long for the claims to expire
	workers := map[string]replica{
		"A": startWorker(t, dbs[0], "A", rs, claimFor, time.Minute),
		"B": startWorker(t, dbs[1], "B", rs, claimFor, time.Minute),
	}
	newSession(t, dbs[0])
	for i := range 5 {
		createPending(t, dbs[i%2], fmt.Sprintf("A%02d", i))
	}
	var hung, victimName string
	select {
	case held := <-h.held:
		hung, victimName = held[0], held[1]
	case <-time.After(2 * time.Minute):
		t.Fatal("no request within 2 minutes")
	}
	if by := claimedBy(t, dbs[1], hung); by != victimName {
		// Only on a machine so slow that the claim expired meanwhile.
		t.Logf("the hung row is claimed by %q already, not its sender %s", by, victimName)
	}
	victim, survivorName := workers[victimName], map[string]string{"A": "B", "B": "A"}[victimName]
	survivor := workers[survivorName]
	for i := range 5 {
		createPending(t, survivor.db, fmt.Sprintf("A%02d", 5+i))
		resolve(t, survivor.db, fmt.Sprintf("A%02d", i))
	}
	victim.db.Close()
	victim.stop()
	for i := range 3 {
		createPending(t, survivor.db, fmt.Sprintf("A%02d", 10+i))
	}
	h.wait(t)
	waitRecorded(t, survivor.db)
	survivor.stop()
	checkDelivered(t, survivor.db, h)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen[hung] != 2 || !slices.Equal(h.by[hung], []string{survivorName}) {
		t.Errorf("the row %s hung on (%s): sent %d times, answered to %v; want twice, answered to %s", victimName, hung, h.seen[hung], h.by[hung], survivorName)
	}
	twice := 0
	for id, n := range h.seen {
		switch {
		case id == hung:
		case n == 2 && slices.Equal(h.by[id], []string{victimName, survivorName}):
			twice++ // in flight on the victim's other lane as it died
		case n != 1:
			t.Errorf("%s was sent %d times (answered to %v), want once", id, n, h.by[id])
		}
	}
	if twice > 1 {
		t.Errorf("%d rows sent by both replicas besides the hung one; want at most the one in flight as the victim died", twice)
	}
}

// claimedBy is the worker whose claim holds outbox row id.
func claimedBy(t *testing.T, db *pg.DB, id string) string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var by string
	if err := c.QueryRow(ctx, `SELECT claimed_by FROM notify_outbox WHERE id = $1`, id).Scan(&by); err != nil {
		t.Fatalf("claimed_by of %s: %v", id, err)
	}
	return by
}
