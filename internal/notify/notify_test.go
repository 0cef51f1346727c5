package notify_test

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/notify"
	"countersign/internal/render"
	"countersign/internal/share"
	"countersign/internal/store/sqlite"
	"countersign/internal/tool"
)

func TestParseReceiversTakesNamedAndSlackEntriesAndRefusesBadOnes(t *testing.T) {
	ok := []struct {
		name, entry                string
		wantName, wantURL, wantFmt string
	}{
		{"plain URL: named after its host", "https://hooks.example.com/x?a=1", "hooks.example.com", "https://hooks.example.com/x?a=1", "json"},
		{"named", "alice=https://hooks.example.com/a", "alice", "https://hooks.example.com/a", "json"},
		{"slack: the format parameter is not sent", "bob=https://hooks.slack.com/services/T/B/X?format=slack", "bob", "https://hooks.slack.com/services/T/B/X", "slack"},
		{"an = inside the query is not a name", "http://127.0.0.1:9/h?k=v", "127.0.0.1", "http://127.0.0.1:9/h?k=v", "json"},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := notify.ParseReceivers([]string{tc.entry})
			if err != nil {
				t.Fatal(err)
			}
			r := rs[0]
			if r.Name != tc.wantName || r.URL != tc.wantURL || string(r.Format) != tc.wantFmt || !strings.HasPrefix(r.ID, "wh-") {
				t.Errorf("got %+v, want name %q URL %q format %q", r, tc.wantName, tc.wantURL, tc.wantFmt)
			}
		})
	}
	bad := []struct{ name, entry, want string }{
		{"not http", "ftp://x/y", "want http(s)://host/path"},
		{"no host", "https:///path", "want http(s)://host/path"},
		{"a reserved name", "owner=https://x.example/h", "the recipient's name"},
		{"a name with markup", "<b>=https://x.example/h", "the recipient's name"},
		{"unknown format", "https://x.example/h?format=teams", `unknown format "teams"`},
		{"credentials", "https://u:p@x.example/h", "credentials"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := notify.ParseReceivers([]string{tc.entry})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "-notify-webhook") {
				t.Errorf("ParseReceivers(%q) = %v, want an error naming -notify-webhook and %q", tc.entry, err, tc.want)
			}
		})
	}
	t.Run("an error never shows the URL's path or query, often its secret", func(t *testing.T) {
		for _, entry := range []string{"ops=ftp://hooks.slack.com/services/T0/B0/SECRETPATH", "https://hooks.example.com/h/SECRETPATH?format=teams",
			"https://u:SECRETPATH@hooks.example.com/h", "owner=https://hooks.example.com/SECRETPATH"} {
			_, err := notify.ParseReceivers([]string{entry})
			if err == nil || strings.Contains(err.Error(), "SECRETPATH") || !strings.Contains(err.Error(), "hooks.") {
				t.Errorf("ParseReceivers(%q) = %v, want an error naming the host without the secret", entry, err)
			}
		}
	})
	t.Run("the same receiver twice", func(t *testing.T) {
		if _, err := notify.ParseReceivers([]string{"https://x.example/h", "https://x.example/h"}); err == nil || !strings.Contains(err.Error(), "twice") {
			t.Errorf("err = %v, want given twice", err)
		}
	})
}

func TestLoadKeyCreatesAPrivateSecretOnceAndRefusesAForeignFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db.notify-key")
	k1, created, err := notify.LoadKey(path)
	if err != nil || !created || !strings.HasPrefix(k1.Secret(), "whsec_") {
		t.Fatalf("first LoadKey = %q, %v, %v", k1.Secret(), created, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	k2, created, err := notify.LoadKey(path)
	if err != nil || created || k2.Secret() != k1.Secret() || k2.Fingerprint() != k1.Fingerprint() {
		t.Errorf("second LoadKey = %q, %v, %v; want the same key, not created", k2.Secret(), created, err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("hunter2"), 0o600)
	if _, _, err := notify.LoadKey(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("LoadKey(bad) = %v, want an error naming the file", err)
	}
}

func TestRetryDelayDoublesWithJitterAndIsBounded(t *testing.T) {
	w := notify.NewWorker(notify.WorkerConfig{RetryBase: 100 * time.Millisecond})
	for n := 1; n <= 8; n++ {
		base := 100 * time.Millisecond << (n - 1)
		for range 50 {
			if d := w.RetryDelay(n); d < base || d >= base+base/4+1 {
				t.Fatalf("RetryDelay(%d) = %v, want in [%v, %v]", n, d, base, base+base/4)
			}
		}
	}
	if d := w.RetryDelay(40); d > time.Hour+time.Hour/4 {
		t.Errorf("RetryDelay(40) = %v, want at most an hour and its jitter", d)
	}
}

func TestArgumentsDigestIgnoresKeyOrderAndSpacing(t *testing.T) {
	a := notify.ArgumentsDigest(json.RawMessage(`{"b": 1, "a": "x"}`))
	if b := notify.ArgumentsDigest(json.RawMessage(`{"a":"x","b":1}`)); a != b {
		t.Errorf("same arguments, digests %s and %s", a, b)
	}
	if c := notify.ArgumentsDigest(json.RawMessage(`{"a":"y","b":1}`)); a == c {
		t.Error("other arguments, same digest")
	}
}

// serverKey stands for the server's share key (share.LoadKey), which seals decision-link tokens.
var serverKey = []byte("the server's own key, 32 bytes!!")

// env is a store with one session, a receiver server and a worker over them.
type env struct {
	db      *sqlite.DB
	path    string
	key     notify.Key
	links   notify.LinkTokens // sealed under serverKey
	sess    string
	hits    chan hit
	answers chan int // the status each request gets; 200 when none is queued
	srv     *httptest.Server
}

type hit struct {
	header http.Header
	body   []byte
	url    string
	at     time.Time
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{path: filepath.Join(t.TempDir(), "cs.db"), hits: make(chan hit, 100), answers: make(chan int, 100)}
	var err error
	if e.key, _, err = notify.LoadKey(e.path + ".notify-key"); err != nil {
		t.Fatal(err)
	}
	if e.links, err = notify.NewLinkTokens(serverKey); err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		e.hits <- hit{header: r.Header.Clone(), body: b, url: r.URL.String(), at: time.Now()}
		st := 200
		select {
		case st = <-e.answers:
		default:
		}
		w.WriteHeader(st)
	}))
	t.Cleanup(e.srv.Close)
	e.open(t)
	e.sess = "s1"
	if err := e.db.CreateSession(context.Background(), agent.Session{ID: e.sess, Title: "Deploy <prod>", Model: "faux:x", Workspace: "/w"}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) open(t *testing.T) {
	t.Helper()
	db, err := sqlite.Open(context.Background(), e.path)
	if err != nil {
		t.Fatal(err)
	}
	e.db = db
	t.Cleanup(func() { db.Close() })
}

