package pg_test

import (
	"context"
	"regexp"
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

// TestIdentityNamesTheDatabase: two connections to one database have one identity; another
// database of the same server has another (issue 28: a restarted server kills only the processes
// of its own database's calls).
func TestIdentityNamesTheDatabase(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Database(t)
	a, b, other := open(t, url, time.Now), open(t, url, time.Now), open(t, pgtest.Database(t), time.Now)
	defer a.Close()
	defer b.Close()
	defer other.Close()
	var ids []string
	for _, db := range []*pg.DB{a, b, other} {
		id, err := db.Identity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^postgres:\d+/\d+$`).MatchString(id) {
			t.Errorf("Identity = %q, want postgres:<system identifier>/<oid>", id)
		}
		ids = append(ids, id)
	}
	if ids[0] != ids[1] || ids[0] == ids[2] {
		t.Errorf("identities %q: want the first two equal (one database), the third different", ids)
	}
}
