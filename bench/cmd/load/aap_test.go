package main

import (
	"context"
	"testing"
	"time"
)

// TestAAPCaseRuns runs the aap case small (issue 32, acceptance 6): create, long poll, approve and
// wake, one at a time, and 20 long polls held at once, all woken approved with an expires_at (the
// case checks every answer itself).
func TestAAPCaseRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := aapRoundTrip(ctx, 20, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"p50_us", "p99_us", "wake_p50_us"} {
		if v, ok := rt.get(k); !ok || v.(float64) <= 0 {
			t.Errorf("round trip: %s = %v", k, v)
		}
	}
	held, err := aapHeldPolls(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := held.get("rss_growth_mb"); !ok {
		t.Error("held polls: no rss_growth_mb")
	}
}
