package pg_test

import (
	"context"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/pgtest"
)

// TestLeasesHeldCountsAReplicasLiveLeases (issue 33: lease series): the session_leases_held
// metric's count is the replica's own leases not yet expired by the database's clock.
func TestLeasesHeldCountsAReplicasLiveLeases(t *testing.T) {
	ctx := context.Background()
	db := open(t, pgtest.Database(t), time.Now)
	t.Cleanup(func() { db.Close() })
	for _, id := range []string{"s1", "s2", "s3"} {
		if err := db.CreateSession(ctx, agent.Session{ID: id, Title: "t", Model: "m", Workspace: "/w"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool().Exec(ctx, `INSERT INTO session_leases (session_id, replica, run, expires_at) VALUES
		('s1', 'a', 'r1', now() + interval '8 seconds'), ('s2', 'a', 'r2', now() - interval '1 second'),
		('s3', 'b', 'r3', now() + interval '8 seconds')`); err != nil {
		t.Fatal(err)
	}
	for replica, want := range map[string]int{"a": 1, "b": 1, "c": 0} {
		if n, err := db.LeasesHeld(ctx, replica); err != nil || n != want {
			t.Errorf("LeasesHeld(%s) = %d, %v; want %d", replica, n, err, want)
		}
	}
}

// TestClockIsTheDatabases (issue 33): the webhook workers' claims read the database's clock
// (store.SQL.Clock), not the store's Now: here a store whose Now is a year off still reads the
// server's time.
func TestClockIsTheDatabases(t *testing.T) {
	db := open(t, pgtest.Database(t), func() time.Time { return time.Now().AddDate(1, 0, 0) })
	t.Cleanup(func() { db.Close() })
	got, err := db.Clock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(got); d > time.Minute || d < -time.Minute {
		t.Errorf("Clock = %v, %v from this machine's clock; want the database server's (this machine's)", got, d)
	}
}
