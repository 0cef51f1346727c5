package pg_test

import (
	"context"
	"testing"
	"time"

	"countersign/internal/pgtest"
	"countersign/internal/store"
	"countersign/internal/store/pg"
	"countersign/internal/store/storetest"
)

// TestConformance runs the store conformance suite (issue 21) on the PostgreSQL store, each test
// on a fresh database of the test server (pgtest; skipped without one, failed under CI=true).
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Name:    "postgres",
		Require: func(t *testing.T) { pgtest.ServerURL(t) },
		Open: func(t *testing.T, now func() time.Time) store.Backend {
			return open(t, pgtest.Database(t), now)
		},
		Reopen: func(t *testing.T, db store.Backend, now func() time.Time) store.Backend {
			return open(t, db.(*pg.DB).URL(), now)
		},
	})
}

func open(t *testing.T, url string, now func() time.Time) *pg.DB {
	t.Helper()
	db, err := pg.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	db.Now = now
	return db
}
