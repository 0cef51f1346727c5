package web_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	_ "modernc.org/sqlite"

	"countersign/internal/agent"
	"countersign/internal/web"
)

// shareServer is a test server with one session to share.
func shareServer(t *testing.T) (*testServer, string) {
	t.Helper()
	return shareServerConfig(t, nil)
}

// shareServerConfig is shareServer with the web.Config changed by configure.
func shareServerConfig(t *testing.T, configure func(*web.Config, *http.Server)) (*testServer, string) {
	t.Helper()
	ts := newTestServerConfig(t, map[string]string{"one": oneCall}, configure)
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "shared", "model": "faux:one"}, &sess)
	return ts, sess.ID
}

// reviewer is an HTTP client that opened a share link and gave its name.
func reviewer(t *testing.T, ts *testServer, link, name string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	res, err := c.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "Your name") {
		t.Fatalf("first visit = %d without the name form", res.StatusCode)
	}
	u, _ := url.Parse(link)
	res, err = c.PostForm(ts.URL+u.Path+"/name", url.Values{"name": {name}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "Signed in as "+name) {
		t.Fatalf("after the name = %d: %.300s", res.StatusCode, body)
	}
	return c
}

func TestReviewersNeverReachOwnerRoutes(t *testing.T) {
	ts, sid := shareServer(t)
	var links = map[string]string{}
	for _, role := range []string{"viewer", "approver"} {
		var out struct{ URL string }
		if st := ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": role, "label": role}, &out); st != 201 {
			t.Fatalf("create %s link = %d", role, st)
		}
		links[role] = out.URL
	}
	for role, link := range links {
		c := reviewer(t, ts, link, "Rita")
		owner := []struct{ method, path string }{
			{"GET", "/"}, {"GET", "/sessions/" + sid}, {"GET", "/sessions/" + sid + "/audit"},
			{"GET", "/sessions/" + sid + "/live"},
			{"POST", "/sessions/" + sid + "/messages"}, {"POST", "/sessions/" + sid + "/stop"},
			{"POST", "/sessions/" + sid + "/shares"}, {"POST", "/sessions/" + sid + "/shares/x/revoke"},
			{"POST", "/sessions/" + sid + "/approvals/x/decision"}, {"POST", "/sessions/" + sid + "/tools"},
			{"GET", "/api/sessions"}, {"POST", "/api/sessions/" + sid + "/messages"},
			{"POST", "/api/approvals/x/decision"}, {"DELETE", "/api/shares/x"},
		}
		for _, r := range owner {
			req, _ := http.NewRequest(r.method, ts.URL+r.path, strings.NewReader("text=hi&decision=approve"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s: %s %s = %d, want 401", role, r.method, r.path, res.StatusCode)
			}
		}
	}
	// A viewer may not decide, even through its own link's route.
	u, _ := url.Parse(links["viewer"])
	c := reviewer(t, ts, links["viewer"], "Val")
	res, err := c.PostForm(ts.URL+u.Path+"/approvals/x/decision", url.Values{"decision": {"approve"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("viewer decision = %d, want 404", res.StatusCode)
	}
	es, _ := ts.db.Entries(context.Background(), sid)
	if len(es) != 0 {
		t.Errorf("reviewers changed the transcript: %d entries", len(es))
	}
}

func TestRevokedAndExpiredLinksAre404AndSocketsClose(t *testing.T) {
	ts, sid := shareServer(t)
	var out struct{ ID, URL string }
	ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "viewer"}, &out)
	c := reviewer(t, ts, out.URL, "Vic")
	u, _ := url.Parse(out.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+u.Path+"/live", &websocket.DialOptions{HTTPClient: c})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if _, _, err := conn.Read(ctx); err != nil { // the resync fragment
		t.Fatal(err)
	}
	if st := ts.call(t, "DELETE", "/api/shares/"+out.ID, nil, nil); st != 204 {
		t.Fatalf("revoke = %d", st)
	}
	readCtx, cancelRead := context.WithTimeout(context.Background(), time.Second)
	defer cancelRead()
	_, _, err = conn.Read(readCtx)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Errorf("after revoke the socket read %v, want closed within a second (policy violation)", err)
	}
	res, err := c.Get(out.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 404 || strings.Contains(string(body), "shared") {
		t.Errorf("revoked link = %d (%.100s), want 404 with no detail", res.StatusCode, body)
	}

	var short struct{ URL string }
	ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "approver", "expiresIn": "50ms"}, &short)
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := http.Get(short.URL)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("expired link still answers %d", res.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var bad map[string]map[string]string
	if st := ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "admin"}, &bad); st != 400 {
		t.Errorf("bad role = %d %v", st, bad)
	}
	if st := ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "viewer", "expiresIn": "soon"}, &bad); st != 400 {
		t.Errorf("bad expiresIn = %d %v", st, bad)
	}
}

