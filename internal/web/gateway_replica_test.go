package web_test

import (
	"context"
	"encoding/json"
	"io"
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
	"countersign/internal/rules"
	"countersign/internal/store/sqlite"
	"countersign/internal/tool"
	"countersign/internal/web"
)

// Door 2 across replicas (SPEC §16: any replica serves any request, no sticky sessions): a call
// a rule decided is recorded after its answer on the replica that answered it, so what a later
// request reads on another replica must not depend on that record's being stored yet.

// gatewayReplica is a second server over gs's store with a runner of its own (its own queue of
// records, its own generations and session cache): another replica behind the load balancer.
type gatewayReplica struct {
	*httptest.Server
	runner *agent.Runner
}

func (gs *gatewayServer) replica(t *testing.T) *gatewayReplica {
	t.Helper()
	r := agent.New(agent.Config{Store: gs.db, Models: gs.env.Scripts, Tools: gs.env.Tools, Broker: agent.NewBroker(),
		ApprovalTimeout: time.Minute, CompileRules: rules.NewCompiler(nil), ParseRule: rules.Parse, SuggestRule: rules.Suggest})
	tools := gs.env.Tools.All()
	srv := web.New(web.Config{Runner: r, Store: gs.db, Broker: agent.NewBroker(), OwnerToken: token, Connections: gs.conns,
		OwnerSessions: gs.db, Notify: gs.db, GatewayTools: func() []*tool.Tool { return tools }})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		r.Shutdown("test cleanup")
		r.Wait()
		hs.Close()
	})
	return &gatewayReplica{Server: hs, runner: r}
}

// outcomeHeldStore holds the writes of outside calls' outcomes (AppendOutsideOutcome) while held
// is set, until released; the calls' own records are written at once.
type outcomeHeldStore struct {
	*sqlite.DB
	held     atomic.Bool
	release  chan struct{}
	entering chan struct{}
	once     sync.Once
}

func (h *outcomeHeldStore) let() {
	h.held.Store(false)
	h.once.Do(func() { close(h.release) })
}

func (h *outcomeHeldStore) AppendOutsideOutcome(ctx context.Context, sessionID string, m agent.Message, approvalID string, outcome json.RawMessage, at time.Time) (agent.Entry, error) {
	if h.held.Load() {
		h.entering <- struct{}{}
		<-h.release
	}
	return h.DB.AppendOutsideOutcome(ctx, sessionID, m, approvalID, outcome, at)
}

// postJSON posts body to url with the bearer token and returns the status and body.
func postJSON(t *testing.T, url, bearer, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+bearer)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// mcp-proxy reports an allowed call's outcome in a second request, which another replica may
// serve: the call a rule allowed is found there as soon as /mcp/decide answered allow.
func TestGatewayProxyOutcomeIsTakenByAnotherReplicaRightAfterTheAllow(t *testing.T) {
	gs, hs := newHeldGateway(t, "allow notes__delete")
	t.Cleanup(hs.let)
	other := gs.replica(t)
	tl := `{"name":"delete","inputSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}`
	decide := `{"sessionId":"p1","clientInfo":{"name":"c","version":"1"},"server":"notes","tool":` + tl + `,"arguments":{"name":"x"}}`

	hs.held.Store(true)
	answered := make(chan string, 1)
	go func() {
		_, body := postJSON(t, gs.URL+"/mcp/decide", gs.token, decide)
		answered <- body
	}()
	select {
	case <-hs.entering:
	case <-time.After(15 * time.Second):
		t.Fatal("the call's record was never written")
	}
	var body string
	select {
	case body = <-answered: // answered while its record is held
	case <-time.After(500 * time.Millisecond):
		hs.let()
		body = <-answered
	}
	var d struct{ Decision, ApprovalID string }
	if err := json.Unmarshal([]byte(body), &d); err != nil || d.Decision != "allow" {
		t.Fatalf("decide: %s", body)
	}
	// The wrapped server ran the call; its outcome goes to the other replica.
	out := `{"sessionId":"p1","approvalId":"` + d.ApprovalID + `","result":{"content":[{"type":"text","text":"gone"}]}}`
	if st, body := postJSON(t, other.URL+"/mcp/outcome", gs.token, out); st != http.StatusOK {
		t.Errorf("the outcome reported to another replica right after the allow: %d %s, want 200", st, body)
	}
}

