package web

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"countersign/internal/gate"
	"countersign/internal/notify"
)

// TestADecisionLinkDecidesOnlyItsPendingApprovalWithItsArguments: deadReason is "" only for an
// unused link whose approval is pending with the arguments the link was made for.
func TestADecisionLinkDecidesOnlyItsPendingApprovalWithItsArguments(t *testing.T) {
	args := json.RawMessage(`{"command":"ls"}`)
	at := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	live := notify.Link{ID: "dl-1", ApprovalID: "A1", Recipient: "alice", ArgumentsSHA256: notify.ArgumentsDigest(args)}
	pending := gate.Approval{ID: "A1", Status: gate.Pending, Arguments: args}
	approved := gate.Approval{ID: "A1", Status: gate.Approved, DecidedBy: "alice", DecidedAt: &at, Arguments: args}
	used := live
	used.UsedAt = &at
	for _, tc := range []struct {
		name string
		l    notify.Link
		a    gate.Approval
		want string
	}{
		{"live", live, pending, ""},
		{"the same arguments written another way", live, gate.Approval{Status: gate.Pending, Arguments: json.RawMessage(`{ "command" : "ls" }`)}, ""},
		{"other arguments", live, gate.Approval{Status: gate.Pending, Arguments: json.RawMessage(`{"command":"rm -rf /"}`)}, "made for other arguments"},
		{"used", used, approved, "This link was already used. The call was approved by alice at 2026-12-02 05:00:00 UTC."},
		{"used, the decision not stored", used, pending, "This link was already used."},
		{"resolved by someone else", live, approved, "no longer decides anything: the call was approved by alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := deadReason(tc.l, tc.a)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("deadReason = %q, want %q", got, tc.want)
			}
		})
	}
}
