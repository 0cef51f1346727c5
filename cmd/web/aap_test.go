package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/aap/aaptest"
)

// Door 3 (SPEC §18, issue 32): the Agent Approval Protocol v1 against the server binary as it
// runs, on a SQLite file. Every request the suite sends and every answer it gets is checked
// against the protocol's own schemas (internal/aap/aaptest: the OpenAPI contract's
// components.schemas).

// aapClient is an AAP instance of server p: an api connection's token.
type aapClient struct {
	t     *testing.T
	p     *proc
	token string
	id    string // the connection's id
}

var aapKeySeq atomic.Int64

// newAAPClient makes an api connection on p through the owner's API.
func newAAPClient(t *testing.T, p *proc, kind string) *aapClient {
	t.Helper()
	var conn struct {
		Token      string
		Connection struct{ ID string }
	}
	p.mustAPI(t, 201, "POST", "/api/connections", map[string]string{"label": "sdk agent " + kind, "kind": kind}, &conn)
	return &aapClient{t: t, p: p, token: conn.Token, id: conn.Connection.ID}
}

// aapAnswer is one exchange's answer.
type aapAnswer struct {
	status    int
	body      []byte
	requestID string
	took      time.Duration
}

// do sends method path with body (nil: none; a string: as it is) and headers, as this instance
// (token "" sends none), and checks the answer's shape: X-Request-ID a UUID, and an error body an
// ErrorResponse whose request_id is that header.
func (c *aapClient) do(method, path, token string, body any, headers ...string) aapAnswer {
	c.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.p.base+"/aap"+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a := aapAnswer{status: res.StatusCode, body: b, requestID: res.Header.Get("X-Request-ID"), took: time.Since(start)}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(a.requestID) {
		c.t.Errorf("%s %s: X-Request-ID %q is not a UUID", method, path, a.requestID)
	}
	if a.status >= 400 {
		if err := aaptest.Validate("ErrorResponse", b); err != nil {
			c.t.Errorf("%s %s = %d: %v", method, path, a.status, err)
		}
		var e struct {
			Error struct {
				RequestID string `json:"request_id"`
			}
		}
		_ = json.Unmarshal(b, &e)
		if e.Error.RequestID != a.requestID {
			c.t.Errorf("%s %s: error.request_id %q, X-Request-ID %q", method, path, e.Error.RequestID, a.requestID)
		}
		if bytes.Contains(b, []byte(c.token)) || (token != "" && bytes.Contains(b, []byte(token))) {
			c.t.Errorf("%s %s: the error holds the credential: %s", method, path, b)
		}
	}
	return a
}

// create posts a CreateApprovalRequest (checked against the schema first) with key.
func (c *aapClient) create(key string, body string) aapAnswer {
	c.t.Helper()
	if err := aaptest.Validate("CreateApprovalRequest", []byte(body)); err != nil {
		c.t.Fatalf("the suite's own request: %v", err)
	}
	return c.do("POST", "/v1/requests", c.token, body, "Idempotency-Key", key)
}

// request decodes an ApprovalRequest answer, checked against schema (ApprovalRequest or
// CancelledApprovalRequest), requiring status.
func (c *aapClient) request(a aapAnswer, status int, schema string) aapRequest {
	c.t.Helper()
	if a.status != status {
		c.t.Fatalf("answer %d %s, want %d", a.status, a.body, status)
	}
	if err := aaptest.Validate(schema, a.body); err != nil {
		c.t.Fatal(err)
	}
	var r aapRequest
	if err := json.Unmarshal(a.body, &r); err != nil {
		c.t.Fatal(err)
	}
	return r
}

type aapRequest struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Status    string          `json:"status"`
	CreatedAt string          `json:"created_at"`
	Deadline  string          `json:"deadline_at"`
	Decision  *struct {
		Status    string `json:"status"`
		Note      string `json:"note"`
		DecidedAt string `json:"decided_at"`
		ExpiresAt string `json:"expires_at"`
	} `json:"decision"`
}

