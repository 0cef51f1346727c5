package store

import (
	"context"
	"sync"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/apperr"
)

// TestInstructionsAreStoredAndFixedByTheFirstEntry: a session's instructions round-trip, change
// while it has no entry, and once it has one a change is a conflict that changes nothing.
func TestInstructionsAreStoredAndFixedByTheFirstEntry(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	s := session("s1", t0)
	s.Instructions = "Work in /work/s1.\nBe brief."
	mustCreateSession(t, db, s)
	got, err := db.Session(ctx, "s1")
	if err != nil || got.Instructions != s.Instructions {
		t.Fatalf("Session = %q, %v; want %q", got.Instructions, err, s.Instructions)
	}
	if err := db.SetSessionInstructions(ctx, "s1", "Answer like a pirate."); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.Session(ctx, "s1"); got.Instructions != "Answer like a pirate." {
		t.Fatalf("instructions %q after the change", got.Instructions)
	}
	if _, err := db.AppendEntry(ctx, "s1", agent.Message{ID: "m1", Role: agent.User, Content: []agent.Block{{Type: "text", Text: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	err = db.SetSessionInstructions(ctx, "s1", "Something else.")
	if apperr.CodeOf(err) != apperr.Conflict || apperr.MessageOf(err) != "The instructions can no longer change: the session has messages (they are fixed by the first one)." {
		t.Fatalf("after an entry: %v, want the conflict", err)
	}
	if got, _ := db.Session(ctx, "s1"); got.Instructions != "Answer like a pirate." {
		t.Errorf("a refused change left %q", got.Instructions)
	}
	if err := db.SetSessionInstructions(ctx, "nope", "x"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("unknown session: %v, want not found", err)
	}
}

// TestInstructionsRaceTheFirstEntry: an instructions change and a first entry at the same time
// end in one of two ways only: the change comes first, or it is refused.
func TestInstructionsRaceTheFirstEntry(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	for i := range 20 {
		id := "race" + string(rune('a'+i))
		mustCreateSession(t, db, session(id, t0))
		var wg sync.WaitGroup
		var setErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			setErr = db.SetSessionInstructions(ctx, id, "changed")
		}()
		go func() {
			defer wg.Done()
			if _, err := db.AppendEntry(ctx, id, agent.Message{ID: "m", Role: agent.User}); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		got, _ := db.Session(ctx, id)
		switch {
		case setErr == nil && got.Instructions == "changed":
		case apperr.CodeOf(setErr) == apperr.Conflict && got.Instructions == "":
		default:
			t.Fatalf("set: %v, instructions %q: neither first nor refused", setErr, got.Instructions)
		}
	}
}

// TestUsageIsSummedPerSession: each assistant message's usage is stored with it and added to its
// session's sums (agent.Session.Usage) in the same commit; messages without usage add nothing.
func TestUsageIsSummedPerSession(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0))
	msgs := []agent.Message{
		{ID: "u", Role: agent.User},
		{ID: "a1", Role: agent.Assistant, Usage: &agent.Usage{Input: 1000, Output: 20, CacheRead: 300}},
		{ID: "a2", Role: agent.Assistant},
		{ID: "a3", Role: agent.Assistant, Usage: &agent.Usage{Input: 5, Output: 7, CacheWrite: 11}},
	}
	for _, m := range msgs {
		if _, err := db.AppendEntry(ctx, "s1", m); err != nil {
			t.Fatal(err)
		}
	}
	s, err := db.Session(ctx, "s1")
	if want := (agent.Usage{Input: 1005, Output: 27, CacheRead: 300, CacheWrite: 11}); err != nil || s.Usage != want {
		t.Errorf("s1 usage %+v, %v; want %+v", s.Usage, err, want)
	}
	if other, _ := db.Session(ctx, "s2"); !other.Usage.IsZero() {
		t.Errorf("s2 usage %+v, want none", other.Usage)
	}
	es, _ := db.Entries(ctx, "s1")
	if es[1].Message.Usage == nil || *es[1].Message.Usage != *msgs[1].Usage || es[2].Message.Usage != nil {
		t.Errorf("stored usage %+v, %+v", es[1].Message.Usage, es[2].Message.Usage)
	}
	all, _ := db.Sessions(ctx)
	for _, x := range all {
		if x.ID == "s1" && x.Usage != s.Usage {
			t.Errorf("Sessions reads usage %+v, Session %+v", x.Usage, s.Usage)
		}
	}
}

// TestMigrationGivesOlderSessionsNoInstructionsAndNoUsage: migration 0011 (issue 18) leaves a
// session stored before it with "" instructions (no system prompt, as its requests were sent)
// and zero usage.
func TestMigrationGivesOlderSessionsNoInstructionsAndNoUsage(t *testing.T) {
	ctx := context.Background()
	p, raw := migratedBefore(t, "0011")
	if _, err := raw.Exec(`INSERT INTO sessions (id, title, model, workspace, state, created_at) VALUES ('old', 't', 'm', '/w', 'idle', '2025-01-01T00:00:00.000000000Z')`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db := mustOpenPath(t, p)
	s, err := db.Session(ctx, "old")
	if err != nil || s.Instructions != "" || !s.Usage.IsZero() {
		t.Fatalf("older session: instructions %q, usage %+v, %v; want none", s.Instructions, s.Usage, err)
	}
}
