package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/gate/gatetest"
	"countersign/internal/tool"
)

// actor is a tool that, when run, asks the gate about three actions inside itself
// (tool.Context.Authorize) and records the answers: what a shell's exec handler does before it
// starts a program.
func actor(answers *[]tool.Authorization, mu *sync.Mutex, uncovered string) *tool.Tool {
	return &tool.Tool{Name: "actor", InputSchema: objectSchema,
		Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			for _, what := range []string{"first", "second", "third"} {
				a := tc.Authorize(ctx, "act", map[string]string{"what": what}, uncovered)
				mu.Lock()
				*answers = append(*answers, a)
				mu.Unlock()
			}
			return tool.Result{Content: []tool.Content{tool.Text("acted")}}, nil
		}}
}

var act = &tool.Tool{Name: "act", InputSchema: json.RawMessage(`{"type":"object","properties":{"what":{"type":"string"}}}`), // no annotations: it asks
	Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
		panic("an action authorized inside a call is never executed by the pipeline")
	}}

const actorScript = `{"steps": [
  {"content": [{"type": "toolCall", "id": "c1", "name": "actor", "arguments": {}}], "stopReason": "toolUse"},
  {"content": [{"type": "text", "text": "done"}], "stopReason": "stop"}
]}`

// TestAuthorizeAsksAPersonAsANestedCallAndRefusesAnEdit: an action the rules leave to a person
// becomes a nested approval of the running call (source action); approved it is allowed (the
// pipeline never executes it), denied it is refused with the person's reason; an edit or a
// session grant of it is refused (the parent takes the action as it is, not as edited, and a
// grant from it would allow every later call of the tool).
func TestAuthorizeAsksAPersonAsANestedCallAndRefusesAnEdit(t *testing.T) {
	var answers []tool.Authorization
	var mu sync.Mutex
	h := newHarness(t, actorScript, nil, actor(&answers, &mu, ""), act)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	decisions := []gate.Answer{
		{Decision: "approve", By: gate.Owner()},
		{Decision: "deny", Reason: "not that one", By: gate.Owner()},
		{Decision: "deny", Reason: "third", By: gate.Owner()},
	}
	for i, d := range decisions {
		ev := h.await(agent.ApprovalRequested)
		if ev.Approval.ToolName != "act" || ev.Approval.ParentToolCallID != "c1" || ev.Approval.RequestedBy != "actor" ||
			ev.Approval.DecisionSource != gate.FromAction {
			t.Fatalf("approval %d: %+v, want a nested act of c1, source action", i, ev.Approval)
		}
		// An action is approved or denied as it is: no edit, no session grant, no rule.
		for _, bad := range []gate.Answer{{Decision: "approve", Arguments: json.RawMessage(`{"what":"something else"}`), By: gate.Owner()},
			{Decision: "approve_session", By: gate.Owner()}} {
			if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, bad); apperr.CodeOf(err) != apperr.Invalid {
				t.Errorf("approval %d, %s: %v, want invalid", i, bad.Decision, err)
			}
		}
		if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, d); err != nil {
			t.Fatal(err)
		}
	}
	h.await(agent.AgentEnd)
	mu.Lock()
	defer mu.Unlock()
	if len(answers) != 3 || !answers[0].Allowed || !answers[0].Nested || answers[1].Allowed ||
		!strings.Contains(answers[1].Reason, "not that one") || answers[2].Allowed {
		t.Errorf("answers %+v", answers)
	}
}

// TestAuthorizeFollowsRulesAndUncoveredActionsAlwaysAsk: an allow rule covers an action with no
// prompt and no nested record; a deny rule refuses it; an action no rule may cover asks even
// under an allow rule for its tool, and no rule releases it later.
func TestAuthorizeFollowsRulesAndUncoveredActionsAlwaysAsk(t *testing.T) {
	for _, c := range []struct {
		name, uncovered string
		rule            gate.Rule
		wantAllowed     bool
		wantPrompt      bool
	}{
		{"allowed by a rule", "", gate.Rule{Effect: gate.Allow, Tool: "act"}, true, false},
		{"denied by a rule", "", gate.Rule{Effect: gate.Deny, Tool: "act"}, false, false},
		{"uncovered under an allow rule", "it leaves the workspace", gate.Rule{Effect: gate.Allow, Tool: "act"}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var answers []tool.Authorization
			var mu sync.Mutex
			rule := c.rule
			rule.ID, rule.Scope, rule.Source = "p1", gate.ScopeServer, gate.SourcePolicyFile
			h := newHarnessWith(t, actorScript, agent.Config{PolicyRules: []gate.Rule{rule}, CompileRules: gatetest.Compile},
				actor(&answers, &mu, c.uncovered), act)
			if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
				t.Fatal(err)
			}
			prompts := 0
			for {
				var ev agent.Event
				select {
				case e := <-h.events.C:
					ev = *e
				case <-time.After(10 * time.Second):
					t.Fatal("the run did not end")
				}
				if ev.Type == agent.ApprovalRequested {
					prompts++
					for _, d := range []gate.Answer{{Decision: "approve_session", By: gate.Owner()},
						{Decision: "approve", Arguments: json.RawMessage(`{"what":"x"}`), By: gate.Owner()}} {
						if _, err := h.runner.Gate().Decide(context.Background(), h.sess.ID, ev.Approval.ID, d); apperr.CodeOf(err) != apperr.Invalid {
							t.Errorf("%s of an uncovered action: %v, want invalid", d.Decision, err)
						}
					}
					if ev.Approval.AskReason != c.uncovered || ev.Approval.DecisionSource != gate.FromAction {
						t.Errorf("prompt %+v, want the uncovered reason and the source action", ev.Approval)
					}
					if _, err := h.runner.Gate().Decide(context.Background(), h.sess.ID, ev.Approval.ID, gate.Answer{Decision: "deny", By: gate.Owner()}); err != nil {
						t.Fatal(err)
					}
				}
				if ev.Type == agent.AgentEnd {
					break
				}
			}
			if (prompts > 0) != c.wantPrompt {
				t.Errorf("%d prompts, want prompts: %v", prompts, c.wantPrompt)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, a := range answers {
				if a.Allowed != c.wantAllowed {
					t.Errorf("answer %+v, want allowed %v", a, c.wantAllowed)
				}
			}
			// The rule decided each of the three actions once (not once per look at it).
			if !c.wantPrompt {
				for _, rl := range h.runner.Gate().Rules() {
					if rl.ID == "p1" && rl.Hits != 3 {
						t.Errorf("the rule has %d hits, want 3", rl.Hits)
					}
				}
			}
		})
	}
}
