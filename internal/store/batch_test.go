package store

import (
	"context"
	"os"
	"reflect"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

func TestCreateApprovalsIsAllOrNothing(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	mustCreateSession(t, db, agent.Session{ID: "s2", Title: "two", Model: "faux:demo", Workspace: "/w"})
	all := approvals()
	if err := db.CreateApprovals(ctx, all[:3]); err != nil {
		t.Fatal(err)
	}
	// A batch with an id that exists fails whole, with CreateApproval's code, and stores nothing.
	err := db.CreateApprovals(ctx, []gate.Approval{all[3], all[0]})
	assertErr(t, err, apperr.Conflict, "approval a1 already exists")
	if _, err := db.Approval(ctx, all[3].ID); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("a4 of the failed batch was stored: %v", err)
	}
	if err := db.CreateApprovals(ctx, nil); err != nil {
		t.Fatalf("an empty batch: %v", err)
	}
	for _, want := range all[:3] {
		got, err := db.Approval(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Approval(%s) = %+v, want %+v", want.ID, got, want)
		}
	}
}

// TestCheckpointsRunInTheBackground: with commits no longer paying for checkpoints, the WAL is
// still copied into the database file, and Close stops the checkpointer.
func TestCheckpointsRunInTheBackground(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	before, err := os.Stat(db.Path())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := db.AppendEntry(ctx, "s1", agent.Message{ID: "m", Role: agent.User,
			Content: []agent.Block{{Type: "text", Text: string(make([]byte, 2000)) + string(rune('a'+i%26))}}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * checkpointInterval)
	for {
		fi, err := os.Stat(db.Path())
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > before.Size()+100_000 {
			break // the entries reached the database file
		}
		if time.Now().After(deadline) {
			t.Fatalf("database file still %d bytes (was %d) after %v: no checkpoint ran", fi.Size(), before.Size(), 10*checkpointInterval)
		}
		time.Sleep(checkpointInterval / 5)
	}
}
