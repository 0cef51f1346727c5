package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"countersign/internal/agent"
	"countersign/internal/connections"
	"countersign/internal/gate"
	"countersign/internal/mcp"
	"countersign/internal/rules"
	"countersign/internal/store/sqlite"
	"countersign/internal/tool"
	"countersign/internal/web"
)

// Door 2 (SPEC §18): the MCP gateway at /mcp, driven by the official go-sdk client, against the
// real server, store, gate and rules, with a real upstream MCP server (the go-sdk's, over
// Streamable HTTP) reached through the real mcp.Manager.

// upstream is an MCP server with a read-only tool, a destructive one and one whose result breaks
// its outputSchema; reads and deletes count the runs of read and delete. While hold is set, each
// delete is sent on it when it starts and waits until the channel it sent is closed.
type upstream struct {
	*httptest.Server
	srv            *sdk.Server
	reads, deletes atomic.Int64
	hold           atomic.Pointer[chan chan struct{}]
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	up := &upstream{}
	s := sdk.NewServer(&sdk.Implementation{Name: "upstream", Version: "1.0.0"}, nil)
	no := false
	s.AddTool(&sdk.Tool{Name: "read", Title: "Read a note", Description: "Reads a note.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		Annotations:  &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var in struct{ Name string }
		_ = json.Unmarshal(req.Params.Arguments, &in)
		up.reads.Add(1)
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "note " + in.Name}},
			StructuredContent: map[string]any{"text": "note " + in.Name}}, nil
	})
	yes := true
	s.AddTool(&sdk.Tool{Name: "delete", Title: "Delete a note", Description: "Deletes a note.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"deleted":{"type":"string"}},"required":["deleted"]}`),
		Annotations:  &sdk.ToolAnnotations{DestructiveHint: &yes},
	}, func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var in struct{ Name string }
		_ = json.Unmarshal(req.Params.Arguments, &in)
		up.deletes.Add(1)
		if h := up.hold.Load(); h != nil {
			release := make(chan struct{})
			*h <- release
			<-release
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "deleted " + in.Name}},
			StructuredContent: map[string]any{"deleted": in.Name}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "bad_output", InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
		Annotations:  &sdk.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "n is a word"}},
			StructuredContent: map[string]any{"n": "seven"}}, nil
	})
	up.srv = s
	up.Server = httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(up.Close)
	return up
}

// gatewayServer is a test server whose /mcp offers the upstream's tools (server "up", trusted),
// with the real rules, and one connection of kind mcp.
type gatewayServer struct {
	*testServer
	up      *upstream
	token   string
	connID  string
	timeout string   // ?timeout= on the clients' endpoint
	names   sync.Map // *sdk.ClientSession → its clientInfo name
}

// sid is the agent session id of cs's calls: its MCP session id, or, for a client of the
// stateless revision (no sessions), "client:" and its clientInfo name.
func (gs *gatewayServer) sid(cs *sdk.ClientSession) string {
	if id := cs.ID(); id != "" {
		return id
	}
	name, _ := gs.names.Load(cs)
	return "client:" + name.(string)
}

func newGatewayServer(t *testing.T, ruleTexts ...string) *gatewayServer {
	t.Helper()
	return newGatewayServerWith(t, nil, ruleTexts...)
}

