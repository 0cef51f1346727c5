package sqlite

import (
	"context"
	"testing"

	"countersign/internal/gate"
	"countersign/internal/store"
)

// TestTheVotesTableKeepsOneVotePerName: approval_votes itself refuses a second row for a name
// (the conformance suite's OneVotePerPerson checks the behaviour through CastVote).
func TestTheVotesTableKeepsOneVotePerName(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, session("s1", t0))
	if err := db.CreateApproval(ctx, gate.Approval{ID: "a1", SessionID: "s1", ToolCallID: "c1", ToolName: "deploy",
		Status: gate.Pending, Approvers: 3}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CastVote(ctx, "a1", gate.Vote{By: "alice", Decision: gate.Approved}, 3); err != nil {
		t.Fatal(err)
	}
	_, err := db.write.ExecContext(ctx, `INSERT INTO approval_votes (approval_id, name, decision, at) VALUES ('a1', 'alice', 'denied', 'x')`)
	if errKind(err) != store.ErrUnique {
		t.Fatalf("a second row for alice: %v, want a UNIQUE error", err)
	}
}
