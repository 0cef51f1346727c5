package gate

import (
	"context"
	"time"

	"countersign/internal/apperr"
)

// Outside calls that do not wait (SPEC §18 Door 3, the Agent Approval Protocol): the client
// creates a request and reads its decision later (a long poll, a webhook), so the gate decides by
// its rules at creation or stores a pending approval and returns at once; readers watch the
// approval for its decision (Gate.Watch).

// EventAAP is OutsideCall.Event for a request made through the approval API (SPEC §18 Door 3):
// no edit is offered (the protocol has no edited arguments), and a restart does not mark it
// "stopped waiting" (its instance reads it again).
const EventAAP = "aap"

// EventToolsCall is the Event of a call an MCP client made through the gateway (SPEC §18 Door 2):
// the MCP method that asked it.
const EventToolsCall = "tools/call"

// watcher is one reader watching an approval (Gate.Watch).
type watcher struct{ ch chan struct{} }

// Watch returns a channel that receives (one slot, never blocking the sender) each time approval
// id is decided in this process, or Wake names it (a decision another replica stored); the reader
// reads the approval from the store again. stop ends the watch. Unlike a Ticket it holds no call:
// any number of readers may watch one approval.
func (g *Gate) Watch(id string) (<-chan struct{}, func()) {
	w := &watcher{ch: make(chan struct{}, 1)}
	g.mu.Lock()
	if g.watchers == nil {
		g.watchers = map[string]map[*watcher]struct{}{}
	}
	if g.watchers[id] == nil {
		g.watchers[id] = map[*watcher]struct{}{}
	}
	g.watchers[id][w] = struct{}{}
	g.mu.Unlock()
	return w.ch, func() {
		g.mu.Lock()
		delete(g.watchers[id], w)
		if len(g.watchers[id]) == 0 {
			delete(g.watchers, id)
		}
		g.mu.Unlock()
	}
}

// signal wakes approval id's watchers.
func (g *Gate) signal(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for w := range g.watchers[id] {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// Park stores a as pending under id and shows it, with no call waiting on it in this process
// (Open without its Ticket): its decision is read from the store (Watch wakes the readers).
func (g *Gate) Park(ctx context.Context, id string, a Approval) (Approval, error) {
	a.ID = id
	a.Status = Pending
	if a.CreatedAt.IsZero() {
		a.CreatedAt = g.now().UTC()
	}
	if err := g.store.CreateApproval(ctx, a); err != nil {
		return Approval{}, err
	}
	g.notify(a)
	return a, nil
}

// Watch is the gate's Watch for approval id (Gate.Watch).
func (s *Service) Watch(id string) (<-chan struct{}, func()) { return s.gate.Watch(id) }

// Approval returns approval id as stored; apperr.NotFound.
func (s *Service) Approval(ctx context.Context, id string) (Approval, error) {
	return s.store.Approval(ctx, id)
}

// OpenOutside is DecideOutside for a client that does not wait (SPEC §18 Door 3): the call,
// always new (req.MatchKey unique to it), is decided in the order of SPEC §14 — rules on its tool
// name (an "Approve for session" rule included), the session's mode, the read-only defaults —
// and recorded; or, when it asks, stored as a pending approval (the inbox, decision links,
// webhooks and several approvers serve it) and returned at once, pending. req.Deadline is when
// the client stops waiting (shown as the card's countdown); the caller ends the approval then
// (EndOutside). req.Editable should be false for a client that takes no edit. Errors: the
// store's; apperr.NotFound for an unknown session.
func (s *Service) OpenOutside(ctx context.Context, req OutsideRequest) (a Approval, err error) {
	defer apperr.Wrap(&err, "OpenOutside(%s, %s)", req.SessionID, req.ToolName)
	os, ok := s.store.(OutsideStore)
	if !ok {
		return Approval{}, apperr.Errorf(apperr.Internal, "the store keeps no outside calls")
	}
	j, err := s.judgeOutside(ctx, req, "aap-"+NewID()[:16])
	if err != nil {
		return Approval{}, err
	}
	if j.d.Outcome != Asked {
		return s.recordDecided(ctx, os, req, j)
	}
	rec, oc := j.d.Record(j.base), j.oc
	if req.Record != nil {
		if rec.MessageID, err = req.Record(ctx, j.callID, nil); err != nil {
			return Approval{}, err
		}
	}
	id := NewID()
	oc.ApprovalID = id
	s.held.Store(id, oc)
	defer s.held.Delete(id)
	if a, err = s.gate.Park(ctx, id, rec); err != nil {
		return Approval{}, err
	}
	oc.CreatedAt = a.CreatedAt
	if err := os.CreateOutsideCall(ctx, oc); err != nil {
		_, _ = s.EndOutside(context.WithoutCancel(ctx), a.ID, Cancelled, "the outside call could not be recorded")
		return Approval{}, err
	}
	// A rule made while the approval was being stored may allow it already.
	s.Release(ctx, []Approval{a})
	return s.store.Approval(ctx, a.ID)
}

// EndOutside ends pending approval id without a person: st is TimedOut (the client's deadline
// passed: "expired") or Cancelled (the client withdrew it), with reason. A decision that got
// there first stands: the approval is returned as stored. Errors: the store's, apperr.NotFound.
func (s *Service) EndOutside(ctx context.Context, id string, st Status, reason string) (Approval, error) {
	by := BySystem
	if st == TimedOut {
		by = ByTimeout
	}
	a, err := s.gate.Decide(ctx, id, Resolution{Status: st, DecidedBy: by, Automatic: true, Reason: reason, At: time.Now().UTC()})
	if apperr.CodeOf(err) == apperr.Conflict {
		return s.store.Approval(ctx, id)
	}
	return a, err
}

// Watching reports whether a reader in this process watches approval id, or a call waits on it
// (Gate.Waiting).
func (s *Service) Watching(id string) bool { return s.gate.Waiting(id) }

// pastAAPDeadline reports whether a, an outside call's pending approval, was asked through the
// approval API and its deadline passed: it is then expired (timed out) first, and returned as
// ended, so no person approves it late (AAP v1 §4: "It must not approve a pending request after
// that deadline"). False for every other approval.
func (s *Service) pastAAPDeadline(ctx context.Context, a Approval) (Approval, bool) {
	os, ok := s.store.(OutsideStore)
	if !ok {
		return a, false
	}
	c, err := os.OutsideCall(ctx, a.ID)
	if err != nil || c.Event != EventAAP || c.Deadline == nil || time.Now().Before(*c.Deadline) {
		return a, false
	}
	ended, err := s.EndOutside(context.WithoutCancel(ctx), a.ID, TimedOut, "no decision before the request's deadline")
	if err != nil || ended.Status == Pending {
		return a, false
	}
	return ended, true
}