// newGatewayServerWith is newGatewayServer with agentCfg, when set, changing the runner's config
// first (a store that holds writes…).
func newGatewayServerWith(t *testing.T, agentCfg func(*agent.Config), ruleTexts ...string) *gatewayServer {
	t.Helper()
	up := newUpstream(t)
	cfg, err := mcp.ParseConfig("mcp.json", []byte(`{"mcpServers":{"up":{"url":"`+up.URL+`","trusted":true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	m := mcp.NewManager(cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	m.Start(ctx)
	t.Cleanup(func() { cancel(); m.Close() })
	tools := m.Tools()
	if len(tools) != 3 {
		t.Fatalf("upstream tools: %d, want 3 (%v)", len(tools), m.Servers())
	}
	var ts *testServer
	ts = newTestServerAgent(t, nil, func(c *web.Config, _ *http.Server) {
		c.GatewayTools = func() []*tool.Tool {
			var out []*tool.Tool
			for _, t := range m.Tools() {
				if ts != nil {
					if rt, ok := ts.env.Tools.Lookup(t.Name); ok && rt == t {
						out = append(out, t)
					}
				} else {
					out = append(out, t) // registered as newTestServerAgent's extra tools
				}
			}
			return out
		}
		c.GatewayProgressEvery = 50 * time.Millisecond
	}, func(c *agent.Config) {
		c.CompileRules, c.ParseRule, c.SuggestRule = rules.NewCompiler(nil), rules.Parse, rules.Suggest
		if agentCfg != nil {
			agentCfg(c)
		}
	}, tools...)
	conn, tok, err := ts.conns.Create(context.Background(), "test mcp", connections.MCP)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range ruleTexts {
		eff, pattern, _ := strings.Cut(text, " ")
		rl := gate.Rule{Effect: gate.Effect(eff), Tool: pattern, Scope: gate.ScopeServer, Source: gate.SourceAPI, CreatedBy: "owner"}
		if p, q, ok := strings.Cut(pattern, " approvers="); ok {
			rl.Tool, rl.Approvers = p, int(q[0]-'0')
		}
		if _, err := ts.runner.Gate().AddRule(context.Background(), rl); err != nil {
			t.Fatalf("rule %s: %v", text, err)
		}
	}
	// As cmd/web wires it: a change upstream registers the new tools, then /mcp offers them.
	m.OnChange(func() {
		_, _ = m.RegisterTools(ts.env.Tools)
		ts.srv.GatewayToolsChanged()
	})
	return &gatewayServer{testServer: ts, up: up, token: tok, connID: conn.ID, timeout: "30"}
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// client connects a go-sdk client named name to /mcp; progress, when set, gets every progress
// notification.
func (gs *gatewayServer) client(t *testing.T, name string, progress func(*sdk.ProgressNotificationParams)) *sdk.ClientSession {
	t.Helper()
	opts := &sdk.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, req *sdk.ProgressNotificationClientRequest) { progress(req.Params) }
	}
	c := sdk.NewClient(&sdk.Implementation{Name: name, Version: "0.1.0"}, opts)
	tr := &sdk.StreamableClientTransport{Endpoint: gs.URL + "/mcp?timeout=" + gs.timeout,
		HTTPClient: &http.Client{Transport: bearerTransport{gs.token}}}
	cs, err := c.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	gs.names.Store(cs, name)
	return cs
}

// statelessClient connects a go-sdk client named name to base's /mcp speaking the stateless
// revision 2026-07-28, with a 1 s deadline (?timeout=1).
func (gs *gatewayServer) statelessClient(t *testing.T, base, name string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: name, Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: base + "/mcp?timeout=1",
		HTTPClient: &http.Client{Transport: bearerTransport{gs.token}}}, &sdk.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// deleteR calls up__delete with name "r" through cs.
func deleteR(t *testing.T, cs *sdk.ClientSession) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "r"}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// pendingIn waits for the one pending approval of the connection's agent session sid.
func (gs *gatewayServer) pendingIn(t *testing.T, sid string) gate.Approval {
	t.Helper()
	for range 2000 {
		if s, err := gs.db.AgentSession(context.Background(), gs.connID, sid); err == nil {
			if as, _ := gs.db.Approvals(context.Background(), s.ID, gate.Pending); len(as) == 1 {
				return as[0]
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no pending approval in agent session %s", sid)
	return gate.Approval{}
}

func (gs *gatewayServer) decide(t *testing.T, a gate.Approval, answer map[string]any) {
	t.Helper()
	if st := gs.call(t, http.MethodPost, "/api/approvals/"+a.ID+"/decision", answer, nil); st != http.StatusOK {
		t.Fatalf("decision: %d", st)
	}
}

type callAnswer struct {
	res *sdk.CallToolResult
	err error
}

// callAsync calls the tool through cs in a goroutine of its own, with its own copy of params (the
// go-sdk client writes its _meta: two calls sharing it raced, and the second sent the first's
// clientInfo).
func callAsync(cs *sdk.ClientSession, params *sdk.CallToolParams) <-chan callAnswer {
	got := make(chan callAnswer, 1)
	p := *params
	p.Meta = maps.Clone(params.Meta)
	go func() {
		res, err := cs.CallTool(context.Background(), &p)
		got <- callAnswer{res, err}
	}()
	return got
}

func wait(t *testing.T, got <-chan callAnswer) *sdk.CallToolResult {
	t.Helper()
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("tools/call: %v", a.err)
		}
		return a.res
	case <-time.After(15 * time.Second):
		t.Fatal("tools/call not answered")
	}
	return nil
}

func textOf(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func structured(t *testing.T, res *sdk.CallToolResult) string {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGatewayListsTheUpstreamToolsWithTheirSchemasTitlesAndAnnotations(t *testing.T) {
	gs := newGatewayServer(t)
	cs := gs.client(t, "lister", nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*sdk.Tool{}
	for _, tl := range res.Tools {
		byName[tl.Name] = tl
	}
	if len(byName) != 3 || byName["up__read"] == nil || byName["up__delete"] == nil || byName["up__bad_output"] == nil {
		t.Fatalf("tools %v, want up__read, up__delete, up__bad_output", byName)
	}
	del := byName["up__delete"]
	if del.Title != "Delete a note" || del.Annotations == nil || del.Annotations.DestructiveHint == nil || !*del.Annotations.DestructiveHint {
		t.Errorf("up__delete: title %q annotations %+v", del.Title, del.Annotations)
	}
	in, _ := json.Marshal(del.InputSchema)
	out, _ := json.Marshal(del.OutputSchema)
	if !strings.Contains(string(in), `"required":["name"]`) || !strings.Contains(string(out), `"deleted"`) {
		t.Errorf("up__delete schemas: %s / %s", in, out)
	}
	if r := byName["up__read"]; r.Annotations == nil || !r.Annotations.ReadOnlyHint {
		t.Errorf("up__read annotations %+v, want readOnlyHint", r.Annotations)
	}
}

func TestGatewayRunsAReadOnlyToolAtOnceAndHoldsADestructiveOneUntilApproved(t *testing.T) {
	gs := newGatewayServer(t)
	cs := gs.client(t, "approver-test", nil)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || textOf(res) != "note a" || structured(t, res) != `{"text":"note a"}` {
		t.Fatalf("read: isError %v %q %s", res.IsError, textOf(res), structured(t, res))
	}

	got := callAsync(cs, &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "b"}})
	a := gs.pendingIn(t, gs.sid(cs))
	if gs.up.deletes.Load() != 0 {
		t.Fatal("the destructive call ran before anybody approved it")
	}
	if a.ToolName != "up__delete" || string(a.Arguments) != `{"name":"b"}` {
		t.Errorf("approval %s %s", a.ToolName, a.Arguments)
	}
	sess, _ := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if !strings.Contains(sess.Title, "approver-test 0.1.0") {
		t.Errorf("agent session title %q, want the clientInfo", sess.Title)
	}
	gs.decide(t, a, map[string]any{"decision": "approve"})
	res = wait(t, got)
	if res.IsError || textOf(res) != "deleted b" || structured(t, res) != `{"deleted":"b"}` {
		t.Fatalf("approved delete: isError %v %q %s", res.IsError, textOf(res), structured(t, res))
	}
	if n := gs.up.deletes.Load(); n != 1 {
		t.Errorf("upstream ran delete %d times, want 1", n)
	}
}

func TestGatewayAnswersADenialAsAnErrorResultWithTheReason(t *testing.T) {
	gs := newGatewayServer(t)
	cs := gs.client(t, "deny-test", nil)
	got := callAsync(cs, &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "c"}})
	gs.decide(t, gs.pendingIn(t, gs.sid(cs)), map[string]any{"decision": "deny", "reason": "keep that note"})
	res := wait(t, got)
	if !res.IsError || !strings.Contains(textOf(res), "keep that note") {
		t.Fatalf("denied: isError %v %q", res.IsError, textOf(res))
	}
	if gs.up.deletes.Load() != 0 {
		t.Error("a denied call ran")
	}
}

func TestGatewayAnswersAtTheDeadlineAndTheRepeatedCallFindsTheDecisionOnce(t *testing.T) {
	gs := newGatewayServer(t)
	gs.timeout = "1" // answered half a second in
	var progress atomic.Int64
	var msg atomic.Value
	cs := gs.client(t, "deadline-test", func(p *sdk.ProgressNotificationParams) { progress.Add(1); msg.Store(p.Message) })
	params := &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "d"}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(textOf(res), "Waiting for approval at "+gs.URL+"/sessions/") ||
		!strings.HasSuffix(textOf(res), "; call again once it is approved") {
		t.Fatalf("deadline answer: isError %v %q", res.IsError, textOf(res))
	}
	if progress.Load() == 0 {
		t.Error("no progress notification arrived while the call was held")
	} else if m, _ := msg.Load().(string); !strings.HasPrefix(m, "waiting for approval: ") {
		t.Errorf("progress message %q", m)
	}
	a := gs.pendingIn(t, gs.sid(cs))
	gs.decide(t, a, map[string]any{"decision": "approve"})
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "d"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || structured(t, res) != `{"deleted":"d"}` {
		t.Fatalf("repeated call after approval: isError %v %q", res.IsError, textOf(res))
	}
	// Once: the same call again is a new call, asked again.
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "d"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(textOf(res), "Waiting for approval at ") {
		t.Fatalf("third call: isError %v %q, want it asked again", res.IsError, textOf(res))
	}
	if n := gs.up.deletes.Load(); n != 1 {
		t.Errorf("upstream ran delete %d times, want 1", n)
	}
}

// TestGatewayRunsTwoIdenticalCallsInFlightOnOneDecisionOnce: the same call twice at once in one
// session, both held for one approval (the second joins the first's wait, or finds the decision
// made): once approved, one runs and the other is asked anew (store.ClaimOutsideCall). Without
// the claim both ran on one approval.
func TestGatewayRunsTwoIdenticalCallsInFlightOnOneDecisionOnce(t *testing.T) {
	gs := newGatewayServer(t)
	gs.timeout = "3"
	arrived := make(chan chan struct{}, 2)
	gs.up.hold.Store(&arrived)
	cs := gs.client(t, "twice-test", nil)
	p := &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "t"}}
	first := callAsync(cs, p)
	a := gs.pendingIn(t, gs.sid(cs))
	second := callAsync(cs, p)
	gs.decide(t, a, map[string]any{"decision": "approve"})
	ranOnce(t, gs, arrived, first, second)
	if n := gs.pendingIn(t, gs.sid(cs)); n.ID == a.ID {
		t.Error("the call not run is not asked anew")
	}
}

func TestGatewayCancelsTheApprovalWhenTheClientCancels(t *testing.T) {
	gs := newGatewayServer(t)
	cs := gs.client(t, "cancel-test", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "e"}})
		done <- err
	}()
	a := gs.pendingIn(t, gs.sid(cs))
	cancel() // the go-sdk client sends notifications/cancelled
	<-done
	for range 500 {
		got, err := gs.db.Approval(context.Background(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == gate.Cancelled {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the approval was not cancelled after the client cancelled the call")
}

func TestGatewayAppliesRulesOnArgumentsAndSeveralApprovers(t *testing.T) {
	gs := newGatewayServer(t, "allow up__delete(name=tmp-*)", "deny up__delete(name=keep-*)", "ask up__read approvers=2")
	when := gate.Rule{Effect: gate.Deny, Tool: "up__delete", When: `args.name.startsWith("secret")`,
		Scope: gate.ScopeServer, Source: gate.SourceAPI, CreatedBy: "owner"}
	if _, err := gs.runner.Gate().AddRule(context.Background(), when); err != nil {
		t.Fatal(err)
	}
	cs := gs.client(t, "rules-test", nil)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "secret-1"}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "rule up__delete denies") {
		t.Fatalf("denied by when: %v %q", err, textOf(res))
	}
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "tmp-1"}})
	if err != nil || res.IsError || structured(t, res) != `{"deleted":"tmp-1"}` {
		t.Fatalf("rule-allowed: %v %v %q", err, res != nil && res.IsError, textOf(res))
	}
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "keep-1"}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "up__delete(name=keep-*)") {
		t.Fatalf("rule-denied: %v %q", err, textOf(res))
	}
	// approvers=2: one approval leaves it pending, the second runs it.
	got := callAsync(cs, &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "x"}})
	a := gs.pendingIn(t, gs.sid(cs))
	gs.decide(t, a, map[string]any{"decision": "approve"})
	select {
	case <-got:
		t.Fatal("answered after one approval of two")
	case <-time.After(300 * time.Millisecond):
	}
	reviewerApprove(t, gs, a)
	if res := wait(t, got); res.IsError || textOf(res) != "note x" {
		t.Fatalf("after two approvals: %q", textOf(res))
	}
	if n := gs.up.deletes.Load(); n != 1 {
		t.Errorf("deletes %d, want 1", n)
	}
}

// reviewerApprove approves a as a second person (alice, through an approver share link).
func reviewerApprove(t *testing.T, gs *gatewayServer, a gate.Approval) {
	t.Helper()
	alice := gate.Decider{Name: "alice", Via: &gate.LinkRef{LinkID: "link-alice", Label: "alice"}}
	if _, err := gs.runner.Gate().Decide(context.Background(), a.SessionID, a.ID, gate.Answer{Decision: "approve", By: alice}); err != nil {
		t.Fatalf("alice's vote: %v", err)
	}
}

func TestGatewayModesApply(t *testing.T) {
	gs := newGatewayServer(t)
	cs := gs.client(t, "mode-test", nil)
	if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "m"}}); err != nil {
		t.Fatal(err)
	}
	sess, err := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if err != nil {
		t.Fatal(err)
	}
	if err := gs.runner.Gate().SetMode(context.Background(), sess.ID, gate.ModePlan); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "p"}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), gate.PlanReason) {
		t.Fatalf("plan mode: %v %q", err, textOf(res))
	}
}

func TestGatewayRefusesBadInputAndKeepsServing(t *testing.T) {
	gs := newGatewayServer(t)
	cs := gs.client(t, "bad-input-test", nil)

	// Arguments failing the schema: an isError result naming the violation; nothing asked.
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": 7, "extra": true}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "Invalid arguments") {
		t.Fatalf("schema-failing arguments: %v %q", err, textOf(res))
	}
	// An unknown tool: the protocol error MCP says (-32602).
	if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__nothing", Arguments: map[string]any{}}); err == nil ||
		!strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("unknown tool: %v", err)
	}
	// The upstream's structuredContent breaking its outputSchema: an isError result.
	res, err = cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__bad_output", Arguments: map[string]any{}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "violates its outputSchema") {
		t.Fatalf("bad output: %v %q", err, textOf(res))
	}

	post := func(token, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, gs.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	if st, body := post("", initialize); st != http.StatusUnauthorized {
		t.Errorf("no token: %d %s", st, body)
	}
	if st, body := post("wrong", initialize); st != http.StatusUnauthorized {
		t.Errorf("wrong token: %d %s", st, body)
	}
	if st, body := post(gs.token, `{"jsonrpc":"2.0","id":1,"method":`); st != http.StatusBadRequest {
		t.Errorf("malformed JSON-RPC: %d %s", st, body)
	}
	big := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"pad":"` + strings.Repeat("x", 2<<20) + `"}}`
	if st, body := post(gs.token, big); st != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized request: %d %.200s", st, body)
	}

	// Still serving: this client, and a new one.
	if res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "z"}}); err != nil || res.IsError {
		t.Fatalf("after the attacks: %v", err)
	}
	other := gs.client(t, "other", nil)
	if res, err := other.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "y"}}); err != nil || res.IsError {
		t.Fatalf("another client after the attacks: %v", err)
	}

	// A revoked connection: 401 on the next request.
	if st := gs.call(t, http.MethodDelete, "/api/connections/"+gs.connID, nil, nil); st/100 != 2 {
		t.Fatalf("revoke: %d", st)
	}
	if st, body := post(gs.token, initialize); st != http.StatusUnauthorized {
		t.Errorf("revoked token: %d %s", st, body)
	}
	if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "z"}}); err == nil {
		t.Error("a revoked connection's session still calls tools")
	}
}

