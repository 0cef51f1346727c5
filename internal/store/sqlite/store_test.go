package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/store/fixture"
)

// t0 is the tests' epoch: nanoseconds set, so a lossy time round trip shows.
var t0 = fixture.T0

// MustOpenDB opens a fresh database file in a temporary folder, with a clock that starts at t0 and
// advances one second per reading, and closes it when the test ends.
func MustOpenDB(tb testing.TB) *DB {
	tb.Helper()
	return mustOpenPath(tb, filepath.Join(tb.TempDir(), "data", "countersign.db"))
}

func mustOpenPath(tb testing.TB, path string) *DB {
	tb.Helper()
	db, err := Open(context.Background(), path)
	if err != nil {
		tb.Fatalf("Open(%s): %v", path, err)
	}
	var mu sync.Mutex
	now := t0
	db.Now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return db
}

// migratedBefore makes a database file in a temporary folder with the embedded migrations
// applied and recorded up to, not including, the one whose name starts with first ("0011"), as a
// store of an older release left it; it returns the file's path and a raw handle to fill it with
// that release's rows (close it before opening the store on path).
func migratedBefore(t *testing.T, first string) (string, *sql.DB) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "old.db")
	raw, err := sql.Open("sqlite", "file:"+p+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	names, _ := fs.Glob(migrationFS, "migrations/*.sql")
	sort.Strings(names)
	if _, err := raw.Exec(`CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if path.Base(n) >= first {
			break
		}
		body, _ := migrationFS.ReadFile(n)
		if _, err := raw.Exec(string(body)); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if _, err := raw.Exec(`INSERT INTO migrations VALUES (?, '2025-01-01T00:00:00.000000000Z')`, path.Base(n)); err != nil {
			t.Fatal(err)
		}
	}
	return p, raw
}

func assertEqual[T any](t *testing.T, name string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %s\nwant %s", name, dump(got), dump(want))
	}
}

func dump(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

func mustCreateSession(t *testing.T, db *DB, s agent.Session) {
	t.Helper()
	if err := db.CreateSession(context.Background(), s); err != nil {
		t.Fatalf("CreateSession(%s): %v", s.ID, err)
	}
}

func session(id string, at time.Time) agent.Session { return fixture.Session(id, at) }

// transcript, approvals: the shared fixture (internal/store/fixture).
func transcript() []agent.Message { return fixture.Transcript() }

func approvals() []gate.Approval { return fixture.Approvals() }

func mustCreateApprovals(t *testing.T, db *DB, as ...gate.Approval) {
	t.Helper()
	for _, a := range as {
		if err := db.CreateApproval(context.Background(), a); err != nil {
			t.Fatalf("CreateApproval(%s): %v", a.ID, err)
		}
	}
}

// TestMigrateTwice checks that migrating an up-to-date database changes nothing, whether by
// calling migrate again or by opening the file again.
func TestMigrateTwice(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))

	names := func(db *DB) []string {
		t.Helper()
		rows, err := db.read.QueryContext(ctx, `SELECT name FROM migrations ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return names
	}
	want := names(db)
	if len(want) == 0 || want[0] != "0001_init.sql" {
		t.Fatalf("migrations = %v, want 0001_init.sql first", want)
	}

	if err := db.migrate(ctx); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	assertEqual(t, "migrations after migrate", names(db), want)

	again := mustOpenPath(t, db.Path())
	assertEqual(t, "migrations after reopening", names(again), want)
	got, err := again.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Sessions", got, []agent.Session{session("s1", t0)})
}

// TestOpenOddPath checks that the path is escaped into the file: URI, so characters that mean
// something in a URI still name the file.
func TestOpenOddPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a dir?x=1#frag%20")
	db := mustOpenPath(t, filepath.Join(dir, "my db.sqlite"))
	mustCreateSession(t, db, session("s1", t0))
	if _, err := os.Stat(filepath.Join(dir, "my db.sqlite")); err != nil {
		t.Fatalf("database file not where asked: %v", err)
	}
}

func TestOpenRefusesMemory(t *testing.T) {
	if _, err := Open(context.Background(), ":memory:"); err == nil {
		t.Fatal("Open(:memory:) succeeded, want an error")
	}
}

// TestReadPoolIsReadOnly checks the guard that keeps the read pool from becoming a second writer.
func TestReadPoolIsReadOnly(t *testing.T) {
	db := MustOpenDB(t)
	_, err := db.read.ExecContext(context.Background(), `DELETE FROM sessions`)
	if err == nil {
		t.Fatal("a write through the read pool succeeded")
	}
}

// TestPendingLookupsUseThePartialIndex: automatic records are stored decided, so only pending
// approvals are indexed by status (migration 0004); the two lookups by pending status must use
// that index, not scan the session's approvals or the whole table.
func TestPendingLookupsUseThePartialIndex(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	plans := db.PlannedQueries()
	for _, q := range []string{
		strings.ReplaceAll(plans["sessionPending"], "?1", "'s'"),
		plans["pending"],
		strings.ReplaceAll(plans["session"], "?1", "'s'"), // a session's pending count
	} {
		rows, err := db.read.QueryContext(ctx, `EXPLAIN QUERY PLAN `+q)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if !strings.Contains(strings.Join(plan, "; "), "approvals_pending") {
			t.Errorf("plan of %q = %q, want it to use approvals_pending", q, plan)
		}
	}
}
