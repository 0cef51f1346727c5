package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"countersign/internal/aap/aaptest"
)

// aapReceiver is a harness's webhook receiver (AAP v1 §7): it knows one registration and its
// secret, verifies every message's Standard Webhooks signature, echoes a verification's challenge
// when echo is set, and answers notifications with the queued statuses (then 204).
type aapReceiver struct {
	t        *testing.T
	srv      *httptest.Server
	secret   string
	reg      string
	mu       sync.Mutex
	echo     bool
	statuses []int
	hits     []aapHit
	arrived  chan struct{}
}

type aapHit struct {
	id, ts string
	body   []byte
	at     time.Time
	valid  bool
}

func newAAPReceiver(t *testing.T, secret, reg string) *aapReceiver {
	r := &aapReceiver{t: t, secret: secret, reg: reg, echo: true, arrived: make(chan struct{}, 100)}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		h := aapHit{id: req.Header.Get("webhook-id"), ts: req.Header.Get("webhook-timestamp"), body: body, at: time.Now(),
			valid: wh.Verify(body, req.Header) == nil}
		r.mu.Lock()
		r.hits = append(r.hits, h)
		echo := r.echo
		status := http.StatusNoContent
		if len(r.statuses) > 0 {
			status, r.statuses = r.statuses[0], r.statuses[1:]
		}
		r.mu.Unlock()
		defer func() { r.arrived <- struct{}{} }()
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		if m["type"] == "webhook.verification" {
			if err := aaptest.Validate("WebhookVerification", body); err != nil {
				t.Error(err)
			}
			if !h.valid || m["registration_id"] != r.reg || !echo {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"challenge": m["challenge"]})
			return
		}
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *aapReceiver) events(typ string) []aapHit {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []aapHit
	for _, h := range r.hits {
		if strings.Contains(string(h.body), `"type":"`+typ+`"`) {
			out = append(out, h)
		}
	}
	return out
}