func TestGatewayProxyEndpointsRefuseBadInputAndNeverAllowIt(t *testing.T) {
	gs := newGatewayServer(t, "allow notes__delete")
	post := func(path, token, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, gs.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	tl := `{"name":"delete","inputSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]},"annotations":{"readOnlyHint":true}}`
	good := `{"sessionId":"p1","clientInfo":{"name":"c","version":"1"},"server":"notes","tool":` + tl + `,"arguments":{"name":"x"}}`
	cases := []struct {
		name, path, token, body string
		status                  int
		want                    string
	}{
		{"no token", "/mcp/decide", "", good, 401, "Bearer"},
		{"wrong token", "/mcp/decide", "nope", good, 401, "connection token"},
		{"malformed JSON", "/mcp/decide", gs.token, `{"sessionId":`, 400, "not the expected JSON"},
		{"unknown field", "/mcp/decide", gs.token, strings.Replace(good, `"server"`, `"allow":true,"server"`, 1), 400, "unknown field"},
		{"bad server name", "/mcp/decide", gs.token, strings.Replace(good, `"notes"`, `"no__tes"`, 1), 400, "server"},
		{"no session", "/mcp/decide", gs.token, strings.Replace(good, `"p1"`, `""`, 1), 400, "sessionId"},
		{"schema that is not an object schema", "/mcp/decide", gs.token, strings.Replace(good, `{"type":"object","properties"`, `{"type":"string","properties"`, 1), 400, "delete"},
		{"oversized", "/mcp/decide", gs.token, strings.Replace(good, `"x"`, `"`+strings.Repeat("x", 5<<20)+`"`, 1), 413, "limit"},
		{"an outcome for no call", "/mcp/outcome", gs.token, `{"sessionId":"p1","approvalId":"nothing","result":{}}`, 404, ""},
	}
	for _, c := range cases {
		if st, body := post(c.path, c.token, c.body); st != c.status || !strings.Contains(body, c.want) || strings.Contains(body, `"decision": "allow"`) {
			t.Errorf("%s: %d %.300s, want %d with %q and no allow", c.name, st, body, c.status, c.want)
		}
	}
	// Arguments failing the schema: denied with the violations, even though a rule allows the tool.
	st, body := post("/mcp/decide", gs.token, strings.Replace(good, `{"name":"x"}`, `{"name":1}`, 1))
	if st != 200 || !strings.Contains(body, `"decision": "deny"`) || !strings.Contains(body, "Invalid arguments") {
		t.Errorf("schema-failing arguments: %d %s", st, body)
	}
	// The rule allows; the proxy's readOnlyHint is never what allows (an untrusted server).
	st, body = post("/mcp/decide", gs.token, good)
	var d struct{ Decision, ApprovalID, Reason string }
	_ = json.Unmarshal([]byte(body), &d)
	if st != 200 || d.Decision != "allow" || !strings.Contains(d.Reason, "notes__delete") {
		t.Fatalf("rule-allowed: %d %s", st, body)
	}
	out := `{"sessionId":"p1","approvalId":"` + d.ApprovalID + `","result":{"content":[{"type":"text","text":"gone"}]}}`
	if st, body := post("/mcp/outcome", gs.token, strings.Replace(out, `"p1"`, `"p2"`, 1)); st != 404 {
		t.Errorf("another session's outcome: %d %s", st, body)
	}
	if st, body := post("/mcp/outcome", gs.token, out); st != 200 || !strings.Contains(body, "gone") {
		t.Errorf("outcome: %d %s", st, body)
	}
	if st, body := post("/mcp/outcome", gs.token, out); st != 409 {
		t.Errorf("the outcome twice: %d %s", st, body)
	}
}

func TestGatewayForwardsToolsListChanged(t *testing.T) {
	gs := newGatewayServer(t)
	changed := make(chan struct{}, 4)
	c := sdk.NewClient(&sdk.Implementation{Name: "watcher", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} }})
	cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: gs.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{gs.token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	gs.up.srv.AddTool(&sdk.Tool{Name: "later", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed reached the client")
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "up__later") {
		t.Errorf("tools after the change: %v", names)
	}
}

func TestGatewayServesTheStatelessRevisionToo(t *testing.T) {
	gs := newGatewayServer(t)
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			c := sdk.NewClient(&sdk.Implementation{Name: "rev-" + version, Version: "1"}, nil)
			cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: gs.URL + "/mcp",
				HTTPClient: &http.Client{Transport: bearerTransport{gs.token}}}, &sdk.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated %q, want %q", got, version)
			}
			got := callAsync(cs, &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": version}})
			sid := cs.ID()
			if sid == "" {
				sid = "client:rev-" + version // no sessions: the client's agent session is its clientInfo's
			}
			gs.decide(t, gs.pendingIn(t, sid), map[string]any{"decision": "approve"})
			if res := wait(t, got); res.IsError || structured(t, res) != `{"deleted":"`+version+`"}` {
				t.Fatalf("approved: %q", textOf(res))
			}
		})
	}
}

