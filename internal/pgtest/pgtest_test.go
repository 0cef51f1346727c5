package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"countersign/internal/pgtest"
)

// TestEachTestGetsItsOwnEmptyDatabase: two databases from Database are distinct, empty and
// writable, on a server at least as new as Debian 12's (15).
func TestEachTestGetsItsOwnEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.Database(t), pgtest.Database(t)
	if a == b {
		t.Fatalf("two databases share the URL %s", a)
	}
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(ctx)
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	var version int
	if err := ca.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil || version < 150000 {
		t.Fatalf("server version %d, %v; want PostgreSQL 15 or newer", version, err)
	}
	if _, err := ca.Exec(ctx, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 't'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the second database sees %d tables named t (%v): the databases are not separate", n, err)
	}
}
