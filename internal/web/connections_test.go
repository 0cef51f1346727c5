package web_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/connections"
	"countersign/internal/web"
)

// created is POST /api/connections' answer.
type created struct {
	Connection map[string]any      `json:"connection"`
	Token      string              `json:"token"`
	Snippet    connections.Snippet `json:"snippet"`
}

// owner sends an owner request (bearer token) and returns the status, headers and body.
func (ts *testServer) owner(t *testing.T, method, path, contentType, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

func TestTheConnectionsAPICreatesListsAndRevokes(t *testing.T) {
	ts := newTestServer(t, nil)
	st, h, body := ts.owner(t, "POST", "/api/connections", "application/json", `{"label":"alice's laptop","kind":"codex"}`)
	if st != http.StatusCreated {
		t.Fatalf("POST = %d %s", st, body)
	}
	if h.Get("Cache-Control") != "no-store" {
		t.Errorf("the answer with the token may be cached: Cache-Control %q", h.Get("Cache-Control"))
	}
	var out created
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	id, _ := out.Connection["id"].(string)
	if id == "" || out.Connection["label"] != "alice's laptop" || out.Connection["kind"] != "codex" || out.Connection["createdAt"] == nil {
		t.Fatalf("connection %v", out.Connection)
	}
	if _, ok := out.Connection["tokenHash"]; ok || strings.Contains(body, connections.Hash(out.Token)) {
		t.Error("the answer holds the token's hash")
	}
	if !strings.HasPrefix(out.Token, connections.TokenPrefix) || out.Snippet.Kind != "codex" || out.Snippet.Format != "toml" ||
		!strings.Contains(out.Snippet.Text, "countersign-hook hook --agent codex --url '"+ts.URL+"'") ||
		out.Snippet.Export != "export COUNTERSIGN_AGENT_TOKEN="+out.Token || out.Snippet.Unreachable == "" {
		t.Fatalf("token %q, snippet %+v", out.Token, out.Snippet)
	}

	var list struct{ Connections []map[string]any }
	st, _, body = ts.owner(t, "GET", "/api/connections", "", "")
	json.Unmarshal([]byte(body), &list)
	if st != 200 || len(list.Connections) != 1 || list.Connections[0]["id"] != id || list.Connections[0]["revokedAt"] != nil {
		t.Fatalf("GET = %d %s", st, body)
	}
	if strings.Contains(body, out.Token) || strings.Contains(body, connections.Hash(out.Token)) {
		t.Fatalf("the list holds the token or its hash: %s", body)
	}

	var revoked struct{ Connection map[string]any }
	st, _, body = ts.owner(t, "DELETE", "/api/connections/"+id, "", "")
	json.Unmarshal([]byte(body), &revoked)
	first, _ := revoked.Connection["revokedAt"].(string)
	if st != 200 || revoked.Connection["id"] != id || first == "" {
		t.Fatalf("DELETE = %d %s", st, body)
	}
	st, _, body = ts.owner(t, "DELETE", "/api/connections/"+id, "", "")
	json.Unmarshal([]byte(body), &revoked)
	if st != 200 || revoked.Connection["revokedAt"] != first {
		t.Fatalf("DELETE again = %d %s, want the first time %s", st, body, first)
	}
	if _, err := ts.conns.Authenticate(context.Background(), out.Token, connections.Codex); apperr.CodeOf(err) != apperr.Unauthorized {
		t.Fatalf("the revoked token authenticates: %v", err)
	}
	st, _, body = ts.owner(t, "DELETE", "/api/connections/nope", "", "")
	if st != http.StatusNotFound || !strings.Contains(body, "connection nope not found") {
		t.Fatalf("DELETE unknown = %d %s", st, body)
	}
	st, _, body = ts.owner(t, "GET", "/api/connections", "", "")
	json.Unmarshal([]byte(body), &list)
	if list.Connections[0]["revokedAt"] != first {
		t.Fatalf("the list after revoking: %s", body)
	}
}

func TestTheConnectionsAPIRefusesBadInputWithAReason(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, tt := range []struct{ name, body, reason string }{
		{"no label", `{"kind":"codex"}`, "Give the connection a label"},
		{"blank label", `{"label":"  ","kind":"codex"}`, "Give the connection a label"},
		{"long label", `{"label":"` + strings.Repeat("x", 201) + `","kind":"codex"}`, "The label is too long"},
		{"unknown kind", `{"label":"x","kind":"vim"}`, `Unknown kind \"vim\": use one of claude-code, codex, gemini, cursor, copilot, mcp, api.`},
		{"no kind", `{"label":"x"}`, `Unknown kind \"\"`},
		{"unknown field", `{"label":"x","kind":"codex","token":"mine"}`, "token"},
		{"a number for the label", `{"label":1,"kind":"codex"}`, "label"},
		{"not JSON", `label=x`, "JSON"},
		{"empty", ``, "The request body is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, _, body := ts.owner(t, "POST", "/api/connections", "application/json", tt.body)
			if st != http.StatusBadRequest || !strings.Contains(body, tt.reason) || !strings.Contains(body, `"code": "invalid"`) {
				t.Fatalf("= %d %s, want 400 with %q", st, body, tt.reason)
			}
		})
	}
	if st, _, body := ts.owner(t, "GET", "/api/connections", "", ""); st != 200 || !strings.Contains(body, `"connections": []`) {
		t.Fatalf("refused bodies made connections: %d %s", st, body)
	}
}