// A call a rule allowed, repeated on another replica while the first one's outcome is still
// queued on the replica that ran it, is a call of its own (SPEC §18: the same call repeated finds
// a decision once): it is judged and recorded anew, never run on the first call's approval.
func TestGatewayRepeatedRuleAllowedCallOnAnotherReplicaGetsItsOwnRecord(t *testing.T) {
	hs := &outcomeHeldStore{release: make(chan struct{}), entering: make(chan struct{}, 4)}
	gs := newGatewayServerWith(t, func(c *agent.Config) {
		hs.DB = c.Store.(*sqlite.DB)
		c.Store = hs
	}, "allow up__read")
	t.Cleanup(hs.let)
	other := gs.replica(t)
	connect := func(base string) *sdk.ClientSession {
		t.Helper()
		c := sdk.NewClient(&sdk.Implementation{Name: "replica-test", Version: "1"}, nil)
		cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: base + "/mcp",
			HTTPClient: &http.Client{Transport: bearerTransport{gs.token}}}, &sdk.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	read := func(cs *sdk.ClientSession) {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "x"}})
		if err != nil || res.IsError {
			t.Fatalf("read: %v %+v", err, res)
		}
	}
	hs.held.Store(true)
	read(connect(gs.URL))
	select {
	case <-hs.entering: // the call's record is stored, its outcome held
	case <-time.After(15 * time.Second):
		t.Fatal("the call's outcome was never written")
	}
	read(connect(other.URL))
	hs.let()
	gs.runner.FlushAgentRecords()
	other.runner.FlushAgentRecords()
	if n := gs.up.reads.Load(); n != 2 {
		t.Fatalf("upstream reads %d, want 2", n)
	}
	sess, err := gs.db.AgentSession(context.Background(), gs.connID, "client:replica-test")
	if err != nil {
		t.Fatal(err)
	}
	calls, err := gs.db.OutsideCalls(context.Background(), sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 {
		t.Fatalf("%d outside calls recorded for 2 runs, want 2 (one approval used twice)", len(calls))
	}
	for _, c := range calls {
		a, err := gs.db.Approval(context.Background(), c.ApprovalID)
		if err != nil || a.Status != gate.Approved || c.Outcome == nil {
			t.Errorf("call %s: %v %s, outcome %s", c.ApprovalID, err, a.Status, c.Outcome)
		}
	}
}

// A session deleted on another replica (its deletion relayed here, SPEC §16) is forgotten by this
// replica's gateway as by its own deletion: the client's next call, a rule allows at once and
// records after the answer, goes into a new session, not into the deleted one, where its record
// would be lost while it ran.
func TestGatewayForgetsASessionDeletedOnAnotherReplica(t *testing.T) {
	gs := newGatewayServer(t, "allow up__read")
	other := gs.replica(t)
	cs := gs.client(t, "deleted-elsewhere", nil)
	call := func(name string) {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": name}})
		if err != nil || res.IsError {
			t.Fatalf("call %s: %v %+v", name, err, res)
		}
	}
	call("a")
	gs.runner.FlushAgentRecords()
	first, err := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.runner.DeleteSession(context.Background(), first.ID); err != nil {
		t.Fatal(err)
	}
	// The relay delivers the deletion here.
	gs.runner.Replica().Deliver(agent.Event{Type: agent.SessionDeleted, SessionID: first.ID})
	call("b")
	gs.runner.FlushAgentRecords()
	second, err := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if err != nil {
		t.Fatalf("the call after the deletion made no session: %v", err)
	}
	calls, _ := gs.db.OutsideCalls(context.Background(), second.ID)
	if second.ID == first.ID || len(calls) != 1 || calls[0].Outcome == nil {
		t.Fatalf("the call after the deletion: session %s (deleted %s), %d outside calls, want its own record in a new session",
			second.ID, first.ID, len(calls))
	}
}

