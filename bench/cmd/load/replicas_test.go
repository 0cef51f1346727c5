package main

import (
	"context"
	"testing"
	"time"

	"countersign/internal/pgtest"
)

// TestReplicasCaseRuns runs the replicas case small (issue 21): a few approvals decided on B for
// calls waiting on A, and a burst fanned out to 20 subscribers over both replicas. The case
// checks itself (each call ran once, on A; every subscriber on B got every stored event A
// published), so a relay that loses events fails here, not only in `make bench`. Skipped
// without COUNTERSIGN_TEST_POSTGRES (failed under CI=true), as the store's PostgreSQL tests.
func TestReplicasCaseRuns(t *testing.T) {
	server := pgtest.ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := replicasRoundTrip(ctx, server, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := rt.get("n"); n != 5 {
		t.Errorf("round trip n = %v, want 5", n)
	}
	if p99, _ := rt.get("p99_us"); p99.(float64) <= 0 {
		t.Errorf("round trip p99 = %v µs, want a positive time", p99)
	}
	fo, err := replicasFanout(ctx, server, 20, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := fo.get("received_a")
	b, _ := fo.get("received_b")
	if a != b || a.(int) == 0 {
		t.Errorf("fan-out: subscribers on A received %v events, on B %v; want the same, more than none", a, b)
	}
}
