package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// holdLead starts a write that leads the committer until release is called; writes made
// meanwhile queue up and form the next group.
func holdLead(t *testing.T, db *DB) (release func()) {
	t.Helper()
	started, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- db.commit(context.Background(), false, func(w *writeTx) error {
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

// TestWritesThatWaitAreCommittedTogetherAndFailAlone: writes that arrive while another is being
// written are committed as one group; each gets its own answer, and a failing one (a conflict, an
// entry whose audit record is bad, a decision on a resolved approval, an unknown session) leaves
// nothing behind while the others of its group are stored.
func TestWritesThatWaitAreCommittedTogetherAndFailAlone(t *testing.T) {
	db := MustOpenDB(t)
	db.commits.max = 64 // group commit on
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	mustCreateSession(t, db, agent.Session{ID: "s2", Title: "two", Model: "faux:demo", Workspace: "/w"})
	now := time.Now().UTC()
	approval := func(id, session string, status gate.Status) gate.Approval {
		a := gate.Approval{ID: id, SessionID: session, MessageID: "m", ToolCallID: "c-" + id, ToolName: "t",
			RequestedBy: "model", Status: status, CreatedAt: now}
		if status != gate.Pending {
			a.Automatic, a.DecidedBy, a.DecidedAt = true, "policy", &now
		}
		return a
	}
	for _, a := range []gate.Approval{approval("taken", "s1", gate.Approved), approval("open", "s1", gate.Pending),
		approval("done", "s1", gate.Approved)} {
		if err := db.CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	text := func(s string) agent.Message {
		return agent.Message{Role: agent.User, Content: []agent.Block{{Type: "text", Text: s}}}
	}

	type result struct {
		name string
		err  error
	}
	writes := []struct {
		name string
		run  func() error
		code apperr.Code // "" for success
	}{
		{"entry s1", func() error { _, err := db.AppendEntry(ctx, "s1", text("a")); return err }, ""},
		{"entry s2 with records", func() error {
			_, err := db.AppendEntry(ctx, "s2", text("b"), approval("r1", "s2", gate.Approved), approval("r2", "s2", gate.Approved))
			return err
		}, ""},
		{"entry s1 with a taken record", func() error {
			_, err := db.AppendEntry(ctx, "s1", text("lost"), approval("r3", "s1", gate.Approved), approval("taken", "s1", gate.Approved))
			return err
		}, apperr.Conflict},
		{"approval taken again", func() error { return db.CreateApproval(ctx, approval("taken", "s1", gate.Pending)) }, apperr.Conflict},
		{"entry of an unknown session", func() error { _, err := db.AppendEntry(ctx, "nope", text("x")); return err }, apperr.NotFound},
		{"decision", func() error {
			_, err := db.ResolveApproval(ctx, "open", gate.Resolution{Status: gate.Approved, DecidedBy: "ann"})
			return err
		}, ""},
		{"decision on a resolved approval", func() error {
			_, err := db.ResolveApproval(ctx, "done", gate.Resolution{Status: gate.Denied, DecidedBy: "bob"})
			return err
		}, apperr.Conflict},
		{"audit batch", func() error {
			return db.CreateApprovals(ctx, []gate.Approval{approval("b1", "s2", gate.Approved), approval("b2", "s2", gate.Approved)})
		}, ""},
		{"entry s1 again", func() error { _, err := db.AppendEntry(ctx, "s1", text("c")); return err }, ""},
	}

	release := holdLead(t, db)
	results := make(chan result, len(writes))
	for _, w := range writes {
		go func() { results <- result{w.name, w.run()} }()
	}
	waitQueued(t, db, len(writes))
	release()
	got := map[string]error{}
	for range writes {
		r := <-results
		got[r.name] = r.err
	}
	for _, w := range writes {
		if err := got[w.name]; apperr.CodeOf(err) != w.code || (w.code == "" && err != nil) {
			t.Errorf("%s: %v, want code %q", w.name, err, w.code)
		}
	}

	// What the group stored: the successful writes, nothing of the failed ones.
	s1, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var s1Texts []string
	for _, e := range s1 {
		s1Texts = append(s1Texts, e.Message.Content[0].Text)
	}
	if fmt.Sprint(s1Texts) != "[a c]" && fmt.Sprint(s1Texts) != "[c a]" {
		t.Errorf("session s1's entries %q, want a and c (not the entry whose record failed)", s1Texts)
	}
	if len(s1) == 2 && (s1[0].Seq != 1 || s1[1].Seq != 2) {
		t.Errorf("session s1's seqs %d, %d, want 1, 2", s1[0].Seq, s1[1].Seq)
	}
	for _, id := range []string{"r1", "r2", "b1", "b2"} {
		if _, err := db.Approval(ctx, id); err != nil {
			t.Errorf("approval %s: %v, want stored", id, err)
		}
	}
	if _, err := db.Approval(ctx, "r3"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("record r3 of the failed entry: %v, want not found", err)
	}
	if a, err := db.Approval(ctx, "open"); err != nil || a.Status != gate.Approved || a.DecidedBy != "ann" {
		t.Errorf("approval open = %+v, %v; want approved by ann", a, err)
	}
	if a, err := db.Approval(ctx, "done"); err != nil || a.DecidedBy != "policy" {
		t.Errorf("approval done = %+v, %v; want unchanged", a, err)
	}
	if a, err := db.Approval(ctx, "taken"); err != nil || a.Status != gate.Approved {
		t.Errorf("approval taken = %+v, %v; want the first one unchanged", a, err)
	}
}

// TestAWriteCancelledWhileItWaitsWritesNothing: a write whose context ends while it waits for
// the group before it returns the context's error at once, without waiting for that group, and
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
		t.Fatal("the cancelled write still waits for the group before it")
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

// TestWhenSQLiteRollsTheGroupBackEveryWriteIsToldSo: SQLite can end a transaction itself (a full
// disk, an I/O error; here a trigger's RAISE(ROLLBACK)) in the middle of a group. No write of the
// group may then report success without its data stored, and the committer goes on working.
func TestWhenSQLiteRollsTheGroupBackEveryWriteIsToldSo(t *testing.T) {
	db := MustOpenDB(t)
	db.commits.max = 64 // group commit on
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	if _, err := db.write.Exec(`CREATE TEMP TRIGGER boom BEFORE INSERT ON approvals WHEN NEW.id LIKE 'boom%'
		BEGIN SELECT RAISE(ROLLBACK, 'boom'); END`); err != nil {
		t.Fatal(err)
	}
	mk := func(id string) gate.Approval {
		return gate.Approval{ID: id, SessionID: "s1", MessageID: "m", ToolCallID: "c", ToolName: "t", RequestedBy: "model", Status: gate.Pending}
	}
	for name, bad := range map[string]func() error{
		"one approval": func() error { return db.CreateApproval(ctx, mk("boom1")) },
		"a batch":      func() error { return db.CreateApprovals(ctx, []gate.Approval{mk("x1"), mk("boom2"), mk("x2")}) },
		"an entry with records": func() error {
			_, err := db.AppendEntry(ctx, "s1", agent.Message{Role: agent.User}, mk("y1"), mk("boom3"))
			return err
		},
	} {
		release := holdLead(t, db)
		type result struct {
			id  string
			err error
		}
		out := make(chan result, 3)
		good := func() { id := gate.NewID(); out <- result{id, db.CreateApproval(ctx, mk(id))} }
		go good()
		waitQueued(t, db, 1)
		go func() { out <- result{"", bad()} }()
		waitQueued(t, db, 2)
		go good()
		waitQueued(t, db, 3)
		release()
		for range 3 {
			r := <-out
			if r.id == "" {
				if r.err == nil {
					t.Errorf("%s: the write that made SQLite roll back reported success", name)
				}
				continue
			}
			_, err := db.Approval(ctx, r.id)
			if stored := err == nil; stored != (r.err == nil) {
				t.Errorf("%s: a write of its group reported %v, stored %v", name, r.err, stored)
			}
		}
		if err := db.CreateApproval(ctx, mk(gate.NewID())); err != nil {
			t.Fatalf("%s: a write after: %v", name, err)
		}
	}
	for _, id := range []string{"x1", "x2", "y1"} {
		if _, err := db.Approval(ctx, id); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("approval %s of a rolled-back write: %v, want not found", id, err)
		}
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

// TestConcurrentWritesAllLand: many goroutines appending at once, one at a time and in groups,
// each see their entries stored in order, with no gaps, and nothing hangs.
func TestConcurrentWritesAllLand(t *testing.T) {
	for _, max := range []int{1, 64} {
		t.Run(fmt.Sprintf("max=%d", max), func(t *testing.T) { concurrentWritesAllLand(t, max) })
	}
}

func concurrentWritesAllLand(t *testing.T, max int) {
	db := MustOpenDB(t)
	db.commits.max = max
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
// in the goroutine that made the write, alone or in a group; what it wrote is rolled back, the
// others of its group are committed and later writes still go through (the committer is not
// left leading).
func TestAWriteThatPanicsPanicsInItsOwnGoroutine(t *testing.T) {
	db := MustOpenDB(t)
	db.commits.max = 64 // group commit on
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	boom := func() (p any) {
		defer func() { p = recover() }()
		_ = db.commit(ctx, true, func(w *writeTx) error {
			if _, err := w.stmt(insertEntry).ExecContext(w.ctx, "s1", "user", "", `{"role":"user"}`, formatTime(time.Now()), "s1"); err != nil {
				return err
			}
			panic("boom")
		}, insertEntry)
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
		t.Fatalf("a grouped write's panic: recovered %v, want boom", p)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the other write of the group: %v", err)
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
