package web_test

import (
	"bytes"
	"context"
	"countersign/internal/aap"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"countersign/internal/agent"
	"countersign/internal/connections"
	"countersign/internal/gate"
	"countersign/internal/gate/gatetest"
	"countersign/internal/share"
	"countersign/internal/store/sqlite"
	"countersign/internal/testkit"
	"countersign/internal/tool"
	"countersign/internal/web"
)

const token = "test-owner-token"

// testServer is the whole server over a testkit.Env, with test tools and inline faux scripts.
type testServer struct {
	*httptest.Server
	env     *testkit.Env
	db      *sqlite.DB
	dbPath  string // the SQLite file behind db
	runner  *agent.Runner
	broker  *agent.Broker
	runs    atomic.Int32
	workDir string
	srv     *web.Server
	conns   *connections.Service
}

func newTestServer(t testing.TB, scripts map[string]string, extra ...*tool.Tool) *testServer {
	t.Helper()
	return newTestServerWith(t, scripts, nil, extra...)
}

// newTestServerWith is newTestServer with the tool renderers given (nil: the built-in ones).
func newTestServerWith(t testing.TB, scripts map[string]string, renderers map[string]web.Renderer, extra ...*tool.Tool) *testServer {
	t.Helper()
	return newTestServerConfig(t, scripts, func(c *web.Config, _ *http.Server) { c.Renderers = renderers }, extra...)
}

// newTestServerConfig is newTestServer with the web.Config and the http.Server (before it starts)
// changed by configure.
func newTestServerConfig(t testing.TB, scripts map[string]string, configure func(*web.Config, *http.Server), extra ...*tool.Tool) *testServer {
	t.Helper()
	return newTestServerAgent(t, scripts, configure, nil, extra...)
}

