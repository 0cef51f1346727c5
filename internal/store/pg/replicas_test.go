package pg_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/pgtest"
	"countersign/internal/store/pg"
	"countersign/internal/store/storetest"
)

// replicas opens n stores on one fresh database, each with its own pool, as n replicas of the
// team service would; they are closed when t ends.
func replicas(t *testing.T, n int) []*pg.DB {
	t.Helper()
	url := pgtest.Database(t)
	dbs := make([]*pg.DB, n)
	for i := range dbs {
		dbs[i] = open(t, url, time.Now)
		t.Cleanup(func() { dbs[i].Close() })
	}
	return dbs
}

// TestReplicasStartingTogetherMigrateOnce: stores opened on one empty database at the same time
// all start, each migration is recorded once, and opening again applies nothing.
func TestReplicasStartingTogetherMigrateOnce(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Database(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			db, err := pg.Open(ctx, url)
			if err == nil {
				db.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	names := func() []string {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		rows, err := c.Query(ctx, `SELECT name FROM schema_migrations ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := names()
	if len(want) == 0 || want[0] != "0001_init.sql" {
		t.Fatalf("migrations = %v, want 0001_init.sql first, each once", want)
	}
	db := open(t, url, time.Now)
	defer db.Close()
	if err := db.Ready(ctx); err != nil {
		t.Fatalf("Ready = %v", err)
	}
	if got := names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after opening again: %v, want %v", got, want)
	}
}

// TestDecisionsRaceAcrossReplicas (issue 21, acceptance 4 at the store): two replicas decide
// the same approval at once, 50 times: exactly one wins each time, the other gets
// apperr.Conflict, and both then read the winner's decision.
func TestDecisionsRaceAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	dbs := replicas(t, 2)
	if err := dbs[0].CreateSession(ctx, agent.Session{ID: "s1", Title: "t", Model: "m", Workspace: "/w"}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		id := fmt.Sprintf("a%02d", i)
		if err := dbs[i%2].CreateApproval(ctx, gate.Approval{ID: id, SessionID: "s1", MessageID: "m", ToolCallID: "c" + id,
			ToolName: "run_command", RequestedBy: "model", Status: gate.Pending}); err != nil {
			t.Fatal(err)
		}
		deciders := []gate.Resolution{
			{Status: gate.Approved, DecidedBy: "ana", Scope: gate.Once},
			{Status: gate.Denied, DecidedBy: "bob", Reason: "no"},
		}
		results := make([]gate.Approval, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j := range deciders {
			wg.Go(func() {
				<-start
				results[j], errs[j] = dbs[j].ResolveApproval(ctx, id, deciders[j])
			})
		}
		close(start)
		wg.Wait()
		wins, winner := 0, gate.Approval{}
		for j, err := range errs {
			switch apperr.CodeOf(err) {
			case "":
				wins++
				winner = results[j]
			case apperr.Conflict:
				if apperr.MessageOf(err) != "approval already resolved" {
					t.Fatalf("%s: the loser's message %q", id, apperr.MessageOf(err))
				}
			default:
				t.Fatalf("%s: replica %d: %v", id, j, err)
			}
		}
		if wins != 1 {
			t.Fatalf("%s: %d decisions won, want exactly 1 (%v)", id, wins, errs)
		}
		for j, db := range dbs {
			got, err := db.Approval(ctx, id)
			if err != nil || got.Status != winner.Status || got.DecidedBy != winner.DecidedBy {
				t.Fatalf("%s: replica %d reads %s by %s (%v), want the winner's %s by %s", id, j, got.Status, got.DecidedBy, err, winner.Status, winner.DecidedBy)
			}
		}
	}
}

// TestAppendsAcrossReplicasNumberTheTranscript: replicas appending to one session at once get
// seqs 1…n, each once, and the transcript reads back in that order with the instructions fixed.
func TestAppendsAcrossReplicasNumberTheTranscript(t *testing.T) {
	ctx := context.Background()
	dbs := replicas(t, 3)
	if err := dbs[0].CreateSession(ctx, agent.Session{ID: "s1", Title: "t", Model: "m", Workspace: "/w"}); err != nil {
		t.Fatal(err)
	}
	const n = 60
	seqs := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			e, err := dbs[i%len(dbs)].AppendEntry(ctx, "s1", agent.Message{ID: fmt.Sprint(i), Role: agent.User})
			if err != nil {
				t.Error(err)
			}
			seqs[i] = e.Seq
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, s := range seqs {
		if s < 1 || s > n || seen[s] {
			t.Fatalf("seq %d duplicated or out of 1..%d: %v", s, n, seqs)
		}
		seen[s] = true
	}
	es, err := dbs[2].Entries(ctx, "s1")
	if err != nil || len(es) != n {
		t.Fatalf("Entries = %d, %v; want %d", len(es), err, n)
	}
	for i, e := range es {
		if e.Seq != int64(i+1) || seqs[mustAtoi(t, e.Message.ID)] != e.Seq {
			t.Fatalf("entry %d: seq %d, message %s", i, e.Seq, e.Message.ID)
		}
	}
	err = dbs[1].SetSessionInstructions(ctx, "s1", "late")
	if apperr.CodeOf(err) != apperr.Conflict {
		t.Fatalf("instructions after the first entry: %v, want conflict", err)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscan(s, &i); err != nil {
		t.Fatal(err)
	}
	return i
}

// TestTextsPostgreSQLCannotHoldAreInvalid: PostgreSQL's text holds neither a NUL byte nor invalid
// UTF-8 (the SQLite store keeps both byte for byte): such an approval or session is
// apperr.Invalid, and nothing is stored.
func TestTextsPostgreSQLCannotHoldAreInvalid(t *testing.T) {
	ctx := context.Background()
	db := replicas(t, 1)[0]
	if err := db.CreateSession(ctx, agent.Session{ID: "s1", Title: "t", Model: "m", Workspace: "/w"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ id, reason string }{{"nul", "a\x00b"}, {"utf8", "bad \xff byte"}} {
		a := gate.Approval{ID: tc.id, SessionID: "s1", MessageID: "m", ToolCallID: "c", ToolName: "t", RequestedBy: "model",
			Status: gate.Denied, Reason: tc.reason}
		err := db.CreateApproval(ctx, a)
		if apperr.CodeOf(err) != apperr.Invalid {
			t.Errorf("%s: %v, want invalid", tc.id, err)
		}
		if err := db.CreateApprovals(ctx, []gate.Approval{{ID: "ok-" + tc.id, SessionID: "s1", MessageID: "m", ToolCallID: "c",
			ToolName: "t", RequestedBy: "model", Status: gate.Denied}, a}); apperr.CodeOf(err) != apperr.Invalid {
			t.Errorf("%s in a batch: %v, want invalid", tc.id, err)
		}
		if _, err := db.Approval(ctx, "ok-"+tc.id); apperr.CodeOf(err) != apperr.NotFound {
			t.Errorf("%s: the failed batch stored a row: %v", tc.id, err)
		}
		if err := db.CreateSession(ctx, agent.Session{ID: "s-" + tc.id, Title: tc.reason}); apperr.CodeOf(err) != apperr.Invalid {
			t.Errorf("%s: a session titled so: %v, want invalid", tc.id, err)
		}
	}
}

// TestOpenKeepsThePasswordOutOfErrors: a URL that cannot be used is an error naming the server
// without the password.
func TestOpenKeepsThePasswordOutOfErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, url := range []string{"postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=2", "postgres://u:s3cret@[bad"} {
		_, err := pg.Open(ctx, url)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) = %v, want an error without the password", url, err)
		}
	}
}

// TestReadyNamesMissingMigrations: Ready is nil on a migrated database and an error saying how
// many migrations are applied when one is missing, or when the database does not answer.
func TestReadyNamesMissingMigrations(t *testing.T) {
	ctx := context.Background()
	db := replicas(t, 1)[0]
	if err := db.Ready(ctx); err != nil {
		t.Fatalf("Ready = %v, want nil", err)
	}
	c, err := pgx.Connect(ctx, db.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `DELETE FROM schema_migrations WHERE name = '0001_init.sql'`); err != nil {
		t.Fatal(err)
	}
	if err := db.Ready(ctx); err == nil || !strings.Contains(err.Error(), "migrations applied") {
		t.Fatalf("Ready with a migration missing = %v, want it named", err)
	}
	db.Close()
	if err := db.Ready(ctx); err == nil {
		t.Fatal("Ready on a closed store = nil, want an error")
	}
}

// TestStoppedResultsMigrationMarksOnlyStoppedCalls: 0007 marks the results stored before
// result.stopped existed whose call a Stop ended, and no other (the same as SQLite's 0018).
func TestStoppedResultsMigrationMarksOnlyStoppedCalls(t *testing.T) {
	ctx := context.Background()
	db := replicas(t, 1)[0]
	if err := db.CreateSession(ctx, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"}); err != nil {
		t.Fatal(err)
	}
	storetest.StoppedResultsBefore(t, ctx, db, "s1")
	c, err := pgx.Connect(ctx, db.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `DELETE FROM schema_migrations WHERE name = '0007_stopped_results.sql'`); err != nil {
		t.Fatal(err)
	}
	again := open(t, db.URL(), time.Now) // applies 0007 again
	defer again.Close()
	entries, err := again.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckStoppedResults(t, entries)
}
