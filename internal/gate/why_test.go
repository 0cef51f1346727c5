package gate_test

import (
	"testing"
	"time"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// TestAskReasonSaysWhyACallAsks: the reason a prompt shows after "asks because" (issue 16, item
// 5): a tool that always asks gives its own (an untrusted MCP server), otherwise the annotation
// that makes the SPEC §3 rule ask; "" exactly when NeedsApproval is false.
func TestAskReasonSaysWhyACallAsks(t *testing.T) {
	yes, no := tool.Bool(true), tool.Bool(false)
	for _, tc := range []struct {
		name string
		tool tool.Tool
		want string
	}{
		{"untrusted MCP server, read-only tool", tool.Tool{AlwaysAsk: true, AskReason: "server files is not trusted",
			Annotations: tool.Annotations{ReadOnlyHint: yes}}, "server files is not trusted"},
		{"always asks without a reason", tool.Tool{AlwaysAsk: true}, "the tool always asks"},
		{"read-only", tool.Tool{Annotations: tool.Annotations{ReadOnlyHint: yes}}, ""},
		{"not destructive, closed world", tool.Tool{Annotations: tool.Annotations{DestructiveHint: no, OpenWorldHint: no}}, ""},
		{"destructive", tool.Tool{Annotations: tool.Annotations{DestructiveHint: yes}}, "destructiveHint is true"},
		{"read-only yet destructive", tool.Tool{Annotations: tool.Annotations{ReadOnlyHint: yes, DestructiveHint: yes}}, "destructiveHint is true"},
		{"no annotations", tool.Tool{}, "it is not marked read-only, and destructiveHint defaults to true"},
		{"not destructive, world absent", tool.Tool{Annotations: tool.Annotations{DestructiveHint: no}}, "it is not marked read-only, and openWorldHint defaults to true"},
		{"not destructive, open world", tool.Tool{Annotations: tool.Annotations{DestructiveHint: no, OpenWorldHint: yes}}, "it is not marked read-only, and openWorldHint is true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := gate.AskReason(&tc.tool)
			if got != tc.want {
				t.Errorf("AskReason = %q, want %q", got, tc.want)
			}
			if asks := tc.tool.AlwaysAsk || gate.NeedsApproval(tc.tool.Annotations); asks != (got != "") {
				t.Errorf("AskReason %q, but the call asks: %v", got, asks)
			}
		})
	}
}

// TestOutcomeNamesTheStatusAndWhoDecided: what a losing decision is told (issue 16, item 5:
// "Your decision was not applied: already approved by alice").
func TestOutcomeNamesTheStatusAndWhoDecided(t *testing.T) {
	at := time.Now()
	for _, tc := range []struct {
		a    gate.Approval
		want string
	}{
		{gate.Approval{Status: gate.Approved, DecidedBy: "alice", DecidedAt: &at}, "approved by alice"},
		{gate.Approval{Status: gate.Denied, DecidedBy: gate.ByOwner, Reason: "not now"}, "denied by owner"},
		{gate.Approval{Status: gate.TimedOut, Automatic: true, DecidedBy: gate.ByTimeout, Reason: "no decision within 15m0s"}, "timed out"},
		{gate.Approval{Status: gate.Cancelled, Automatic: true, DecidedBy: gate.BySystem, Reason: "Run stopped by owner"}, "cancelled (Run stopped by owner)"},
		{gate.Approval{Status: gate.Approved, Automatic: true, DecidedBy: gate.ByGrant, Reason: "approved for this session by bob"}, "approved for this session by bob"},
		{gate.Approval{Status: gate.Denied, Automatic: true, DecidedBy: gate.ByHandler, Reason: "blocked"}, "denied automatically (tool_call handler)"},
	} {
		if got := tc.a.Outcome(); got != tc.want {
			t.Errorf("Outcome of %s by %q = %q, want %q", tc.a.Status, tc.a.DecidedBy, got, tc.want)
		}
	}
}