func errCode(a aapAnswer) string {
	var e struct{ Error struct{ Type, Code string } }
	_ = json.Unmarshal(a.body, &e)
	return e.Error.Type + "/" + e.Error.Code
}

func newKey() string { return fmt.Sprintf("key-%d-%d", time.Now().UnixNano(), aapKeySeq.Add(1)) }

// pendingApprovalFor is the id of the pending approval of the call whose arguments hold marker,
// found through the owner's API (the sessions, then each one's pending approvals).
func pendingApprovalFor(t *testing.T, p *proc, marker string) string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var list struct{ Sessions []struct{ ID string } }
		p.mustAPI(t, 200, "GET", "/api/sessions", nil, &list)
		for _, s := range list.Sessions {
			var as struct {
				Approvals []struct {
					ID        string
					Arguments json.RawMessage
				}
			}
			p.mustAPI(t, 200, "GET", "/api/sessions/"+s.ID+"/approvals?status=pending", nil, &as)
			for _, a := range as.Approvals {
				if strings.Contains(string(a.Arguments), marker) {
					return a.ID
				}
			}
		}
	}
	t.Fatalf("no pending approval for %s", marker)
	return ""
}

// TestAAPContract is acceptance 1: create, replay, conflicting replay, retrieve, a long poll that
// ends pending, one woken by a decision (approve with expires_at; deny with its note), cancel,
// cancel of a terminal request (409), unknown fields (400), bad credentials (401), unknown and
// other instances' ids (404) — every message valid against the protocol's schemas.
func TestAAPContract(t *testing.T) {
	f := newServerFiles(t)
	p := startServing(t, f.args("127.0.0.1:0")...)
	c := newAAPClient(t, p, "api")

	// Create: 201, pending, the call as sent.
	key := newKey()
	body := `{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":4900,"currency":"GBP"},"timeout":"30m","agent_reasoning":"The customer was charged twice.","context":{"session_id":"contract"}}`
	r := c.request(c.create(key, body), 201, "ApprovalRequest")
	if r.Status != "pending" || r.Tool != "issue_refund" || r.Decision != nil {
		t.Fatalf("created: %+v", r)
	}
	created, _ := time.Parse(time.RFC3339, r.CreatedAt)
	deadline, _ := time.Parse(time.RFC3339, r.Deadline)
	if deadline.Sub(created) != 30*time.Minute {
		t.Errorf("deadline_at %s is not created_at %s + 30m", r.Deadline, r.CreatedAt)
	}

	// Replay: the same parsed values in another spelling → 200, the same request.
	replay := `{ "context":{"session_id":"contract"}, "timeout":"30m", "arguments":{"currency":"GBP","amount":4900.0,"payment_id":"payment_123"},
		"agent_reasoning":"The customer was charged twice.", "tool":"issue_refund" }`
	if r2 := c.request(c.create(key, replay), 200, "ApprovalRequest"); r2.ID != r.ID || r2.Status != "pending" {
		t.Errorf("replay: %+v, want request %s", r2, r.ID)
	}
	// Conflicting replay: 409 idempotency_conflict, the original unchanged.
	conflict := c.create(key, `{"tool":"issue_refund","arguments":{"payment_id":"payment_123","amount":9999,"currency":"GBP"},"timeout":"30m"}`)
	if conflict.status != 409 || errCode(conflict) != "conflict/idempotency_conflict" {
		t.Errorf("conflicting replay: %d %s", conflict.status, conflict.body)
	}
	// Retrieve.
	got := c.request(c.do("GET", "/v1/requests/"+r.ID, c.token, nil), 200, "ApprovalRequest")
	if got.ID != r.ID || got.Status != "pending" || !strings.Contains(string(got.Arguments), `"amount":4900`) {
		t.Errorf("retrieve: %+v", got)
	}
	// A long poll that ends pending.
	a := c.do("GET", "/v1/requests/"+r.ID+"?wait=1s", c.token, nil)
	if got := c.request(a, 200, "ApprovalRequest"); got.Status != "pending" || a.took < 900*time.Millisecond || a.took > 5*time.Second {
		t.Errorf("wait=1s: %s after %v", got.Status, a.took)
	}
	// A long poll woken by an approval: approved, with expires_at after decided_at.
	approval := pendingApprovalFor(t, p, "payment_123")
	polled := make(chan aapAnswer, 1)
	go func() { polled <- c.do("GET", "/v1/requests/"+r.ID+"?wait=30s", c.token, nil) }()
	time.Sleep(300 * time.Millisecond)
	decided := time.Now()
	p.mustAPI(t, 200, "POST", "/api/approvals/"+approval+"/decision", map[string]string{"decision": "approve", "reason": "The duplicate charge has been confirmed."}, nil)
	var woke aapAnswer
	select {
	case woke = <-polled:
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll did not wake")
	}
	if since := time.Since(decided); since > 2*time.Second {
		t.Errorf("the long poll answered %v after the decision", since)
	}
	ap := c.request(woke, 200, "ApprovalRequest")
	if ap.Status != "approved" || ap.Decision == nil || ap.Decision.ExpiresAt <= ap.Decision.DecidedAt || ap.Decision.Note != "The duplicate charge has been confirmed." {
		t.Errorf("woken: %s", woke.body)
	}
	// A replay of an approved request: 200, approved, the same decision.
	if r3 := c.request(c.create(key, body), 200, "ApprovalRequest"); r3.Status != "approved" || r3.Decision.ExpiresAt != ap.Decision.ExpiresAt {
		t.Errorf("replay after approval: %+v", r3)
	}
	// Cancel of a terminal request: 409 already_terminal, unchanged.
	if a := c.do("DELETE", "/v1/requests/"+r.ID, c.token, nil); a.status != 409 || errCode(a) != "conflict/already_terminal" {
		t.Errorf("cancel approved: %d %s", a.status, a.body)
	}

	// A denial carries the person's note.
	denyKey := newKey()
	dr := c.request(c.create(denyKey, `{"tool":"delete_customer","arguments":{"customer":"cus_deny_me"},"timeout":"10m"}`), 201, "ApprovalRequest")
	polled = make(chan aapAnswer, 1)
	go func() { polled <- c.do("GET", "/v1/requests/"+dr.ID+"?wait=30s", c.token, nil) }()
	p.mustAPI(t, 200, "POST", "/api/approvals/"+pendingApprovalFor(t, p, "cus_deny_me")+"/decision", map[string]string{"decision": "deny", "reason": "Not this customer."}, nil)
	if d := c.request(<-polled, 200, "ApprovalRequest"); d.Status != "denied" || d.Decision == nil || !strings.Contains(d.Decision.Note, "Not this customer.") || d.Decision.ExpiresAt != "" {
		t.Errorf("denied: %+v", d)
	}

	// Cancel: 200 cancelled (a waiting long poll answers it), again 200.
	cr := c.request(c.create(newKey(), `{"tool":"send_email","arguments":{"to":"cancel@example.com"},"timeout":"5m"}`), 201, "ApprovalRequest")
	polled = make(chan aapAnswer, 1)
	go func() { polled <- c.do("GET", "/v1/requests/"+cr.ID+"?wait=30s", c.token, nil) }()
	time.Sleep(200 * time.Millisecond)
	if x := c.request(c.do("DELETE", "/v1/requests/"+cr.ID, c.token, nil), 200, "CancelledApprovalRequest"); x.Status != "cancelled" {
		t.Errorf("cancel: %+v", x)
	}
	if x := c.request(<-polled, 200, "ApprovalRequest"); x.Status != "cancelled" {
		t.Errorf("the long poll on a cancelled request: %+v", x)
	}
	if x := c.request(c.do("DELETE", "/v1/requests/"+cr.ID, c.token, nil), 200, "CancelledApprovalRequest"); x.Status != "cancelled" {
		t.Errorf("cancel again: %+v", x)
	}

	// Unknown fields, in the body and in a nested protocol object: 400, nothing created.
	for _, bad := range []string{
		`{"tool":"t","arguments":{},"timeout":"30m","delivery":{"url":"https://x"}}`,
		`{"tool":"t","arguments":{},"timeout":"30m","Tool":"u"}`,
	} {
		if aaptest.Validate("CreateApprovalRequest", []byte(bad)) == nil {
			t.Errorf("the schema accepts %s", bad)
		}
		if a := c.do("POST", "/v1/requests", c.token, bad, "Idempotency-Key", newKey()); a.status != 400 || errCode(a) != "invalid_request/invalid_request" {
			t.Errorf("unknown field %s: %d %s", bad, a.status, a.body)
		}
	}
	// Other bad input: never a request, never an allow.
	for _, bad := range []struct{ body, key string }{
		{`{"tool":"t","arguments":{},"timeout":"30m"}`, ""},                           // no Idempotency-Key
		{`{"tool":"t","arguments":{},"timeout":"30 minutes"}`, newKey()},              // not a Duration
		{`{"tool":"t","arguments":[],"timeout":"30m"}`, newKey()},                     // arguments not an object
		{`{"tool":"","arguments":{},"timeout":"30m"}`, newKey()},                      // no tool
		{`{"tool":"t","arguments":{},"timeout":"30m"} {"tool":"u"}`, newKey()},        // two documents
		{`{"tool":"t","arguments":{},"timeout":"0m"}`, newKey()},                      // not positive
		{`{"tool":"t","arguments":{},"timeout":"30m","context":"x"}`, newKey()},       // context not an object
		{`{"tool":"t","arguments":{},"timeout":"30m","agent_reasoning":1}`, newKey()}, // wrong type
	} {
		var a aapAnswer
		if bad.key == "" {
			a = c.do("POST", "/v1/requests", c.token, bad.body)
		} else {
			a = c.do("POST", "/v1/requests", c.token, bad.body, "Idempotency-Key", bad.key)
		}
		if a.status != 400 {
			t.Errorf("%s (key %q): %d %s, want 400", bad.body, bad.key, a.status, a.body)
		}
	}
	if a := c.do("GET", "/v1/requests/"+r.ID+"?wait=forever", c.token, nil); a.status != 400 {
		t.Errorf("wait=forever: %d", a.status)
	}
	big := `{"tool":"t","timeout":"30m","arguments":{"x":"` + strings.Repeat("a", 1<<20) + `"}}`
	if a := c.do("POST", "/v1/requests", c.token, big, "Idempotency-Key", newKey()); a.status != 413 {
		t.Errorf("oversized body: %d", a.status)
	}

	// Bad credentials: 401 authentication, whatever the route.
	hook := newAAPClient(t, p, "claude-code") // another kind's token
	revoked := newAAPClient(t, p, "api")
	p.mustAPI(t, 200, "DELETE", "/api/connections/"+revoked.id, nil, nil)
	for _, tok := range []string{"", "nope", "csa_" + strings.Repeat("x", 40), hook.token, revoked.token, testToken} {
		for _, q := range []struct{ method, path string }{{"POST", "/v1/requests"}, {"GET", "/v1/requests/" + r.ID}, {"DELETE", "/v1/requests/" + r.ID}} {
			a := c.do(q.method, q.path, tok, `{"tool":"t","arguments":{},"timeout":"30m"}`, "Idempotency-Key", newKey())
			if a.status != 401 || !strings.HasPrefix(errCode(a), "authentication/") {
				t.Errorf("%s %s with token %.8q: %d %s, want 401", q.method, q.path, tok, a.status, a.body)
			}
		}
	}

	// Unknown ids, malformed ids and another instance's request: 404 not_found.
	other := newAAPClient(t, p, "api")
	for _, id := range []string{"7ab8c8ec-7b2d-4fd6-9b52-752f9515eb71", "not-a-uuid"} {
		if a := c.do("GET", "/v1/requests/"+id, c.token, nil); a.status != 404 || errCode(a) != "not_found/not_found" {
			t.Errorf("GET %s: %d %s", id, a.status, a.body)
		}
	}
	for _, m := range []string{"GET", "DELETE"} {
		if a := other.do(m, "/v1/requests/"+dr.ID, other.token, nil); a.status != 404 {
			t.Errorf("%s another instance's request: %d %s", m, a.status, a.body)
		}
	}
	// The other instance's keys are its own: the same key creates its own request.
	if o := other.request(other.create(key, body), 201, "ApprovalRequest"); o.ID == r.ID {
		t.Errorf("another instance's key replayed this one's request")
	}
}