// recorder is the store as the worker's outbox, telling the test of every attempt stored.
type recorder struct {
	*sqlite.DB
	attempts chan notify.Attempt
}

func (r recorder) RecordAttempt(ctx context.Context, id string, a notify.Attempt, next *time.Time) error {
	err := r.DB.RecordAttempt(ctx, id, a, next)
	r.attempts <- a
	return err
}

// start runs a worker for receivers until the test ends (or stop is called).
func (e *env) start(t *testing.T, base time.Duration, receivers ...notify.Receiver) (attempts chan notify.Attempt, stop func()) {
	t.Helper()
	return e.startWith(t, notify.WorkerConfig{RetryBase: base}, receivers, receivers)
}

// startWith is start with cfg's RetryBase, MaxAttempts and Now, the store making rows for stored and
// the worker knowing only known.
func (e *env) startWith(t *testing.T, cfg notify.WorkerConfig, stored, known []notify.Receiver) (attempts chan notify.Attempt, stop func()) {
	t.Helper()
	attempts = make(chan notify.Attempt, 100)
	w := notify.NewWorker(notify.WorkerConfig{Outbox: recorder{e.db, attempts}, Receivers: known, Key: e.key, Links: e.links,
		PublicURL: "https://cs.example.com/", RetryBase: cfg.RetryBase, MaxAttempts: cfg.MaxAttempts, Now: cfg.Now,
		Diff: render.UnifiedDiff})
	receivers := stored
	e.db.SetNotify(receivers, e.links, w.Wake)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return attempts, stop
}

func (e *env) receiver(t *testing.T, entry string) notify.Receiver {
	t.Helper()
	r, err := notify.ParseReceiver(entry)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func pending(id, sess, toolName string, args string) gate.Approval {
	return gate.Approval{ID: id, SessionID: sess, MessageID: "m1", ToolCallID: "call-" + id, ToolName: toolName,
		Arguments: json.RawMessage(args), RequestedBy: "model", Status: gate.Pending}
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30 s", what)
	}
	var zero T
	return zero
}

func TestReceiverGetsASignedApprovalRequestedWithTheCommandAndADecisionLink(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	attempts, _ := e.start(t, time.Second, e.receiver(t, "alice="+e.srv.URL+"/hook"))
	if err := e.db.CreateApproval(ctx, pending("A1", e.sess, "run_command", `{"command":"rm -rf build && make"}`)); err != nil {
		t.Fatal(err)
	}
	h := wait(t, e.hits, "request")
	wh, err := standardwebhooks.NewWebhook(e.key.Secret())
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(h.body, h.header); err != nil {
		t.Fatalf("the library's Verify refused the signature: %v (headers %v)", err, h.header)
	}
	if h.header.Get("webhook-id") != "A1/"+e.receiver(t, "alice="+e.srv.URL+"/hook").ID+"/approval.requested" {
		t.Errorf("webhook-id %q", h.header.Get("webhook-id"))
	}
	var p notify.Payload
	if err := json.Unmarshal(h.body, &p); err != nil {
		t.Fatal(err)
	}
	d := p.Data
	if p.Type != notify.Requested || d.Session.Title != "Deploy <prod>" || d.Approval.ID != "A1" || d.Approval.ToolName != "run_command" ||
		d.Approval.Status != "pending" || d.Approval.RequestedBy != "model" || d.Summary.Command != "rm -rf build && make" || d.Recipient != "alice" {
		t.Errorf("payload %s", h.body)
	}
	if d.Links.Session != "https://cs.example.com/sessions/s1" || !strings.HasPrefix(d.Links.Decision, "https://cs.example.com/d/") {
		t.Errorf("links %+v", d.Links)
	}
	// The link's token names the link bound to this approval; the database holds only its hash.
	tok := strings.TrimPrefix(d.Links.Decision, "https://cs.example.com/d/")
	l, err := e.db.DecisionLink(ctx, notify.HashToken(tok))
	if err != nil || l.ApprovalID != "A1" || l.Recipient != "alice" || l.ArgumentsSHA256 != notify.ArgumentsDigest(json.RawMessage(`{"command":"rm -rf build && make"}`)) {
		t.Errorf("DecisionLink = %+v, %v", l, err)
	}
	if a := wait(t, attempts, "attempt"); a.Status != 200 || a.N != 1 {
		t.Errorf("attempt %+v", a)
	}
	ds, _ := e.db.Deliveries(ctx, e.sess)
	if len(ds) != 1 || ds[0].DeliveredAt == nil || ds[0].NextAt != nil || len(ds[0].Attempts) != 1 {
		t.Errorf("deliveries %+v", ds)
	}
	// Tampering with the body breaks the signature.
	if err := wh.Verify(append(h.body[:len(h.body)-1:len(h.body)-1], ' '), h.header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("Verify(tampered body) = %v", err)
	}
}