// TestGatewayUsesADecisionOnceAcrossARestart: a decision used by the repeated call is not used
// again by a server that starts over the same store (it finds the call's generation there), so
// the same call asks anew rather than running on an old approval.
func TestGatewayUsesADecisionOnceAcrossARestart(t *testing.T) {
	gs := newGatewayServer(t)
	gs.timeout = "1"
	connect := func(base string) *sdk.ClientSession { return gs.statelessClient(t, base, "restart-test") }
	call := func(cs *sdk.ClientSession) *sdk.CallToolResult { return deleteR(t, cs) }
	a := connect(gs.URL)
	if res := call(a); !strings.HasPrefix(textOf(res), "Waiting for approval at ") {
		t.Fatalf("first call: %q", textOf(res))
	}
	gs.decide(t, gs.pendingIn(t, "client:restart-test"), map[string]any{"decision": "approve"})
	if res := call(a); res.IsError {
		t.Fatalf("repeated call: %q", textOf(res))
	}

	// Another server over the same store and runner: it has never seen the call.
	tools := gs.env.Tools.All()
	other := web.New(web.Config{Runner: gs.runner, Store: gs.db, Broker: gs.broker, OwnerToken: token, Connections: gs.conns,
		OwnerSessions: gs.db, Notify: gs.db, GatewayTools: func() []*tool.Tool { return tools }})
	hs := httptest.NewServer(other.Handler())
	defer hs.Close()
	if res := call(connect(hs.URL)); !res.IsError || !strings.HasPrefix(textOf(res), "Waiting for approval at ") {
		t.Fatalf("the same call after a restart: isError %v %q, want it asked anew", res.IsError, textOf(res))
	}
	if n := gs.up.deletes.Load(); n != 1 {
		t.Errorf("upstream ran delete %d times, want 1", n)
	}
}

