package main

import (
	"context"
	"testing"
	"time"
)

// TestGatewayCaseRuns runs the gateway case small (issue 31, acceptance 7): rule-allowed
// tools/call through /mcp to the in-process upstream, one at a time beside direct calls, then
// from ten clients for a second. The case checks every answer is the upstream's, so a gateway
// that answers otherwise fails here, not only in `make bench`.
func TestGatewayCaseRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server and an upstream")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	one, err := gatewayOneAtATime(ctx, 20, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"direct_p99_us", "gateway_p99_us"} {
		if v, _ := one.get(k); v.(float64) <= 0 {
			t.Errorf("one at a time: %s = %v, want a positive time", k, v)
		}
	}
	many, err := gatewayClients(ctx, 10, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := many.get("errors"); v != int64(0) {
		t.Errorf("clients: errors = %v, want 0 (%v)", v, many)
	}
	if v, _ := many.get("calls"); v.(int64) <= 0 {
		t.Errorf("clients: calls = %v", v)
	}
}