// newTestServerAgent is newTestServerConfig with the agent.Config changed by agentCfg too. Every
// test server compiles rules with gatetest.Compile and reads their text with gatetest.Parse, the
// stand-ins for package internal/rules.
func newTestServerAgent(t testing.TB, scripts map[string]string, configure func(*web.Config, *http.Server),
	agentCfg func(*agent.Config), extra ...*tool.Tool) *testServer {
	t.Helper()
	ts := &testServer{}
	shell := &tool.Tool{Name: "shell", InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`),
		Execute: func(_ context.Context, args json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			ts.runs.Add(1)
			return tool.Result{Content: []tool.Content{tool.Text("ran " + string(args))}}, nil
		}}
	env := testkit.New(t, testkit.Options{Tools: append([]*tool.Tool{shell}, extra...), Scripts: scripts, Agent: func(c *agent.Config) {
		c.CompileRules, c.ParseRule = gatetest.Compile, gatetest.Parse
		if agentCfg != nil {
			agentCfg(c)
		}
	}})
	ts.env, ts.db, ts.dbPath, ts.runner, ts.broker, ts.workDir = env, env.DB, env.DB.Path(), env.Runner, env.Broker, env.Workspace
	db, ms := env.DB, env.Scripts
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i)
	}
	ts.conns = connections.NewService(db)
	cfg := web.Config{Runner: ts.runner, Store: db, Broker: ts.broker, Models: ms, OwnerToken: token,
		Workspace: ts.workDir, Shares: share.NewService(db, key), OwnerSessions: db, Notify: db, Connections: ts.conns,
		AAP:          aap.NewService(ts.runner.Gate(), db, nil),
		AAPInstances: aap.NewProvisioner(aap.ProvisionerConfig{Store: db, Pending: db, Gate: ts.runner.Gate(), Sealer: aap.NewSealer(token)})}
	ts.Server = httptest.NewUnstartedServer(nil)
	if configure != nil {
		configure(&cfg, ts.Server.Config)
	}
	ts.srv = web.New(cfg)
	ts.Server.Config.Handler = ts.srv.Handler()
	ts.Server.Start()
	t.Cleanup(func() {
		// The runner stops before the server closes, as ever; the Env closes the store after.
		ts.runner.Shutdown("test cleanup")
		ts.runner.Wait()
		ts.Server.Close()
	})
	return ts
}

// call makes an API request with the owner's bearer token and decodes a JSON answer into out.
func (ts *testServer) call(t *testing.T, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, ts.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	return res.StatusCode
}

func (ts *testServer) events(t *testing.T, sessionID string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{"Authorization": {"Bearer " + token}}
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/api/sessions/"+sessionID+"/events", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// next reads events until one of type typ arrives.
func next(t *testing.T, c *websocket.Conn, typ string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var ev map[string]any
		if err := wsjson.Read(ctx, c, &ev); err != nil {
			t.Fatalf("waiting for %s: %v", typ, err)
		}
		if ev["type"] == typ {
			return ev
		}
	}
}

const oneCall = `{"steps":[
  {"content":[{"type":"text","text":"Running it."},{"type":"toolCall","id":"c1","name":"shell","arguments":{"command":"touch x"}}],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"Done."}],"stopReason":"stop"}]}`

// TestAPIDrivesAWholeSession is SPEC §12 end to end: create, send, approval_requested on the
// event socket, decide over HTTP, tool_execution_end and agent_end, read the transcript.
func TestAPIDrivesAWholeSession(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var sess agent.Session
	if st := ts.call(t, "POST", "/api/sessions", map[string]string{"title": "api", "model": "faux:one"}, &sess); st != 201 {
		t.Fatalf("create = %d", st)
	}
	if sess.Workspace != ts.workDir || sess.State != agent.Idle {
		t.Errorf("session %+v: want the server's workspace and idle", sess)
	}
	c := ts.events(t, sess.ID)
	snap := next(t, c, "snapshot")
	if snap["sessionId"] != sess.ID {
		t.Errorf("snapshot %v", snap)
	}
	if st := ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil); st != 202 {
		t.Fatalf("send = %d", st)
	}
	var busy map[string]map[string]string
	if st := ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "again"}, &busy); st != 409 || busy["error"]["code"] != "conflict" {
		t.Errorf("send while busy = %d %v, want 409 conflict", st, busy)
	}
	ev := next(t, c, "approval_requested")
	approval := ev["approval"].(map[string]any)
	if approval["toolName"] != "shell" || ev["toolCallId"] != "c1" {
		t.Fatalf("approval_requested %v", ev)
	}
	var pending struct{ Approvals []map[string]any }
	ts.call(t, "GET", "/api/sessions/"+sess.ID+"/approvals?status=pending", nil, &pending)
	if len(pending.Approvals) != 1 {
		t.Fatalf("pending approvals %v", pending)
	}
	var decided map[string]any
	if st := ts.call(t, "POST", "/api/approvals/"+approval["id"].(string)+"/decision", map[string]string{"decision": "approve"}, &decided); st != 200 || decided["status"] != "approved" {
		t.Fatalf("decide = %d %v", st, decided)
	}
	end := next(t, c, "tool_execution_end")
	if end["toolCallId"] != "c1" || end["result"].(map[string]any)["isError"] != false {
		t.Errorf("tool_execution_end %v", end)
	}
	if ae := next(t, c, "agent_end"); ae["error"] != nil {
		t.Errorf("agent_end %v", ae)
	}
	var full struct {
		agent.Session
		Entries []agent.Entry `json:"entries"`
	}
	ts.call(t, "GET", "/api/sessions/"+sess.ID, nil, &full)
	var roles []string
	for _, e := range full.Entries {
		roles = append(roles, string(e.Message.Role))
	}
	if got := strings.Join(roles, ","); got != "user,assistant,toolResult,assistant" {
		t.Errorf("transcript %s", got)
	}
	if ts.runs.Load() != 1 {
		t.Errorf("the tool ran %d times", ts.runs.Load())
	}
}

// TestDecisionRace: two clients race 100 times to decide the same approval; exactly one wins
// each time and the other gets 409 (run with -race).
func TestDecisionRace(t *testing.T) {
	const rounds = 100
	var steps []string
	for i := 0; i < rounds; i++ {
		steps = append(steps, fmt.Sprintf(`{"content":[{"type":"toolCall","id":"c%d","name":"shell","arguments":{"command":"%d"}}],"stopReason":"toolUse"}`, i, i))
	}
	steps = append(steps, `{"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}`)
	ts := newTestServer(t, map[string]string{"race": `{"steps":[` + strings.Join(steps, ",") + `]}`})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "race", "model": "faux:race"}, &sess)
	c := ts.events(t, sess.ID)
	next(t, c, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	for i := 0; i < rounds; i++ {
		id := next(t, c, "approval_requested")["approval"].(map[string]any)["id"].(string)
		var wg sync.WaitGroup
		codes := make([]int, 2)
		decisions := []string{"approve", "deny"}
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[k] = ts.call(t, "POST", "/api/approvals/"+id+"/decision", map[string]string{"decision": decisions[k]}, nil)
			}()
		}
		wg.Wait()
		if !(codes[0] == 200 && codes[1] == 409 || codes[0] == 409 && codes[1] == 200) {
			t.Fatalf("round %d: codes %v, want one 200 and one 409", i, codes)
		}
	}
	next(t, c, "agent_end")
	as, err := ts.db.Approvals(context.Background(), sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Status == "pending" {
			t.Errorf("approval %s still pending", a.ID)
		}
	}
}