func TestGatewayAnswersAnUpstreamFailureAsAnErrorResultWithTheReason(t *testing.T) {
	gs := newGatewayServer(t, "allow up__read")
	cs := gs.client(t, "down-test", nil)
	gs.up.CloseClientConnections()
	gs.up.Close()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "q"}})
	if err != nil {
		t.Fatalf("an upstream failure is a result, not a protocol error: %v", err)
	}
	if !res.IsError || !strings.Contains(textOf(res), "MCP server up") {
		t.Fatalf("upstream down: isError %v %q", res.IsError, textOf(res))
	}
	// The gateway itself still serves.
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// The gateway reads a client's agent session once (not on every call); the call after the session
// is deleted from the page is recorded in a new session and runs once.
func TestGatewayCallsAfterTheirSessionIsDeletedMakeANewOne(t *testing.T) {
	gs := newGatewayServer(t)
	cs := gs.client(t, "deleted-test", nil)
	call := func() (*sdk.CallToolResult, error) {
		return cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "a"}})
	}
	if res, err := call(); err != nil || res.IsError {
		t.Fatalf("first call: %v %+v", err, res)
	}
	first, err := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if err != nil {
		t.Fatal(err)
	}
	if err := gs.runner.DeleteSession(context.Background(), first.ID); err != nil {
		t.Fatal(err)
	}
	reads := gs.up.reads.Load()
	if res, err := call(); err != nil || res.IsError || textOf(res) != "note a" {
		t.Fatalf("the call after: %v %+v", err, res)
	}
	if n := gs.up.reads.Load() - reads; n != 1 {
		t.Fatalf("the upstream ran the call after the deletion %d times, want 1", n)
	}
	second, err := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID {
		t.Fatal("the call after the deletion was recorded in the deleted session")
	}
	gs.runner.FlushAgentRecords() // its record is written after the answer
	if es, _ := gs.db.Entries(context.Background(), second.ID); len(es) < 2 {
		t.Errorf("new session holds %d entries, want the call and its result", len(es))
	}
}

