package gate

import (
	"context"
	"sync"
	"testing"
	"time"

	"countersign/internal/apperr"
)

// memStore is an in-memory Store for the gate's own tests.
type memStore struct {
	mu sync.Mutex
	m  map[string]Approval
}

func (s *memStore) CreateApproval(_ context.Context, a Approval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[a.ID] = a
	return nil
}

func (s *memStore) ResolveApproval(_ context.Context, id string, r Resolution) (Approval, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.m[id]
	if !ok {
		return Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if a.Status != Pending {
		return Approval{}, apperr.Errorf(apperr.Conflict, "approval already resolved")
	}
	a.Status, a.DecidedBy, a.Reason, a.DecidedAt = r.Status, r.DecidedBy, r.Reason, &r.At
	s.m[id] = a
	return a, nil
}

func (s *memStore) Approval(_ context.Context, id string) (Approval, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id], nil
}

// CastVote is not used by these tests (votes_test.go runs the real store).
func (s *memStore) CastVote(context.Context, string, Vote, int) (Approval, bool, error) {
	return Approval{}, false, apperr.Errorf(apperr.Internal, "memStore counts no votes")
}

func (s *memStore) CreateGrant(context.Context, Grant) error { return nil }

func (s *memStore) Grant(context.Context, string, string) (Grant, error) {
	return Grant{}, apperr.Errorf(apperr.NotFound, "no grant")
}

// TestADecisionIsShownBeforeTheCallWakes: viewers must see approval_resolved before anything the
// resumed call publishes, so the decision is shown (notify) before the waiting call can wake.
func TestADecisionIsShownBeforeTheCallWakes(t *testing.T) {
	var ticket *Ticket
	var wokeBeforeShown []bool
	g := New(&memStore{m: map[string]Approval{}}, time.Minute, func(a Approval) {
		if a.Status != Pending {
			wokeBeforeShown = append(wokeBeforeShown, len(ticket.ch) > 0)
		}
	})
	ctx := context.Background()
	var err error
	ticket, err = g.Open(ctx, Approval{SessionID: "s1", ToolCallID: "c1", ToolName: "t", RequestedBy: "model"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Decide(ctx, ticket.Approval.ID, Resolution{Status: Approved, DecidedBy: "ann"}); err != nil {
		t.Fatal(err)
	}
	if len(wokeBeforeShown) != 1 || wokeBeforeShown[0] {
		t.Fatalf("the waiting call could wake before the decision was shown (notify saw the decision delivered: %v)", wokeBeforeShown)
	}
	if a := ticket.Wait(ctx); a.Status != Approved || a.DecidedBy != "ann" {
		t.Fatalf("Wait = %+v, want approved by ann", a)
	}
}
