package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/notify"
	"countersign/internal/render"
	"countersign/internal/store/sqlite"
	"countersign/internal/web"
)

var decisionKey, _ = notify.NewKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")

// decisionLinks seals decision-link tokens as the server does with its share key.
var decisionLinks, _ = notify.NewLinkTokens([]byte("the server's own key, 32 bytes!!"))

// linkToken is the token of d's decision link, opened from its outbox row.
func linkToken(t *testing.T, d notify.Delivery) string {
	t.Helper()
	token, err := decisionLinks.TokenOf(d)
	if err != nil {
		t.Fatalf("delivery %s: %v", d.ID, err)
	}
	return token
}

var aliceHook = notify.Receiver{ID: "wh-alice", Name: "alice", URL: "http://127.0.0.1:1/never", Format: notify.FormatJSON}

// linkEnv is a test server whose store makes decision links for alice, a session parked on an
// approval of shell {"command": command}, and alice's link to it.
type linkEnv struct {
	*testServer
	sid, aid, token string
	events          *websocket.Conn
}

func newLinkEnv(t *testing.T, command string, agentCfg func(*agent.Config)) *linkEnv {
	t.Helper()
	return newLinkEnvServing(t, command, agentCfg, []notify.Receiver{aliceHook})
}

// newLinkEnvServing is newLinkEnv with the web server's Config.Receivers set to served (the
// store still makes alice's links).
func newLinkEnvServing(t *testing.T, command string, agentCfg func(*agent.Config), served []notify.Receiver) *linkEnv {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"command": command})
	script := `{"steps":[
	  {"content":[{"type":"toolCall","id":"c1","name":"shell","arguments":` + string(args) + `}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"Done."}],"stopReason":"stop"}]}`
	ts := newTestServerAgent(t, map[string]string{"one": script}, func(c *web.Config, _ *http.Server) {
		c.Store.(*sqlite.DB).SetNotify([]notify.Receiver{aliceHook}, decisionLinks, nil)
		c.Receivers = served
	}, agentCfg)
	e := &linkEnv{testServer: ts}
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "linked", "model": "faux:one"}, &sess)
	e.sid = sess.ID
	e.events = ts.events(t, sess.ID)
	next(t, e.events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	e.aid = next(t, e.events, "approval_requested")["approval"].(map[string]any)["id"].(string)
	ds, err := ts.db.Deliveries(context.Background(), sess.ID)
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries %+v, %v", ds, err)
	}
	e.token = linkToken(t, ds[0])
	return e
}

