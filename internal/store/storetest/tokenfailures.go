package storetest

import (
	"context"
	"testing"
	"time"
)

// testFailedTokensAreCountedInTheDatabase (SPEC §16, issue 33): failed token attempts are a
// token bucket per client address kept in the database: burst failures, then a wait of at most
// one refill; a failure while the client waits is not counted; other clients are unaffected;
// and the allowance refills by the database's clock.
func testFailedTokensAreCountedInTheDatabase(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	const alice, mallory = "192.0.2.1", "192.0.2.66"
	const every, burst = time.Minute, 3
	wait := func(client string) time.Duration {
		t.Helper()
		w, err := db.TokenWait(ctx, client, every, burst)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	for i := range burst {
		if w := wait(mallory); w != 0 {
			t.Fatalf("wait after %d failures = %v, want 0", i, w)
		}
		if err := db.FailToken(ctx, mallory, every, burst); err != nil {
			t.Fatal(err)
		}
	}
	w := wait(mallory)
	if w <= every-10*time.Second || w > every {
		t.Errorf("wait after %d failures = %v, want just under %v", burst, w, every)
	}
	// Refused meanwhile, a failure is not counted: the wait does not grow.
	if err := db.FailToken(ctx, mallory, every, burst); err != nil {
		t.Fatal(err)
	}
	if w2 := wait(mallory); w2 > w {
		t.Errorf("wait after a refused failure = %v, grew from %v", w2, w)
	}
	if w := wait(alice); w != 0 {
		t.Errorf("another client's wait = %v, want 0", w)
	}

	// The allowance refills by the clock.
	const fast = 50 * time.Millisecond
	if err := db.FailToken(ctx, alice, fast, 1); err != nil {
		t.Fatal(err)
	}
	if w, err := db.TokenWait(ctx, alice, fast, 1); err != nil || w <= 0 || w > fast {
		t.Errorf("wait after one failure of one = %v, %v; want in (0, %v]", w, err, fast)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		w, err := db.TokenWait(ctx, alice, fast, 1)
		if err == nil && w == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("wait %v later = %v, %v; want 0", 10*time.Second, w, err)
		}
	}
}
