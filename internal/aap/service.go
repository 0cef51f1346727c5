package aap

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// Request is an approval request as stored (internal/store's aap_requests): the submission as
// sent, the instance (connection) that made it, its idempotency key with the digest of the
// submission (Digest), the approval that carries its decision and the agent session it landed
// in. Times are UTC.
type Request struct {
	ID             string // a UUID
	ConnectionID   string
	IdempotencyKey string
	Digest         string
	ApprovalID     string
	SessionID      string
	Tool           string
	Arguments      json.RawMessage
	Timeout        string
	AgentReasoning *string
	Context        json.RawMessage
	CreatedAt      time.Time
	DeadlineAt     time.Time
}

// Store keeps approval requests (internal/store).
type Store interface {
	// CreateAAPRequest stores r; apperr.Conflict when r's connection used its key already.
	CreateAAPRequest(ctx context.Context, r Request) error
	// AAPRequest is request id; apperr.NotFound.
	AAPRequest(ctx context.Context, id string) (Request, error)
	// AAPRequestByKey is connection connectionID's request with idempotency key key;
	// apperr.NotFound.
	AAPRequestByKey(ctx context.Context, connectionID, key string) (Request, error)
	// AAPRequestsDue lists the requests still pending (their approval is) whose deadline_at is
	// at or before at.
	AAPRequestsDue(ctx context.Context, at time.Time) ([]Request, error)
}

// Gate is what the requests need of the gate (*gate.Service is one).
type Gate interface {
	OpenOutside(ctx context.Context, req gate.OutsideRequest) (gate.Approval, error)
	EndOutside(ctx context.Context, id string, st gate.Status, reason string) (gate.Approval, error)
	Approval(ctx context.Context, id string) (gate.Approval, error)
	Watch(id string) (<-chan struct{}, func())
}

// Service is the lifecycle of approval requests (AAP v1 §4, §5): create (idempotent), read (with
// a long poll), cancel, and expiry at the deadline.
type Service struct {
	gate  Gate
	store Store
	log   *slog.Logger
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*keyLock // connection + key → the creation in progress in this process
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// NewService returns a Service over g and store.
func NewService(g Gate, store Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{gate: g, store: store, log: log, now: time.Now, keys: map[string]*keyLock{}}
}

// SetClock replaces the clock (tests).
func (s *Service) SetClock(now func() time.Time) { s.now = now }

// Create is what POST /v1/requests needs besides its body.
type Create struct {
	ConnectionID string
	Key          string // the Idempotency-Key header
	Body         CreateApprovalRequest
	Timeout      time.Duration // Body.Timeout parsed
	Digest       string        // Digest(Body)
	// Session finds or makes the agent session the request lands in (SPEC §18: the
	// connection's), called only for a new request.
	Session func(ctx context.Context) (sessionID string, err error)
	// Record records the call in that session, with decided when the gate decided it at once
	// (gate.OutsideRequest.Record).
	Record func(ctx context.Context, sessionID, callID string, decided *gate.OutsideDecided) (messageID string, err error)
}

func (s *Service) lockKey(k string) func() {
	s.mu.Lock()
	l := s.keys[k]
	if l == nil {
		l = &keyLock{}
		s.keys[k] = l
	}
	l.refs++
	s.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.keys, k)
		}
		s.mu.Unlock()
	}
}

