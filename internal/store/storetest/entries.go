package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/apperr"
)

func testEntries(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0))

	var want []agent.Entry
	for i, m := range transcript() {
		got, err := db.AppendEntry(ctx, "s1", m)
		if err != nil {
			t.Fatal(err)
		}
		e := agent.Entry{Seq: int64(i + 1), SessionID: "s1", Message: m}
		assertEqual(t, "AppendEntry", got, e)
		want = append(want, e)
	}
	got, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Entries", got, want)

	// Seq counts per session.
	e, err := db.AppendEntry(ctx, "s2", transcript()[0])
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != 1 {
		t.Fatalf("first entry of s2: Seq = %d, want 1", e.Seq)
	}

	_, err = db.AppendEntry(ctx, "nope", transcript()[0])
	assertErr(t, err, apperr.NotFound, "session nope not found")
	got, err = db.Entries(ctx, "nope")
	if err != nil || len(got) != 0 {
		t.Fatalf("Entries(nope) = %v, %v; want none", got, err)
	}
}

func testAppendEntryConcurrent(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	const n = 50
	var wg sync.WaitGroup
	seqs := make(chan int64, n)
	for i := range n {
		wg.Go(func() {
			e, err := db.AppendEntry(ctx, "s1", agent.Message{ID: fmt.Sprint(i), Role: agent.User, Timestamp: t0})
			if err != nil {
				t.Error(err)
				return
			}
			seqs <- e.Seq
		})
	}
	wg.Wait()
	close(seqs)
	seen := map[int64]bool{}
	for s := range seqs {
		if seen[s] || s < 1 || s > n {
			t.Fatalf("Seq %d duplicated or out of 1..%d", s, n)
		}
		seen[s] = true
	}
	entries, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != n {
		t.Fatalf("len(Entries) = %d, want %d", len(entries), n)
	}
}
