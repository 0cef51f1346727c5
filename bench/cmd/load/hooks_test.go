package main

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestHooksCaseRuns runs the hooks case small (issue 30, acceptance 7): Claude Code PreToolUse
// calls the rule allows, one at a time and from five agents for a second, and countersign-hook
// against curl. The case checks itself (every answer the exact allow, every call audited, none
// lost), so a door that answers otherwise or records fewer calls fails here, not only in `make
// bench`.
func TestHooksCaseRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/countersign-hook and runs a server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := hooksOptions{n: 20, warmup: 5, agents: 5, rate: 10, duration: time.Second, clientRuns: 3, clientWarm: 1}

	one, err := hooksOneAtATime(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := one.get("audited_calls"); v != 25 {
		t.Errorf("one at a time: audited_calls %v, want 25 (warm-up included)", v)
	}
	for _, k := range []string{"p50_us", "p99_us", "max_us", "server_p50_us"} {
		if v, _ := one.get(k); v.(float64) <= 0 {
			t.Errorf("one at a time: %s = %v, want a positive time", k, v)
		}
	}

	agents, err := hooksAgents(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"calls": int64(50), "answered": int64(50), "lost": int64(0), "audited_calls": 50, "audit_rows": 50} {
		if v, _ := agents.get(k); v != want {
			t.Errorf("agents: %s = %v (%T), want %v", k, v, v, want)
		}
	}
	if v, _ := agents.get("p99_us"); v.(float64) <= 0 {
		t.Errorf("agents: p99_us = %v, want a positive time", v)
	}

	client, err := hooksClient(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := client.get("hook_p50_us"); v.(float64) <= 0 {
		t.Errorf("client: hook_p50_us = %v, want a positive time", v)
	}
	if _, err := exec.LookPath("curl"); err == nil {
		if v, _ := client.get("ratio"); v == nil || v.(float64) <= 0 {
			t.Errorf("client: ratio = %v, want a positive ratio", v)
		}
		if v, _ := client.get("audited_calls"); v != 8 {
			t.Errorf("client: audited_calls = %v, want 8 (4 runs of each)", v)
		}
	} else if v, _ := client.get("curl"); v == nil {
		t.Error("client: curl is missing and the line does not say so")
	}
}