// A person's decision found by the repeated call is used once across replicas too: once another
// replica ran the call on it (its outcome stored), the same call repeated here asks anew, even
// though this replica's generations still name the decided one.
func TestGatewayUsesAPersonsDecisionOnceAcrossReplicas(t *testing.T) {
	gs := newGatewayServer(t)
	other := gs.replica(t)
	connect := func(base string) *sdk.ClientSession { return gs.statelessClient(t, base, "once-test") }
	call := func(cs *sdk.ClientSession) *sdk.CallToolResult { return deleteR(t, cs) }
	here, there := connect(gs.URL), connect(other.URL)
	if res := call(here); !strings.HasPrefix(textOf(res), "Waiting for approval at ") {
		t.Fatalf("first call: %q", textOf(res))
	}
	gs.decide(t, gs.pendingIn(t, "client:once-test"), map[string]any{"decision": "approve"})
	if res := call(there); res.IsError {
		t.Fatalf("the repeated call on the other replica: %q", textOf(res))
	}
	if res := call(here); !res.IsError || !strings.HasPrefix(textOf(res), "Waiting for approval at ") {
		t.Errorf("the same call once more, here: isError %v %q, want it asked anew", res.IsError, textOf(res))
	}
	if n := gs.up.deletes.Load(); n != 1 {
		t.Errorf("upstream ran delete %d times on one approval, want 1", n)
	}
}

// TestGatewayTwoReplicasTakingOneDecisionAtOnceRunTheCallOnce: the same call repeated on two
// replicas at the same instant after a person approved it: both find the decision, one takes it
// (store.ClaimOutsideCall) and runs, the other is asked anew. Without the claim both ran: the
// outcome that marks a decision used is written only after the upstream answers.
func TestGatewayTwoReplicasTakingOneDecisionAtOnceRunTheCallOnce(t *testing.T) {
	gs := newGatewayServer(t)
	other := gs.replica(t)
	here, there := gs.statelessClient(t, gs.URL, "claim-test"), gs.statelessClient(t, other.URL, "claim-test")
	if res := deleteR(t, here); !strings.HasPrefix(textOf(res), "Waiting for approval at ") {
		t.Fatalf("first call: %q", textOf(res))
	}
	gs.decide(t, gs.pendingIn(t, "client:claim-test"), map[string]any{"decision": "approve"})
	arrived := make(chan chan struct{}, 2)
	gs.up.hold.Store(&arrived)
	p := &sdk.CallToolParams{Name: "up__delete", Arguments: map[string]any{"name": "r"}}
	ranOnce(t, gs, arrived, callAsync(here, p), callAsync(there, p))
	gs.pendingIn(t, "client:claim-test") // the one not run is asked anew
}

// ranOnce checks that of two calls x and y in flight on one decision, one reaches the upstream
// (held there, through arrived) and the other is answered that it waits for a new approval, and
// that the one held then returns the upstream's result: the upstream ran it once.
func ranOnce(t *testing.T, gs *gatewayServer, arrived chan chan struct{}, x, y <-chan callAnswer) {
	t.Helper()
	var release chan struct{}
	select {
	case release = <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the approved call never reached the upstream")
	}
	defer gs.up.hold.Store(nil)
	var held <-chan callAnswer
	select {
	case a := <-x:
		held = y
		checkAskedAnew(t, a)
	case a := <-y:
		held = x
		checkAskedAnew(t, a)
	case again := <-arrived:
		close(again)
		close(release)
		t.Fatal("the upstream ran the call twice on one decision")
	case <-time.After(30 * time.Second):
		t.Fatal("the second call was never answered")
	}
	close(release)
	if res := wait(t, held); res.IsError || !strings.HasPrefix(structured(t, res), `{"deleted":`) {
		t.Errorf("the call that took the decision: isError %v %q", res.IsError, textOf(res))
	}
	if n := gs.up.deletes.Load(); n != 1 {
		t.Errorf("upstream ran delete %d times on one decision, want 1", n)
	}
}

