package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/store"
)

// holdLead starts a write that leads the committer until release is called; writes made
// meanwhile queue up behind it.
func holdLead(t *testing.T, db *DB) (release func()) {
	t.Helper()
	started, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- conn{db}.Write(context.Background(), 0, func(store.Querier) error {
			close(started)
			<-unblock
			return nil
		})
	}()
	<-started
	return func() {
		close(unblock)
		if err := <-done; err != nil {
			t.Errorf("the leading write: %v", err)
		}
	}
}

// waitQueued waits until n writes wait in the committer's queue.
func waitQueued(t *testing.T, db *DB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		db.commits.mu.Lock()
		got := len(db.commits.queue)
		db.commits.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAWriteCancelledWhileItWaitsWritesNothing: a write whose context ends while it waits for
// the write before it returns the context's error at once, without waiting for that write, and
// is never run.
func TestAWriteCancelledWhileItWaitsWritesNothing(t *testing.T) {
	db := MustOpenDB(t)
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	release := holdLead(t, db)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := db.AppendEntry(ctx, "s1", agent.Message{Role: agent.User, Content: []agent.Block{{Type: "text", Text: "x"}}})
		done <- err
	}()
	waitQueued(t, db, 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("AppendEntry = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled write still waits for the write before it")
	}
	waitQueued(t, db, 0)
	release()
	entries, err := db.Entries(context.Background(), "s1")
	if err != nil || len(entries) != 0 {
		t.Fatalf("entries %v, %v; want none", entries, err)
	}
	if _, err := db.AppendEntry(context.Background(), "s1", agent.Message{Role: agent.User}); err != nil {
		t.Fatalf("a write after: %v", err)
	}
}

// TestWritesAreServedInArrivalOrder: writes that wait are written first come, first served
// (database/sql would hand its connection to a random waiter).
func TestWritesAreServedInArrivalOrder(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	release := holdLead(t, db)
	const n = 8
	done := make(chan error, n)
	for i := range n {
		go func() {
			_, err := db.AppendEntry(ctx, "s1", agent.Message{Role: agent.User, Content: []agent.Block{{Type: "text", Text: fmt.Sprint(i)}}})
			done <- err
		}()
		waitQueued(t, db, i+1)
	}
	release()
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	entries, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Message.Text())
	}
	if fmt.Sprint(got) != "[0 1 2 3 4 5 6 7]" {
		t.Fatalf("entries written in the order %v, want the order the writes arrived in", got)
	}
}

// TestConcurrentWritesAllLand: many goroutines appending at once each see their entries stored
// in order, with no gaps, and nothing hangs.
func TestConcurrentWritesAllLand(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	const sessions, perSession = 40, 25
	for i := range sessions {
		mustCreateSession(t, db, agent.Session{ID: fmt.Sprintf("s%d", i), Title: "t", Model: "faux:demo", Workspace: "/w"})
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Go(func() {
			id := fmt.Sprintf("s%d", i)
			for j := range perSession {
				e, err := db.AppendEntry(ctx, id, agent.Message{Role: agent.User, Content: []agent.Block{{Type: "text", Text: fmt.Sprint(j)}}},
					gate.Approval{ID: fmt.Sprintf("%s-%d", id, j), SessionID: id, MessageID: "m", ToolCallID: "c", ToolName: "t",
						RequestedBy: "model", Status: gate.Pending, CreatedAt: time.Now()})
				if err != nil {
					errs <- err
					return
				}
				if e.Seq != int64(j+1) {
					errs <- fmt.Errorf("%s: entry %d got seq %d", id, j, e.Seq)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range sessions {
		id := fmt.Sprintf("s%d", i)
		entries, err := db.Entries(ctx, id)
		if err != nil || len(entries) != perSession {
			t.Fatalf("%s: %d entries, %v; want %d", id, len(entries), err, perSession)
		}
		pending, err := db.Approvals(ctx, id, gate.Pending)
		if err != nil || len(pending) != perSession {
			t.Fatalf("%s: %d pending approvals, %v; want %d", id, len(pending), err, perSession)
		}
	}
	db.commits.mu.Lock()
	defer db.commits.mu.Unlock()
	if db.commits.leading || len(db.commits.queue) != 0 {
		t.Fatalf("committer left leading=%v with %d queued", db.commits.leading, len(db.commits.queue))
	}
}

// TestAWriteThatPanicsPanicsInItsOwnGoroutine: a bug in one write's function is raised again
// in the goroutine that made the write, alone or while others wait; what it wrote is rolled
// back, the writes waiting behind it are committed and later writes still go through (the
// committer is not left leading).
func TestAWriteThatPanicsPanicsInItsOwnGoroutine(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	boom := func() (p any) {
		defer func() { p = recover() }()
		_ = conn{db}.Write(ctx, store.Atomic, func(tx store.Querier) error {
			if _, err := tx.Exec(ctx, `INSERT INTO entries (session_id, seq, role, tool_call_id, message, created_at)
				SELECT ?, COALESCE(MAX(seq), 0) + 1, 'user', '', '{"role":"user"}', ? FROM entries WHERE session_id = ?`,
				"s1", store.FormatTime(time.Now()), "s1"); err != nil {
				return err
			}
			panic("boom")
		})
		return nil
	}
	entry := func(text string) error {
		_, err := db.AppendEntry(ctx, "s1", agent.Message{Role: agent.User, Content: []agent.Block{{Type: "text", Text: text}}})
		return err
	}

	if p := boom(); p != "boom" {
		t.Fatalf("a lone write's panic: recovered %v, want boom", p)
	}
	release := holdLead(t, db)
	panicked, wrote := make(chan any, 1), make(chan error, 1)
	go func() { panicked <- boom() }()
	waitQueued(t, db, 1)
	go func() { wrote <- entry("kept") }()
	waitQueued(t, db, 2)
	release()
	if p := <-panicked; p != "boom" {
		t.Fatalf("a queued write's panic: recovered %v, want boom", p)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the write queued behind it: %v", err)
	}
	if err := entry("after"); err != nil {
		t.Fatalf("a write after the panics: %v", err)
	}
	entries, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range entries {
		texts = append(texts, e.Message.Text())
	}
	// What the panicking writes inserted before they panicked is rolled back.
	if got := fmt.Sprint(texts); got != "[kept after]" {
		t.Fatalf("entries %q, want kept and after only", texts)
	}
}

// TestAWriteTransactionsStatementsArePreparedOnce: a statement first run inside a write's
// transaction (where preparing on the pool would wait for the connection the transaction holds)
// is prepared after its commit, so the next write that runs it binds the prepared statement.
func TestAWriteTransactionsStatementsArePreparedOnce(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	const q = `UPDATE sessions SET title = ? WHERE id = ?`
	write := func(title string) {
		t.Helper()
		if err := (conn{db}).Write(ctx, store.Atomic, func(tx store.Querier) error {
			_, err := tx.Exec(ctx, q, title, "s1")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	write("two")
	if db.writes.cached(q) == nil {
		t.Fatal("the statement was not prepared after the write's commit")
	}
	n := len(db.writes.m)
	write("three")
	if len(db.writes.m) != n {
		t.Fatalf("the cache grew from %d to %d statements on the second write", n, len(db.writes.m))
	}
	if s, err := db.Session(ctx, "s1"); err != nil || s.Title != "three" {
		t.Fatalf("session %+v, %v; want the title three", s, err)
	}
}