// TestAAPRestart is acceptance 5: a request pending when the server is killed is pending after
// the restart, a long poll reconnecting gets the decision made then, and a request whose timeout
// passes (the last process's included) becomes expired, read or not.
func TestAAPRestart(t *testing.T) {
	f := newServerFiles(t)
	p := startServing(t, f.args("127.0.0.1:0")...)
	c := newAAPClient(t, p, "api")
	key := newKey()
	body := `{"tool":"deploy","arguments":{"service":"billing-restart"},"timeout":"30m"}`
	r := c.request(c.create(key, body), 201, "ApprovalRequest")
	short := c.request(c.create(newKey(), `{"tool":"deploy","arguments":{"service":"expires-soon"},"timeout":"3s"}`), 201, "ApprovalRequest")
	unread := c.request(c.create(newKey(), `{"tool":"deploy","arguments":{"service":"expires-unread"},"timeout":"3s"}`), 201, "ApprovalRequest")
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.exited

	p2 := startServing(t, f.args("127.0.0.1:0")...)
	c.p = p2
	if got := c.request(c.do("GET", "/v1/requests/"+r.ID, c.token, nil), 200, "ApprovalRequest"); got.Status != "pending" {
		t.Fatalf("after the restart: %+v", got)
	}
	if got := c.request(c.create(key, body), 200, "ApprovalRequest"); got.ID != r.ID || got.Status != "pending" {
		t.Errorf("replay after the restart: %+v", got)
	}
	polled := make(chan aapAnswer, 1)
	go func() { polled <- c.do("GET", "/v1/requests/"+r.ID+"?wait=30s", c.token, nil) }()
	time.Sleep(200 * time.Millisecond)
	p2.mustAPI(t, 200, "POST", "/api/approvals/"+pendingApprovalFor(t, p2, "billing-restart")+"/decision", map[string]string{"decision": "approve"}, nil)
	if got := c.request(<-polled, 200, "ApprovalRequest"); got.Status != "approved" || got.Decision == nil || got.Decision.ExpiresAt == "" {
		t.Errorf("the reconnected long poll: %+v", got)
	}

	// The short one: a long poll ends at its deadline, expired.
	a := c.do("GET", "/v1/requests/"+short.ID+"?wait=30s", c.token, nil)
	if got := c.request(a, 200, "ApprovalRequest"); got.Status != "expired" || got.Decision == nil || got.Decision.Status != "expired" || a.took > 10*time.Second {
		t.Errorf("past its timeout: %s after %v", a.body, a.took)
	}
	// The unread one is expired by the server itself (its sweep, every second, after its
	// deadline_at): its approval left the inbox as timed out.
	unreadStatus := func() string {
		var list struct{ Sessions []struct{ ID string } }
		p2.mustAPI(t, 200, "GET", "/api/sessions", nil, &list)
		for _, s := range list.Sessions {
			var as struct {
				Approvals []struct {
					Status    string
					Arguments json.RawMessage
				}
			}
			p2.mustAPI(t, 200, "GET", "/api/sessions/"+s.ID+"/approvals", nil, &as)
			for _, x := range as.Approvals {
				if strings.Contains(string(x.Arguments), "expires-unread") {
					return x.Status
				}
			}
		}
		return "gone"
	}
	st := unreadStatus()
	for deadline := time.Now().Add(10 * time.Second); st == "pending" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st = unreadStatus()
	}
	if st != "timed_out" {
		t.Errorf("the unread request's approval is %s, want timed_out", st)
	}
	if got := c.request(c.do("GET", "/v1/requests/"+unread.ID, c.token, nil), 200, "ApprovalRequest"); got.Status != "expired" {
		t.Errorf("unread: %+v", got)
	}
}

