package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/gate/gatetest"
	"countersign/internal/tool"
)

// ruleTools are a file writer (accept-edits may allow it), a read-only reader, a
// review_diff-style parent that calls both, and a codemode-style parent that runs the calls its
// script lists, in order. ran records "tool path" for every write and read that executed.
func ruleTools(ran *[]string, mu *sync.Mutex) []*tool.Tool {
	pathSchema := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)
	record := func(name string) tool.ExecuteFunc {
		return func(_ context.Context, args json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			var in struct{ Path string }
			_ = json.Unmarshal(args, &in)
			mu.Lock()
			*ran = append(*ran, name+" "+in.Path)
			mu.Unlock()
			return tool.Result{Content: []tool.Content{tool.Text("ok")}}, nil
		}
	}
	calls := func(ctx context.Context, tc tool.Context, list []struct{ Name, Path string }) (tool.Result, error) {
		var out []string
		for _, c := range list {
			o := tc.ExecuteTool(ctx, c.Name, map[string]string{"path": c.Path})
			out = append(out, c.Name+" "+c.Path+": "+o.Result.TextOf())
		}
		return tool.Result{Content: []tool.Content{tool.Text(strings.Join(out, "\n"))}}, nil
	}
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	return []*tool.Tool{
		{Name: "write", InputSchema: pathSchema, WritesFiles: true, Execute: record("write"),
			Annotations: tool.Annotations{DestructiveHint: tool.Bool(true), OpenWorldHint: tool.Bool(false)}},
		{Name: "read", InputSchema: pathSchema, Annotations: ro, Execute: record("read")},
		{Name: "review", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: ro,
			Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
				return calls(ctx, tc, []struct{ Name, Path string }{{"read", "a"}, {"write", "secrets/k"}, {"write", "docs/x"}})
			}},
		{Name: "script", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: ro, Exposure: tool.ModelOnly,
			Execute: func(ctx context.Context, args json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
				var in struct{ Calls []struct{ Name, Path string } }
				_ = json.Unmarshal(args, &in)
				return calls(ctx, tc, in.Calls)
			}},
	}
}

// TestNestedCallsFollowTheRulesAndTheMode: issue 17, acceptance 4. With a deny rule on
// write(secrets/**), then with plan mode, nested calls (a review_diff-style parent and a
// codemode-style script) are denied exactly as top-level calls are, without a prompt; a prompt
// that is still due names its parent call; and the top-level calls of the same batch, decided
// and prompting while the nested prompt is pending, follow the same rules unchanged.
func TestNestedCallsFollowTheRulesAndTheMode(t *testing.T) {
	script := `{"steps":[{"content":[
	  {"type":"toolCall","id":"c1","name":"review","arguments":{}},
	  {"type":"toolCall","id":"c2","name":"script","arguments":{"calls":[{"name":"write","path":"secrets/s"},{"name":"read","path":"b"}]}},
	  {"type":"toolCall","id":"c3","name":"write","arguments":{"path":"secrets/top"}},
	  {"type":"toolCall","id":"c4","name":"write","arguments":{"path":"docs/top"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`
	deny := gate.Rule{ID: "deny-secrets", Effect: gate.Deny, Tool: "write", Specifier: "secrets/**", Scope: gate.ScopeServer,
		Source: gate.SourcePolicyFile, CreatedBy: "policy.json"}
	for _, tc := range []struct {
		name   string
		policy []gate.Rule
		mode   gate.Mode
		// prompts are the calls that must prompt (approved once by the test), by tool call id.
		prompts []string
		ran     []string
		// denied maps each denied call id to its decision source and reason.
		denied map[string][2]string
	}{
		{"a deny rule", []gate.Rule{deny}, gate.ModeDefault, []string{"c1/3", "c4"},
			[]string{"read a", "read b", "write docs/top", "write docs/x"},
			map[string][2]string{"c1/2": {"rule", "rule write(secrets/**) denies the call"}, "c2/1": {"rule", "rule write(secrets/**) denies the call"},
				"c3": {"rule", "rule write(secrets/**) denies the call"}}},
		{"plan mode", nil, gate.ModePlan, nil,
			[]string{"read a", "read b"},
			map[string][2]string{"c1/2": {"mode", gate.PlanReason}, "c1/3": {"mode", gate.PlanReason}, "c2/1": {"mode", gate.PlanReason},
				"c3": {"mode", gate.PlanReason}, "c4": {"mode", gate.PlanReason}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var ran []string
			h := newHarnessWith(t, script, agent.Config{CompileRules: gatetest.Compile, PolicyRules: tc.policy, DefaultMode: tc.mode},
				ruleTools(&ran, &mu)...)
			ctx := context.Background()
			if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
				t.Fatal(err)
			}
			var prompted []string
			timeout := time.After(15 * time.Second)
			for done := false; !done; {
				select {
				case ev := <-h.events.C:
					if ev.Type == agent.ApprovalRequested {
						a := ev.Approval
						prompted = append(prompted, a.ToolCallID)
						if a.ToolCallID == "c1/3" && (a.ParentToolCallID != "c1" || a.RequestedBy != "review") {
							t.Errorf("the nested prompt names parent %q / %q, want c1 / review", a.ParentToolCallID, a.RequestedBy)
						}
						if a.ToolCallID == "c4" && (a.ParentToolCallID != "" || a.RequestedBy != "model") {
							t.Errorf("the top-level prompt = %+v", a)
						}
						if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, a.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
							t.Fatal(err)
						}
					}
					done = ev.Type == agent.AgentEnd
				case <-timeout:
					t.Fatal("the run did not end")
				}
			}
			slices.Sort(prompted)
			if !slices.Equal(prompted, tc.prompts) {
				t.Errorf("prompted %v, want %v", prompted, tc.prompts)
			}
			mu.Lock()
			slices.Sort(ran)
			if !slices.Equal(ran, tc.ran) {
				t.Errorf("ran %v, want %v", ran, tc.ran)
			}
			mu.Unlock()
			as, err := h.db.Approvals(ctx, h.sess.ID, "")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][2]string{}
			for _, a := range as {
				if a.Status == gate.Denied {
					if !a.Automatic || a.Mode != tc.mode {
						t.Errorf("%s: automatic %v mode %q", a.ToolCallID, a.Automatic, a.Mode)
					}
					got[a.ToolCallID] = [2]string{string(a.DecisionSource), a.Reason}
					if a.DecisionSource == gate.FromRule && (a.RuleID != "deny-secrets" || a.RuleSource != gate.SourcePolicyFile || a.RuleText != "write(secrets/**)") {
						t.Errorf("%s names rule %q %q %q", a.ToolCallID, a.RuleID, a.RuleText, a.RuleSource)
					}
				}
			}
			if len(got) != len(tc.denied) {
				t.Errorf("denied %v, want %v", got, tc.denied)
			}
			for id, want := range tc.denied {
				if got[id] != want {
					t.Errorf("%s denied by %v, want %v", id, got[id], want)
				}
			}
		})
	}
}

