package pg_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/pgtest"
	"countersign/internal/store/pg"
)

// TestADatabaseMigratedByANewerBinaryIsRefused (SPEC §16, issue 33): a database whose
// schema_migrations names a migration numbered past this binary's newest answers Ready with an
// error naming both versions (GET /readyz: 503), and Open refuses it with the same words.
func TestADatabaseMigratedByANewerBinaryIsRefused(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Database(t)
	db := open(t, url, time.Now)
	t.Cleanup(func() { db.Close() })
	if err := db.Ready(ctx); err != nil {
		t.Fatalf("Ready = %v, want nil", err)
	}
	names, _ := filepath.Glob("migrations/*.sql")
	binary := strings.SplitN(filepath.Base(names[len(names)-1]), "_", 2)[0]
	if _, err := db.Pool().Exec(ctx, `INSERT INTO schema_migrations (name, applied_at) VALUES ('9998_from_a_newer_release.sql', '2026-12-06T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	want := "the database's schema (migration 9998, 9998_from_a_newer_release.sql) is newer than this binary's (migration " + binary + ", "
	if err := db.Ready(ctx); err == nil || !strings.HasPrefix(apperr.MessageOf(err), want) {
		t.Errorf("Ready = %v (message %q), want a message starting %q", err, apperr.MessageOf(err), want)
	}
	other, err := pg.Open(ctx, url)
	if err == nil {
		other.Close()
		t.Fatal("Open of a database migrated by a newer binary = nil error")
	}
	if !strings.HasPrefix(apperr.MessageOf(err), want) {
		t.Errorf("Open = %v (message %q), want a message starting %q", err, apperr.MessageOf(err), want)
	}
}
