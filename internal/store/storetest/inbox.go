package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
)

// testInboxListsPendingApprovalsAcrossSessionsOldestFirst: the inbox (SPEC §15) reads every
// session's pending approvals, oldest first, with the session's title, and nothing decided.
func testInboxListsPendingApprovalsAcrossSessionsOldestFirst(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	for _, s := range []struct{ id, title string }{{"s1", "First <b>one</b>"}, {"s2", "Second"}, {"s3", "Third"}} {
		x := session(s.id, t0)
		x.Title = s.title
		mustCreateSession(t, db, x)
	}
	as := approvals() // a1 pending in s1 at t0, a4 pending in s2 at t0-1h, the rest decided
	mustCreateApprovals(t, db, as...)
	// Same created_at as a1: insertion order breaks the tie.
	tie := as[0]
	tie.ID, tie.SessionID, tie.ToolCallID = "a6", "s3", "call_6"
	mustCreateApprovals(t, db, tie)
	// Pending, then decided: not in the inbox any more.
	gone := as[0]
	gone.ID, gone.SessionID, gone.ToolCallID, gone.CreatedAt = "a7", "s3", "call_7", t0.Add(-2*time.Hour)
	mustCreateApprovals(t, db, gone)
	if _, err := db.ResolveApproval(ctx, "a7", gate.Resolution{Status: gate.Denied, DecidedBy: gate.ByOwner}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		sessionID string
		want      []string // approval id/session title
	}{
		{"every session, oldest first", "", []string{"a4/Second", "a1/First <b>one</b>", "a6/Third"}},
		{"one session", "s3", []string{"a6/Third"}},
		{"a session with nothing pending", "s9", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := db.Inbox(ctx, agent.InboxQuery{SessionID: tt.sessionID})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range items {
				got = append(got, it.Approval.ID+"/"+it.SessionTitle)
				if it.Approval.Status != gate.Pending {
					t.Errorf("%s: status %q, want pending", it.Approval.ID, it.Approval.Status)
				}
				if it.Workspace == "" {
					t.Errorf("%s: no workspace", it.Approval.ID)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Inbox(%q) = %q, want %q", tt.sessionID, got, tt.want)
			}
			n, err := db.PendingCount(ctx, tt.sessionID)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tt.want) {
				t.Errorf("PendingCount(%q) = %d, want %d", tt.sessionID, n, len(tt.want))
			}
		})
	}
	// Pages: after an approval, at most a limit.
	for _, tt := range []struct {
		name string
		q    agent.InboxQuery
		want string
	}{
		{"the first page", agent.InboxQuery{Limit: 2}, "a4,a1"},
		{"the next page", agent.InboxQuery{After: "a1", Limit: 2}, "a6"},
		{"after the tie's first", agent.InboxQuery{After: "a4"}, "a1,a6"},
		{"after the last", agent.InboxQuery{After: "a6"}, ""},
		{"one session's page", agent.InboxQuery{SessionID: "s1", Limit: 1}, "a1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			items, err := db.Inbox(ctx, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range items {
				got = append(got, it.Approval.ID)
			}
			if strings.Join(got, ",") != tt.want {
				t.Errorf("Inbox(%+v) = %q, want %q", tt.q, got, tt.want)
			}
		})
	}
	// The whole approval comes back, as Approval reads it.
	items, _ := db.Inbox(ctx, agent.InboxQuery{SessionID: "s2"})
	want, _ := db.Approval(ctx, "a4")
	if len(items) != 1 || string(items[0].Approval.Arguments) != string(want.Arguments) ||
		!items[0].Approval.CreatedAt.Equal(want.CreatedAt) || items[0].Approval.ToolName != want.ToolName {
		t.Errorf("Inbox(s2) = %+v, want the approval %+v", items, want)
	}
}

// testInboxForAPersonKeepsWhatTheyMayDecide: the inbox and count for a person (InboxQuery.For,
// PendingCountFor; SPEC §15) keep the calls with no reviewers and those whose reviewers name
// them (without case), and leave out the others — "a_ice" and "%" name nobody but themselves.
func testInboxForAPersonKeepsWhatTheyMayDecide(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	base := approvals()[0] // pending in s1
	var as []gate.Approval
	for i, reviewers := range [][]string{nil, {}, {"Owner", "bob"}, {"alice"}, {"a_ice"}, {"%"}} {
		a := base
		a.ID, a.ToolCallID, a.CreatedAt = fmt.Sprintf("r%d", i), fmt.Sprintf("call_r%d", i), t0.Add(time.Duration(i)*time.Second)
		a.Reviewers = reviewers
		as = append(as, a)
	}
	mustCreateApprovals(t, db, as...)
	for _, tt := range []struct {
		person string
		want   []string
	}{
		{"", []string{"r0", "r1", "r2", "r3", "r4", "r5"}},
		{"owner", []string{"r0", "r1", "r2"}},
		{"alice", []string{"r0", "r1", "r3"}},
		{"a_ice", []string{"r0", "r1", "r4"}},
		{"%", []string{"r0", "r1", "r5"}},
	} {
		items, err := db.Inbox(ctx, agent.InboxQuery{For: tt.person})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range items {
			got = append(got, it.Approval.ID)
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("Inbox for %q = %q, want %q", tt.person, got, tt.want)
		}
		n, err := db.PendingCountFor(ctx, "", tt.person)
		if err != nil || n != len(tt.want) {
			t.Errorf("PendingCountFor(%q) = %d, %v; want %d", tt.person, n, err, len(tt.want))
		}
	}
}