func TestApproverDecisionIsRecordedWithTheirName(t *testing.T) {
	ts, sid := shareServer(t)
	var out struct{ URL string }
	ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "approver"}, &out)
	c := reviewer(t, ts, out.URL, "Ada Lovelace")
	events := ts.events(t, sid)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sid+"/messages", map[string]string{"text": "go"}, nil)
	id := next(t, events, "approval_requested")["approval"].(map[string]any)["id"].(string)
	u, _ := url.Parse(out.URL)
	req, _ := http.NewRequest("POST", ts.URL+u.Path+"/approvals/"+id+"/decision", strings.NewReader("decision=approve"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("HX-Request", "true")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("approver decision = %d", res.StatusCode)
	}
	next(t, events, "agent_end")
	a, err := ts.db.Approval(context.Background(), id)
	if err != nil || a.DecidedBy != "Ada Lovelace" || a.Status != "approved" {
		t.Errorf("approval %+v (%v): want approved by Ada Lovelace", a, err)
	}
}

func TestDatabaseHoldsNoShareToken(t *testing.T) {
	ts, sid := shareServer(t)
	var out struct{ URL string }
	ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "viewer", "label": "for Bob"}, &out)
	tok := out.URL[strings.LastIndex(out.URL, "/")+1:]
	if len(tok) < 26 {
		t.Fatalf("token %q is shorter than 128 bits of base32", tok)
	}
	raw, err := sql.Open("sqlite", "file:"+ts.db.Path()+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rows, err := raw.Query(`SELECT id, session_id, role, label, token_hash, created_at, COALESCE(expires_at,''), COALESCE(revoked_at,''), COALESCE(last_used_at,'') FROM shares`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
		cols := make([]string, 9)
		ptrs := make([]any, 9)
		for i := range cols {
			ptrs[i] = &cols[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for _, c := range cols {
			if strings.Contains(strings.ToLower(c), tok) {
				t.Errorf("the shares table holds the token in clear: %q", c)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d share rows", n)
	}
}

// TestReviewerNameCannotBeForged: the name cookie is signed; an edited one, or one naming the
// owner, decides nothing.
func TestReviewerNameCannotBeForged(t *testing.T) {
	ts, sid := shareServer(t)
	var out struct{ URL string }
	ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "approver"}, &out)
	u, _ := url.Parse(out.URL)
	real := reviewer(t, ts, out.URL, "Mallory")
	var sig string
	for _, c := range real.Jar.Cookies(u) {
		if c.Name == "countersign_reviewer" {
			sig = c.Value[strings.LastIndexByte(c.Value, '.')+1:]
		}
	}
	if sig == "" {
		t.Fatal("no signed name cookie")
	}
	for _, forged := range []string{"owner", "owner." + sig, "Alice." + sig, url.QueryEscape(strings.Repeat("x", 3000)) + "." + sig} {
		req, _ := http.NewRequest("POST", ts.URL+u.Path+"/approvals/x/decision", strings.NewReader("decision=approve"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: "countersign_reviewer", Value: forged})
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("forged name cookie %.40q: %d, want 401", forged, res.StatusCode)
		}
	}
	res, err := real.PostForm(ts.URL+u.Path+"/name", url.Values{"name": {"Owner"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("the name Owner = %d, want 400", res.StatusCode)
	}
}

// peersSpy records what the server asks the other replicas to close (web.Peers).
type peersSpy struct {
	mu   sync.Mutex
	keys []string
	subs map[string][]func(key string)
}

func (p *peersSpy) Send(_, key string) {
	p.mu.Lock()
	p.keys = append(p.keys, key)
	p.mu.Unlock()
}

func (p *peersSpy) Subscribe(topic string, f func(key string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subs == nil {
		p.subs = map[string][]func(string){}
	}
	p.subs[topic] = append(p.subs[topic], f)
}

// tell is another replica's message key on topic, as the relay hands it to the subscribers.
func (p *peersSpy) tell(topic, key string) {
	p.mu.Lock()
	fs := slices.Clone(p.subs[topic])
	p.mu.Unlock()
	for _, f := range fs {
		f(key)
	}
}

// TestRevokesAndLogoutsCloseSocketsOnEveryReplica (SPEC §16): revoking a link and logging out
// ask the other replicas to close those sockets too (Peers), and what another replica asks
// (Server.CloseSockets) closes this one's, saying why.
func TestRevokesAndLogoutsCloseSocketsOnEveryReplica(t *testing.T) {
	spy := &peersSpy{}
	ts, sid := shareServerConfig(t, func(c *web.Config, _ *http.Server) { c.Peers = spy })
	open := func(link struct{ ID, URL string }) *websocket.Conn {
		t.Helper()
		c := reviewer(t, ts, link.URL, "Vic")
		u, _ := url.Parse(link.URL)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+u.Path+"/live", &websocket.DialOptions{HTTPClient: c})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.CloseNow() })
		if _, _, err := conn.Read(ctx); err != nil { // the resync fragment
			t.Fatal(err)
		}
		return conn
	}
	var revoked, elsewhere struct{ ID, URL string }
	ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "viewer"}, &revoked)
	ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "viewer"}, &elsewhere)
	open(revoked)
	if st := ts.call(t, "DELETE", "/api/shares/"+revoked.ID, nil, nil); st != 204 {
		t.Fatalf("revoke = %d", st)
	}
	spy.mu.Lock()
	got := strings.Join(spy.keys, ",")
	spy.mu.Unlock()
	if got != "link:"+revoked.ID {
		t.Fatalf("the other replicas were asked to close %q, want link:%s", got, revoked.ID)
	}

	// A logout asks them to close the login's sockets.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	for _, step := range []func() (*http.Response, error){
		func() (*http.Response, error) { return browser.Get(ts.URL + "/login?token=" + token) },
		func() (*http.Response, error) {
			return browser.Post(ts.URL+"/logout", "application/x-www-form-urlencoded", nil)
		},
	} {
		res, err := step()
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	spy.mu.Lock()
	keys := slices.Clone(spy.keys)
	spy.mu.Unlock()
	if len(keys) != 2 || !strings.HasPrefix(keys[1], "login:") {
		t.Fatalf("after a logout the other replicas were asked to close %q, want a login's sockets", keys)
	}

	// Revoked on another replica: that replica asks this one.
	conn := open(elsewhere)
	ts.srv.CloseSockets("link:" + elsewhere.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := conn.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "revoked") {
		t.Fatalf("after another replica's revoke the socket read %v, want closed saying the link was revoked", err)
	}
}

