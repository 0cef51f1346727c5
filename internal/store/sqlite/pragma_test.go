package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/gate"
)

// The page caches are bounded (see Open): 512 KiB for the writer, 256 KiB for the readers and
// the checkpointer (a negative cache_size is in KiB).
func TestCacheSizes(t *testing.T) {
	db := MustOpenDB(t)
	for _, c := range []struct {
		name string
		pool *sql.DB
		want int
	}{{"write", db.write, -512}, {"read", db.read, -256}, {"ckpt", db.ckpt, -256}} {
		var got int
		if err := c.pool.QueryRowContext(context.Background(), "PRAGMA cache_size").Scan(&got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: cache_size = %d, want %d", c.name, got, c.want)
		}
	}
}

// The database and the -wal and -shm files SQLite makes beside it are the owner's alone (issue
// 15): SQLite would create them 0644 (less the umask).
func TestDatabaseFilesAreOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "countersign.db")
	db := mustOpenPath(t, path)
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "t", Model: "faux:demo", Workspace: "/w"})
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s has mode %v, want -rw-------", filepath.Base(f), got)
		}
	}
}

// Approvals and decisions commit at synchronous=FULL, other writes at NORMAL (see commitDurable:
// a power loss must not un-approve a call that already ran). Triggers record the safety level
// in effect inside each write (pragma_synchronous: 1 NORMAL, 2 FULL), in the order written.
func TestApprovalWritesCommitAtSynchronousFull(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE sync_log (n INTEGER PRIMARY KEY, what TEXT, level INTEGER)`,
		`CREATE TRIGGER log_entry AFTER INSERT ON entries BEGIN
			INSERT INTO sync_log (what, level) SELECT 'entry', synchronous FROM pragma_synchronous; END`,
		`CREATE TRIGGER log_approval AFTER INSERT ON approvals BEGIN
			INSERT INTO sync_log (what, level) SELECT 'approval ' || NEW.status, synchronous FROM pragma_synchronous; END`,
		`CREATE TRIGGER log_decision AFTER UPDATE ON approvals BEGIN
			INSERT INTO sync_log (what, level) SELECT 'decision ' || NEW.status, synchronous FROM pragma_synchronous; END`,
		`CREATE TRIGGER log_grant AFTER INSERT ON rules BEGIN
			INSERT INTO sync_log (what, level) SELECT 'grant', synchronous FROM pragma_synchronous; END`,
	} {
		if _, err := db.write.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	mustCreateSession(t, db, session("s1", t0))
	as := approvals()
	steps := []func() error{
		func() error { _, err := db.AppendEntry(ctx, "s1", transcript()[0]); return err },
		func() error { return db.CreateApproval(ctx, as[0]) },
		func() error {
			_, err := db.ResolveApproval(ctx, "a1", gate.Resolution{Status: gate.Approved, DecidedBy: "ana", Scope: gate.Session})
			return err
		},
		func() error {
			return db.CreateGrant(ctx, gate.Grant{SessionID: "s1", ToolName: "run_command", ApprovalID: "a1", GrantedBy: "ana"})
		},
		func() error { _, err := db.AppendEntry(ctx, "s1", transcript()[1], as[2]); return err },
		func() error { return db.CreateApprovals(ctx, as[4:5]) },
		func() error { return db.CreateApproval(ctx, as[1]) },
		func() error { _, err := db.AppendEntry(ctx, "s1", transcript()[2]); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	rows, err := db.write.QueryContext(ctx, `SELECT what, level FROM sync_log ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var what string
		var level int
		if err := rows.Scan(&what, &level); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s: %d", what, level))
	}
	// A pending approval and the records written with an entry stay at NORMAL (see
	// CreateApproval and AppendEntry); an automatic record written alone does not.
	want := []string{"entry: 1", "approval pending: 1", "decision approved: 2", "grant: 2",
		"entry: 1", "approval approved: 1", "approval denied: 2", "approval approved: 2", "entry: 1"}
	assertEqual(t, "safety level per write", got, want)
}