// do sends a request with no cookie (a fresh browser) and returns status and body.
func (e *linkEnv) do(t *testing.T, method, path string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, e.URL+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

var htmx = http.Header{"Hx-Request": {"true"}}

func (e *linkEnv) approval(t *testing.T) gate.Approval {
	t.Helper()
	a, err := e.db.Approval(context.Background(), e.aid)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestADecisionLinkApprovesOnceAsItsRecipient(t *testing.T) {
	e := newLinkEnv(t, "touch x", nil)
	st, page := e.do(t, "GET", "/d/"+e.token, nil, nil)
	if st != 200 || !strings.Contains(page, `aria-label="Approval required: shell"`) || !strings.Contains(page, "touch x") ||
		!strings.Contains(page, "Deciding as <strong>alice</strong>") || !strings.Contains(page, `hx-post="/d/`+e.token+`"`) {
		t.Fatalf("GET = %d:\n%s", st, page)
	}
	for _, absent := range []string{"Always allow", "data-action=\"edit-arguments\"", "Approve for session", "Sessions</a>"} {
		if strings.Contains(page, absent) {
			t.Errorf("the link's page offers %q", absent)
		}
	}
	st, body := e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"approve"}}, htmx)
	if st != 200 || !strings.Contains(body, "Done: approved by alice") {
		t.Fatalf("POST = %d %s", st, body)
	}
	if end := next(t, e.events, "tool_execution_end"); end["toolCallId"] != "c1" {
		t.Errorf("tool_execution_end %v", end)
	}
	a := e.approval(t)
	if a.Status != gate.Approved || a.DecidedBy != "alice" || a.DecidedVia == nil || a.DecidedVia.LinkID != "webhook:wh-alice" || e.runs.Load() != 1 {
		t.Errorf("approval %+v via %+v, runs %d", a, a.DecidedVia, e.runs.Load())
	}
	// The audit shows the recipient.
	req, _ := http.NewRequest("GET", e.URL+"/sessions/"+e.sid+"/audit", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, _ := http.DefaultClient.Do(req)
	audit, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(audit), "alice") || !strings.Contains(string(audit), "Webhook deliveries") {
		t.Errorf("the audit page does not name alice or list the deliveries")
	}

	t.Run("a second use is refused and the page says it was used", func(t *testing.T) {
		st, body := e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"deny"}}, htmx)
		if st != http.StatusConflict || !strings.Contains(body, "already used") {
			t.Errorf("second POST = %d %s", st, body)
		}
		st, page := e.do(t, "GET", "/d/"+e.token, nil, nil)
		if st != 200 || !strings.Contains(page, "This link was already used. The call was approved by alice at") || strings.Contains(page, "<form") {
			t.Errorf("GET after use = %d %s", st, page)
		}
		if a := e.approval(t); a.Status != gate.Approved || e.runs.Load() != 1 {
			t.Errorf("approval %s, runs %d", a.Status, e.runs.Load())
		}
	})
	t.Run("a tampered or unknown token is a bare 404", func(t *testing.T) {
		flip := "a"
		if strings.HasSuffix(e.token, "a") {
			flip = "b"
		}
		for _, tok := range []string{e.token[:len(e.token)-1] + flip, strings.ToUpper(e.token), e.token + "x", "nothing"} {
			for _, m := range []string{"GET", "POST"} {
				st, body := e.do(t, m, "/d/"+tok, url.Values{"decision": {"approve"}}, nil)
				if st != http.StatusNotFound || strings.Contains(body, "alice") || strings.Contains(body, "linked") {
					t.Errorf("%s /d/%s = %d %s", m, tok, st, body)
				}
			}
		}
	})
}

func TestADecisionLinkDeniesWithTheRecipientsReason(t *testing.T) {
	e := newLinkEnv(t, "rm -rf /", nil)
	// Only approve or deny: a link may not approve for the session, and asking does not spend it.
	if st, _ := e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"approve_session"}}, htmx); st != http.StatusBadRequest {
		t.Errorf("approve_session = %d, want 400", st)
	}
	st, body := e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"deny"}, "reason": {"not on prod"}}, htmx)
	if st != 200 || !strings.Contains(body, "denied by alice") {
		t.Fatalf("deny = %d %s", st, body)
	}
	if a := e.approval(t); a.Status != gate.Denied || a.DecidedBy != "alice" || a.Reason != "not on prod" || e.runs.Load() != 0 {
		t.Errorf("approval %+v, runs %d", a, e.runs.Load())
	}
	// A plain form post (no JavaScript) is sent back to the page, which says what happened.
	st, _ = e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"deny"}}, nil)
	if st != http.StatusConflict {
		t.Errorf("plain POST after use = %d, want 409", st)
	}
}