func TestWriteFileEventsCarryTheDiffCutAt8KiB(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		cut     bool
	}{
		{"small", "new line\n", false},
		{"large", strings.Repeat("0123456789abcdef\n", 1200), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.start(t, time.Second, e.receiver(t, e.srv.URL))
			args, _ := json.Marshal(map[string]string{"path": "a.txt", "content": tc.content})
			a := pending("W1", e.sess, "write_file", string(args))
			a.Preview = &tool.Preview{Path: "a.txt", Exists: true, Content: "old line\n"}
			if err := e.db.CreateApproval(context.Background(), a); err != nil {
				t.Fatal(err)
			}
			var p notify.Payload
			json.Unmarshal(wait(t, e.hits, "request").body, &p)
			s := p.Data.Summary
			if !strings.Contains(s.Diff, "-old line\n") || !strings.Contains(s.Diff, "+") || s.DiffCut != tc.cut || s.ArgumentsCut != tc.cut {
				t.Errorf("diff %q (cut %v, arguments cut %v), want the change, cut %v", s.Diff[:min(len(s.Diff), 200)], s.DiffCut, s.ArgumentsCut, tc.cut)
			}
			if len(s.Diff) > notify.MaxSummaryBytes+64 || len(s.Arguments) > notify.MaxSummaryBytes+64 {
				t.Errorf("diff %d bytes, arguments %d: want at most 8 KiB and the mark", len(s.Diff), len(s.Arguments))
			}
			if tc.cut && !strings.HasSuffix(s.Diff, "(cut at 8 KiB)") {
				t.Errorf("a cut diff ends %q, want the mark", s.Diff[len(s.Diff)-40:])
			}
		})
	}
}

