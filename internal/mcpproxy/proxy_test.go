package mcpproxy_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"countersign/internal/agent"
	"countersign/internal/connections"
	"countersign/internal/gate"
	"countersign/internal/mcpproxy"
	"countersign/internal/rules"
	"countersign/internal/testkit"
	"countersign/internal/web"
)

// `countersign mcp-proxy` (SPEC §18 Door 2), driven by the go-sdk's command client: this test
// binary is started again as the proxy (MCPPROXY_TEST_ROLE=proxy, running mcpproxy.Main as
// cmd/web's main does) and, by the proxy, as the wrapped stdio server (role upstream); the
// Countersign server is the real one over a real store.

func TestMain(m *testing.M) {
	switch os.Getenv("MCPPROXY_TEST_ROLE") {
	case "proxy":
		var args []string
		_ = json.Unmarshal([]byte(os.Getenv("MCPPROXY_TEST_ARGS")), &args)
		os.Exit(mcpproxy.Main(context.Background(), args, os.Stdin, os.Stdout, os.Stderr, os.Getenv))
	case "upstream":
		serveUpstream()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveUpstream is the wrapped server: delete (destructive) appends the name to the file
// $MCPPROXY_TEST_RUNS, so the test counts its runs.
func serveUpstream() {
	s := sdk.NewServer(&sdk.Implementation{Name: "notes", Version: "1.0.0"}, nil)
	yes := true
	s.AddTool(&sdk.Tool{Name: "delete", Title: "Delete a note",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"deleted":{"type":"string"}},"required":["deleted"]}`),
		Annotations:  &sdk.ToolAnnotations{DestructiveHint: &yes},
	}, func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var in struct{ Name string }
		_ = json.Unmarshal(req.Params.Arguments, &in)
		f, err := os.OpenFile(os.Getenv("MCPPROXY_TEST_RUNS"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			_, _ = f.WriteString(in.Name + "\n")
			f.Close()
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "deleted " + in.Name}},
			StructuredContent: map[string]any{"deleted": in.Name}}, nil
	})
	_ = s.Run(context.Background(), &sdk.StdioTransport{})
}

type proxyEnv struct {
	env   *testkit.Env
	url   string
	token string
	runs  string
}

func newProxyEnv(t *testing.T, ruleTexts ...string) *proxyEnv {
	t.Helper()
	env := testkit.New(t, testkit.Options{Agent: func(c *agent.Config) {
		c.CompileRules, c.ParseRule, c.SuggestRule = rules.NewCompiler(nil), rules.Parse, rules.Suggest
	}})
	conns := connections.NewService(env.DB)
	_, tok, err := conns.Create(context.Background(), "proxy test", connections.MCP)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range ruleTexts {
		eff, pattern, _ := strings.Cut(text, " ")
		if _, err := env.Runner.Gate().AddRule(context.Background(), gate.Rule{Effect: gate.Effect(eff), Tool: pattern,
			Scope: gate.ScopeServer, Source: gate.SourceAPI, CreatedBy: "owner"}); err != nil {
			t.Fatal(err)
		}
	}
	srv := web.New(web.Config{Runner: env.Runner, Store: env.DB, Broker: env.Broker, OwnerToken: "owner-token-for-tests",
		Connections: conns, OwnerSessions: env.DB, Notify: env.DB})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &proxyEnv{env: env, url: hs.URL, token: tok, runs: filepath.Join(t.TempDir(), "runs")}
}

// connect starts the proxy (timeout: the client's timeout in seconds) with the go-sdk's command
// client.
func (pe *proxyEnv) connect(t *testing.T, timeout string) *sdk.ClientSession {
	t.Helper()
	args, _ := json.Marshal([]string{"--connection-token-env", "PROXY_TEST_TOKEN", "--url", pe.url, "--name", "notes",
		"--timeout", timeout, "--", "env", "MCPPROXY_TEST_ROLE=upstream", os.Args[0]})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "MCPPROXY_TEST_ROLE=proxy", "MCPPROXY_TEST_ARGS="+string(args),
		"PROXY_TEST_TOKEN="+pe.token, "MCPPROXY_TEST_RUNS="+pe.runs)
	cmd.Stderr = os.Stderr
	c := sdk.NewClient(&sdk.Implementation{Name: "stdio-client", Version: "2.0"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func (pe *proxyEnv) ranTimes() int {
	b, _ := os.ReadFile(pe.runs)
	return strings.Count(string(b), "\n")
}

// pending waits for the one pending approval.
func (pe *proxyEnv) pending(t *testing.T) gate.Approval {
	t.Helper()
	for range 2000 {
		if as, _ := pe.env.DB.PendingApprovals(context.Background()); len(as) == 1 {
			return as[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no pending approval")
	return gate.Approval{}
}

func (pe *proxyEnv) decide(t *testing.T, a gate.Approval, decision, reason string) {
	t.Helper()
	if _, err := pe.env.Runner.Gate().Decide(context.Background(), a.SessionID, a.ID,
		gate.Answer{Decision: decision, Reason: reason, By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type answer struct {
	res *sdk.CallToolResult
	err error
}

func callAsync(cs *sdk.ClientSession, name string) <-chan answer {
	got := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "delete", Arguments: map[string]any{"name": name}})
		got <- answer{res, err}
	}()
	return got
}

func wait(t *testing.T, got <-chan answer) *sdk.CallToolResult {
	t.Helper()
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatal(a.err)
		}
		return a.res
	case <-time.After(20 * time.Second):
		t.Fatal("no answer")
	}
	return nil
}

func TestProxyRunsAnApprovedCallOnceAndPassesItsResultOn(t *testing.T) {
	pe := newProxyEnv(t)
	cs := pe.connect(t, "60")
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "delete" {
		t.Fatalf("tools: %v %+v", err, tools)
	}
	got := callAsync(cs, "a")
	a := pe.pending(t)
	if a.ToolName != "notes__delete" || !strings.Contains(a.AskReason, "mcp-proxy") {
		t.Errorf("approval of %s, asks because %q", a.ToolName, a.AskReason)
	}
	if pe.ranTimes() != 0 {
		t.Fatal("ran before approval")
	}
	sess, _ := pe.env.DB.Session(context.Background(), a.SessionID)
	if !strings.Contains(sess.Title, "stdio-client 2.0") {
		t.Errorf("session title %q, want the client's clientInfo", sess.Title)
	}
	pe.decide(t, a, "approve", "")
	res := wait(t, got)
	sc, _ := json.Marshal(res.StructuredContent)
	if res.IsError || text(res) != "deleted a" || string(sc) != `{"deleted":"a"}` {
		t.Fatalf("approved: isError %v %q %s", res.IsError, text(res), sc)
	}
	if n := pe.ranTimes(); n != 1 {
		t.Errorf("ran %d times, want 1", n)
	}
}

func TestProxyAnswersADenialWithTheReasonAndNeverRuns(t *testing.T) {
	pe := newProxyEnv(t)
	cs := pe.connect(t, "60")
	got := callAsync(cs, "b")
	pe.decide(t, pe.pending(t), "deny", "not that one")
	res := wait(t, got)
	if !res.IsError || !strings.Contains(text(res), "not that one") {
		t.Fatalf("denied: isError %v %q", res.IsError, text(res))
	}
	if pe.ranTimes() != 0 {
		t.Error("a denied call ran")
	}
}

func TestProxyAnswersAtTheDeadlineAndTheRepeatedCallFindsTheDecision(t *testing.T) {
	pe := newProxyEnv(t)
	cs := pe.connect(t, "1")
	res := wait(t, callAsync(cs, "c"))
	if !res.IsError || !strings.HasPrefix(text(res), "Waiting for approval at "+pe.url+"/sessions/") {
		t.Fatalf("deadline: isError %v %q", res.IsError, text(res))
	}
	pe.decide(t, pe.pending(t), "approve", "")
	res = wait(t, callAsync(cs, "c"))
	if res.IsError || text(res) != "deleted c" {
		t.Fatalf("repeated: isError %v %q", res.IsError, text(res))
	}
	if n := pe.ranTimes(); n != 1 {
		t.Errorf("ran %d times, want 1", n)
	}
}

func TestProxyAppliesRulesAndRefusesARevokedOrMissingToken(t *testing.T) {
	pe := newProxyEnv(t, "allow notes__delete(name=tmp-*)")
	cs := pe.connect(t, "60")
	res := wait(t, callAsync(cs, "tmp-1"))
	if res.IsError || text(res) != "deleted tmp-1" {
		t.Fatalf("rule-allowed: %q", text(res))
	}
	pe.token = "not-a-token"
	bad := pe.connect(t, "60")
	res = wait(t, callAsync(bad, "tmp-2"))
	if !res.IsError || !strings.Contains(text(res), "401") {
		t.Fatalf("wrong token: isError %v %q", res.IsError, text(res))
	}
	if n := pe.ranTimes(); n != 1 {
		t.Errorf("ran %d times, want 1", n)
	}
}