func TestTheAgentsPageShowsTheTokenOnceThenTheListWithLastUseAndRevoke(t *testing.T) {
	ts := newTestServer(t, nil)
	form := url.Values{"label": {"alice's <laptop>"}, "kind": {"claude-code"}}.Encode()
	st, h, page := ts.owner(t, "POST", "/agents", "application/x-www-form-urlencoded", form)
	if st != http.StatusOK {
		t.Fatalf("POST /agents = %d %s", st, page)
	}
	if h.Get("Cache-Control") != "no-store" {
		t.Errorf("the page with the token may be cached: Cache-Control %q", h.Get("Cache-Control"))
	}
	tok := regexp.MustCompile(`cs_agent_[a-z2-7]{32}`).FindString(page)
	if tok == "" {
		t.Fatalf("no token on the page after Connect:\n%s", page)
	}
	for _, want := range []string{
		"Connected: alice&#39;s &lt;laptop&gt; (Claude Code)",
		"export COUNTERSIGN_AGENT_TOKEN=" + tok,
		`id="connection-snippet"`, `data-copy="connection-snippet"`, `data-copy="connection-export"`,
		ts.URL + "/hooks/claude-code", "onFailure", "allowedEnvVars",
		"2. Paste this into .claude/settings.json",
		"If Countersign is unreachable: </strong>If Countersign cannot be reached, Claude Code blocks every tool call",
		"it is shown this once", "after a reload this page no longer shows it", "<code>" + tok[len(tok)-4:] + "</code>",
		`<a href="/agents">Agents</a>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page after Connect lacks %q", want)
		}
	}
	if strings.Count(page, tok) != 1 {
		t.Errorf("the token is on the page %d times, want once (the export line)", strings.Count(page, tok))
	}

	// A reload: no token, the list with the connection, never used, a Revoke that asks first.
	st, _, page = ts.owner(t, "GET", "/agents", "", "")
	if st != 200 || strings.Contains(page, tok) || strings.Contains(page, tok[len(connections.TokenPrefix):]) || strings.Contains(page, "connection-snippet") {
		t.Fatalf("GET /agents = %d, holds the token or the snippet", st)
	}
	row := regexp.MustCompile(`(?s)<tr id="connection-(\w+)".*?</tr>`).FindStringSubmatch(page)
	if row == nil {
		t.Fatalf("no connection row:\n%s", page)
	}
	id := row[1]
	for _, want := range []string{"alice&#39;s &lt;laptop&gt;", "Claude Code", "never", "active", `action="/agents/` + id + `/revoke"`, "data-confirm="} {
		if !strings.Contains(row[0], want) {
			t.Errorf("the row lacks %q:\n%s", want, row[0])
		}
	}

	// A use shows as a relative time.
	if _, err := ts.conns.Authenticate(context.Background(), tok, connections.ClaudeCode); err != nil {
		t.Fatal(err)
	}
	_, _, page = ts.owner(t, "GET", "/agents", "", "")
	if !strings.Contains(page, ">just now</time>") {
		t.Errorf("the last use is not shown as just now:\n%s", page)
	}

	// Revoke: back to the list, revoked, no button.
	st, h, _ = ts.owner(t, "POST", "/agents/"+id+"/revoke", "application/x-www-form-urlencoded", "")
	if st != http.StatusSeeOther || h.Get("Location") != "/agents" {
		t.Fatalf("revoke = %d to %q", st, h.Get("Location"))
	}
	_, _, page = ts.owner(t, "GET", "/agents", "", "")
	row = regexp.MustCompile(`(?s)<tr id="connection-` + id + `".*?</tr>`).FindStringSubmatch(page)
	if row == nil || !strings.Contains(row[0], "revoked") || strings.Contains(row[0], "/revoke") {
		t.Fatalf("after revoking, the row is %v", row)
	}
	if st, _, _ := ts.owner(t, "POST", "/agents/nope/revoke", "application/x-www-form-urlencoded", ""); st != http.StatusNotFound {
		t.Errorf("revoke unknown = %d, want 404", st)
	}
}

func TestTheAgentsPageRefusesABadFormAndKeepsWhatWasTyped(t *testing.T) {
	ts := newTestServer(t, nil)
	st, _, page := ts.owner(t, "POST", "/agents", "application/x-www-form-urlencoded", url.Values{"label": {"  "}, "kind": {"gemini"}}.Encode())
	if st != http.StatusBadRequest || !strings.Contains(page, `role="alert">Give the connection a label`) ||
		!strings.Contains(page, `<option value="gemini" selected>`) || strings.Contains(page, "cs_agent_") {
		t.Fatalf("empty label = %d:\n%s", st, page)
	}
	st, _, page = ts.owner(t, "POST", "/agents", "application/x-www-form-urlencoded", url.Values{"label": {"mine"}, "kind": {"vim"}}.Encode())
	if st != http.StatusBadRequest || !strings.Contains(page, "Unknown kind &#34;vim&#34;") || !strings.Contains(page, `value="mine"`) {
		t.Fatalf("unknown kind = %d:\n%s", st, page)
	}
	if list, _ := ts.conns.List(context.Background()); len(list) != 0 {
		t.Fatalf("refused forms made connections: %v", list)
	}
}

// TestAConnectionTokenReachesNoLogPageOrError follows a token through its life — made through
// the API and the page, used, used for the wrong kind, revoked, used again — and then looks for
// it (and its hash) in everything the server wrote: its log, its access log, the pages and the
// API answers after the one that made it, and the errors Authenticate returned (SPEC §18: a
// connection token never reaches a page, a log line or a webhook).
func TestAConnectionTokenReachesNoLogPageOrError(t *testing.T) {
	logs := &lockedBuffer{}
	ts := newTestServerConfig(t, nil, func(c *web.Config, _ *http.Server) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.AccessLog = slog.New(slog.NewJSONHandler(logs, nil))
	})
	ctx := context.Background()
	var out created
	if st := ts.call(t, "POST", "/api/connections", map[string]string{"label": "laptop", "kind": "claude-code"}, &out); st != 201 {
		t.Fatalf("create = %d", st)
	}
	_, _, page := ts.owner(t, "POST", "/agents", "application/x-www-form-urlencoded", "label=phone&kind=codex")
	pageTok := regexp.MustCompile(`cs_agent_[a-z2-7]{32}`).FindString(page)
	secrets := map[string]string{"API token": out.Token, "page token": pageTok}
	for name, tok := range map[string]string{"API token": out.Token, "page token": pageTok} {
		secrets[name+"'s hash"] = connections.Hash(tok)
	}
	var errs []string
	for _, use := range []struct {
		tok  string
		kind connections.Kind
	}{{out.Token, connections.ClaudeCode}, {out.Token, connections.Codex}, {pageTok, connections.Codex}, {pageTok, connections.MCP}} {
		if _, err := ts.conns.Authenticate(ctx, use.tok, use.kind); err != nil {
			errs = append(errs, err.Error())
		}
	}
	id, _ := out.Connection["id"].(string)
	if st, _, _ := ts.owner(t, "DELETE", "/api/connections/"+id, "", ""); st != 200 {
		t.Fatalf("revoke = %d", st)
	}
	if _, err := ts.conns.Authenticate(ctx, out.Token, connections.ClaudeCode); err == nil {
		t.Fatal("the revoked token authenticates")
	} else {
		errs = append(errs, err.Error(), apperr.MessageOf(err))
	}
	if len(errs) != 4 {
		t.Fatalf("errors %q, want 4 (wrong kind twice; revoked, as logged and as answered)", errs)
	}
	_, _, agents := ts.owner(t, "GET", "/agents", "", "")
	_, _, api := ts.owner(t, "GET", "/api/connections", "", "")
	_, _, home := ts.owner(t, "GET", "/", "", "")
	// The access log line of a request is written after its answer: wait for the last one's.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), `"path":"/",`) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "connection revoked") || !strings.Contains(logs.String(), `"path":"/api/connections/`) {
		t.Fatalf("the logs were not captured:\n%s", logs.String())
	}
	for where, text := range map[string]string{"the logs": logs.String(), "the Agents page": agents, "GET /api/connections": api,
		"the sessions page": home, "Authenticate's errors": strings.Join(errs, "\n")} {
		for name, secret := range secrets {
			if secret == "" || strings.Contains(text, secret) {
				t.Errorf("%s holds the %s", where, name)
			}
		}
	}
}

func TestSnippetsPointAtThePublicURLWhenOneIsSet(t *testing.T) {
	ts := newTestServerConfig(t, nil, func(c *web.Config, _ *http.Server) { c.PublicURL = "https://cs.example.com/team" })
	var out created
	if st := ts.call(t, "POST", "/api/connections", map[string]string{"label": "x", "kind": "mcp"}, &out); st != 201 {
		t.Fatalf("create = %d", st)
	}
	if !strings.Contains(out.Snippet.Text, `"url": "https://cs.example.com/team/mcp"`) || strings.Contains(out.Snippet.Text, ts.URL) {
		t.Fatalf("snippet:\n%s", out.Snippet.Text)
	}
}
