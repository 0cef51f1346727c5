package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"countersign/internal/store"
	"countersign/internal/store/sqlite"
	"countersign/internal/store/storetest"
)

// TestConformance runs the store conformance suite (issue 21) on the SQLite store, each test on
// a fresh file in a temporary folder.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Name: "sqlite",
		Open: func(t *testing.T, now func() time.Time) store.Backend {
			return open(t, filepath.Join(t.TempDir(), "data", "countersign.db"), now)
		},
		Reopen: func(t *testing.T, db store.Backend, now func() time.Time) store.Backend {
			return open(t, db.(*sqlite.DB).Path(), now)
		},
	})
}

func open(t *testing.T, path string, now func() time.Time) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	db.Now = now
	return db
}