func TestAPIErrors(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "e", "model": "faux:one"}, &sess)
	tests := []struct {
		name, method, path string
		body               string
		auth               bool
		want               int
		code               string
	}{
		{"no token", "GET", "/api/sessions", "", false, 401, "unauthorized"},
		{"unknown session", "GET", "/api/sessions/nope", "", true, 404, "not_found"},
		{"unknown approval", "POST", "/api/approvals/nope/decision", `{"decision":"approve"}`, true, 404, "not_found"},
		{"malformed body", "POST", "/api/sessions", `{"title":`, true, 400, "invalid"},
		{"unknown field", "POST", "/api/sessions", `{"title":"x","model":"faux:one","color":"red"}`, true, 400, "invalid"},
		{"unknown model", "POST", "/api/sessions", `{"title":"x","model":"gpt-9"}`, true, 400, "invalid"},
		{"empty message", "POST", "/api/sessions/" + sess.ID + "/messages", `{"text":"  "}`, true, 400, "invalid"},
		{"oversized body", "POST", "/api/sessions/" + sess.ID + "/messages", `{"text":"` + strings.Repeat("a", 2<<20) + `"}`, true, 413, "too_large"},
		{"bad status filter", "GET", "/api/sessions/" + sess.ID + "/approvals?status=maybe", "", true, 400, "invalid"},
		{"unknown route", "GET", "/api/nothing", "", true, 404, "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			if tt.auth {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var body struct {
				Error struct{ Code, Message string }
			}
			_ = json.NewDecoder(res.Body).Decode(&body)
			if res.StatusCode != tt.want || body.Error.Code != tt.code || body.Error.Message == "" {
				t.Errorf("%s %s = %d %+v, want %d %s with a message", tt.method, tt.path, res.StatusCode, body.Error, tt.want, tt.code)
			}
		})
	}
	// Nothing changed: the session has no entries.
	es, _ := ts.db.Entries(context.Background(), sess.ID)
	if len(es) != 0 {
		t.Errorf("bad requests left %d entries", len(es))
	}
}

// A wrong method on a route answers 405 with the route's methods in Allow (after the owner
// check, which still answers 401 first); unknown paths stay 404.
func TestWrongMethodIs405WithAllow(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "m", "model": "faux:one"}, &sess)
	tests := []struct {
		name, method, path string
		auth               bool
		want               int
		allow, code        string // code is the JSON error code; "" for the HTML pages
	}{
		{"API GET on a POST route", "GET", "/api/sessions/" + sess.ID + "/messages", true, 405, "POST", "method_not_allowed"},
		{"API GET on decision", "GET", "/api/approvals/x/decision", true, 405, "POST", "method_not_allowed"},
		{"API DELETE on sessions", "DELETE", "/api/sessions", true, 405, "GET, HEAD, POST", "method_not_allowed"},
		{"API POST on tools", "POST", "/api/sessions/" + sess.ID + "/tools", true, 405, "GET, HEAD, PUT", "method_not_allowed"},
		{"API no token first", "GET", "/api/sessions/" + sess.ID + "/messages", false, 401, "", "unauthorized"},
		{"API unknown path", "GET", "/api/nothing", true, 404, "", "not_found"},
		{"API unknown path, other method", "POST", "/api/sessions/" + sess.ID + "/nothing", true, 404, "", "not_found"},
		{"page GET on a POST route", "GET", "/sessions/" + sess.ID + "/messages", true, 405, "POST", ""},
		{"page POST on a GET route", "POST", "/sessions/" + sess.ID, true, 405, "GET, HEAD", ""},
		{"page GET on logout", "GET", "/logout", true, 405, "POST", ""},
		{"page no token first", "GET", "/sessions/" + sess.ID + "/messages", false, 401, "", ""},
		{"page unknown path", "GET", "/nothing", true, 404, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, nil)
			if tt.auth {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if got := res.Header.Get("Allow"); res.StatusCode != tt.want || got != tt.allow {
				t.Errorf("%s %s = %d Allow %q, want %d Allow %q", tt.method, tt.path, res.StatusCode, got, tt.want, tt.allow)
			}
			if tt.code == "" {
				if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
					t.Errorf("Content-Type = %q, want an HTML page", ct)
				}
				return
			}
			var body struct {
				Error struct{ Code, Message string }
			}
			if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if body.Error.Code != tt.code || body.Error.Message == "" {
				t.Errorf("error = %+v, want code %s with a message", body.Error, tt.code)
			}
		})
	}
}

