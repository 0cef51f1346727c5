package gate_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// TestNeedsApproval checks all 27 combinations of absent / true / false for readOnlyHint,
// destructiveHint and openWorldHint against the SPEC §3 formula, written out independently.
func TestNeedsApproval(t *testing.T) {
	type tri int // 0 absent, 1 true, 2 false
	const (
		absent tri = iota
		yes
		no
	)
	ptr := func(v tri) *bool {
		switch v {
		case yes:
			return tool.Bool(true)
		case no:
			return tool.Bool(false)
		}
		return nil
	}
	name := func(v tri) string { return [...]string{"absent", "true", "false"}[v] }
	// want spells the rule out case by case rather than re-evaluating the formula:
	// an explicit destructive true always asks; otherwise read-only true never asks; otherwise
	// it asks unless both destructive and open-world are explicitly false.
	want := func(ro, de, ow tri) bool {
		if de == yes {
			return true
		}
		if ro == yes {
			return false
		}
		return !(de == no && ow == no)
	}
	for _, ro := range []tri{absent, yes, no} {
		for _, de := range []tri{absent, yes, no} {
			for _, ow := range []tri{absent, yes, no} {
				t.Run(fmt.Sprintf("readOnly=%s,destructive=%s,openWorld=%s", name(ro), name(de), name(ow)), func(t *testing.T) {
					a := tool.Annotations{ReadOnlyHint: ptr(ro), DestructiveHint: ptr(de), OpenWorldHint: ptr(ow)}
					if got, want := gate.NeedsApproval(a), want(ro, de, ow); got != want {
						t.Errorf("NeedsApproval = %v, want %v", got, want)
					}
				})
			}
		}
	}
	// The SPEC's worked examples.
	if !gate.NeedsApproval(tool.Annotations{}) {
		t.Error("no annotations must need approval")
	}
	if gate.NeedsApproval(tool.Annotations{ReadOnlyHint: tool.Bool(true)}) {
		t.Error("readOnlyHint true alone must not need approval")
	}
	if !gate.NeedsApproval(tool.Annotations{ReadOnlyHint: tool.Bool(true), DestructiveHint: tool.Bool(true)}) {
		t.Error("an explicit destructiveHint true must always need approval")
	}
}

func TestHandlersCheck(t *testing.T) {
	allow := func(context.Context, gate.CallEvent) (gate.Verdict, error) { return gate.Verdict{}, nil }
	block := func(reason string) gate.Handler {
		return func(context.Context, gate.CallEvent) (gate.Verdict, error) {
			return gate.Verdict{Block: true, Reason: reason}, nil
		}
	}
	fails := func(context.Context, gate.CallEvent) (gate.Verdict, error) {
		return gate.Verdict{}, errors.New("policy service unreachable")
	}
	panics := func(context.Context, gate.CallEvent) (gate.Verdict, error) { panic("boom") }

	tests := []struct {
		name      string
		handlers  gate.Handlers
		wantBlock bool
		wantWhy   string
	}{
		{"no handlers", nil, false, ""},
		{"all allow", gate.Handlers{allow, allow}, false, ""},
		{"first block wins", gate.Handlers{allow, block("first"), block("second")}, true, "first"},
		{"default reason", gate.Handlers{block("")}, true, gate.DefaultBlockReason},
		{"error fails closed", gate.Handlers{allow, fails, allow}, true, "tool_call handler failed: policy service unreachable"},
		{"panic fails closed", gate.Handlers{panics}, true, "tool_call handler panicked: boom"},
		{"block before failure", gate.Handlers{block("stop"), fails}, true, "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.handlers.Check(context.Background(), gate.CallEvent{ToolName: "run_command"})
			if got.Block != tt.wantBlock || got.Reason != tt.wantWhy {
				t.Errorf("Check = %+v, want block=%v reason=%q", got, tt.wantBlock, tt.wantWhy)
			}
		})
	}

	t.Run("handlers see the call", func(t *testing.T) {
		var seen []gate.CallEvent
		spy := func(_ context.Context, ev gate.CallEvent) (gate.Verdict, error) {
			seen = append(seen, ev)
			return gate.Verdict{}, nil
		}
		ev := gate.CallEvent{ToolName: "git_diff", ToolCallID: "c1/1", ParentToolCallID: "c1"}
		gate.Handlers{spy, spy}.Check(context.Background(), ev)
		if len(seen) != 2 || seen[1].ToolCallID != "c1/1" || seen[0].ParentToolCallID != "c1" {
			t.Errorf("handlers saw %+v, want the call twice with its parent", seen)
		}
	})
}
