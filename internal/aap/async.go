package aap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// DeliveryWindow is how long a request.resolved event is retried after its decision (AAP v1 §7
// "Acknowledgements and Retries": seven days, 168 hours).
const DeliveryWindow = 168 * time.Hour

// Retention is how long a terminal request and its idempotency key are kept at least after the
// decision (AAP v1 §5 "Retention": seven days).
const Retention = 168 * time.Hour

// maxRetryDelay bounds the wait between two attempts.
const maxRetryDelay = time.Hour

// Connections makes and revokes the api connections instances are (internal/connections).
type Connections interface {
	Create(ctx context.Context, label string) (connID, token string, err error)
	Revoke(ctx context.Context, connID string) error
}

// PendingLister lists a connection's pending requests (for an instance's deletion).
type PendingLister interface {
	AAPPendingRequests(ctx context.Context, connectionID string) ([]Request, error)
}

// Provisioner serves /v1/instances and the asynchronous delivery of AAP v1 §7.
type Provisioner struct {
	store    InstanceStore
	pending  PendingLister
	gate     Gate
	conns    Connections
	sealer   Sealer
	client   *http.Client
	insecure bool
	// RetryBase is the wait after a first failed attempt; each next one doubles it, with up to
	// a quarter of random jitter, at most an hour (default 5 s).
	RetryBase time.Duration
	log       *slog.Logger
	keys      sync.Map // provision key → *sync.Mutex: one verification per key at a time
}

// ProvisionerConfig wires a Provisioner. Insecure allows http:// and non-public receivers (local
// development and tests only).
type ProvisionerConfig struct {
	Store     InstanceStore
	Pending   PendingLister
	Gate      Gate
	Conns     Connections
	Sealer    Sealer
	Insecure  bool
	RetryBase time.Duration
	Logger    *slog.Logger
}

