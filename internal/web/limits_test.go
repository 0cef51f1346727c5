package web_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/testkit"
	"countersign/internal/web"
)

// shortTimeouts are server limits short enough for a test to outlast.
var shortTimeouts = web.Timeouts{ReadHeader: 300 * time.Millisecond, Read: 300 * time.Millisecond,
	Write: 300 * time.Millisecond, Idle: 300 * time.Millisecond}

// The HTTP server's read, write and idle limits cut off slow clients, and never a live socket:
// one open three times as long as the limits still gets the session's events.
func TestTimeoutsBoundSlowClientsButNotLiveSockets(t *testing.T) {
	ts := newTestServerConfig(t, map[string]string{"one": oneCall}, func(_ *web.Config, hs *http.Server) {
		shortTimeouts.Apply(hs)
	})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "timeouts", "model": "faux:one"}, &sess)

	t.Run("a body slower than the read limit is cut off", func(t *testing.T) {
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /api/sessions/%s/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{", sess.ID, token)
		// Never sends the rest: the server must give up and close the connection.
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the server kept a half-sent request open for 10s (read limit 300ms)")
		}
	})

	t.Run("an idle connection is closed", func(t *testing.T) {
		conn, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("an idle keep-alive connection: %v, want closed by the server (idle limit 300ms)", err)
		}
	})

	t.Run("live sockets outlive the limits", func(t *testing.T) {
		events := ts.events(t, sess.ID)
		next(t, events, "snapshot")
		live := ts.ownerLive(t, sess.ID)
		readMessage(t, live) // the resync
		// Read and write limits are 300ms; the sockets sit idle for three times that.
		time.Sleep(3 * shortTimeouts.Write)
		ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "still there?"}, nil)
		next(t, events, "approval_requested")
		if msg := readMessage(t, live); !strings.Contains(msg, "hx-swap-oob") {
			t.Errorf("the live page socket's next message %.200q is not a fragment", msg)
		}
	})
}

// ownerLive opens the session page's live socket as the owner (bearer token).
func (ts *testServer) ownerLive(t *testing.T, sessionID string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{"Authorization": {"Bearer " + token}}
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/sessions/"+sessionID+"/live", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// readMessage reads one message within 10 seconds.
func readMessage(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("reading a message: %v", err)
	}
	return string(b)
}

// expectPolicyClose reads from c and wants it closed with 1008 and reason.
func expectPolicyClose(t *testing.T, c *websocket.Conn, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || ce.Reason != reason {
		t.Errorf("the socket past the cap: %v, want closed 1008 %q", err, reason)
	}
}

