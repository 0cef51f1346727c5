package main

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"countersign/internal/store/sqlite"
)

// futureMigration records a migration no binary of this version has in the SQLite database at
// path, as a newer binary would have.
func futureMigration(t *testing.T, path string) {
	t.Helper()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`INSERT INTO migrations (name, applied_at) VALUES ('9998_from_a_newer_release.sql', '2026-12-06T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
}

// TestAServerOlderThanItsDatabasesSchemaIsNotReadyAndRefusesToStart (SPEC §16, issue 33): once a
// newer binary has migrated the database, a running older server answers /readyz 503 naming both
// migrations, and an older server does not start, saying the same; the refused start makes no
// key file.
func TestAServerOlderThanItsDatabasesSchemaIsNotReadyAndRefusesToStart(t *testing.T) {
	const want = "the database's schema (migration 9998, 9998_from_a_newer_release.sql) is newer than this binary's (migration "
	dbPath := filepath.Join(t.TempDir(), "db", "cs.db")
	login := startServer(t, []string{"-db", dbPath}, nil)
	futureMigration(t, dbPath)
	res, err := http.Get(strings.SplitN(login, "/login", 2)[0] + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), want) {
		t.Errorf("/readyz = %d %q, want 503 naming both migrations", res.StatusCode, body)
	}

	other := filepath.Join(t.TempDir(), "cs.db")
	db, err := sqlite.Open(context.Background(), other)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	futureMigration(t, other)
	err = run(context.Background(), []string{"-addr", "127.0.0.1:0", "-db", other, "-workspace", t.TempDir()},
		func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("start on a newer schema: %v, want it refused saying %q", err, want)
	}
	if _, err := os.Stat(other + ".share-key"); !os.IsNotExist(err) {
		t.Errorf("the refused start made a share key (%v)", err)
	}
}