func TestCrossOriginAndForeignWebSocketAreRefused(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "x", "model": "faux:one"}, &sess)
	req, _ := http.NewRequest("POST", ts.URL+"/api/sessions/"+sess.ID+"/messages", strings.NewReader(`{"text":"hi"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST = %d, want 403", res.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := http.Header{"Authorization": {"Bearer " + token}, "Origin": {"https://evil.example"}}
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/api/sessions/"+sess.ID+"/events", &websocket.DialOptions{HTTPHeader: h})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("WebSocket with a foreign Origin: err %v, status %v; want 403", err, resp)
	}
	es, _ := ts.db.Entries(context.Background(), sess.ID)
	if len(es) != 0 {
		t.Error("the cross-origin message was stored")
	}
}

// TestAPIEventsQueuedForASlowViewerArriveOneEachInOrder: events published faster than the
// viewer's socket is served are sent in batches, still one JSON event per message, in order.
func TestAPIEventsQueuedForASlowViewerArriveOneEachInOrder(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var sess struct{ ID string }
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "q", "model": "faux:one"}, &sess)
	c := ts.events(t, sess.ID)
	next(t, c, "snapshot")
	const n = 600 // more than one batch (256)
	for i := range n {
		ts.broker.Publish(agent.Event{Type: agent.ToolExecutionStart, SessionID: sess.ID, MessageID: "m",
			ToolCallID: fmt.Sprintf("c%d", i), ToolName: "shell", Arguments: json.RawMessage(`{"command":"ls"}`)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		typ, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		var ev struct{ Type, ToolCallID string }
		if err := json.Unmarshal(b, &ev); typ != websocket.MessageText || err != nil {
			t.Fatalf("event %d is not one JSON event: %v %v %.100q", i, typ, err, b)
		}
		if want := fmt.Sprintf("c%d", i); ev.Type != "tool_execution_start" || ev.ToolCallID != want {
			t.Fatalf("event %d: got %s %s, want tool_execution_start %s", i, ev.Type, ev.ToolCallID, want)
		}
	}
}

// TestAPIEventsViewerThatFallsBehindIsClosedToResync: a viewer that does not read falls more than
// the broker's buffer behind; it gets what was sent, then a close with StatusTryAgainLater.
func TestAPIEventsViewerThatFallsBehindIsClosedToResync(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var sess struct{ ID string }
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "slow", "model": "faux:one"}, &sess)
	c := ts.events(t, sess.ID)
	c.SetReadLimit(1 << 20)
	next(t, c, "snapshot")
	big := strings.Repeat("x", 16<<10)
	for range 5000 { // 80 MB: more than the sockets' buffers and the broker's 1,024 events
		ts.broker.Publish(agent.Event{Type: agent.AgentEnd, SessionID: sess.ID, Error: big})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := 0
	for {
		_, _, err := c.Read(ctx)
		if err != nil {
			if st := websocket.CloseStatus(err); st != websocket.StatusTryAgainLater {
				t.Fatalf("after %d events: %v (close status %v), want StatusTryAgainLater", got, err, st)
			}
			break
		}
		got++
	}
	if got == 0 || got >= 5000 {
		t.Errorf("read %d events before the close, want some but not all", got)
	}
}

// TestADecisionFormThatLosesShowsTheFinalState: a page's decision form posted after another
// decision won (another page, or this page's live updates cut) is answered with the approval's
// final state and a notice that this decision was not applied, so the form's buttons go away;
// the JSON API still answers 409.
func TestADecisionFormThatLosesShowsTheFinalState(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "race", "model": "faux:one"}, &sess)
	c := ts.events(t, sess.ID)
	next(t, c, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	id := next(t, c, "approval_requested")["approval"].(map[string]any)["id"].(string)
	if st := ts.call(t, "POST", "/api/approvals/"+id+"/decision", map[string]string{"decision": "approve"}, nil); st != 200 {
		t.Fatalf("first decision = %d", st)
	}
	req, _ := http.NewRequest("POST", ts.URL+"/sessions/"+sess.ID+"/approvals/"+id+"/decision",
		strings.NewReader(url.Values{"decision": {"deny"}, "reason": {"too late"}}.Encode()))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	page := string(body)
	if res.StatusCode != 200 {
		t.Fatalf("the losing form = %d %s, want 200 with the final state", res.StatusCode, page)
	}
	for _, want := range []string{"Your decision was not applied: already approved by owner", "approval-outcome",
		// Beside the slot, by id, so a live update of the slot does not take it away.
		`hx-swap-oob="afterend:#`} {
		if !strings.Contains(page, want) {
			t.Errorf("the answer does not contain %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "approval-form") {
		t.Errorf("the answer still holds the decision form:\n%s", page)
	}
	if a, err := ts.db.Approval(context.Background(), id); err != nil || a.Status != gate.Approved {
		t.Errorf("approval %s %v, want approved (the late denial changed nothing)", a.Status, err)
	}
	if st := ts.call(t, "POST", "/api/approvals/"+id+"/decision", map[string]string{"decision": "deny"}, nil); st != 409 {
		t.Errorf("the API's late decision = %d, want 409", st)
	}
}