// heldStore holds the writes of outside calls decided without a person (AppendOutsideCall,
// AppendOutsideOutcome) while held is set, until it is released.
type heldStore struct {
	*sqlite.DB
	held     atomic.Bool
	release  chan struct{}
	entering chan string // told of each held write as it starts waiting
	once     sync.Once
	fail     atomic.Bool // the writes fail, as a full disk's would
}

// newHeldGateway is newGatewayServer with ruleTexts over a heldStore.
func newHeldGateway(t *testing.T, ruleTexts ...string) (*gatewayServer, *heldStore) {
	t.Helper()
	hs := &heldStore{release: make(chan struct{}), entering: make(chan string, 4)}
	gs := newGatewayServerWith(t, func(c *agent.Config) {
		hs.DB = c.Store.(*sqlite.DB)
		c.Store = hs
	}, ruleTexts...)
	return gs, hs
}

// let releases the held writes (once), and holds no more.
func (h *heldStore) let() {
	h.held.Store(false)
	h.once.Do(func() { close(h.release) })
}

func (h *heldStore) wait(what string) {
	if h.held.Load() {
		h.entering <- what
		<-h.release
	}
}

func (h *heldStore) AppendOutsideCall(ctx context.Context, sessionID string, m agent.Message, a gate.Approval, c gate.OutsideCall) (agent.Entry, error) {
	h.wait("call")
	if h.fail.Load() {
		return agent.Entry{}, errors.New("disk I/O error: the disk is full")
	}
	return h.DB.AppendOutsideCall(ctx, sessionID, m, a, c)
}

func (h *heldStore) AppendOutsideOutcome(ctx context.Context, sessionID string, m agent.Message, approvalID string, outcome json.RawMessage, at time.Time) (agent.Entry, error) {
	h.wait("outcome")
	return h.DB.AppendOutsideOutcome(ctx, sessionID, m, approvalID, outcome, at)
}