// TestRulesAndModesReleasePendingCalls: a pending call is released, never denied, by a change:
// switching to accept-edits releases a pending file write (audited as the mode); an API rule of
// workspace scope releases a pending call in its session; plan mode leaves a pending call
// pending (nothing is denied retroactively). The rule's hits reach the store.
func TestRulesAndModesReleasePendingCalls(t *testing.T) {
	script := `{"steps":[{"content":[
	  {"type":"toolCall","id":"c1","name":"write","arguments":{"path":"a"}},
	  {"type":"toolCall","id":"c2","name":"write","arguments":{"path":"b"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`
	var mu sync.Mutex
	var ran []string
	h := newHarnessWith(t, script, agent.Config{CompileRules: gatetest.Compile}, ruleTools(&ran, &mu)...)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	first := h.await(agent.ApprovalRequested).Approval
	h.await(agent.ApprovalRequested)
	if err := h.runner.Gate().SetMode(ctx, h.sess.ID, gate.ModePlan); err != nil {
		t.Fatal(err)
	}
	if p, _ := h.db.Approvals(ctx, h.sess.ID, gate.Pending); len(p) != 2 {
		t.Fatalf("plan mode changed pending calls: %d pending", len(p))
	}
	// A rule for c1's path only: the gatetest compiler matches a path prefix.
	if _, err := h.runner.Gate().AddRule(ctx, gate.Rule{Effect: gate.Allow, Tool: "write", Specifier: "a", Scope: gate.ScopeWorkspace,
		Workspace: h.sess.Workspace, Source: gate.SourceAPI, CreatedBy: gate.ByOwner}); err != nil {
		t.Fatal(err)
	}
	// Plan mode is on: an allow rule does not override it, so nothing is released yet.
	if p, _ := h.db.Approvals(ctx, h.sess.ID, gate.Pending); len(p) != 2 {
		t.Fatalf("in plan mode a rule released %d", 2-len(p))
	}
	if err := h.runner.Gate().SetMode(ctx, h.sess.ID, gate.ModeDefault); err != nil {
		t.Fatal(err)
	}
	a, err := h.db.Approval(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != gate.Approved || a.DecisionSource != gate.FromRule || a.RuleText != "write(a)" || !a.Automatic {
		t.Errorf("c1 after the rule and the mode = %+v", a)
	}
	if err := h.runner.Gate().SetMode(ctx, h.sess.ID, gate.ModeAcceptEdits); err != nil {
		t.Fatal(err)
	}
	h.await(agent.AgentEnd)
	as, _ := h.db.Approvals(ctx, h.sess.ID, "")
	second := as[len(as)-1]
	if second.ToolCallID != "c2" || second.Status != gate.Approved || second.DecisionSource != gate.FromMode || second.DecidedBy != gate.ByMode {
		t.Errorf("c2 after accept-edits = %+v", second)
	}
	h.runner.Wait() // flushes hits
	stored, err := h.db.Rules(ctx)
	if err != nil || len(stored) != 1 {
		t.Fatalf("stored rules %+v %v", stored, err)
	}
	// One hit: the release of c1. The check while plan mode was on does not count (the rule's
	// decision did not stand).
	if stored[0].Hits != 1 || stored[0].LastUsedAt == nil {
		t.Errorf("stored hits %d, last used %v; want 1", stored[0].Hits, stored[0].LastUsedAt)
	}
	if s, _ := h.db.Session(ctx, h.sess.ID); s.Mode != gate.ModeAcceptEdits {
		t.Errorf("stored mode = %q", s.Mode)
	}
	if err := h.runner.Gate().SetMode(ctx, h.sess.ID, "yolo"); err == nil || !strings.Contains(err.Error(), "plan") {
		t.Errorf("an unknown mode: %v", err)
	}
}
