package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/share"
)

// testVotesRoundTrip: an approval's approvers and reviewers, and each vote with its link,
// decision, reason and time, come back from every read (one, a session's, the pending ones),
// and the one that resolves it carries the decider.
func testVotesRoundTrip(t *testing.T, h Harness) {
	db := h.open(t)
	ctx := context.Background()
	if err := db.CreateSession(ctx, session("s1", t0)); err != nil {
		t.Fatal(err)
	}
	a := gate.Approval{ID: "a1", SessionID: "s1", ToolCallID: "c1", ToolName: "deploy", RequestedBy: "model",
		Status: gate.Pending, CreatedAt: t0, Approvers: 2, Reviewers: []string{"alice", "bob"}}
	if err := db.CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	via := &gate.LinkRef{LinkID: "l1", Label: "for alice"}
	got, counted, err := db.CastVote(ctx, "a1", gate.Vote{By: "alice", Via: via, Decision: gate.Approved, Reason: "fine", At: t0}, 2)
	if err != nil || !counted || got.Status != gate.Pending {
		t.Fatalf("alice: %+v %v %v", got, counted, err)
	}
	check := func(name string, a gate.Approval) {
		t.Helper()
		if a.Approvers != 2 || len(a.Reviewers) != 2 || a.Reviewers[1] != "bob" || len(a.Votes) != 1 {
			t.Fatalf("%s: %+v", name, a)
		}
		v := a.Votes[0]
		if v.By != "alice" || v.Via == nil || *v.Via != *via || v.Decision != gate.Approved || v.Reason != "fine" || !v.At.Equal(t0) {
			t.Fatalf("%s: vote %+v", name, v)
		}
	}
	check("CastVote", got)
	one, err := db.Approval(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	check("Approval", one)
	list, err := db.Approvals(ctx, "s1", "")
	if err != nil || len(list) != 1 {
		t.Fatal(list, err)
	}
	check("Approvals", list[0])
	pending, err := db.PendingApprovals(ctx)
	if err != nil || len(pending) != 1 {
		t.Fatal(pending, err)
	}
	check("PendingApprovals", pending[0])
	// The inbox's cards show the votes too (found in review: a fresh /inbox said "0 of 2").
	inbox, err := db.Inbox(ctx, agent.InboxQuery{})
	if err != nil || len(inbox) != 1 {
		t.Fatal(inbox, err)
	}
	check("Inbox", inbox[0].Approval)

	got, counted, err = db.CastVote(ctx, "a1", gate.Vote{By: "bob", Decision: gate.Approved}, 2)
	if err != nil || !counted || got.Status != gate.Approved || got.DecidedBy != "bob" || got.DecisionSource != gate.FromPerson ||
		len(got.Votes) != 2 || got.Votes[1].Via != nil {
		t.Fatalf("bob: %+v %v %v", got, counted, err)
	}
	if got.Outcome() != "approved by alice and bob" {
		t.Fatalf("outcome %q", got.Outcome())
	}
}

// testOneVotePerPerson: a second approve by the same name is not counted; another decision by
// them is a conflict; a vote on a resolved or unknown approval is refused.
func testOneVotePerPerson(t *testing.T, h Harness) {
	db := h.open(t)
	ctx := context.Background()
	if err := db.CreateSession(ctx, session("s1", t0)); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateApproval(ctx, gate.Approval{ID: "a1", SessionID: "s1", ToolCallID: "c1", ToolName: "deploy",
		Status: gate.Pending, Approvers: 3}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CastVote(ctx, "a1", gate.Vote{By: "alice", Decision: gate.Approved}, 3); err != nil {
		t.Fatal(err)
	}
	a, counted, err := db.CastVote(ctx, "a1", gate.Vote{By: "alice", Decision: gate.Approved}, 3)
	if err != nil || counted || a.Approvals() != 1 {
		t.Fatalf("again: %d approvals, counted %v, %v", a.Approvals(), counted, err)
	}
	_, _, err = db.CastVote(ctx, "a1", gate.Vote{By: "alice", Decision: gate.Denied}, 3)
	assertErr(t, err, apperr.Conflict, "alice already approved this call: one vote per person.")
	if _, _, err := db.CastVote(ctx, "a1", gate.Vote{By: "bob", Decision: gate.Denied, Reason: "no"}, 3); err != nil {
		t.Fatal(err)
	}
	_, _, err = db.CastVote(ctx, "a1", gate.Vote{By: "carol", Decision: gate.Approved}, 3)
	assertErr(t, err, apperr.Conflict, "approval already resolved")
	_, _, err = db.CastVote(ctx, "nope", gate.Vote{By: "carol", Decision: gate.Approved}, 3)
	assertErr(t, err, apperr.NotFound, "approval nope not found")
}

// testLookAlikeNamesVoteOnce: names with one gate.PersonKey are one person ("alice" and "аlice"
// with a Cyrillic а): the second approve is not counted and a two-approver call stays pending.
func testLookAlikeNamesVoteOnce(t *testing.T, h Harness) {
	db := h.open(t)
	ctx := context.Background()
	if err := db.CreateSession(ctx, session("s1", t0)); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateApproval(ctx, gate.Approval{ID: "a1", SessionID: "s1", ToolCallID: "c1", ToolName: "deploy",
		Status: gate.Pending, Approvers: 2}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CastVote(ctx, "a1", gate.Vote{By: "alice", Decision: gate.Approved}, 2); err != nil {
		t.Fatal(err)
	}
	a, counted, err := db.CastVote(ctx, "a1", gate.Vote{By: "\u0430lice", Decision: gate.Approved}, 2)
	if err != nil || counted || a.Status != gate.Pending || a.Approvals() != 1 {
		t.Fatalf("аlice after alice: %s with %d approvals, counted %v, %v; want pending, 1, not counted", a.Status, a.Approvals(), counted, err)
	}
	_, _, err = db.CastVote(ctx, "a1", gate.Vote{By: "ALICE", Decision: gate.Denied}, 2)
	assertErr(t, err, apperr.Conflict, "ALICE already approved this call: one vote per person.")
	a, counted, err = db.CastVote(ctx, "a1", gate.Vote{By: "bob", Decision: gate.Approved}, 2)
	if err != nil || !counted || a.Status != gate.Approved {
		t.Fatalf("bob: %s, counted %v, %v; want approved", a.Status, counted, err)
	}
}

// testRuleAndShareKeepTheirPeople: a rule's approvers and reviewers, and the person a link was
// made for, survive the store.
func testRuleAndShareKeepTheirPeople(t *testing.T, h Harness) {
	db := h.open(t)
	ctx := context.Background()
	if err := db.CreateSession(ctx, session("s1", t0)); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateRule(ctx, gate.Rule{ID: "r1", Effect: gate.Ask, Tool: "deploy", Scope: gate.ScopeServer, Source: gate.SourceAPI,
		CreatedBy: "owner", Approvers: 2, Reviewers: []string{"alice", "bob"}}); err != nil {
		t.Fatal(err)
	}
	rules, err := db.Rules(ctx)
	if err != nil || len(rules) != 1 || rules[0].Approvers != 2 || len(rules[0].Reviewers) != 2 {
		t.Fatalf("%+v %v", rules, err)
	}
	if err := db.CreateShare(ctx, share.Link{ID: "l1", SessionID: "s1", Role: share.Approver, For: "alice", TokenHash: "h", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	l, err := db.Share(ctx, "l1")
	if err != nil || l.For != "alice" {
		t.Fatalf("%+v %v", l, err)
	}
}

// testVotesRacingMakeTheQuorumOnce: two people approving at once an approval that needs both
// resolve it exactly once: both votes are counted, one of them returns it approved, and it is
// stored approved with two votes; a deny racing an approve ends denied or approved, never
// pending, and never both.
func testVotesRacingMakeTheQuorumOnce(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	for i := range 20 {
		id := fmt.Sprintf("q%02d", i)
		if err := db.CreateApproval(ctx, gate.Approval{ID: id, SessionID: "s1", ToolCallID: "c" + id, ToolName: "deploy",
			RequestedBy: "model", Status: gate.Pending, CreatedAt: t0, Approvers: 2}); err != nil {
			t.Fatal(err)
		}
		second := gate.Approved
		if i%2 == 1 {
			second = gate.Denied
		}
		votes := []gate.Vote{{By: "alice", Decision: gate.Approved}, {By: "bob", Decision: second}}
		results := make([]gate.Approval, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j := range votes {
			wg.Go(func() {
				<-start
				results[j], _, errs[j] = db.CastVote(ctx, id, votes[j], 2)
			})
		}
		close(start)
		wg.Wait()
		got, err := db.Approval(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		resolved := 0
		for j := range votes {
			if errs[j] == nil && results[j].Status != gate.Pending {
				resolved++
			}
		}
		switch {
		case second == gate.Approved:
			if errs[0] != nil || errs[1] != nil || resolved != 1 || got.Status != gate.Approved || len(got.Votes) != 2 {
				t.Fatalf("%s: two approvals at once: errors %v, %d resolved, stored %s with %d votes", id, errs, resolved, got.Status, len(got.Votes))
			}
		default:
			// The deny resolves at once; an approve after it is refused, one before it counted.
			if got.Status != gate.Denied || resolved != 1 || errs[1] != nil {
				t.Fatalf("%s: approve and deny at once: errors %v, %d resolved, stored %s", id, errs, resolved, got.Status)
			}
		}
	}
}
