package store

import (
	"context"
	"database/sql"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"testing"
)

// TestMigrationGivesOlderSessionsNoInstructionsAndNoUsage: migration 0011 (issue 18) leaves a
// session stored before it with "" instructions (no system prompt, as its requests were sent)
// and zero usage.
func TestMigrationGivesOlderSessionsNoInstructionsAndNoUsage(t *testing.T) {
	ctx := context.Background()
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
		if path.Base(n) >= "0011" {
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
