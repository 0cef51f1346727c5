package testkit

import (
	"testing"
	"time"
)

// EventuallyWithin is how long Eventually waits: generous for a loaded two-core machine; a test
// that passes waits only as long as its condition takes.
const EventuallyWithin = 20 * time.Second

// Eventually polls cond every 20 ms until it holds, and fails tb ("timed out waiting for what")
// once EventuallyWithin has passed without it.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(EventuallyWithin)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