// TestAAPRulesDecideAtCreation: the gate decides AAP requests as any outside call — a policy
// rule naming the request's tool denies it at creation (201, already denied, with the rule as its
// note); "Approve for session" on one request becomes a rule that approves the next request of
// that tool at creation; and nobody can approve one with edited arguments (AAP has none).
func TestAAPRulesDecideAtCreation(t *testing.T) {
	f := newServerFiles(t)
	policy := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(policy, []byte(`{"permissions": {"deny": ["delete_customer"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startServing(t, append(f.args("127.0.0.1:0"), "-policy", policy)...)
	c := newAAPClient(t, p, "api")

	d := c.request(c.create(newKey(), `{"tool":"delete_customer","arguments":{"customer":"cus_1"},"timeout":"30m"}`), 201, "ApprovalRequest")
	if d.Status != "denied" || d.Decision == nil || !strings.Contains(d.Decision.Note, "delete_customer") {
		t.Errorf("a policy deny: %+v", d)
	}

	first := c.request(c.create(newKey(), `{"tool":"send_invoice","arguments":{"invoice":"inv_edit"},"timeout":"30m"}`), 201, "ApprovalRequest")
	id := pendingApprovalFor(t, p, "inv_edit")
	if st, b := p.api(t, "POST", "/api/approvals/"+id+"/decision", map[string]any{"decision": "approve", "arguments": map[string]string{"invoice": "inv_other"}}); st < 400 {
		t.Errorf("an edit of an AAP request: %d %s", st, b)
	}
	p.mustAPI(t, 200, "POST", "/api/approvals/"+id+"/decision", map[string]string{"decision": "approve_session"}, nil)
	if got := c.request(c.do("GET", "/v1/requests/"+first.ID, c.token, nil), 200, "ApprovalRequest"); got.Status != "approved" || !strings.Contains(string(got.Arguments), "inv_edit") {
		t.Errorf("approved for the session: %+v", got)
	}
	// Past its deadline nobody approves a request: it is expired.
	late := c.request(c.create(newKey(), `{"tool":"wire_money","arguments":{"to":"acct_late"},"timeout":"1s"}`), 201, "ApprovalRequest")
	lateID := pendingApprovalFor(t, p, "acct_late")
	lateDeadline, err := time.Parse(time.RFC3339, late.Deadline)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(lateDeadline) + 100*time.Millisecond) // deadline_at rounds up to the second
	if st, b := p.api(t, "POST", "/api/approvals/"+lateID+"/decision", map[string]string{"decision": "approve"}); st != 409 {
		t.Errorf("an approval after the deadline: %d %s, want 409", st, b)
	}
	if got := c.request(c.do("GET", "/v1/requests/"+late.ID, c.token, nil), 200, "ApprovalRequest"); got.Status != "expired" {
		t.Errorf("past its deadline: %+v", got)
	}
	next := c.request(c.create(newKey(), `{"tool":"send_invoice","arguments":{"invoice":"inv_2"},"timeout":"30m"}`), 201, "ApprovalRequest")
	if next.Status != "approved" || next.Decision == nil || next.Decision.ExpiresAt == "" {
		t.Errorf("the next request of the tool: %+v, want approved at creation", next)
	}
}

// TestAAPAcrossReplicas: two replicas on one PostgreSQL database (SPEC §16). A request created
// on one is read on the other; a long poll held on the second wakes, approved, when a person
// decides on the first; a replay on either finds the same request.
func TestAAPAcrossReplicas(t *testing.T) {
	f := newReplicaFiles(t)
	a := startServing(t, f.args()...)
	b := startServing(t, f.args()...)
	ca := newAAPClient(t, a, "api")
	cb := &aapClient{t: t, p: b, token: ca.token, id: ca.id}
	key := newKey()
	body := `{"tool":"deploy","arguments":{"service":"replicated"},"timeout":"30m"}`
	r := ca.request(ca.create(key, body), 201, "ApprovalRequest")
	if got := cb.request(cb.create(key, body), 200, "ApprovalRequest"); got.ID != r.ID {
		t.Fatalf("replay on the other replica: %+v", got)
	}
	polled := make(chan aapAnswer, 1)
	go func() { polled <- cb.do("GET", "/v1/requests/"+r.ID+"?wait=30s", cb.token, nil) }()
	time.Sleep(300 * time.Millisecond)
	decided := time.Now()
	a.mustAPI(t, 200, "POST", "/api/approvals/"+pendingApprovalFor(t, a, "replicated")+"/decision", map[string]string{"decision": "approve"}, nil)
	select {
	case ans := <-polled:
		if got := cb.request(ans, 200, "ApprovalRequest"); got.Status != "approved" || time.Since(decided) > 3*time.Second {
			t.Errorf("the other replica's long poll: %s after %v", got.Status, time.Since(decided))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the other replica's long poll did not wake")
	}
}

// TestAnAAPRequestsCardCountsDownToItsOwnDeadline: a request's prompt counts down to the request's
// deadline (its timeout, here 2 h), never to the server's approval timeout (15 min): nothing in
// the gate waits on the request, and it expires at its own deadline.
func TestAnAAPRequestsCardCountsDownToItsOwnDeadline(t *testing.T) {
	f := newServerFiles(t)
	p := startServing(t, f.args("127.0.0.1:0")...)
	c := newAAPClient(t, p, "api")
	r := c.request(c.create(newKey(), `{"tool":"issue_refund","arguments":{"payment_id":"pay_countdown"},"timeout":"2h"}`), 201, "ApprovalRequest")
	pendingApprovalFor(t, p, "pay_countdown")
	deadline, err := time.Parse(time.RFC3339, r.Deadline)
	if err != nil {
		t.Fatal(err)
	}
	st, page := p.api(t, "GET", "/inbox", nil)
	if st != 200 {
		t.Fatalf("GET /inbox: %d", st)
	}
	want := `datetime="` + deadline.UTC().Format("2006-01-02T15:04:05.000Z07:00") + `"`
	// About 2 h left: created_at rounds up to the second, so up to 2:00:01.
	words := strings.Contains(string(page), "times out in 1:59:") || strings.Contains(string(page), "times out in 2:00:0")
	if !strings.Contains(string(page), want) || !words {
		t.Errorf("the inbox's countdown is not the request's deadline (%s, want %s and about 2 h left)", countdownOf(string(page)), want)
	}
}

// countdownOf is the first countdown element of page, for a failure's message.
func countdownOf(page string) string {
	i := strings.Index(page, `<time class="countdown"`)
	if i < 0 {
		return "no countdown"
	}
	j := strings.Index(page[i:], "</time>")
	if j < 0 {
		return page[i:]
	}
	return page[i : i+j]
}

// TestAnAAPToolNamedLikeAnAgentsReadOnlyToolStillAsks (attacker's review): an approval-API
// request's tool is the developer's own, so a name that is a hook agent's read-only tool
// ("Read", "TodoWrite", "WebSearch") is no reason to allow it: it waits for a person.
func TestAnAAPToolNamedLikeAnAgentsReadOnlyToolStillAsks(t *testing.T) {
	f := newServerFiles(t)
	p := startServing(t, f.args("127.0.0.1:0")...)
	c := newAAPClient(t, p, "api")
	for _, name := range []string{"Read", "TodoWrite", "WebSearch", "BashOutput"} {
		r := c.request(c.create(newKey(), `{"tool":"`+name+`","arguments":{"anything":"DROP TABLE users"},"timeout":"30m"}`), 201, "ApprovalRequest")
		if r.Status != "pending" {
			t.Errorf("a request of %q: %s, want pending (a person decides)", name, r.Status)
		}
	}
}

// TestRevokingAnAPIConnectionCancelsItsPendingRequests (attacker's review): a revoked api
// connection's pending requests are cancelled, as an instance's deletion cancels them — they
// leave the inbox and nobody can approve them for a credential that can no longer read the
// answer.
func TestRevokingAnAPIConnectionCancelsItsPendingRequests(t *testing.T) {
	f := newServerFiles(t)
	p := startServing(t, f.args("127.0.0.1:0")...)
	c := newAAPClient(t, p, "api")
	c.request(c.create(newKey(), `{"tool":"issue_refund","arguments":{"payment_id":"pay_revoked"},"timeout":"30m"}`), 201, "ApprovalRequest")
	id := pendingApprovalFor(t, p, "pay_revoked")
	var list struct{ Connections []struct{ ID, Kind string } }
	p.mustAPI(t, 200, "GET", "/api/connections", nil, &list)
	for _, conn := range list.Connections {
		if conn.Kind == "api" {
			p.mustAPI(t, 200, "DELETE", "/api/connections/"+conn.ID, nil, nil)
		}
	}
	var sessions struct{ Sessions []struct{ ID string } }
	p.mustAPI(t, 200, "GET", "/api/sessions", nil, &sessions)
	status := ""
	for _, sess := range sessions.Sessions {
		var as struct{ Approvals []struct{ ID, Status string } }
		p.mustAPI(t, 200, "GET", "/api/sessions/"+sess.ID+"/approvals", nil, &as)
		for _, a := range as.Approvals {
			if a.ID == id {
				status = a.Status
			}
		}
	}
	if status != "cancelled" {
		t.Errorf("the revoked connection's pending request: %q, want cancelled", status)
	}
	if st, b := p.api(t, "POST", "/api/approvals/"+id+"/decision", map[string]string{"decision": "approve"}); st != 409 {
		t.Errorf("approving it after the revocation: %d %s, want 409", st, b)
	}
}

// TestAnAAPRequestNeverExpiresBeforeItsTimeout (attacker's review): deadline_at is whole seconds
// on the wire, rounded up: a request never expires before its timeout has passed since it was
// sent (rounded down, a "1s" request could expire at once).
func TestAnAAPRequestNeverExpiresBeforeItsTimeout(t *testing.T) {
	f := newServerFiles(t)
	p := startServing(t, f.args("127.0.0.1:0")...)
	c := newAAPClient(t, p, "api")
	for i := range 3 {
		sent := time.Now()
		r := c.request(c.create(newKey(), `{"tool":"wire_money","arguments":{"n":`+strconv.Itoa(i)+`},"timeout":"1s"}`), 201, "ApprovalRequest")
		deadline, err := time.Parse(time.RFC3339, r.Deadline)
		if err != nil {
			t.Fatal(err)
		}
		if deadline.Before(sent.Add(time.Second)) {
			t.Errorf("sent at %s with timeout 1s, deadline_at %s is earlier than a second later", sent.UTC().Format(time.RFC3339Nano), r.Deadline)
		}
		time.Sleep(time.Duration(300*i) * time.Millisecond)
	}
}