func checkAskedAnew(t *testing.T, a callAnswer) {
	t.Helper()
	if a.err != nil {
		t.Fatal(a.err)
	}
	if !a.res.IsError || !strings.HasPrefix(textOf(a.res), "Waiting for approval at ") {
		t.Fatalf("the call that did not take the decision: isError %v %q, want it asked anew", a.res.IsError, textOf(a.res))
	}
}

// TestGatewayProxyOutcomeIsStoredOnceWhenReportedTwiceAtOnce: an agent holding mcp-proxy's token
// reports one allowed call's outcome twice at the same instant, the second a forgery: the first
// stored stands, the other is refused (409), and the transcript holds one result. Without the
// write-once outcome both passed the handler's check and the later one replaced the first.
func TestGatewayProxyOutcomeIsStoredOnceWhenReportedTwiceAtOnce(t *testing.T) {
	hs := &outcomeHeldStore{release: make(chan struct{}), entering: make(chan struct{}, 4)}
	gs := newGatewayServerWith(t, func(c *agent.Config) {
		hs.DB = c.Store.(*sqlite.DB)
		c.Store = hs
	}, "allow notes__delete")
	t.Cleanup(hs.let)
	tl := `{"name":"delete","inputSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}`
	_, body := postJSON(t, gs.URL+"/mcp/decide", gs.token, `{"sessionId":"p2","clientInfo":{"name":"c","version":"1"},"server":"notes","tool":`+tl+`,"arguments":{"name":"x"}}`)
	var d struct{ Decision, ApprovalID string }
	if err := json.Unmarshal([]byte(body), &d); err != nil || d.Decision != "allow" {
		t.Fatalf("decide: %s", body)
	}
	hs.held.Store(true)
	type answer struct {
		text   string
		status int
	}
	answers := make(chan answer, 2)
	for _, text := range []string{"gone", "forged"} {
		go func() {
			st, _ := postJSON(t, gs.URL+"/mcp/outcome", gs.token,
				`{"sessionId":"p2","approvalId":"`+d.ApprovalID+`","result":{"content":[{"type":"text","text":"`+text+`"}]}}`)
			answers <- answer{text, st}
		}()
	}
	for range 2 { // both passed the handler's own check and are at the store
		select {
		case <-hs.entering:
		case <-time.After(15 * time.Second):
			t.Fatal("the two reports never reached the store together")
		}
	}
	hs.let()
	var stored string
	for range 2 {
		a := <-answers
		switch a.status {
		case http.StatusOK:
			stored = a.text
		case http.StatusConflict:
		default:
			t.Errorf("report %q: %d", a.text, a.status)
		}
	}
	if stored == "" {
		t.Fatal("neither report was stored")
	}
	c, err := gs.db.OutsideCall(context.Background(), d.ApprovalID)
	if err != nil || !strings.Contains(string(c.Outcome), `"`+stored+`"`) {
		t.Errorf("the stored outcome %s (%v), want the accepted report's %q", c.Outcome, err, stored)
	}
	s, _ := gs.db.AgentSession(context.Background(), gs.connID, "proxy:p2")
	es, _ := gs.db.Entries(context.Background(), s.ID)
	results := 0
	for _, e := range es {
		if e.Message.Role == agent.ToolResult {
			results++
		}
	}
	if results != 1 {
		t.Errorf("%d results of the call in its transcript, want 1", results)
	}
}