// A share link has at most 16 open live sockets and the owner 64 (pages and API together): the
// next one is closed at once with 1008 and a reason; closing one makes room.
func TestOpenLiveSocketsAreCapped(t *testing.T) {
	ts, sid := shareServer(t)

	t.Run("per share link", func(t *testing.T) {
		var out struct{ URL string }
		if st := ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "viewer"}, &out); st != 201 {
			t.Fatalf("create link = %d", st)
		}
		c := reviewer(t, ts, out.URL, "Rita")
		u, _ := url.Parse(out.URL)
		dial := func() *websocket.Conn {
			t.Helper()
			conn, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(ts.URL, "http")+u.Path+"/live", &websocket.DialOptions{HTTPClient: c})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.CloseNow() })
			return conn
		}
		var open []*websocket.Conn
		for range web.MaxLinkSockets {
			conn := dial()
			readMessage(t, conn) // served: the resync
			open = append(open, conn)
		}
		expectPolicyClose(t, dial(), "too many open live connections for this link")
		// The owner's sockets are counted apart.
		readMessage(t, ts.ownerLive(t, sid))

		open[0].Close(websocket.StatusNormalClosure, "")
		testkit.Eventually(t, "room for one more socket of the link", func() bool {
			conn := dial()
			defer conn.CloseNow()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, err := conn.Read(ctx)
			return err == nil
		})
	})

	t.Run("per owner", func(t *testing.T) {
		// One socket is already open from the subtest above, maybe two while it closes.
		owner := []*websocket.Conn{}
		for len(owner) < web.MaxOwnerSockets+2 {
			var conn *websocket.Conn
			if len(owner)%2 == 0 {
				conn = ts.ownerLive(t, sid)
			} else {
				conn = ts.events(t, sid)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _, err := conn.Read(ctx)
			cancel()
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				if ce.Code != websocket.StatusPolicyViolation || ce.Reason != "too many open live connections for the owner" {
					t.Fatalf("owner socket %d closed with %v", len(owner), err)
				}
				if len(owner) < web.MaxOwnerSockets-2 {
					t.Fatalf("owner socket %d refused; the cap is %d", len(owner)+1, web.MaxOwnerSockets)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			owner = append(owner, conn)
		}
		t.Errorf("%d owner sockets open, want at most %d", len(owner), web.MaxOwnerSockets)
	})
}

// TestFailedTokenAttemptsAreRateLimitedPerClient (issue 15 item 7): failed guesses of the owner
// token (login or bearer) and of share-link tokens are limited per client address; typos do not
// lock a person out, successes never count, other addresses are unaffected, and the allowance
// refills.
func TestFailedTokenAttemptsAreRateLimitedPerClient(t *testing.T) {
	lt := newLimitTest(t)
	const alice, mallory, bob = "192.0.2.1", "192.0.2.66", "2001:db8::7"

	for i := range 3 {
		if st := lt.get(alice, "/login?token=typo"+fmt.Sprint(i), nil).Code; st != http.StatusUnauthorized {
			t.Fatalf("typo %d = %d, want 401", i, st)
		}
	}
	if st := lt.get(alice, "/login?token="+token, nil).Code; st != http.StatusSeeOther {
		t.Errorf("the right token after 3 typos = %d, want 303", st)
	}
	// Successes are not counted: many logins in a row all work.
	for i := range 20 {
		if st := lt.get(alice, "/login?token="+token, nil).Code; st != http.StatusSeeOther {
			t.Fatalf("login %d = %d, want 303", i, st)
		}
	}

	for i := range 5 {
		if st := lt.get(mallory, "/login?token=guess"+fmt.Sprint(i), nil).Code; st != http.StatusUnauthorized {
			t.Fatalf("guess %d = %d, want 401", i, st)
		}
		if st := lt.get(mallory, "/r/guess"+fmt.Sprint(i), nil).Code; st != http.StatusNotFound {
			t.Fatalf("link guess %d = %d, want 404", i, st)
		}
	}
	for _, path := range []string{"/login?token=guess", "/login?token=" + token, "/r/guess", lt.link, lt.link + "/live"} {
		rec := lt.get(mallory, path, nil)
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "6" {
			t.Errorf("%s after 10 failures = %d, Retry-After %q; want 429, 6", path, rec.Code, rec.Header().Get("Retry-After"))
		}
	}
	// The right owner token as a bearer is refused too: it is the secret being guessed.
	if rec := lt.get(mallory, "/api/sessions", bearer(token)); rec.Code != http.StatusTooManyRequests {
		t.Errorf("the right bearer token from a limited address = %d, want 429", rec.Code)
	}
	if st := lt.get(bob, lt.link, nil).Code; st != http.StatusOK {
		t.Errorf("another address's link = %d, want 200", st)
	}
	if st := lt.get(mallory, "/healthz", nil).Code; st != http.StatusOK {
		t.Errorf("an unguarded route = %d, want 200", st)
	}

	lt.clk.Advance(6 * time.Second)
	if st := lt.get(mallory, "/login?token="+token, nil).Code; st != http.StatusSeeOther {
		t.Errorf("the right token once the allowance refilled = %d, want 303", st)
	}
	if st := lt.get(mallory, "/r/guess-again", nil).Code; st != http.StatusNotFound {
		t.Errorf("one more guess = %d, want 404", st)
	}
	if rec := lt.get(mallory, "/r/guess-again", nil); rec.Code != http.StatusTooManyRequests {
		t.Errorf("the guess after that = %d, want 429", rec.Code)
	}
}

// TestGuessesFromOneAddressDoNotLockOutThePeopleAlreadyIn: behind one address (a NAT, a proxy)
// an attacker's guesses delay new logins, but the owner with a live login and a reviewer who
// gave their name on a link keep working (found by a new-user review: they got 429 too).
func TestGuessesFromOneAddressDoNotLockOutThePeopleAlreadyIn(t *testing.T) {
	lt := newLimitTest(t)
	const shared = "198.51.100.9"
	login := lt.get(shared, "/login?token="+token, nil)
	if login.Code != http.StatusSeeOther {
		t.Fatalf("login = %d", login.Code)
	}
	ownerCookie := cookieHeader(login.Result().Cookies())
	named := lt.post(shared, lt.link+"/name", "name=Rita", nil)
	if named.Code != http.StatusSeeOther {
		t.Fatalf("giving a name = %d", named.Code)
	}
	reviewerCookie := cookieHeader(named.Result().Cookies())
	for i := range 12 {
		lt.get(shared, "/login?token=guess"+fmt.Sprint(i), nil)
	}
	if rec := lt.get(shared, "/login?token="+token, nil); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("a new login from the address = %d, want 429", rec.Code)
	}
	for _, path := range []string{"/", "/login?token=" + token} {
		if rec := lt.get(shared, path, ownerCookie); rec.Code == http.StatusTooManyRequests || rec.Code >= 400 {
			t.Errorf("the owner's %s with a live login = %d, want it served", path, rec.Code)
		}
	}
	if rec := lt.get(shared, lt.link, reviewerCookie); rec.Code != http.StatusOK {
		t.Errorf("the named reviewer's page = %d, want 200", rec.Code)
	}
	// A forged or foreign reviewer cookie is no credential.
	if rec := lt.get(shared, lt.link, http.Header{"Cookie": {"countersign_reviewer=Rita.00"}}); rec.Code != http.StatusTooManyRequests {
		t.Errorf("a forged reviewer cookie = %d, want 429", rec.Code)
	}
}