func TestADecisionLinkIsDeadOnceTheApprovalIsResolved(t *testing.T) {
	t.Run("the owner decided", func(t *testing.T) {
		e := newLinkEnv(t, "touch x", nil)
		if st := e.call(t, "POST", "/api/approvals/"+e.aid+"/decision", map[string]string{"decision": "deny"}, nil); st != 200 {
			t.Fatalf("owner decision = %d", st)
		}
		st, page := e.do(t, "GET", "/d/"+e.token, nil, nil)
		if st != 200 || !strings.Contains(page, "This link no longer decides anything: the call was denied by owner") || strings.Contains(page, "<form") {
			t.Errorf("GET = %d %s", st, page)
		}
		if st, _ := e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"approve"}}, htmx); st != http.StatusConflict {
			t.Errorf("POST = %d, want 409", st)
		}
		if a := e.approval(t); a.Status != gate.Denied || a.DecidedBy != "owner" || e.runs.Load() != 0 {
			t.Errorf("approval %+v, runs %d", a, e.runs.Load())
		}
	})
	t.Run("it timed out", func(t *testing.T) {
		e := newLinkEnv(t, "touch x", func(c *agent.Config) { c.ApprovalTimeout = 300 * time.Millisecond })
		next(t, e.events, "approval_resolved")
		st, page := e.do(t, "GET", "/d/"+e.token, nil, nil)
		if st != 200 || !strings.Contains(page, "the call was timed out") {
			t.Errorf("GET = %d %s", st, page)
		}
		if st, _ := e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"approve"}}, htmx); st != http.StatusConflict {
			t.Errorf("POST = %d, want 409", st)
		}
		ds, _ := e.db.Deliveries(context.Background(), e.sid)
		if len(ds) != 2 || ds[1].Event != notify.TimedOut {
			t.Errorf("deliveries %+v, want the request and its timeout", ds)
		}
		if e.runs.Load() != 0 {
			t.Errorf("runs %d", e.runs.Load())
		}
	})
}

func TestACrossSitePostToADecisionLinkIsRefused(t *testing.T) {
	e := newLinkEnv(t, "touch x", nil)
	for name, h := range map[string]http.Header{
		"Sec-Fetch-Site cross-site": {"Sec-Fetch-Site": {"cross-site"}},
		"a foreign Origin":          {"Origin": {"https://evil.example"}},
	} {
		if st, _ := e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"approve"}}, h); st != http.StatusForbidden {
			t.Errorf("%s: POST = %d, want 403", name, st)
		}
	}
	if a := e.approval(t); a.Status != gate.Pending || e.runs.Load() != 0 {
		t.Errorf("approval %s, runs %d; want pending, none", a.Status, e.runs.Load())
	}
	// The link is still good for its recipient.
	if st, _ := e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"approve"}}, htmx); st != 200 {
		t.Errorf("POST from the page = %d", st)
	}
}

func TestADecisionLinkPageShowsMarkupInArgumentsAsText(t *testing.T) {
	e := newLinkEnv(t, `<script>alert(1)</script><img src=x onerror=alert(2)>`, nil)
	st, page := e.do(t, "GET", "/d/"+e.token, nil, nil)
	if st != 200 || strings.Contains(page, "<script>alert") || strings.Contains(page, "<img src=x") || !strings.Contains(page, "alert(1)") {
		t.Errorf("GET = %d; the arguments are not escaped:\n%s", st, page)
	}
}