// Issue 35: a call a rule allowed is answered without waiting for its record's commit (the
// record is written after the answer, in order), and the page is shown it only once it is
// stored; a call that asks a person is stored after the records queued before it, so the
// transcript keeps the calls' order.
func TestGatewayAnswersARuleAllowedCallBeforeItsRecordIsStoredAndShowsItOnlyOnceStored(t *testing.T) {
	gs, hs := newHeldGateway(t, "allow up__read")
	cs := gs.client(t, "queue-test", nil)
	t.Cleanup(hs.let) // before the client and the servers close (cleanups run last first)
	read := func(name string) <-chan callAnswer {
		return callAsync(cs, &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": name}})
	}
	if res := wait(t, read("first")); res.IsError {
		t.Fatalf("first call: %q", textOf(res))
	}
	gs.runner.FlushAgentRecords()
	sess, err := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if err != nil {
		t.Fatal(err)
	}
	sub := gs.broker.Subscribe(sess.ID)
	defer gs.broker.Unsubscribe(sub)
	before, _ := gs.db.Entries(context.Background(), sess.ID)

	hs.held.Store(true)
	got := read("second")
	select {
	case w := <-hs.entering:
		if w != "call" {
			t.Fatalf("the first held write is the %s, want the call", w)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the call's record was never written")
	}
	// The record's write is held: the answer comes anyway, with the upstream's result.
	if res := wait(t, got); res.IsError || textOf(res) != "note second" {
		t.Fatalf("second call: isError %v %q", res.IsError, textOf(res))
	}
	if es, _ := gs.db.Entries(context.Background(), sess.ID); len(es) != len(before) {
		t.Fatalf("%d entries while the record is held, want %d", len(es), len(before))
	}
	// A call that asks a person, made now, is stored after the queued records.
	asked := callAsync(cs, &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "third"}})
	select {
	case ev := <-sub.C:
		t.Fatalf("event %s shown while its record is held", ev.Type)
	case <-time.After(300 * time.Millisecond):
	}
	hs.let()
	a := gs.pendingIn(t, gs.sid(cs))
	es, err := gs.db.Entries(context.Background(), sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range es[len(before):] {
		switch {
		case e.Message.Role == agent.ToolResult:
			order = append(order, "result "+e.Message.Result.TextOf())
		case len(e.Message.Content) == 1:
			order = append(order, "call "+string(e.Message.Content[0].Arguments))
		}
	}
	if want := []string{`call {"name":"second"}`, "result note second", `call {"name":"third"}`}; strings.Join(order, " | ") != strings.Join(want, " | ") {
		t.Fatalf("transcript after the first call:\n%s\nwant\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
	// Shown once stored, in the same order.
	var shown []string
	for len(shown) < 4 {
		select {
		case ev := <-sub.C:
			switch ev.Type {
			case agent.MessageEnd, agent.ApprovalResolved, agent.ToolExecutionEnd, agent.ApprovalRequested:
				shown = append(shown, string(ev.Type))
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("events shown: %v", shown)
		}
	}
	if want := "message_end approval_resolved tool_execution_end message_end"; strings.Join(shown, " ") != want {
		t.Errorf("events %v, want %s", shown, want)
	}
	gs.decide(t, a, map[string]any{"decision": "deny"})
	wait(t, asked)
}

// A store that refuses a record queued after its answer fails the calls after it closed: they are
// stored before they run, and one the store refuses does not run; once a record is stored again,
// records are queued again.
func TestGatewayFailsCallsClosedAfterTheStoreRefusedAQueuedRecord(t *testing.T) {
	gs, hs := newHeldGateway(t, "allow up__read")
	cs := gs.client(t, "breaker-test", nil)
	read := func(name string) (*sdk.CallToolResult, error) {
		return cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": name}})
	}
	if res, err := read("one"); err != nil || res.IsError {
		t.Fatalf("first call: %v %+v", err, res)
	}
	hs.fail.Store(true)
	// Queued: answered before the store refuses its record.
	if res, err := read("two"); err != nil || res.IsError {
		t.Fatalf("second call: %v %+v", err, res)
	}
	gs.runner.FlushAgentRecords()
	if gs.runner.AgentRecordsQueued() {
		t.Fatal("records are still queued after the store refused one")
	}
	reads := gs.up.reads.Load()
	res, err := read("three")
	if err == nil && !res.IsError {
		t.Fatalf("a call the store cannot record was answered: %+v", res)
	}
	if n := gs.up.reads.Load() - reads; n != 0 {
		t.Fatalf("the upstream ran the unrecorded call %d times", n)
	}
	hs.fail.Store(false)
	if res, err := read("four"); err != nil || res.IsError {
		t.Fatalf("the call after the store is back: %v %+v", err, res)
	}
	if !gs.runner.AgentRecordsQueued() {
		t.Fatal("records are not queued again after one was stored")
	}
	gs.runner.FlushAgentRecords()
	sess, err := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if err != nil {
		t.Fatal(err)
	}
	calls, err := gs.db.OutsideCalls(context.Background(), sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		a, err := gs.db.Approval(context.Background(), c.ApprovalID)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(a.Arguments))
	}
	if want := `{"name":"one"} {"name":"four"}`; strings.Join(got, " ") != want {
		t.Errorf("stored calls %v, want %s (the refused one lost, logged; the failed one never ran)", got, want)
	}
}

// A call stored before it is shown waits only for its own session's queued records: another
// client's session is not held by this one's record.
func TestGatewayQueuedRecordsHoldOnlyTheirOwnSession(t *testing.T) {
	gs, hs := newHeldGateway(t, "allow up__read")
	held := gs.client(t, "held-client", nil)
	other := gs.client(t, "other-client", nil)
	t.Cleanup(hs.let)
	hs.held.Store(true)
	wait(t, callAsync(held, &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "held"}}))
	select {
	case <-hs.entering:
	case <-time.After(15 * time.Second):
		t.Fatal("the held client's record was never written")
	}
	// The other client's call asks a person: stored (and pending) while the first record is held.
	asked := callAsync(other, &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "other"}})
	a := gs.pendingIn(t, gs.sid(other))
	if a.ToolName != "up__delete" {
		t.Fatalf("pending %s", a.ToolName)
	}
	hs.let()
	gs.decide(t, a, map[string]any{"decision": "deny"})
	wait(t, asked)
}

