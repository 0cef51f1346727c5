package sqlite

import (
	"context"
	"testing"

	"countersign/internal/gate"
	"countersign/internal/notify"
)

// TestAVoteThatResolvesAnApprovalQueuesItsResolvedEvent (review of issue 29; as before it): a
// webhook receiver told of a multi-approver approval's request (approval.requested) is told of
// its resolution too (SPEC §15: approval.resolved is POSTed), also when the votes resolve it.
// ResolveApproval writes the approval.resolved outbox rows (outboxResolved); CastVote resolves
// through resolveIn without them, so a call that needed two approvers, denied or approved by
// votes, never reaches the receivers as resolved.
func TestAVoteThatResolvesAnApprovalQueuesItsResolvedEvent(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	key, err := notify.NewLinkTokens([]byte("a test server key of 32 bytes!!!"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetNotify([]notify.Receiver{{ID: "wh-a", Name: "alice", URL: "http://a.example/h", Format: notify.FormatJSON}}, key, func() {})
	mustCreateSession(t, db, session("s1", t0))
	for _, tc := range []struct {
		id    string
		votes []gate.Vote
	}{
		{"denied", []gate.Vote{{By: "ana", Decision: gate.Denied, Reason: "no"}}},
		{"approved", []gate.Vote{{By: "ana", Decision: gate.Approved}, {By: "bob", Decision: gate.Approved}}},
	} {
		if err := db.CreateApproval(ctx, gate.Approval{ID: tc.id, SessionID: "s1", MessageID: "m", ToolCallID: "c-" + tc.id,
			ToolName: "deploy", Arguments: []byte(`{}`), RequestedBy: gate.RequestedByModel, Status: gate.Pending, Approvers: 2}); err != nil {
			t.Fatal(err)
		}
		var a gate.Approval
		for _, v := range tc.votes {
			if a, _, err = db.CastVote(ctx, tc.id, v, 2); err != nil {
				t.Fatal(err)
			}
		}
		if a.Status == gate.Pending {
			t.Fatalf("%s: the votes left it pending", tc.id)
		}
	}
	ds, err := db.Deliveries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	events := map[string]bool{}
	for _, d := range ds {
		events[d.ID] = true
	}
	for _, want := range []string{"denied/wh-a/approval.resolved", "approved/wh-a/approval.resolved"} {
		if !events[want] {
			t.Errorf("no %s delivery; the outbox holds %v", want, events)
		}
	}
}
