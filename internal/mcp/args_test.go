package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/rules"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// TestAmbiguousArgumentsNeverReachTheRulesOrTheServer: issue 28, acceptance 9. Under
// `allow bank__pay when args.amount < 100`, the model calls a real MCP tool with
// {"amount": 50, "Amount": 5000} and with {"amount": 50, "amount": 5000}, and a tool calls it
// nested with {"amount": 50, "AMOUNT": 5000}: each gets an invalid-arguments result naming the
// key, no rule is evaluated for it, nothing asks, and the MCP server never receives it; the same
// tool called with {"amount": 50} is allowed by the rule and runs.
func TestAmbiguousArgumentsNeverReachTheRulesOrTheServer(t *testing.T) {
	var mu sync.Mutex
	var received []string // the arguments of every tools/call the server answered
	s := sdk.NewServer(&sdk.Implementation{Name: "bank", Version: "1.0.0"}, nil)
	s.AddTool(&sdk.Tool{Name: "pay", Description: "Pays an amount.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"}},"required":["amount"]}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			mu.Lock()
			received = append(received, string(req.Params.Arguments))
			mu.Unlock()
			// As a Go server decodes it: case-insensitively, the last member winning.
			var in struct{ Amount float64 }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "paid " + strconv.FormatFloat(in.Amount, 'f', -1, 64)}}}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(hs.Close)
	m, _ := newTestManager(t, Config{Servers: []ServerConfig{{Name: "bank", URL: hs.URL, Trusted: true}}})
	pay := findTool(t, m, "bank__pay")

	var evaluated []string // the arguments of every call a rule was evaluated for
	compile := func(rs []gate.Rule) (gate.RuleEvaluator, error) {
		ev, err := rules.NewCompiler(nil)(rs)
		return evaluatorFunc(func(c gate.RuleCall) gate.RuleDecision {
			mu.Lock()
			evaluated = append(evaluated, string(c.Arguments))
			mu.Unlock()
			return ev.Evaluate(c)
		}), err
	}
	policy := []gate.Rule{{ID: "small-payments", Effect: gate.Allow, Tool: "bank__pay", When: "args.amount < 100",
		Scope: gate.ScopeServer, Source: gate.SourcePolicyFile, CreatedBy: "policy.json"}}
	// relay calls bank__pay nested, with the arguments its "arguments" string holds, as they are.
	relay := &tool.Tool{Name: "relay", InputSchema: json.RawMessage(`{"type":"object","properties":{"arguments":{"type":"string"}}}`),
		Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(ctx context.Context, args json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct{ Arguments string }
			if err := json.Unmarshal(args, &in); err != nil {
				return tool.Result{}, err
			}
			return tc.ExecuteTool(ctx, "bank__pay", json.RawMessage(in.Arguments)).Result, nil
		}}
	script := `{"steps":[{"content":[
	  {"type":"toolCall","id":"case","name":"bank__pay","arguments":{"amount": 50, "Amount": 5000}},
	  {"type":"toolCall","id":"twice","name":"bank__pay","arguments":{"amount": 50, "amount": 5000}},
	  {"type":"toolCall","id":"nested","name":"relay","arguments":{"arguments":"{\"amount\": 50, \"AMOUNT\": 5000}"}},
	  {"type":"toolCall","id":"plain","name":"bank__pay","arguments":{"amount": 50}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`
	env := testkit.New(t, testkit.Options{Tools: []*tool.Tool{pay, relay}, Scripts: map[string]string{"pay": script},
		Agent: func(c *agent.Config) {
			c.CompileRules, c.PolicyRules = compile, policy
			// Should a call ask after all, it times out rather than hang the test.
			c.ApprovalTimeout = 2 * time.Second
		}})
	sess := env.Session("pay", "faux:pay")
	sub := env.Broker.Subscribe(sess.ID)
	env.Send(sess.ID, "pay")
	var seen []agent.Event
	testkit.Await(t, sub, agent.AgentEnd, 30*time.Second, &seen)

	for _, ev := range seen {
		if ev.Type == agent.ApprovalRequested {
			t.Errorf("call %s asked a person; want it refused at validation", ev.Approval.ToolCallID)
		}
	}
	results := map[string]tool.Result{}
	for _, r := range env.ToolResults(sess.ID) {
		if r.Result != nil {
			results[r.ToolCallID] = *r.Result
		}
	}
	for id, want := range map[string]string{
		"case":  `/Amount: the keys "amount" and "Amount" differ only in case`,
		"twice": `/amount: the key "amount" appears twice in this object`,
		// The nested call's result, as the relay returned it.
		"nested": `/AMOUNT: the keys "amount" and "AMOUNT" differ only in case`,
	} {
		r := results[id]
		text := r.TextOf()
		if !r.IsError || !strings.HasPrefix(text, `Invalid arguments for tool "bank__pay":`) || !strings.Contains(text, want) {
			t.Errorf("call %s: result %q (error %v), want an invalid-arguments error with %q", id, text, r.IsError, want)
		}
	}
	if r := results["plain"]; r.IsError || r.TextOf() != "paid 50" {
		t.Errorf(`call plain: result %q (error %v), want "paid 50" (allowed by the rule)`, r.TextOf(), r.IsError)
	}
	mu.Lock()
	defer mu.Unlock()
	// The relay's own call is evaluated; its nested call is not.
	if want := []string{`{"arguments":"{\"amount\": 50, \"AMOUNT\": 5000}"}`, `{"amount": 50}`}; !slices.Equal(evaluated, want) {
		t.Errorf("the rules were evaluated for %q, want %q: the relay's call and the plain call", evaluated, want)
	}
	if len(received) != 1 || received[0] != `{"amount":50}` {
		t.Errorf("the MCP server received %q, want only the plain call", received)
	}
}

// evaluatorFunc is a gate.RuleEvaluator written as a function.
type evaluatorFunc func(gate.RuleCall) gate.RuleDecision

func (f evaluatorFunc) Evaluate(c gate.RuleCall) gate.RuleDecision { return f(c) }