// TestTheGateNeverWaitsForAWebhookReceiver runs the real worker against a receiver that holds
// its request: the prompt is up (approval_requested) while the receiver has the event and has
// not answered; the link in the payload then decides.
func TestTheGateNeverWaitsForAWebhookReceiver(t *testing.T) {
	got := make(chan []byte, 4)
	release := make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
		<-release
	}))
	defer recv.Close()
	defer close(release)
	hook, _ := notify.ParseReceiver("carol=" + recv.URL)
	var worker *notify.Worker
	ts := newTestServerAgent(t, map[string]string{"one": oneCall}, func(c *web.Config, _ *http.Server) {
		db := c.Store.(*sqlite.DB)
		worker = notify.NewWorker(notify.WorkerConfig{Outbox: db, Receivers: []notify.Receiver{hook}, Key: decisionKey, Links: decisionLinks, PublicURL: "http://cs.test", Diff: render.UnifiedDiff})
		db.SetNotify([]notify.Receiver{hook}, decisionLinks, worker.Wake)
		c.Receivers = []notify.Receiver{hook}
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); worker.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "held", "model": "faux:one"}, &sess)
	c := ts.events(t, sess.ID)
	next(t, c, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	next(t, c, "approval_requested")
	var p notify.Payload
	select {
	case b := <-got:
		json.Unmarshal(b, &p)
	case <-time.After(30 * time.Second):
		t.Fatal("the receiver got nothing")
	}
	// The receiver still holds the request: the approval is pending and promptable now.
	var pending struct{ Approvals []map[string]any }
	ts.call(t, "GET", "/api/sessions/"+sess.ID+"/approvals?status=pending", nil, &pending)
	if len(pending.Approvals) != 1 || p.Data.Summary.Command != "touch x" {
		t.Fatalf("pending %v, payload %+v", pending, p)
	}
	path := strings.TrimPrefix(p.Data.Links.Decision, "http://cs.test")
	req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader("decision=approve"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("HX-Request", "true")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("deciding through the payload's link: %v %v", res, err)
	}
	res.Body.Close()
	next(t, c, "tool_execution_end")
	if ts.runs.Load() != 1 {
		t.Errorf("runs %d", ts.runs.Load())
	}
}

// TestADecisionLinksPageIsNeverCached (found in review): the page holds the whole prompt, a
// command or a diff; no browser or proxy cache keeps it.
func TestADecisionLinksPageIsNeverCached(t *testing.T) {
	e := newLinkEnv(t, "touch x", nil)
	req, _ := http.NewRequest("GET", e.URL+"/d/"+e.token, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("GET /d/… = %d, Cache-Control %q; want 200 and no-store", res.StatusCode, res.Header.Get("Cache-Control"))
	}
}

// TestADecisionLinkOnACallThatNeedsTwoSaysTheVoteCounted (SPEC §15): on a call that needs two
// approvers, a recipient's approval through a decision link is a vote; the answer says it was
// counted and that the call waits for the others (not "Done: pending"), and the call waits.
func TestADecisionLinkOnACallThatNeedsTwoSaysTheVoteCounted(t *testing.T) {
	e := newLinkEnv(t, "touch x", func(c *agent.Config) {
		c.PolicyRules = []gate.Rule{{ID: "policy:two", Effect: gate.Ask, Tool: "shell", Approvers: 2,
			Scope: gate.ScopeServer, Source: gate.SourcePolicyFile, CreatedBy: "p.json"}}
	})
	if a := e.approval(t); a.Approvers != 2 {
		t.Fatalf("the approval needs %d approvers, want 2", a.Approvers)
	}
	st, body := e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"approve"}}, htmx)
	if st != 200 || !strings.Contains(body, "Your approval is counted (1 of 2 approvals — approved by alice); the call waits for the others.") || strings.Contains(body, "Done: pending") {
		t.Fatalf("POST = %d %s", st, body)
	}
	if a := e.approval(t); a.Status != gate.Pending || e.runs.Load() != 0 {
		t.Fatalf("after one of two approvals: %s, %d runs; want pending, none", a.Status, e.runs.Load())
	}
}

// TestADecisionLinkOfARemovedReceiverIsNotFound (issue 33): a server started without a
// receiver (another replica may still make its links) answers its links 404 and decides nothing.
func TestADecisionLinkOfARemovedReceiverIsNotFound(t *testing.T) {
	e := newLinkEnvServing(t, "ls", nil, nil)
	if st, _ := e.do(t, "GET", "/d/"+e.token, nil, nil); st != http.StatusNotFound {
		t.Errorf("GET = %d, want 404", st)
	}
	if st, _ := e.do(t, "POST", "/d/"+e.token, url.Values{"decision": {"approve"}}, nil); st != http.StatusNotFound {
		t.Errorf("POST approve = %d, want 404", st)
	}
	if a := e.approval(t); a.Status != gate.Pending {
		t.Errorf("the approval is %s, want pending", a.Status)
	}
}