// NewProvisioner returns a Provisioner.
func NewProvisioner(c ProvisionerConfig) *Provisioner {
	p := &Provisioner{store: c.Store, pending: c.Pending, gate: c.Gate, conns: c.Conns, sealer: c.Sealer,
		client: ReceiverClient(c.Insecure), insecure: c.Insecure, RetryBase: c.RetryBase, log: c.Logger}
	if p.RetryBase <= 0 {
		p.RetryBase = 5 * time.Second
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	return p
}

// Provision is POST /v1/instances (AAP v1 §5 "Provision an Instance"): with delivery, the
// receiver is verified first (422 webhook_verification_failed: nothing is created); then the
// instance (an api connection labelled with its name) and its credential. A replay of the same
// key and body returns the original instance and credential (created false, 200) without
// verifying again; other input is 409 idempotency_conflict; a deleted instance's replay is 409
// instance_deleted. Errors: *Error, the store's.
func (p *Provisioner) Provision(ctx context.Context, key string, body []byte) (ProvisionInstanceResponse, bool, error) {
	var out ProvisionInstanceResponse
	if key == "" || len(key) > 255 {
		return out, false, invalid("Idempotency-Key", "The Idempotency-Key header is required (at most 255 characters).")
	}
	req, digest, perr := ParseProvision(body, p.insecure)
	if perr != nil {
		return out, false, perr
	}
	mu, _ := p.keys.LoadOrStore(key, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if in, err := p.store.AAPInstanceByKey(ctx, key); err == nil {
		switch {
		case in.ProvisionDigest != digest:
			return out, false, Errorf(http.StatusConflict, "idempotency_conflict", "The idempotency key was already used for a different instance.")
		case in.DeletedAt != nil:
			return out, false, Errorf(http.StatusConflict, "instance_deleted", "The instance this key created was deleted.")
		}
		tok, err := p.sealer.Open(in.SealedToken)
		if err != nil {
			return out, false, apperr.Errorf(apperr.Internal, "the instance's credential cannot be opened (the owner token changed?)")
		}
		out.Instance, out.Credential.Token = ViewInstance(in), tok
		return out, false, nil
	} else if apperr.CodeOf(err) != apperr.NotFound {
		return out, false, err
	}
	in := Instance{ID: NewUUID(), ProvisionKey: key, ProvisionDigest: digest, CreatedAt: time.Now().UTC()}
	in.Name = "aap-" + in.ID[:8]
	if req.InstanceName != nil {
		in.Name = *req.InstanceName
	}
	if d := req.Delivery; d != nil {
		if err := Verify(ctx, p.client, *d, in.ID); err != nil {
			e := Errorf(http.StatusUnprocessableEntity, "webhook_verification_failed", "The webhook receiver could not be verified: %v.", err)
			e.Param = "delivery"
			return out, false, e
		}
		in.URL, in.RegistrationID, in.SealedSecret = d.URL, d.RegistrationID, p.sealer.Seal(d.SigningSecret)
		since := in.CreatedAt
		in.DeliverySince = &since
	}
	connID, token, err := p.conns.Create(ctx, in.Name)
	if err != nil {
		return out, false, err
	}
	in.ConnectionID, in.SealedToken = connID, p.sealer.Seal(token)
	if err := p.store.CreateAAPInstance(ctx, in); err != nil {
		_ = p.conns.Revoke(context.WithoutCancel(ctx), connID)
		return out, false, err
	}
	out.Instance, out.Credential.Token = ViewInstance(in), token
	return out, true, nil
}

// Get is GET /v1/instances/{id}: 404 for an unknown or deleted instance (never its secret or
// credential).
func (p *Provisioner) Get(ctx context.Context, id string) (InstanceView, error) {
	if !IsUUID(id) {
		return InstanceView{}, errOf(apperr.Errorf(apperr.NotFound, "no instance"))
	}
	in, err := p.store.AAPInstance(ctx, id)
	if err != nil {
		return InstanceView{}, errOf(err)
	}
	if in.DeletedAt != nil {
		return InstanceView{}, errOf(apperr.Errorf(apperr.NotFound, "deleted"))
	}
	return ViewInstance(in), nil
}

// Delete is DELETE /v1/instances/{id} (AAP v1 §5 "Delete an Instance"): the instance is marked
// deleted (its delivery ends; no notification for what follows), its pending requests are
// cancelled and its credential revoked; repeated deletion is fine; 404 for an unknown id.
func (p *Provisioner) Delete(ctx context.Context, id string) error {
	if !IsUUID(id) {
		return errOf(apperr.Errorf(apperr.NotFound, "no instance"))
	}
	in, err := p.store.AAPInstance(ctx, id)
	if err != nil {
		return errOf(err)
	}
	if err := p.store.DeleteAAPInstance(ctx, id, time.Now().UTC()); err != nil {
		return err
	}
	if err := p.CancelPending(ctx, in.ConnectionID, "the AAP instance was deleted"); err != nil {
		return err
	}
	return p.conns.Revoke(ctx, in.ConnectionID)
}

// CancelPending cancels connection connectionID's pending requests, with reason (their approvals
// leave the inbox; their long polls answer cancelled): its instance was deleted, or the
// connection revoked on the Agents page or through /api/connections, whose credential can no
// longer read an answer. Errors: the store's and the gate's.
func (p *Provisioner) CancelPending(ctx context.Context, connectionID, reason string) error {
	pending, err := p.pending.AAPPendingRequests(ctx, connectionID)
	if err != nil {
		return err
	}
	for _, r := range pending {
		if _, err := p.gate.EndOutside(ctx, r.ApprovalID, gate.Cancelled, reason); err != nil {
			return err
		}
	}
	return nil
}

// MakeEvents records a request.resolved event for each request that became terminal while its
// instance had delivery (AAP v1 §7 "Notification"): found again after a restart, so a decision
// stored is never left without its event.
func (p *Provisioner) MakeEvents(ctx context.Context) error {
	es, err := p.store.AAPEventsToMake(ctx)
	if err != nil {
		return err
	}
	for _, e := range es {
		e.ID, e.NextAt = NewUUID(), time.Now().UTC()
		if err := p.store.CreateAAPEvent(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// RetryDelay is the wait after failed attempt n (1-based): RetryBase·2^(n-1) plus up to a quarter
// of random jitter, at most an hour.
func (p *Provisioner) RetryDelay(n int) time.Duration {
	d := p.RetryBase << min(n-1, 30)
	if d <= 0 || d > maxRetryDelay {
		d = maxRetryDelay
	}
	return d + time.Duration(mrand.Int64N(int64(d/4)+1))
}

// DeliverDue sends the events due now, one attempt each (AAP v1 §7): signed with the instance's
// secret, 10 s, no redirects; a 2xx acknowledges; otherwise the next attempt waits RetryDelay
// (or the receiver's Retry-After on 429 and 503), and delivery ends once the next attempt would
// be past seven days after the decision.
func (p *Provisioner) DeliverDue(ctx context.Context) error {
	now := time.Now().UTC()
	due, err := p.store.DueAAPEvents(ctx, now, 50)
	if err != nil {
		return err
	}
	for _, e := range due {
		// One sender per attempt, across replicas: the claim outlasts the attempt's 10 s.
		if ok, err := p.store.ClaimAAPEvent(ctx, e.ID, e.NextAt, time.Now().UTC().Add(time.Minute)); err != nil || !ok {
			continue
		}
		in, err := p.store.AAPInstance(ctx, e.InstanceID)
		if err != nil || in.URL == "" || in.DeletedAt != nil {
			continue
		}
		secret, err := p.sealer.Open(in.SealedSecret)
		if err != nil {
			p.log.Error("aap delivery: the receiver's secret cannot be opened", "instance", in.ID)
			continue
		}
		body, _ := json.Marshal(map[string]string{"id": e.ID, "type": "request.resolved", "instance_id": e.InstanceID,
			"request_id": e.RequestID, "created_at": Timestamp(e.CreatedAt)})
		st, retryAfter, _, err := signedPost(ctx, p.client, in.URL, secret, e.ID, body)
		at := time.Now().UTC()
		if err == nil && st >= 200 && st < 300 {
			if err := p.store.RecordAAPAttempt(ctx, e.ID, at, true, nil); err != nil {
				return err
			}
			continue
		}
		next := at.Add(p.RetryDelay(e.Attempts + 1))
		if st == http.StatusTooManyRequests || st == http.StatusServiceUnavailable {
			if s, err := strconv.Atoi(retryAfter); err == nil && s > 0 {
				next = at.Add(time.Duration(s) * time.Second)
			}
		}
		var np *time.Time
		if next.Before(e.CreatedAt.Add(DeliveryWindow)) {
			np = &next
		}
		p.log.Warn("aap delivery failed", "event", e.ID, "instance", e.InstanceID, "status", st, "attempt", e.Attempts+1, "retry", np != nil)
		if err := p.store.RecordAAPAttempt(ctx, e.ID, at, false, np); err != nil {
			return err
		}
	}
	return nil
}

// Run makes and delivers events every interval until ctx ends.
func (p *Provisioner) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := p.MakeEvents(ctx); err != nil && ctx.Err() == nil {
			p.log.Error("aap: make events", "err", err)
		}
		if err := p.DeliverDue(ctx); err != nil && ctx.Err() == nil {
			p.log.Error("aap: deliver events", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Update is PATCH /v1/instances/{id} (AAP v1 §5 "Update an Instance", §7 "Updating and Removing
// Delivery"): instance_name and/or delivery (an object replaces the whole configuration after
// its receiver is verified — 422 webhook_verification_failed changes nothing; null removes it
// and ends outstanding delivery). The Idempotency-Key is scoped to the instance: the same key and
// input return the original response without verifying or applying again; other input is 409
// idempotency_conflict. 404 for an unknown or deleted instance. Errors: *Error, the store's.
func (p *Provisioner) Update(ctx context.Context, id, key string, body []byte) (InstanceView, error) {
	if key == "" || len(key) > 255 {
		return InstanceView{}, invalid("Idempotency-Key", "The Idempotency-Key header is required (at most 255 characters).")
	}
	if !IsUUID(id) {
		return InstanceView{}, errOf(apperr.Errorf(apperr.NotFound, "no instance"))
	}
	var raw map[string]json.RawMessage
	if e := DecodeStrict(body, &raw); e != nil {
		return InstanceView{}, e
	}
	if e := exactFields(body, "instance_name", "delivery"); e != nil {
		return InstanceView{}, e
	}
	if len(raw) == 0 {
		return InstanceView{}, invalid("", "Name at least one of instance_name and delivery.")
	}
	var name *string
	if v, ok := raw["instance_name"]; ok {
		if json.Unmarshal(v, &name) != nil || name == nil || *name == "" || len(*name) > 100 {
			return InstanceView{}, invalid("instance_name", "instance_name must be 1 to 100 characters.")
		}
	}
	var delivery *WebhookDeliveryInput
	removing := false
	if v, ok := raw["delivery"]; ok {
		if string(v) == "null" {
			removing = true
		} else {
			req, _, e := ParseProvision(fmt.Appendf(nil, `{"delivery":%s}`, v), p.insecure)
			if e != nil {
				return InstanceView{}, e
			}
			delivery = req.Delivery
		}
	}
	canon, _ := json.Marshal(map[string]any{"name": name, "delivery": delivery, "remove": removing})
	sum := sha256.Sum256(canon)
	digest := hex.EncodeToString(sum[:])
	mu, _ := p.keys.LoadOrStore(id+"\x00"+key, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	in, err := p.store.AAPInstance(ctx, id)
	if err != nil || in.DeletedAt != nil {
		return InstanceView{}, errOf(apperr.Errorf(apperr.NotFound, "no instance"))
	}
	if d, resp, err := p.store.AAPInstanceUpdate(ctx, id, key); err == nil {
		if d != digest {
			return InstanceView{}, Errorf(http.StatusConflict, "idempotency_conflict", "The idempotency key was already used for a different update.")
		}
		var v InstanceView
		err := json.Unmarshal(resp, &v)
		return v, err
	} else if apperr.CodeOf(err) != apperr.NotFound {
		return InstanceView{}, err
	}
	if name != nil {
		in.Name = *name
	}
	now := time.Now().UTC()
	switch {
	case removing:
		in.URL, in.RegistrationID, in.SealedSecret, in.DeliverySince = "", "", "", nil
	case delivery != nil:
		if err := Verify(ctx, p.client, *delivery, in.ID); err != nil {
			e := Errorf(http.StatusUnprocessableEntity, "webhook_verification_failed", "The webhook receiver could not be verified: %v.", err)
			e.Param = "delivery"
			return InstanceView{}, e
		}
		if in.DeliverySince == nil { // a new receiver: only later decisions are notified
			in.DeliverySince = &now
		}
		in.URL, in.RegistrationID, in.SealedSecret = delivery.URL, delivery.RegistrationID, p.sealer.Seal(delivery.SigningSecret)
	}
	v := ViewInstance(in)
	resp, _ := json.Marshal(v)
	if err := p.store.UpdateAAPInstance(ctx, in, key, digest, resp, now); err != nil {
		return InstanceView{}, errOf(err)
	}
	return v, nil
}
