package store

import (
	"context"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// TestARunningSessionWithAPendingApprovalReadsAsWaiting: the store says when a run is parked on
// a person (issue 16, item 3): a running session reads back as waiting, with its pending count,
// while one of its approvals is pending, and as running again once it is decided; an idle
// session stays idle; waiting is never stored.
func TestARunningSessionWithAPendingApprovalReadsAsWaiting(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0.Add(1)))
	if err := db.SetSessionState(ctx, "s1", agent.Running); err != nil {
		t.Fatal(err)
	}
	pending := func(id, sessionID string) gate.Approval {
		return gate.Approval{ID: id, SessionID: sessionID, MessageID: "m", ToolCallID: "c-" + id, ToolName: "run_command",
			RequestedBy: "model", Status: gate.Pending, CreatedAt: t0}
	}
	check := func(step, id string, state agent.State, n int) {
		t.Helper()
		s, err := db.Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.State != state || s.PendingApprovals != n {
			t.Fatalf("%s: Session(%s) state %q with %d pending, want %q with %d", step, id, s.State, s.PendingApprovals, state, n)
		}
		all, err := db.Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range all {
			if x.ID == id && (x.State != state || x.PendingApprovals != n) {
				t.Fatalf("%s: Sessions lists %s as %q with %d pending, want %q with %d", step, id, x.State, x.PendingApprovals, state, n)
			}
		}
	}
	check("running, nothing asked", "s1", agent.Running, 0)
	mustCreateApprovals(t, db, pending("a1", "s1"), pending("a2", "s1"), pending("b1", "s2"))
	check("two prompts open", "s1", agent.Waiting, 2)
	check("an idle session", "s2", agent.Idle, 1)
	if _, err := db.ResolveApproval(ctx, "a1", gate.Resolution{Status: gate.Approved, DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	check("one decided", "s1", agent.Waiting, 1)
	if _, err := db.ResolveApproval(ctx, "a2", gate.Resolution{Status: gate.Denied, DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	check("both decided", "s1", agent.Running, 0)

	running, err := db.SessionsInState(ctx, agent.Running)
	if err != nil || len(running) != 1 || running[0].ID != "s1" {
		t.Fatalf("SessionsInState(running) = %v, %v; want s1", running, err)
	}
	err = db.SetSessionState(ctx, "s1", agent.Waiting)
	assertErr(t, err, apperr.Invalid, `a session's stored state is idle or running, not "waiting"`)
}