// TestAnotherReplicasCloseIsCheckedAgainstTheStore (issue 33: control messages are pointers): a
// "close the sockets of link X" from the relay closes nothing while the stored link is active
// (a forged or mistaken message), and closes them, saying why, once the store says the link was
// revoked (by the replica that sent it).
func TestAnotherReplicasCloseIsCheckedAgainstTheStore(t *testing.T) {
	spy := &peersSpy{}
	ts, sid := shareServerConfig(t, func(c *web.Config, _ *http.Server) { c.Peers = spy })
	var link struct{ ID, URL string }
	ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "viewer"}, &link)
	c := reviewer(t, ts, link.URL, "Vic")
	u, _ := url.Parse(link.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+u.Path+"/live", &websocket.DialOptions{HTTPClient: c})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if _, _, err := conn.Read(ctx); err != nil { // the resync fragment
		t.Fatal(err)
	}
	spy.tell("close", "link:"+link.ID)
	spy.tell("close", "login:"+strings.Repeat("0", 64))
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	_, _, err = conn.Read(short)
	cancelShort()
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		t.Fatalf("a relayed close of an active link closed its socket: %v", err)
	}
	// The read's deadline ended the socket; a new one stays for the real revoke.
	conn, _, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+u.Path+"/live", &websocket.DialOptions{HTTPClient: c})
	if err != nil {
		t.Fatalf("the link stopped working after a relayed close: %v", err)
	}
	defer conn.CloseNow()
	if _, _, err := conn.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.db.RevokeShare(ctx, link.ID, time.Now()); err != nil { // as the other replica did
		t.Fatal(err)
	}
	spy.tell("close", "link:"+link.ID)
	_, _, err = conn.Read(ctx)
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "revoked") {
		t.Fatalf("after the stored revoke and the relayed close the socket read %v, want closed saying revoked", err)
	}
}

// TestShareLinksAreBuiltFromThePublicURLNotTheHostHeader (issue 33): with -public-url set, the
// share panel's and the JSON API's links are on it, whatever Host the request named; a forged
// Host never reaches a link the owner copies and sends to someone.
func TestShareLinksAreBuiltFromThePublicURLNotTheHostHeader(t *testing.T) {
	const public = "https://countersign.example.com/cs"
	ts, sid := shareServerConfig(t, func(c *web.Config, _ *http.Server) { c.PublicURL = public })
	do := func(path, contentType, body string) string {
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
		req.Host = "evil.example"
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode/100 != 2 {
			t.Fatalf("POST %s = %d: %s", path, res.StatusCode, b)
		}
		return string(b)
	}
	panel := do("/sessions/"+sid+"/shares", "application/x-www-form-urlencoded", url.Values{"role": {"viewer"}, "label": {"v"}}.Encode())
	if !strings.Contains(panel, public+"/r/") || strings.Contains(panel, "evil.example") {
		t.Errorf("the share panel's link is not on -public-url, or names the forged Host:\n%s", panel)
	}
	api := do("/api/sessions/"+sid+"/shares", "application/json", `{"role":"viewer"}`)
	if !strings.Contains(api, `"url": "`+public+`/r/`) || strings.Contains(api, "evil.example") {
		t.Errorf("the API's share link is not on -public-url, or names the forged Host: %s", api)
	}
}
