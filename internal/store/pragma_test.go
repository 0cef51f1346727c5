package store

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"countersign/internal/agent"
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