// TestAAPAsyncDelivery is acceptance 4: an instance provisioned with a receiver passes receiver
// verification (a receiver that does not echo the challenge fails it: 422, no instance); a
// decision is delivered as a signed request.resolved (Standard Webhooks), retried with growing
// waits while the receiver fails (500, then 503 with Retry-After), the same id and body each
// time; the instance is read without its secret and deleted (its credential then refused).
func TestAAPAsyncDelivery(t *testing.T) {
	f := newServerFiles(t)
	p := startServing(t, append(f.args("127.0.0.1:0"), "-aap-insecure-receivers", "-notify-retry-base", "300ms")...)
	const secret = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	const reg = "8246931c-4ce0-4c15-a94a-e9c078ad06e2"
	recv := newAAPReceiver(t, secret, reg)
	c := &aapClient{t: t, p: p, token: testToken}
	provision := func(key, name string) aapAnswer {
		body := `{"instance_name":"` + name + `","delivery":{"type":"webhook","url":"` + recv.srv.URL + `/aap/events","registration_id":"` + reg + `","signing_secret":"` + secret + `"}}`
		// The suite's own request, with the loopback receiver's http:// read as a deployment's https://.
		if err := aaptest.Validate("ProvisionInstanceRequest", []byte(strings.Replace(body, `"url":"http://`, `"url":"https://`, 1))); err != nil {
			t.Fatal(err)
		}
		return c.do("POST", "/v1/instances", testToken, body, "Idempotency-Key", key)
	}

	// A receiver that does not echo the challenge: 422, nothing created.
	recv.echo = false
	if a := provision("prov-1", "failing"); a.status != 422 || errCode(a) != "invalid_request/webhook_verification_failed" {
		t.Fatalf("verification failed: %d %s", a.status, a.body)
	}
	var conns struct{ Connections []struct{ Kind string } }
	p.mustAPI(t, 200, "GET", "/api/connections", nil, &conns)
	if len(conns.Connections) != 0 {
		t.Errorf("a failed verification left %d connections", len(conns.Connections))
	}
	// The same key may try again; now the receiver expects it: 201, the instance and credential.
	recv.echo = true
	a := provision("prov-1", "failing")
	if a.status != 201 {
		t.Fatalf("provision: %d %s", a.status, a.body)
	}
	// The receiver here is http:// on loopback (-aap-insecure-receivers); the schema's WebhookURL
	// is https only, so the answer is checked with that one field as a deployment would have it.
	httpsLike := func(b []byte) []byte {
		return []byte(strings.ReplaceAll(string(b), `"url":"http://`, `"url":"https://`))
	}
	if err := aaptest.Validate("ProvisionInstanceResponse", httpsLike(a.body)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(a.body), "whsec_") {
		t.Errorf("the answer holds the signing secret: %s", a.body)
	}
	var inst struct {
		Instance struct {
			ID string `json:"id"`
		} `json:"instance"`
		Credential struct{ Token string } `json:"credential"`
	}
	_ = json.Unmarshal(a.body, &inst)
	verifications := len(recv.events("webhook.verification"))
	// A replay: 200, the same instance and credential, no new verification.
	if r := provision("prov-1", "failing"); r.status != 200 || !strings.Contains(string(r.body), inst.Credential.Token) || !strings.Contains(string(r.body), inst.Instance.ID) {
		t.Errorf("replay: %d %s", r.status, r.body)
	}
	if n := len(recv.events("webhook.verification")); n != verifications {
		t.Errorf("a replay verified again (%d → %d)", verifications, n)
	}
	if r := provision("prov-1", "another name"); r.status != 409 || errCode(r) != "conflict/idempotency_conflict" {
		t.Errorf("conflicting replay: %d %s", r.status, r.body)
	}
	// Only the provisioner token provisions.
	if r := c.do("POST", "/v1/instances", inst.Credential.Token, `{}`, "Idempotency-Key", "prov-2"); r.status != 401 {
		t.Errorf("an instance credential provisions: %d", r.status)
	}
	if r := c.do("GET", "/v1/instances/"+inst.Instance.ID, testToken, nil); r.status != 200 || aaptest.Validate("Instance", httpsLike(r.body)) != nil || strings.Contains(string(r.body), "whsec_") {
		t.Errorf("get instance: %d %s", r.status, r.body)
	}

	// A decision, delivered signed; the receiver fails twice first.
	recv.mu.Lock()
	recv.statuses = []int{500, 503}
	recv.mu.Unlock()
	ic := &aapClient{t: t, p: p, token: inst.Credential.Token}
	req := ic.request(ic.create(newKey(), `{"tool":"issue_refund","arguments":{"payment_id":"payment_async"},"timeout":"30m"}`), 201, "ApprovalRequest")
	p.mustAPI(t, 200, "POST", "/api/approvals/"+pendingApprovalFor(t, p, "payment_async")+"/decision", map[string]string{"decision": "approve"}, nil)
	deadline := time.After(20 * time.Second)
	for len(recv.events("request.resolved")) < 3 {
		select {
		case <-recv.arrived:
		case <-deadline:
			t.Fatalf("%d deliveries after 20 s", len(recv.events("request.resolved")))
		}
	}
	hits := recv.events("request.resolved")
	got := ic.request(ic.do("GET", "/v1/requests/"+req.ID, ic.token, nil), 200, "ApprovalRequest")
	for i, h := range hits {
		if !h.valid {
			t.Errorf("attempt %d: the signature does not verify", i+1)
		}
		if err := aaptest.Validate("RequestResolvedEvent", h.body); err != nil {
			t.Error(err)
		}
		var ev struct {
			ID, Type   string
			InstanceID string `json:"instance_id"`
			RequestID  string `json:"request_id"`
			CreatedAt  string `json:"created_at"`
		}
		_ = json.Unmarshal(h.body, &ev)
		if ev.ID != h.id || ev.InstanceID != inst.Instance.ID || ev.RequestID != req.ID || ev.CreatedAt != got.Decision.DecidedAt {
			t.Errorf("attempt %d: %s (webhook-id %s), want request %s decided at %s", i+1, h.body, h.id, req.ID, got.Decision.DecidedAt)
		}
		if string(h.body) != string(hits[0].body) {
			t.Errorf("attempt %d's body differs from the first's", i+1)
		}
		if strings.Contains(string(h.body), "payment_async") || strings.Contains(string(h.body), inst.Credential.Token) {
			t.Errorf("the event carries arguments or the credential: %s", h.body)
		}
	}
	if d := hits[1].at.Sub(hits[0].at); d < 250*time.Millisecond {
		t.Errorf("the first retry came after %v, want the retry base", d)
	}
	if d := hits[2].at.Sub(hits[1].at); d < 900*time.Millisecond {
		t.Errorf("after a 503 with Retry-After: 1 the next attempt came after %v", d)
	}
	time.Sleep(1500 * time.Millisecond)
	if n := len(recv.events("request.resolved")); n != 3 {
		t.Errorf("%d deliveries after the acknowledgement, want 3", n)
	}

	// Updates: a rename needs no verification; its replay answers the same; other input under
	// the key is 409; a replacement receiver that fails verification changes nothing (422); null
	// removes delivery.
	before := len(recv.events("webhook.verification"))
	if r := c.do("PATCH", "/v1/instances/"+inst.Instance.ID, testToken, `{"instance_name":"renamed"}`, "Idempotency-Key", "upd-1"); r.status != 200 || !strings.Contains(string(r.body), `"name":"renamed"`) || aaptest.Validate("Instance", httpsLike(r.body)) != nil {
		t.Errorf("rename: %d %s", r.status, r.body)
	}
	if r := c.do("PATCH", "/v1/instances/"+inst.Instance.ID, testToken, `{"instance_name":"renamed"}`, "Idempotency-Key", "upd-1"); r.status != 200 || !strings.Contains(string(r.body), `"name":"renamed"`) {
		t.Errorf("rename replay: %d %s", r.status, r.body)
	}
	if r := c.do("PATCH", "/v1/instances/"+inst.Instance.ID, testToken, `{"instance_name":"other"}`, "Idempotency-Key", "upd-1"); r.status != 409 || errCode(r) != "conflict/idempotency_conflict" {
		t.Errorf("rename conflict: %d %s", r.status, r.body)
	}
	if n := len(recv.events("webhook.verification")); n != before {
		t.Errorf("a rename verified the receiver")
	}
	unknownReg := `{"instance_name":"x","delivery":{"type":"webhook","url":"` + recv.srv.URL + `/other","registration_id":"00000000-4ce0-4c15-a94a-e9c078ad06e2","signing_secret":"` + secret + `"}}`
	if r := c.do("PATCH", "/v1/instances/"+inst.Instance.ID, testToken, unknownReg, "Idempotency-Key", "upd-2"); r.status != 422 || errCode(r) != "invalid_request/webhook_verification_failed" {
		t.Errorf("a replacement the receiver does not expect: %d %s", r.status, r.body)
	}
	if r := c.do("GET", "/v1/instances/"+inst.Instance.ID, testToken, nil); !strings.Contains(string(r.body), `"name":"renamed"`) || !strings.Contains(string(r.body), "/aap/events") {
		t.Errorf("after a failed replacement: %s", r.body)
	}
	if r := c.do("PATCH", "/v1/instances/"+inst.Instance.ID, testToken, `{"delivery":null}`, "Idempotency-Key", "upd-3"); r.status != 200 || strings.Contains(string(r.body), "delivery") {
		t.Errorf("remove delivery: %d %s", r.status, r.body)
	}
	removed := ic.request(ic.create(newKey(), `{"tool":"issue_refund","arguments":{"payment_id":"payment_nodelivery"},"timeout":"30m"}`), 201, "ApprovalRequest")
	p.mustAPI(t, 200, "POST", "/api/approvals/"+pendingApprovalFor(t, p, "payment_nodelivery")+"/decision", map[string]string{"decision": "deny"}, nil)
	_ = removed
	time.Sleep(1500 * time.Millisecond)
	if n := len(recv.events("request.resolved")); n != 3 {
		t.Errorf("a decision without delivery was notified (%d deliveries)", n)
	}

	// Deletion: 204, again 204; the instance is gone, its credential refused, its pending request
	// cancelled without a notification.
	pending := ic.request(ic.create(newKey(), `{"tool":"issue_refund","arguments":{"payment_id":"payment_left"},"timeout":"30m"}`), 201, "ApprovalRequest")
	for range 2 {
		if r := c.do("DELETE", "/v1/instances/"+inst.Instance.ID, testToken, nil); r.status != 204 {
			t.Errorf("delete: %d %s", r.status, r.body)
		}
	}
	if r := c.do("GET", "/v1/instances/"+inst.Instance.ID, testToken, nil); r.status != 404 {
		t.Errorf("get a deleted instance: %d", r.status)
	}
	if r := ic.do("GET", "/v1/requests/"+pending.ID, ic.token, nil); r.status != 401 {
		t.Errorf("the deleted instance's credential: %d", r.status)
	}
	if r := provision("prov-1", "failing"); r.status != 409 || errCode(r) != "conflict/instance_deleted" {
		t.Errorf("replay after deletion: %d %s", r.status, r.body)
	}
	time.Sleep(1500 * time.Millisecond)
	if n := len(recv.events("request.resolved")); n != 3 {
		t.Errorf("the deletion's cancellation was notified (%d deliveries)", n)
	}
}
