package gate_test

import (
	"context"
	"encoding/json"
	"testing"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// evaluatorFunc is a gate.RuleEvaluator from a function.
type evaluatorFunc func(gate.RuleCall) gate.RuleDecision

func (f evaluatorFunc) Evaluate(c gate.RuleCall) gate.RuleDecision { return f(c) }

// When no rule decides but the rules say what they did not cover (RuleDecision.Note), the
// prompt's reason is that note, not the annotation default's (issue 28: "`touch x` is not
// covered by run_command(git diff:*)"); a tool that always asks keeps its own reason, and a
// tool the annotations allow still runs.
func TestCheckAsksWithTheRulesNote(t *testing.T) {
	note := "`touch x` is not covered by run_command(git diff:*)"
	rules := evaluatorFunc(func(gate.RuleCall) gate.RuleDecision { return gate.RuleDecision{Note: note} })
	cmd := &tool.Tool{Name: "run_command"}
	untrusted := &tool.Tool{Name: "files__x", AlwaysAsk: true, AskReason: "server files is not trusted"}
	readOnly := &tool.Tool{Name: "read_file", Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)}}
	for _, tc := range []struct {
		tool    *tool.Tool
		outcome gate.Outcome
		reason  string
	}{
		{cmd, gate.Asked, note},
		{untrusted, gate.Asked, "server files is not trusted"},
		{readOnly, gate.Allowed, "annotations allow it without approval"},
	} {
		d := gate.Checker{Rules: rules}.Check(context.Background(), gate.CheckCall{SessionID: "s", Tool: tc.tool, Arguments: json.RawMessage(`{}`)})
		if d.Outcome != tc.outcome || d.Reason != tc.reason || d.Source != gate.FromAnnotations {
			t.Errorf("%s: %s (%s) %q, want %s %q", tc.tool.Name, d.Outcome, d.Source, d.Reason, tc.outcome, tc.reason)
		}
	}
}