// Create creates an approval request, or replays it (AAP v1 §5 "Create a Request",
// "Idempotency and Retries"): the same key with the same parsed values returns the request as it
// stands now with created false (200); the same key with other values is 409
// idempotency_conflict, and the original is unchanged. A new request (created true, 201) is
// decided by the gate's rules at once, or pending until a person decides or deadline_at
// (created_at + min(timeout, MaxTimeout)). Errors: *Error, or the store's.
func (s *Service) Create(ctx context.Context, c Create) (ApprovalRequest, bool, error) {
	if c.Key == "" {
		return ApprovalRequest{}, false, invalid("Idempotency-Key", "The Idempotency-Key header is required.")
	}
	if len(c.Key) > 255 {
		return ApprovalRequest{}, false, invalid("Idempotency-Key", "The Idempotency-Key header is longer than 255 characters.")
	}
	unlock := s.lockKey(c.ConnectionID + "\x00" + c.Key)
	defer unlock()
	if r, err := s.store.AAPRequestByKey(ctx, c.ConnectionID, c.Key); err == nil {
		return s.replay(ctx, r, c.Digest)
	} else if apperr.CodeOf(err) != apperr.NotFound {
		return ApprovalRequest{}, false, err
	}
	sessionID, err := c.Session(ctx)
	if err != nil {
		return ApprovalRequest{}, false, err
	}
	// Whole seconds on the wire (RFC 3339): rounded up, so deadline_at = created_at + timeout
	// is never before the timeout has passed (rounded down, a 1 s request could expire at once).
	now := s.now().UTC()
	if t := now.Truncate(time.Second); !t.Equal(now) {
		now = t.Add(time.Second)
	}
	r := Request{ID: NewUUID(), ConnectionID: c.ConnectionID, IdempotencyKey: c.Key, Digest: c.Digest, SessionID: sessionID,
		Tool: c.Body.Tool, Arguments: c.Body.Arguments, Timeout: c.Body.Timeout, AgentReasoning: c.Body.AgentReasoning,
		Context: c.Body.Context, CreatedAt: now, DeadlineAt: now.Add(min(c.Timeout, MaxTimeout))}
	req := gate.OutsideRequest{SessionID: sessionID, Event: gate.EventAAP, ToolName: r.Tool, Input: r.Arguments,
		MatchKey: "aap:" + r.ID, Deadline: r.DeadlineAt, Editable: false}
	if c.Record != nil {
		req.Record = func(ctx context.Context, callID string, decided *gate.OutsideDecided) (string, error) {
			return c.Record(ctx, sessionID, callID, decided)
		}
	}
	a, err := s.gate.OpenOutside(ctx, req)
	if err != nil {
		return ApprovalRequest{}, false, err
	}
	r.ApprovalID = a.ID
	if err := s.store.CreateAAPRequest(ctx, r); err != nil {
		// Not recorded: the approval must not stay in the inbox for a request nobody can read.
		_, _ = s.gate.EndOutside(context.WithoutCancel(ctx), a.ID, gate.Cancelled, "the approval request could not be recorded")
		if apperr.CodeOf(err) == apperr.Conflict { // another replica stored the same key first
			if prev, err2 := s.store.AAPRequestByKey(ctx, c.ConnectionID, c.Key); err2 == nil {
				return s.replay(ctx, prev, c.Digest)
			}
		}
		return ApprovalRequest{}, false, err
	}
	v, err := s.view(ctx, r, a)
	return v, true, err
}

func (s *Service) replay(ctx context.Context, r Request, digest string) (ApprovalRequest, bool, error) {
	if r.Digest != digest {
		return ApprovalRequest{}, false, Errorf(http.StatusConflict, "idempotency_conflict",
			"The idempotency key was already used for a different request.")
	}
	v, err := s.current(ctx, r)
	return v, false, err
}

// load is connection connID's request id: 404 not_found for a malformed id, an unknown one and
// another connection's (never saying which).
func (s *Service) load(ctx context.Context, connID, id string) (Request, error) {
	if !IsUUID(id) {
		return Request{}, Errorf(http.StatusNotFound, "not_found", "No such approval request.")
	}
	r, err := s.store.AAPRequest(ctx, id)
	if apperr.CodeOf(err) == apperr.NotFound || (err == nil && r.ConnectionID != connID) {
		return Request{}, Errorf(http.StatusNotFound, "not_found", "No such approval request.")
	}
	return r, err
}

// current is r as it stands: its approval read from the store, expired first when its deadline
// passed while pending.
func (s *Service) current(ctx context.Context, r Request) (ApprovalRequest, error) {
	a, err := s.gate.Approval(ctx, r.ApprovalID)
	if err != nil {
		return ApprovalRequest{}, err
	}
	return s.view(ctx, r, a)
}

// view is r with approval a as the protocol shows it; a pending a whose deadline passed is
// expired first (AAP v1 §4: "If the request is still pending at its deadline, the provider
// records expired").
func (s *Service) view(ctx context.Context, r Request, a gate.Approval) (ApprovalRequest, error) {
	if a.Status == gate.Pending && !s.now().Before(r.DeadlineAt) {
		var err error
		if a, err = s.gate.EndOutside(context.WithoutCancel(ctx), a.ID, gate.TimedOut, "no decision before the request's deadline"); err != nil {
			return ApprovalRequest{}, err
		}
	}
	return View(r, a), nil
}