func TestFailedDeliveriesAreRetriedWithGrowingDelaysAndEveryAttemptIsStored(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.answers <- 500
	e.answers <- 500
	base := 30 * time.Millisecond
	attempts, _ := e.start(t, base, e.receiver(t, e.srv.URL))
	if err := e.db.CreateApproval(ctx, pending("A1", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	var got []notify.Attempt
	for range 3 {
		got = append(got, wait(t, attempts, "attempt"))
	}
	if got[0].Status != 500 || got[1].Status != 500 || got[2].Status != 200 {
		t.Fatalf("attempts %+v, want 500, 500, 200", got)
	}
	ds, err := e.db.Deliveries(ctx, e.sess)
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries %+v, %v", ds, err)
	}
	st := ds[0].Attempts
	if len(st) != 3 || st[0].Status != 500 || st[1].Status != 500 || st[2].Status != 200 || ds[0].DeliveredAt == nil {
		t.Fatalf("stored attempts %+v delivered %v", st, ds[0].DeliveredAt)
	}
	// A timer never fires early: the waits are at least the base, then twice it.
	if g1, g2 := st[1].At.Sub(st[0].At), st[2].At.Sub(st[1].At); g1 < base || g2 < 2*base {
		t.Errorf("waits %v then %v, want at least %v then %v", g1, g2, base, 2*base)
	}
	var ids []string
	for range 3 {
		ids = append(ids, wait(t, e.hits, "request").header.Get("webhook-id"))
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Errorf("webhook-id changed across retries: %q", ids)
	}
}

func TestTheStoreNeverWaitsForAReceiver(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	release := make(chan struct{})
	got := make(chan struct{}, 10)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- struct{}{}
		<-release
	}))
	defer slow.Close()
	defer close(release)
	e.start(t, time.Second, e.receiver(t, slow.URL))
	if err := e.db.CreateApproval(ctx, pending("A1", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	wait(t, got, "the first request")
	// The receiver holds the first request; the next approval is stored and readable anyway.
	if err := e.db.CreateApproval(ctx, pending("A2", e.sess, "run_command", `{"command":"pwd"}`)); err != nil {
		t.Fatal(err)
	}
	if a, err := e.db.Approval(ctx, "A2"); err != nil || a.Status != gate.Pending {
		t.Errorf("A2 = %+v, %v; want pending", a, err)
	}
	if _, err := e.db.ResolveApproval(ctx, "A2", gate.Resolution{Status: gate.Denied, DecidedBy: "owner"}); err != nil {
		t.Errorf("deciding while the receiver hangs: %v", err)
	}
}

func TestARestartBetweenAttemptsStillDelivers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r := e.receiver(t, e.srv.URL)
	e.answers <- 500
	attempts, stop := e.start(t, 50*time.Millisecond, r)
	if err := e.db.CreateApproval(ctx, pending("A1", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	if a := wait(t, attempts, "first attempt"); a.Status != 500 {
		t.Fatalf("first attempt %+v", a)
	}
	stop()
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	// A new process: the store and a worker again, the row picked up from the outbox.
	e.open(t)
	attempts, _ = e.start(t, 50*time.Millisecond, r)
	if a := wait(t, attempts, "attempt after the restart"); a.Status != 200 || a.N != 2 {
		t.Fatalf("attempt after restart %+v, want the second, 200", a)
	}
	ds, _ := e.db.Deliveries(ctx, e.sess)
	if len(ds) != 1 || len(ds[0].Attempts) != 2 || ds[0].DeliveredAt == nil {
		t.Errorf("deliveries %+v", ds)
	}
	var bodies [2]notify.Payload
	json.Unmarshal(wait(t, e.hits, "request").body, &bodies[0])
	json.Unmarshal(wait(t, e.hits, "request").body, &bodies[1])
	if bodies[0].Data.Links.Decision == "" || bodies[0].Data.Links.Decision != bodies[1].Data.Links.Decision {
		t.Errorf("decision links %q and %q: want the same link on the retry", bodies[0].Data.Links.Decision, bodies[1].Data.Links.Decision)
	}
}

func TestSlackReceiversGetTextAndBlocksWithTheLinks(t *testing.T) {
	e := newEnv(t)
	e.start(t, time.Second, e.receiver(t, e.srv.URL+"/services/T/B?format=slack"))
	if err := e.db.CreateApproval(context.Background(), pending("A1", e.sess, "run_command", "{\"command\":\"echo <@U123> & ```\"}")); err != nil {
		t.Fatal(err)
	}
	h := wait(t, e.hits, "request")
	if h.url != "/services/T/B" {
		t.Errorf("POSTed to %q, want the URL without ?format=slack", h.url)
	}
	var m struct {
		Text   string           `json:"text"`
		Blocks []map[string]any `json:"blocks"`
	}
	if err := json.Unmarshal(h.body, &m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.Text, "Approval required: run_command") || !strings.Contains(m.Text, "/d/") || len(m.Blocks) != 3 {
		t.Fatalf("slack body %s", h.body)
	}
	code := m.Blocks[1]["text"].(map[string]any)["text"].(string)
	if code != "```echo &lt;@U123&gt; &amp; '''```" {
		t.Errorf("command block %q: want it escaped for Slack (no mention, no early end of the code block)", code)
	}
	buttons := m.Blocks[2]["elements"].([]any)
	first := buttons[0].(map[string]any)
	if !strings.HasPrefix(first["url"].(string), "https://cs.example.com/d/") {
		t.Errorf("first button %v, want the decision link", first)
	}
}

func TestResolutionsAndTimeoutsAreAnnouncedToTheReceiversToldOfTheRequest(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r1, r2 := e.receiver(t, "alice="+e.srv.URL+"/1"), e.receiver(t, "bob="+e.srv.URL+"/2")
	e.start(t, time.Second, r1, r2)
	for _, id := range []string{"A1", "A2"} {
		if err := e.db.CreateApproval(ctx, pending(id, e.sess, "run_command", `{"command":"ls"}`)); err != nil {
			t.Fatal(err)
		}
	}
	// An automatic record (decided when stored) is not announced.
	auto := pending("A3", e.sess, "read_file", `{}`)
	now := time.Now()
	auto.Status, auto.Automatic, auto.DecidedBy, auto.DecidedAt = gate.Approved, true, gate.ByPolicy, &now
	if err := e.db.CreateApproval(ctx, auto); err != nil {
		t.Fatal(err)
	}
	e.db.ResolveApproval(ctx, "A1", gate.Resolution{Status: gate.Approved, DecidedBy: "owner"})
	e.db.ResolveApproval(ctx, "A2", gate.Resolution{Status: gate.TimedOut, DecidedBy: gate.ByTimeout})
	seen := map[string]bool{}
	for range 8 {
		var p notify.Payload
		json.Unmarshal(wait(t, e.hits, "request").body, &p)
		seen[p.Data.Approval.ID+" "+string(p.Type)+" "+p.Data.Recipient] = true
		if p.Type != notify.Requested && p.Data.Links.Decision != "" {
			t.Errorf("%s carries a decision link", p.Type)
		}
	}
	for _, want := range []string{"A1 approval.requested alice", "A1 approval.requested bob", "A1 approval.resolved alice", "A1 approval.resolved bob",
		"A2 approval.requested alice", "A2 approval.timed_out alice", "A2 approval.timed_out bob"} {
		if !seen[want] {
			t.Errorf("no %q among %v", want, seen)
		}
	}
}

func TestADeliveryIsGivenUpAfterItsLastAttempt(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answers   []int
		known     bool
		attempts  int
		wantError string
	}{
		{"every attempt fails", []int{500, 503}, true, 2, ""},
		{"the receiver is no longer configured", nil, false, 1, "no longer configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for _, st := range tc.answers {
				e.answers <- st
			}
			r := e.receiver(t, e.srv.URL)
			known := []notify.Receiver{r}
			if !tc.known {
				known = nil
			}
			attempts, _ := e.startWith(t, notify.WorkerConfig{RetryBase: 10 * time.Millisecond, MaxAttempts: 2}, []notify.Receiver{r}, known)
			if err := e.db.CreateApproval(context.Background(), pending("A1", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
				t.Fatal(err)
			}
			for range tc.attempts {
				wait(t, attempts, "attempt")
			}
			ds, _ := e.db.Deliveries(context.Background(), e.sess)
			if len(ds) != 1 || !ds[0].Failed || ds[0].NextAt != nil || ds[0].DeliveredAt != nil || len(ds[0].Attempts) != tc.attempts ||
				!strings.Contains(ds[0].Attempts[tc.attempts-1].Error, tc.wantError) {
				t.Errorf("delivery %+v", ds)
			}
		})
	}
}

// TestAHangingReceiverDelaysNoOtherReceiver (found in review: one goroutine posted every row in
// turn, so a receiver that never answered held every other receiver's deliveries for its timeout,
// attempt after attempt — decision links arrived minutes late). Each receiver has its own lane:
// while bob's receiver holds its first request, alice gets both approvals' requests.
func TestAHangingReceiverDelaysNoOtherReceiver(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	release := make(chan struct{})
	var returned atomic.Bool
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // then the server notices the worker hanging up (r.Context)
		select {
		case <-release:
		case <-r.Context().Done(): // the worker gave up on the attempt (its timeout)
			returned.Store(true)
		}
	}))
	defer slow.Close()
	defer close(release)
	alice, bob := e.receiver(t, "alice="+e.srv.URL), e.receiver(t, "bob="+slow.URL)
	e.start(t, time.Hour, alice, bob)
	for _, id := range []string{"A1", "A2"} {
		if err := e.db.CreateApproval(ctx, pending(id, e.sess, "run_command", `{"command":"ls"}`)); err != nil {
			t.Fatal(err)
		}
		var p notify.Payload
		json.Unmarshal(wait(t, e.hits, "alice's request for "+id).body, &p)
		if p.Data.Approval.ID != id || p.Data.Recipient != "alice" {
			t.Fatalf("alice got %s for %s, want %s", p.Type, p.Data.Approval.ID, id)
		}
		if returned.Load() {
			t.Fatalf("alice's request for %s came only after bob's hanging attempt was given up", id)
		}
	}
}

