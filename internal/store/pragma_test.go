package store

import (
	"context"
	"database/sql"
	"testing"
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