// TestOnlyTokenFailuresCount: wrong bearer tokens count like wrong login tokens; a 404 for
// something else under a valid link (an unknown approval) is not a guess, and neither is a
// visit without any credential (found by a new-user review).
func TestOnlyTokenFailuresCount(t *testing.T) {
	lt := newLimitTest(t)
	const eve, rita = "203.0.113.5", "203.0.113.6"
	for i := range 10 {
		if st := lt.get(eve, "/api/sessions", bearer("guess"+fmt.Sprint(i))).Code; st != http.StatusUnauthorized {
			t.Fatalf("bearer guess %d = %d, want 401", i, st)
		}
	}
	if st := lt.get(eve, "/api/sessions", bearer("guess")).Code; st != http.StatusTooManyRequests {
		t.Errorf("the 11th bearer guess = %d, want 429", st)
	}

	named := lt.post(rita, lt.link+"/name", "name=Rita", nil)
	rc := cookieHeader(named.Result().Cookies())
	for i := range 15 {
		if st := lt.post(rita, lt.link+"/approvals/unknown"+fmt.Sprint(i)+"/decision", "decision=approve", rc).Code; st == http.StatusTooManyRequests {
			t.Fatalf("decision %d on an unknown approval = 429", i)
		}
		if st := lt.get(rita, "/sessions/"+lt.session, nil).Code; st != http.StatusUnauthorized {
			t.Fatalf("a page without a login = %d, want 401", st)
		}
	}
	if st := lt.get(rita, lt.link, nil).Code; st != http.StatusOK {
		t.Errorf("the link without a cookie after those = %d, want 200 (nothing counted)", st)
	}
}

// limitTest drives the whole handler with chosen client addresses and an injectable clock.
type limitTest struct {
	t       *testing.T
	h       http.Handler
	clk     *clock
	session string
	link    string // path of an approver link: /r/<token>
}

func newLimitTest(t *testing.T) *limitTest {
	t.Helper()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	ts := newTestServerConfig(t, map[string]string{"one": oneCall}, func(c *web.Config, _ *http.Server) { c.Now = clk.Now })
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "t", "model": "faux:one"}, &sess)
	var link struct{ URL string }
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/shares", map[string]string{"role": "approver"}, &link)
	u, _ := url.Parse(link.URL)
	return &limitTest{t: t, h: ts.Server.Config.Handler, clk: clk, session: sess.ID, link: u.Path}
}

func (lt *limitTest) serve(req *http.Request, addr string, h http.Header) *httptest.ResponseRecorder {
	lt.t.Helper()
	req.RemoteAddr = addr + ":40000"
	for k, vs := range h {
		req.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	lt.h.ServeHTTP(rec, req)
	return rec
}

func (lt *limitTest) get(addr, path string, h http.Header) *httptest.ResponseRecorder {
	return lt.serve(httptest.NewRequest("GET", path, nil), addr, h)
}

func (lt *limitTest) post(addr, path, form string, h http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", path, strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return lt.serve(req, addr, h)
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

// cookieHeader is a Cookie header holding cs.
func cookieHeader(cs []*http.Cookie) http.Header {
	var parts []string
	for _, c := range cs {
		parts = append(parts, c.Name+"="+c.Value)
	}
	return http.Header{"Cookie": {strings.Join(parts, "; ")}}
}

// TestGuessedDecisionLinksAreRateLimited: decision-link tokens (/d/<token>, SPEC §15) are
// guarded like share links: each unknown token counts against the address, and once its
// allowance is spent the next guess is answered 429 without being looked up.
func TestGuessedDecisionLinksAreRateLimited(t *testing.T) {
	lt := newLimitTest(t)
	const mallory = "192.0.2.66"
	for i := range 10 {
		if st := lt.get(mallory, "/d/guess"+fmt.Sprint(i), nil).Code; st != http.StatusNotFound {
			t.Fatalf("guess %d = %d, want 404", i, st)
		}
	}
	if rec := lt.get(mallory, "/d/guess-more", nil); rec.Code != http.StatusTooManyRequests {
		t.Errorf("guess 11 = %d, want 429", rec.Code)
	}
}

// TestGuessedProvisionerTokensAreRateLimited: the AAP provisioner token is the owner token
// (SPEC §18 Door 3), so a wrong one on /aap/v1/instances counts as a guess of it: after ten, the
// client is refused (429) until its allowance refills, even with the right token.
func TestGuessedProvisionerTokensAreRateLimited(t *testing.T) {
	lt := newLimitTest(t)
	const mallory = "192.0.2.66"
	for i := range 10 {
		if st := lt.get(mallory, "/aap/v1/instances/b29a43a7-1949-4b9f-9d61-b7ae66f85d31", bearer(fmt.Sprint("guess", i))).Code; st != http.StatusUnauthorized {
			t.Fatalf("guess %d = %d, want 401", i, st)
		}
	}
	if rec := lt.get(mallory, "/aap/v1/instances/b29a43a7-1949-4b9f-9d61-b7ae66f85d31", bearer(token)); rec.Code != http.StatusTooManyRequests {
		t.Errorf("the right token after ten guesses = %d, want 429", rec.Code)
	}
}