// TestARequestIsNotRetriedOnceItsApprovalIsDecided (found in review: a request retried after
// the decision reached the receiver after approval.resolved, with a dead link). The first
// attempt fails, the owner decides, and the request's retry is given up, saying why; the
// resolution is delivered.
func TestARequestIsNotRetriedOnceItsApprovalIsDecided(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.answers <- 500
	// The worker's clock jumps past the retry's time only once the decision is stored, so the
	// retry comes after the decision however slow the machine (the retry is an hour away).
	var ahead atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	r := e.receiver(t, "alice="+e.srv.URL)
	attempts, _ := e.startWith(t, notify.WorkerConfig{RetryBase: time.Hour, Now: now}, []notify.Receiver{r}, []notify.Receiver{r})
	if err := e.db.CreateApproval(ctx, pending("A1", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	if a := wait(t, attempts, "the first attempt"); a.Status != 500 {
		t.Fatalf("first attempt %+v", a)
	}
	if _, err := e.db.ResolveApproval(ctx, "A1", gate.Resolution{Status: gate.Approved, DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	if a := wait(t, attempts, "the resolution's attempt"); a.Status != 200 {
		t.Fatalf("the resolution's attempt %+v", a)
	}
	// Two hours on, the request's retry is due; another approval wakes the worker.
	ahead.Store(int64(2 * time.Hour))
	if err := e.db.CreateApproval(ctx, pending("A2", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	wait(t, attempts, "an attempt after the jump")
	wait(t, attempts, "an attempt after the jump")
	ds, err := e.db.Deliveries(ctx, e.sess)
	if err != nil {
		t.Fatal(err)
	}
	byEvent := map[notify.Event]notify.Delivery{}
	for _, d := range ds {
		if d.Approval.ID == "A1" {
			byEvent[d.Event] = d
		}
	}
	req, res := byEvent[notify.Requested], byEvent[notify.Resolved]
	if len(req.Attempts) != 2 || !req.Failed || req.NextAt != nil || !strings.Contains(req.Attempts[1].Error, "not sent again: the approval was approved") {
		t.Errorf("the request's delivery %+v, want given up after its second attempt, saying why", req)
	}
	if res.DeliveredAt == nil || len(res.Attempts) != 1 {
		t.Errorf("the resolution's delivery %+v, want delivered at once", res)
	}
}

// thief is the store as a worker's outbox, where another worker takes every row the moment the
// worker has claimed it (as when the worker's claims expired while its lane was busy): the
// worker's renewals, which must all fail, are sent on renewed, and each claim after the first
// (the worker's lane wakes Run once it is done with a row) on reclaimed.
type thief struct {
	*sqlite.DB
	renewed   chan bool
	reclaimed chan struct{}
	claims    *atomic.Int32
}

func (th thief) ClaimDeliveries(ctx context.Context, c notify.Claim, limit int) ([]notify.Delivery, error) {
	if th.claims.Add(1) > 1 {
		th.reclaimed <- struct{}{}
	}
	ds, err := th.DB.ClaimDeliveries(ctx, c, limit)
	if err == nil && len(ds) > 0 {
		// After the worker's claims end, another worker claims the same rows.
		if _, err := th.DB.ClaimDeliveries(ctx, notify.Claim{By: "other", Now: c.Until, Until: c.Until.Add(time.Hour)}, limit); err != nil {
			return nil, err
		}
	}
	return ds, err
}

func (th thief) RenewClaim(ctx context.Context, id string, c notify.Claim) (bool, error) {
	ok, err := th.DB.RenewClaim(ctx, id, c)
	th.renewed <- ok
	return ok, err
}

// TestAWorkerNeverSendsARowWhoseClaimItLost: a row another worker claimed after this worker's
// claim expired is not attempted by this worker (its renewal before the attempt fails): nothing
// is sent, nothing recorded, and the row stays the other worker's.
func TestAWorkerNeverSendsARowWhoseClaimItLost(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice := e.receiver(t, "alice="+e.srv.URL)
	th := thief{DB: e.db, renewed: make(chan bool, 10), reclaimed: make(chan struct{}, 10), claims: new(atomic.Int32)}
	w := notify.NewWorker(notify.WorkerConfig{Outbox: th, Receivers: []notify.Receiver{alice}, Key: e.key, Links: e.links,
		PublicURL: "https://cs.example.com/", ID: "mine"})
	// Not woken by the store: the row is claimed by Run's first read, and Run reads again only
	// when the lane is done with it.
	e.db.SetNotify([]notify.Receiver{alice}, e.links, nil)
	if err := e.db.CreateApproval(ctx, pending("A1", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(runCtx) }()
	if ok := wait(t, th.renewed, "renewal"); ok {
		t.Error("the worker renewed a claim another worker holds")
	}
	wait(t, th.reclaimed, "the lane's end") // a post after the failed renewal would have been made by now
	cancel()
	<-done
	select {
	case h := <-e.hits:
		t.Errorf("the worker sent %s although another worker holds its claim", h.header.Get("webhook-id"))
	default:
	}
	ds, _ := e.db.Deliveries(ctx, e.sess)
	if len(ds) != 1 || ds[0].Tries != 0 || ds[0].NextAt == nil {
		t.Errorf("deliveries %+v: want the row untouched", ds)
	}
}

// TestAWorkerStoppedMidAttemptLeavesItsRowToTheNextAtOnce: a worker stopped while an attempt
// hangs releases its claims as it stops, so the next worker (a restart: another id) attempts
// the row at once, not after the claim would have expired (an hour here).
func TestAWorkerStoppedMidAttemptLeavesItsRowToTheNextAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	hung := make(chan struct{}, 1)
	var first atomic.Bool
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if first.CompareAndSwap(false, true) {
			hung <- struct{}{}
			<-r.Context().Done() // until the worker stops
			return
		}
		e.hits <- hit{header: r.Header.Clone()}
	}))
	defer slow.Close()
	r := e.receiver(t, "bob="+slow.URL)
	run := func(id string) (attempts chan notify.Attempt, stop func()) {
		attempts = make(chan notify.Attempt, 10)
		w := notify.NewWorker(notify.WorkerConfig{Outbox: recorder{e.db, attempts}, Receivers: []notify.Receiver{r}, Key: e.key, Links: e.links,
			PublicURL: "https://cs.example.com/", ID: id, Timeout: time.Hour, ClaimFor: time.Hour})
		e.db.SetNotify([]notify.Receiver{r}, e.links, w.Wake)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); w.Run(runCtx) }()
		stop = func() { cancel(); <-done }
		t.Cleanup(stop)
		return attempts, stop
	}
	_, stop := run("first")
	if err := e.db.CreateApproval(ctx, pending("A1", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	wait(t, hung, "the hanging attempt")
	stop()
	attempts, _ := run("second")
	if a := wait(t, attempts, "the next worker's attempt"); a.Status != 200 || a.N != 1 {
		t.Fatalf("attempt %+v, want the first recorded, 200", a)
	}
}

// TestEventArgumentsAreTextAsTyped: the formatted arguments of an event keep `<`, `>` and `&`
// as they are (not \u003c…), so a receiver shows the command as the model wrote it.
func TestEventArgumentsAreTextAsTyped(t *testing.T) {
	e := newEnv(t)
	e.start(t, time.Second, e.receiver(t, e.srv.URL))
	if err := e.db.CreateApproval(context.Background(), pending("L1", e.sess, "run_command", `{"command":"sort <in.txt >out.txt && echo ok"}`)); err != nil {
		t.Fatal(err)
	}
	var p notify.Payload
	if err := json.Unmarshal(wait(t, e.hits, "request").body, &p); err != nil {
		t.Fatal(err)
	}
	if s := p.Data.Summary; !strings.Contains(s.Arguments, `"command": "sort <in.txt >out.txt && echo ok"`) || s.Command != "sort <in.txt >out.txt && echo ok" {
		t.Fatalf("arguments %q, command %q; want them as typed", s.Arguments, s.Command)
	}
}

// A call that needs two approvers, approved and denied, sends approval.resolved with every vote
// (who, what, when), signed as every event is (issue 33).
func TestTwoApproverCallsSendApprovalResolvedWithEveryVote(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r := e.receiver(t, "pager="+e.srv.URL+"/hook")
	e.start(t, time.Second, r)
	for _, id := range []string{"A1", "A2"} {
		a := pending(id, e.sess, "run_command", `{"command":"make deploy"}`)
		a.Approvers = 2
		if err := e.db.CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	t1 := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	t2 := t1.Add(5 * time.Second)
	for _, v := range []struct {
		id string
		v  gate.Vote
	}{
		{"A1", gate.Vote{By: "alice", Decision: gate.Approved, At: t1}},
		{"A1", gate.Vote{By: "bob", Decision: gate.Approved, At: t2}},
		{"A2", gate.Vote{By: "alice", Decision: gate.Approved, At: t1}},
		{"A2", gate.Vote{By: "bob", Decision: gate.Denied, Reason: "not on a Friday", At: t2}},
	} {
		if _, _, err := e.db.CastVote(ctx, v.id, v.v, 2); err != nil {
			t.Fatal(err)
		}
	}
	wh, err := standardwebhooks.NewWebhook(e.key.Secret())
	if err != nil {
		t.Fatal(err)
	}
	resolved := map[string]notify.ApprovalData{}
	for range 4 {
		h := wait(t, e.hits, "request")
		if err := wh.Verify(h.body, h.header); err != nil {
			t.Fatalf("Verify: %v (headers %v)", err, h.header)
		}
		var p notify.Payload
		if err := json.Unmarshal(h.body, &p); err != nil {
			t.Fatal(err)
		}
		switch p.Type {
		case notify.Resolved:
			resolved[p.Data.Approval.ID] = p.Data.Approval
		case notify.Requested:
			if p.Data.Approval.Approvers != 2 || len(p.Data.Approval.Votes) != 0 {
				t.Errorf("request %s: approvers %d, votes %v", p.Data.Approval.ID, p.Data.Approval.Approvers, p.Data.Approval.Votes)
			}
		default:
			t.Errorf("unexpected %s", p.Type)
		}
	}
	want := map[string]struct {
		status, decidedBy string
		votes             []notify.VoteData
	}{
		"A1": {"approved", "bob", []notify.VoteData{{By: "alice", Decision: "approved", At: t1}, {By: "bob", Decision: "approved", At: t2}}},
		"A2": {"denied", "bob", []notify.VoteData{{By: "alice", Decision: "approved", At: t1}, {By: "bob", Decision: "denied", Reason: "not on a Friday", At: t2}}},
	}
	for id, w := range want {
		got, ok := resolved[id]
		if !ok {
			t.Errorf("no approval.resolved for %s", id)
			continue
		}
		gotVotes, _ := json.Marshal(got.Votes)
		wantVotes, _ := json.Marshal(w.votes)
		if got.Status != w.status || got.DecidedBy != w.decidedBy || got.Approvers != 2 || string(gotVotes) != string(wantVotes) {
			t.Errorf("%s resolved: %s by %s, approvers %d, votes %s; want %s by %s, votes %s", id, got.Status, got.DecidedBy, got.Approvers, gotVotes, w.status, w.decidedBy, wantVotes)
		}
	}
}

// TestADecisionLinksTokenCannotBeDerivedFromTheWebhookSecretAndTheDatabase (issue 33): every
// receiver holds the signing secret; with it and a copy of the database, an attacker tries what
// used to work (HMAC of the link id under the secret), opening the sealed token with the secret,
// and finding the token in any stored value. Each fails: the token is random, and sealed under
// the server's own key until its event is delivered, then gone from the database.
func TestADecisionLinksTokenCannotBeDerivedFromTheWebhookSecretAndTheDatabase(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice := e.receiver(t, "alice="+e.srv.URL)
	e.db.SetNotify([]notify.Receiver{alice}, e.links, nil) // no worker yet: the row waits
	if err := e.db.CreateApproval(ctx, pending("A1", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	// The database before the event is sent: the row still holds the sealed token.
	raw, err := sql.Open("sqlite", e.path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var linkID, tokenHash, sealed string
	if err := raw.QueryRow(`SELECT l.id, l.token_hash, o.link_token FROM decision_links l JOIN notify_outbox o ON o.link_id = l.id`).
		Scan(&linkID, &tokenHash, &sealed); err != nil || sealed == "" {
		t.Fatalf("stored link: sealed %q, %v", sealed, err)
	}
	attempts, _ := e.start(t, time.Second, alice)
	var p notify.Payload
	if err := json.Unmarshal(wait(t, e.hits, "request").body, &p); err != nil {
		t.Fatal(err)
	}
	token := strings.TrimPrefix(p.Data.Links.Decision, "https://cs.example.com/d/")
	if len(token) != 32 || notify.HashToken(token) != tokenHash {
		t.Fatalf("token %q does not name the stored link (hash %s)", token, tokenHash)
	}
	secret, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(e.key.Secret(), "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	// 1. The old derivation: HMAC(secret, link id).
	for _, purpose := range []string{"countersign decision link v1", "countersign decision link seal v1"} {
		if guess := share.DeriveToken(secret, purpose, linkID); guess == token || notify.HashToken(guess) == tokenHash {
			t.Errorf("the token is derived from the webhook secret (%s)", purpose)
		}
	}
	// 2. Opening the sealed token with the secret, as raw bytes or as the "whsec_" text.
	for _, k := range [][]byte{secret, []byte(e.key.Secret())} {
		lt, err := notify.NewLinkTokens(k)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := lt.Open(linkID, sealed); err == nil {
			t.Errorf("the webhook secret opens the sealed token: %q", got)
		}
	}
	// 3. The token in any stored value, after the event is delivered: the sealed copy is gone too.
	if a := wait(t, attempts, "attempt"); !a.OK() {
		t.Fatalf("attempt %+v", a)
	}
	for _, q := range []string{`SELECT id || token_hash || approval_id || receiver_id || recipient || arguments_sha256 FROM decision_links`,
		`SELECT id || approval_id || receiver_id || link_id || link_token FROM notify_outbox`} {
		rows, err := raw.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var v string
			rows.Scan(&v)
			if strings.Contains(v, token) {
				t.Errorf("%s: a stored value holds the token", q)
			}
		}
		rows.Close()
	}
	var left string
	if err := raw.QueryRow(`SELECT link_token FROM notify_outbox WHERE link_id = ?`, linkID).Scan(&left); err != nil || left != "" {
		t.Errorf("after delivery the row keeps %q (%v), want no sealed token", left, err)
	}
}

// TestAReceiverNotAmongACallsReviewersIsToldNothingOfIt (issue 33): a call whose rule names
// reviewers is announced only to the receivers whose recipient is one of them (matched as people:
// "аlice" with a Cyrillic а is alice); any other receiver gets no event for it — neither its
// arguments nor its diff, nor a link that could not decide it — and no resolution either.
func TestAReceiverNotAmongACallsReviewersIsToldNothingOfIt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice, bob := e.receiver(t, "\u0430lice="+e.srv.URL+"/a"), e.receiver(t, "bob="+e.srv.URL+"/b")
	e.start(t, time.Second, alice, bob)
	a := pending("A1", e.sess, "write_file", `{"path":".env","content":"DB_PASSWORD=hunter2\n"}`)
	a.Reviewers = []string{"alice", "carol"}
	if err := e.db.CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ResolveApproval(ctx, "A1", gate.Resolution{Status: gate.Denied, DecidedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	// Another call, with no reviewers, goes to both: bob's lane works.
	if err := e.db.CreateApproval(ctx, pending("A2", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for range 4 {
		h := wait(t, e.hits, "request")
		var p notify.Payload
		json.Unmarshal(h.body, &p)
		got[p.Data.Approval.ID+" "+string(p.Type)+" "+h.url] = true
		if h.url == "/b" && strings.Contains(string(h.body), "hunter2") {
			t.Errorf("bob got the arguments of a call he may not decide: %s", h.body)
		}
	}
	for _, want := range []string{"A1 approval.requested /a", "A1 approval.resolved /a", "A2 approval.requested /a", "A2 approval.requested /b"} {
		if !got[want] {
			t.Errorf("no %q among %v", want, got)
		}
	}
	ds, _ := e.db.Deliveries(ctx, e.sess)
	for _, d := range ds {
		if d.Approval.ID == "A1" && d.ReceiverID == bob.ID {
			t.Errorf("a delivery of A1 to bob: %s", d.ID)
		}
	}
	if len(ds) != 4 {
		t.Errorf("%d deliveries, want 4", len(ds))
	}
}

// TestSlackResolutionsOfSeveralApproversListTheVotes: a Slack receiver's approval.resolved of a
// call that needed two approvers shows who voted what, and when, escaped for Slack.
func TestSlackResolutionsOfSeveralApproversListTheVotes(t *testing.T) {
	at := time.Date(2026, 12, 6, 1, 0, 5, 0, time.UTC)
	body, err := notify.SlackBody(notify.Payload{Type: notify.Resolved, Data: notify.Data{
		Approval: notify.ApprovalData{ToolName: "run_command", Status: "denied", DecidedBy: "bob", Approvers: 2, Votes: []notify.VoteData{
			{By: "alice", Decision: "approved", At: at.Add(-5 * time.Second)},
			{By: "bob", Decision: "denied", Reason: "not <today>", At: at}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Blocks []struct {
			Type     string
			Elements []map[string]any
		}
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	want := "1 of 2 approvals — alice approved at 01:00:00 UTC; bob denied at 01:00:05 UTC: not &lt;today&gt;"
	found := false
	for _, b := range m.Blocks {
		found = found || b.Type == "context" && len(b.Elements) == 1 && b.Elements[0]["text"] == want
	}
	if !found {
		t.Errorf("slack body %s, want a context block %q", body, want)
	}
}

// TestARequestWithoutASealedTokenIsSentWithoutADecisionLink: a request row left by an older
// version (no sealed token: its derived link was deleted by the migration) still tells the
// receiver a call waits, with no decision link.
func TestARequestWithoutASealedTokenIsSentWithoutADecisionLink(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	alice := e.receiver(t, "alice="+e.srv.URL)
	e.db.SetNotify([]notify.Receiver{alice}, e.links, nil)
	if err := e.db.CreateApproval(ctx, pending("A1", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", e.path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`UPDATE notify_outbox SET link_token = ''`); err != nil {
		t.Fatal(err)
	}
	attempts, _ := e.start(t, time.Second, alice)
	var p notify.Payload
	if err := json.Unmarshal(wait(t, e.hits, "request").body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != notify.Requested || p.Data.Approval.ID != "A1" || p.Data.Links.Decision != "" {
		t.Errorf("payload %+v, want approval.requested for A1 without a decision link", p)
	}
	if a := wait(t, attempts, "attempt"); !a.OK() {
		t.Errorf("attempt %+v", a)
	}
}

// TestAReceiverThatAnswers410IsNotRetriedNorSentMore (issue 33): 410 Gone is final, unlike a 500:
// the row is given up at once, and the receiver's later rows are recorded as not sent, without
// a request.
func TestAReceiverThatAnswers410IsNotRetriedNorSentMore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.answers <- http.StatusGone
	attempts, _ := e.start(t, 10*time.Millisecond, e.receiver(t, "alice="+e.srv.URL+"/hook"))
	if err := e.db.CreateApproval(ctx, pending("G1", e.sess, "run_command", `{"command":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	wait(t, e.hits, "the first request")
	if a := wait(t, attempts, "the first attempt"); a.Status != http.StatusGone {
		t.Fatalf("first attempt %+v, want 410", a)
	}
	if err := e.db.CreateApproval(ctx, pending("G2", e.sess, "run_command", `{"command":"pwd"}`)); err != nil {
		t.Fatal(err)
	}
	if a := wait(t, attempts, "the second row's attempt"); a.Status != 0 || !strings.Contains(a.Error, "410 Gone") {
		t.Errorf("second row's attempt %+v, want not sent, saying 410 Gone", a)
	}
	select {
	case h := <-e.hits:
		t.Errorf("a request after 410 Gone: %s", h.body)
	case a := <-attempts:
		t.Errorf("an attempt after 410 Gone (a retry): %+v", a)
	case <-time.After(100 * time.Millisecond): // ten retry bases: a 500 would have been retried
	}
	ds, err := e.db.Deliveries(ctx, e.sess)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.NextAt != nil || d.DeliveredAt != nil || len(d.Attempts) != 1 {
			t.Errorf("delivery %s: next %v, delivered %v, %d attempts; want given up after one", d.ID, d.NextAt, d.DeliveredAt, len(d.Attempts))
		}
	}
}

// claimSpy is the store as the worker's outbox, telling the test of every claim's clock.
type claimSpy struct {
	*sqlite.DB
	nows chan time.Time
}

func (c claimSpy) ClaimDeliveries(ctx context.Context, cl notify.Claim, limit int) ([]notify.Delivery, error) {
	select {
	case c.nows <- cl.Now:
	default:
	}
	return c.DB.ClaimDeliveries(ctx, cl, limit)
}

// TestClaimsAreMadeByTheDatabasesClock (issue 33): with WorkerConfig.Clock, a worker's claims
// carry the database's time, not its own: here a database whose clock is an hour ahead.
func TestClaimsAreMadeByTheDatabasesClock(t *testing.T) {
	e := newEnv(t)
	spy := claimSpy{e.db, make(chan time.Time, 10)}
	w := notify.NewWorker(notify.WorkerConfig{Outbox: spy, Key: e.key, Links: e.links,
		Clock: func(context.Context) (time.Time, error) { return time.Now().Add(time.Hour), nil }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	now := wait(t, spy.nows, "a claim")
	if skew := now.Sub(time.Now()); skew < 59*time.Minute || skew > 61*time.Minute {
		t.Errorf("the claim's Now is %v from this process's clock, want the database's hour ahead", skew)
	}
}
