package web

import (
	"testing"

	"countersign/internal/gate"
)

// Issue 34: a call approved but not started says it waits for the run (a replica's takeover).
func TestWaitingHintNamesTheTakeoverOnlyForAnApprovedCallThatWaits(t *testing.T) {
	approved, pending := &gate.Approval{Status: gate.Approved}, &gate.Approval{Status: gate.Pending}
	for _, tc := range []struct {
		name  string
		state string
		a     *gate.Approval
		want  bool
	}{
		{"approved and waiting", "waiting", approved, true},
		{"approved and running", "running", approved, false},
		{"pending", "approval", pending, false},
		{"waiting without an approval", "waiting", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := waitingHint(tc.state, tc.a)
			if (got != "") != tc.want {
				t.Fatalf("waitingHint(%q) = %q, want a hint: %v", tc.state, got, tc.want)
			}
			if tc.want && got != "approved; waiting for the run to go on (if the replica driving it stopped, waiting for a replica to take over)" {
				t.Fatalf("hint %q", got)
			}
		})
	}
}