// byKeyCounted counts the gate's reads of an outside call by its match key.
type byKeyCounted struct {
	*sqlite.DB
	reads atomic.Int64
}

func (b *byKeyCounted) OutsideCallByKey(ctx context.Context, sessionID, key string) (gate.OutsideCall, error) {
	b.reads.Add(1)
	return b.DB.OutsideCallByKey(ctx, sessionID, key)
}

// TestGatewayReadsACallByItsKeyOnceOnItsPath: a rule-allowed call the gateway has not seen is
// looked up by its match key once — by the gateway's generation lookup, whose read the gate
// takes (gate.OutsideRequest.Looked) — not twice (issue 35: the read was ~65 µs of the call's
// path); a repeat, whose generation the gateway knows without reading, is read by the gate.
func TestGatewayReadsACallByItsKeyOnceOnItsPath(t *testing.T) {
	counted := &byKeyCounted{}
	gs := newGatewayServerWith(t, func(c *agent.Config) {
		counted.DB = c.Store.(*sqlite.DB)
		c.Store = counted
	}, "allow up__delete")
	cs := gs.client(t, "reads-test", nil)
	call := func() {
		t.Helper()
		if res := deleteR(t, cs); res.IsError {
			t.Fatalf("a rule-allowed call: %q", textOf(res))
		}
	}
	call()
	if n := counted.reads.Load(); n != 0 {
		t.Errorf("the gate read a call the gateway had just read %d times, want 0", n)
	}
	call()
	if n := counted.reads.Load(); n != 1 {
		t.Errorf("the gate's reads after a repeat whose generation was known: %d, want 1", n)
	}
	if n := gs.up.deletes.Load(); n != 2 {
		t.Errorf("upstream ran %d deletes, want 2 (each allowed by the rule)", n)
	}
}

// TestGatewayCallAskedAnewAfterItsDecisionWasTakenIsJudgedInTheModeOfNow: two identical calls in
// flight on one approval; meanwhile the person switched the session to plan mode and made a rule
// allowing the tool (plan still blocks it: read-only), then approved the held call. One call
// takes the decision and runs; the other is judged anew as the next generation, in plan mode as
// it is now: blocked, never run by the rule. Without reading the session's mode again for that
// judgement it was judged in the mode the call came in (default), and the rule ran it a second
// time.
func TestGatewayCallAskedAnewAfterItsDecisionWasTakenIsJudgedInTheModeOfNow(t *testing.T) {
	gs := newGatewayServer(t)
	arrived := make(chan chan struct{}, 2)
	gs.up.hold.Store(&arrived)
	defer gs.up.hold.Store(nil)
	waiting := make(chan struct{}, 100)
	cs := gs.client(t, "mode-now-test", func(p *sdk.ProgressNotificationParams) {
		if p.ProgressToken == "second" {
			waiting <- struct{}{}
		}
	})
	first := callAsync(cs, &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "m"}})
	a := gs.pendingIn(t, gs.sid(cs))
	p := &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "m"}}
	p.SetProgressToken("second")
	second := callAsync(cs, p)
	select {
	case <-waiting: // the second call is held on the same approval
	case <-time.After(15 * time.Second):
		t.Fatal("the second call was never held")
	}
	if err := gs.runner.Gate().SetMode(context.Background(), a.SessionID, gate.ModePlan); err != nil {
		t.Fatal(err)
	}
	rl := gate.Rule{Effect: gate.Effect("allow"), Tool: "up__delete", Scope: gate.ScopeServer, Source: gate.SourceAPI, CreatedBy: "owner"}
	if _, err := gs.runner.Gate().AddRule(context.Background(), rl); err != nil {
		t.Fatal(err)
	}
	gs.decide(t, a, map[string]any{"decision": "approve"})
	var release chan struct{}
	select {
	case release = <-arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("the approved call never reached the upstream")
	}
	var held <-chan callAnswer
	var other callAnswer
	select {
	case other = <-first:
		held = second
	case other = <-second:
		held = first
	case again := <-arrived:
		close(again)
		close(release)
		t.Fatal("the upstream ran the call twice on one approval, the second by a rule plan mode blocks")
	case <-time.After(15 * time.Second):
		t.Fatal("the call that did not take the decision was never answered")
	}
	close(release)
	if other.err != nil || !other.res.IsError || !strings.Contains(textOf(other.res), gate.PlanReason) {
		t.Errorf("the call that did not take the decision: %v %q, want blocked by plan mode", other.err, textOf(other.res))
	}
	if res := wait(t, held); res.IsError {
		t.Errorf("the call that took the decision: %q", textOf(res))
	}
	if n := gs.up.deletes.Load(); n != 1 {
		t.Errorf("upstream ran delete %d times, want 1", n)
	}
}