// View is request r whose approval is a, as the protocol's ApprovalRequest: approved, denied,
// timed out (expired) and cancelled approvals carry their decision, with decided_at and the
// approval's reason as the note; an approval's decision expires_at is decided_at +
// ApprovalValidity.
func View(r Request, a gate.Approval) ApprovalRequest {
	v := ApprovalRequest{ID: r.ID, Tool: r.Tool, Arguments: r.Arguments, Timeout: r.Timeout, AgentReasoning: r.AgentReasoning,
		Context: r.Context, Status: Pending, CreatedAt: Timestamp(r.CreatedAt), DeadlineAt: Timestamp(r.DeadlineAt)}
	var st Status
	switch a.Status {
	case gate.Pending:
		return v
	case gate.Approved:
		st = Approved
	case gate.Denied:
		st = Denied
	case gate.TimedOut:
		st = Expired
	default:
		st = Cancelled
	}
	decided := a.CreatedAt
	if a.DecidedAt != nil {
		decided = *a.DecidedAt
	}
	d := &Decision{Status: st, Note: a.Reason, DecidedAt: Timestamp(decided)}
	if st == Approved {
		exp := Timestamp(decided.UTC().Truncate(time.Second).Add(ApprovalValidity))
		d.ExpiresAt = &exp
	}
	v.Status, v.Decision = st, d
	return v
}

// Get reads connection connID's request id (AAP v1 §5 "Retrieve a Request"): with wait > 0 it
// holds the answer until the request is terminal, the wait (capped at MaxWait) ends, its
// deadline passes (then it is expired) or ctx ends, whichever is first; a wait that ends with
// no decision answers pending. Errors: *Error 404, the store's.
func (s *Service) Get(ctx context.Context, connID, id string, wait time.Duration) (ApprovalRequest, error) {
	r, err := s.load(ctx, connID, id)
	if err != nil {
		return ApprovalRequest{}, err
	}
	var (
		woke <-chan struct{}
		stop = func() {}
	)
	if wait > 0 {
		woke, stop = s.gate.Watch(r.ApprovalID) // before the read: no decision is missed
	}
	defer stop()
	v, err := s.current(ctx, r)
	if err != nil || v.Status != Pending || wait <= 0 {
		return v, err
	}
	end := s.now().Add(min(wait, MaxWait))
	if r.DeadlineAt.Before(end) {
		end = r.DeadlineAt
	}
	timer := time.NewTimer(time.Until(end))
	defer timer.Stop()
	for {
		select {
		case <-woke:
		case <-timer.C:
			return s.current(ctx, r)
		case <-ctx.Done():
			return v, nil
		}
		if v, err = s.current(ctx, r); err != nil || v.Status != Pending {
			return v, err
		}
	}
}

// Cancel withdraws connection connID's request id (AAP v1 §5 "Cancel a Request"): a pending
// request becomes cancelled (its approval leaves the inbox, its long polls answer); a cancelled
// one is returned as it is; an approved, denied or expired one is 409 already_terminal and
// unchanged. Errors: *Error 404 or 409, the store's.
func (s *Service) Cancel(ctx context.Context, connID, id string) (ApprovalRequest, error) {
	r, err := s.load(ctx, connID, id)
	if err != nil {
		return ApprovalRequest{}, err
	}
	v, err := s.current(ctx, r)
	if err != nil {
		return ApprovalRequest{}, err
	}
	if v.Status == Pending {
		a, err := s.gate.EndOutside(ctx, r.ApprovalID, gate.Cancelled, "withdrawn by the agent (AAP cancel)")
		if err != nil {
			return ApprovalRequest{}, err
		}
		v = View(r, a)
	}
	switch v.Status {
	case Cancelled:
		return v, nil
	}
	return ApprovalRequest{}, Errorf(http.StatusConflict, "already_terminal", "The request is already %s; its outcome is unchanged.", v.Status)
}

// ExpireDue expires every request whose deadline passed while pending (AAP v1 §4), those left by
// an earlier process included. Errors: the store's.
func (s *Service) ExpireDue(ctx context.Context) error {
	due, err := s.store.AAPRequestsDue(ctx, s.now().UTC())
	if err != nil {
		return err
	}
	for _, r := range due {
		if _, err := s.gate.EndOutside(ctx, r.ApprovalID, gate.TimedOut, "no decision before the request's deadline"); err != nil {
			s.log.Error("expire an approval request", "request", r.ID, "err", err)
		}
	}
	return nil
}

// Run expires due requests every interval until ctx ends.
func (s *Service) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.ExpireDue(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("expire approval requests", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
