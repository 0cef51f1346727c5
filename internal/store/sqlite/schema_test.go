package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"countersign/internal/apperr"
)

// TestADatabaseMigratedByANewerBinaryIsRefused (SPEC §16, issue 33): a database whose migrations
// record names a migration numbered past this binary's newest answers Ready with an error naming
// both versions (GET /readyz: 503), and Open refuses it with the same words, applying nothing.
func TestADatabaseMigratedByANewerBinaryIsRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "countersign.db")
	db := mustOpenPath(t, path)
	if err := db.Ready(ctx); err != nil {
		t.Fatalf("Ready = %v, want nil", err)
	}
	names, _ := filepath.Glob("migrations/*.sql")
	binary := strings.SplitN(filepath.Base(names[len(names)-1]), "_", 2)[0]
	if _, err := db.write.ExecContext(ctx, `INSERT INTO migrations (name, applied_at) VALUES ('9998_from_a_newer_release.sql', '2026-12-06T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	want := "the database's schema (migration 9998, 9998_from_a_newer_release.sql) is newer than this binary's (migration " + binary + ", "
	if err := db.Ready(ctx); err == nil || !strings.HasPrefix(apperr.MessageOf(err), want) {
		t.Errorf("Ready = %v (message %q), want a message starting %q", err, apperr.MessageOf(err), want)
	}
	_, err := Open(ctx, path)
	if err == nil || !strings.HasPrefix(apperr.MessageOf(err), want) {
		t.Fatalf("Open = %v (message %q), want a message starting %q", err, apperr.MessageOf(err), want)
	}
	var n int
	if err := db.write.QueryRowContext(ctx, `SELECT COUNT(*) FROM migrations`).Scan(&n); err != nil || n != len(names)+1 {
		t.Errorf("migrations recorded after the refusal: %d, %v; want %d", n, err, len(names)+1)
	}
}