// TestGatewayProxyOutcomeIsRefusedForACallNeverAllowed: /mcp/decide answered wait (with the
// call's approval id), a person approved, and the proxy reports an outcome without asking again:
// the call was never answered allow (its decision was not taken), so the report is refused (409)
// and the repeated /mcp/decide still finds the approval and gets the allow. Without the check
// the report was stored as the call's outcome, and the decision counted as used.
func TestGatewayProxyOutcomeIsRefusedForACallNeverAllowed(t *testing.T) {
	gs := newGatewayServer(t)
	tl := `{"name":"delete","inputSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}`
	decide := `{"sessionId":"p3","clientInfo":{"name":"c","version":"1"},"server":"notes","tool":` + tl + `,"arguments":{"name":"x"}}`
	_, body := postJSON(t, gs.URL+"/mcp/decide?timeout=1", gs.token, decide)
	var d struct{ Decision, ApprovalID string }
	if err := json.Unmarshal([]byte(body), &d); err != nil || d.Decision != "wait" || d.ApprovalID == "" {
		t.Fatalf("decide: %s", body)
	}
	a, err := gs.db.Approval(context.Background(), d.ApprovalID)
	if err != nil {
		t.Fatal(err)
	}
	gs.decide(t, a, map[string]any{"decision": "approve"})
	out := `{"sessionId":"p3","approvalId":"` + d.ApprovalID + `","result":{"content":[{"type":"text","text":"forged"}]}}`
	if st, body := postJSON(t, gs.URL+"/mcp/outcome", gs.token, out); st != http.StatusConflict {
		t.Errorf("an outcome for a call never answered allow: %d %s, want 409", st, body)
	}
	if c, err := gs.db.OutsideCall(context.Background(), d.ApprovalID); err != nil || c.Outcome != nil {
		t.Errorf("the call's outcome %s (%v), want none", c.Outcome, err)
	}
	_, body = postJSON(t, gs.URL+"/mcp/decide?timeout=1", gs.token, decide)
	var again struct{ Decision, ApprovalID string }
	if err := json.Unmarshal([]byte(body), &again); err != nil || again.Decision != "allow" || again.ApprovalID != d.ApprovalID {
		t.Fatalf("the repeated decide: %s, want allow on %s", body, d.ApprovalID)
	}
	if st, body := postJSON(t, gs.URL+"/mcp/outcome", gs.token, strings.Replace(out, "forged", "gone", 1)); st != http.StatusOK {
		t.Errorf("the outcome after the allow: %d %s, want 200", st, body)
	}
}

// TestGatewayProxyOutcomeIsValidatedAgainstItsOwnSessionsTool: an allowed call's outcome is
// validated against the outputSchema of the tool definition its own proxy session sent, never
// against one another connection sent since under the same "<server>__<tool>" name. Without it a
// second token holder's definition turned the first call's valid result into an error.
func TestGatewayProxyOutcomeIsValidatedAgainstItsOwnSessionsTool(t *testing.T) {
	gs := newGatewayServer(t, "allow notes__delete")
	_, otherToken, err := gs.conns.Create(context.Background(), "other mcp", connections.MCP)
	if err != nil {
		t.Fatal(err)
	}
	def := func(output string) string {
		return `{"name":"delete","inputSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]},"outputSchema":` + output + `}`
	}
	mine := def(`{"type":"object","properties":{"deleted":{"type":"string"}},"required":["deleted"]}`)
	_, body := postJSON(t, gs.URL+"/mcp/decide", gs.token, `{"sessionId":"p4","clientInfo":{"name":"c","version":"1"},"server":"notes","tool":`+mine+`,"arguments":{"name":"x"}}`)
	var d struct{ Decision, ApprovalID string }
	if err := json.Unmarshal([]byte(body), &d); err != nil || d.Decision != "allow" {
		t.Fatalf("decide: %s", body)
	}
	theirs := def(`{"type":"object","properties":{"never":{"type":"string"}},"required":["never"]}`)
	if st, body := postJSON(t, gs.URL+"/mcp/decide", otherToken, `{"sessionId":"p4","clientInfo":{"name":"c","version":"1"},"server":"notes","tool":`+theirs+`,"arguments":{"name":"y"}}`); st != http.StatusOK {
		t.Fatalf("the other connection's decide: %d %s", st, body)
	}
	out := `{"sessionId":"p4","approvalId":"` + d.ApprovalID + `","result":{"content":[{"type":"text","text":"gone"}],"structuredContent":{"deleted":"x"}}}`
	st, body := postJSON(t, gs.URL+"/mcp/outcome", gs.token, out)
	if st != http.StatusOK || strings.Contains(body, "outputSchema") || !strings.Contains(body, `"deleted"`) {
		t.Errorf("the outcome: %d %s, want the result as the call's own definition validates it", st, body)
	}
}
