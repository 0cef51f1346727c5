package agent_test

import (
	"context"
	"sync/atomic"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/rules"
)

// TestEveryRuleThatAllowedAChainedCommandGetsAHit (issue 34, acceptance 5): `git status && git
// log` is allowed by two rules together, run_command(git status:*) and run_command(git log:*);
// each gets a hit (before, the second showed "never used" on the Rules page after allowing it).
func TestEveryRuleThatAllowedAChainedCommandGetsAHit(t *testing.T) {
	script := `{"steps":[
	  {"content":[{"type":"toolCall","id":"c1","name":"run_command","arguments":{"command":"git status && git log"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`
	var runs atomic.Int32
	h := newHarnessWith(t, script, agent.Config{CompileRules: rules.Compiler, ParseRule: rules.Parse, SuggestRule: rules.Suggest},
		riskyTool("run_command", &runs))
	ctx := context.Background()
	for _, spec := range []string{"git status:*", "git log:*"} {
		if _, err := h.runner.Gate().AddRule(ctx, gate.Rule{Effect: gate.Allow, Tool: "run_command", Specifier: spec,
			Scope: gate.ScopeWorkspace, Workspace: h.sess.Workspace, Source: gate.SourceAPI, CreatedBy: gate.ByOwner}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	if end := h.await(agent.AgentEnd); end.Error != "" {
		t.Fatal(end.Error)
	}
	if runs.Load() != 1 {
		t.Fatalf("run_command ran %d times, want 1 (allowed by the two rules)", runs.Load())
	}
	h.runner.Wait() // flushes hits
	stored, err := h.db.Rules(ctx)
	if err != nil || len(stored) != 2 {
		t.Fatalf("stored rules %+v %v", stored, err)
	}
	for _, rl := range stored {
		if rl.Hits != 1 || rl.LastUsedAt == nil {
			t.Errorf("rule %s: %d hits, last used %v; want 1 hit", rl.Text(), rl.Hits, rl.LastUsedAt)
		}
	}
}
