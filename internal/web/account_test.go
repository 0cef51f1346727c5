package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/testkit"
	"countersign/internal/tool"
	"countersign/internal/web"
)

// Issue 16, items 7 and 9: sessions and account, and the small ones of the web layer.

// apiError sends body to method path as the owner and returns the status and the error message.
func apiError(t *testing.T, ts *testServer, method, path, body string) (int, string) {
	t.Helper()
	st, out := ts.do(t, method, path, "application/json", body, nil)
	var e struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal([]byte(out), &e)
	return st, e.Error.Message
}

// A body that does not decode is explained in JSON's terms, naming the field by its JSON name
// and the JSON type expected; Go's type names never show.
func TestAPIErrorsSpeakJSONNotGo(t *testing.T) {
	ts, sid := shareServer(t)
	tests := []struct {
		name, method, path, body, want string
	}{
		{"a number for a string", "POST", "/api/sessions", `{"title":1,"model":"faux:one"}`,
			"field title: expected a string, got a number"},
		{"an object for a string", "PATCH", "/api/sessions/" + sid, `{"title":{"x":1}}`,
			"field title: expected a string, got an object"},
		{"a string for an array", "PUT", "/api/sessions/" + sid + "/tools", `{"active":"shell"}`,
			"field active: expected an array of strings, got a string"},
		{"a number in an array of strings", "PUT", "/api/sessions/" + sid + "/tools", `{"active":["shell",2]}`,
			"field active: expected an array of strings, got an array holding a number"},
		{"a string for a boolean", "POST", "/api/sessions/" + sid + "/shares", `{"role":"approver","canEdit":"yes"}`,
			"field canEdit: expected true or false, got a string"},
		{"a boolean for a string", "POST", "/api/approvals/nope/decision", `{"decision":true}`,
			"field decision: expected a string, got a boolean"},
		{"an unknown field", "POST", "/api/sessions", `{"title":"x","model":"faux:one","colour":"red"}`,
			`field "colour" is not known here; the fields are title, model, workspace, instructions.`},
		{"not an object", "POST", "/api/sessions/" + sid + "/messages", `["hi"]`,
			"The request body must be a JSON object, not an array."},
		{"cut short", "POST", "/api/sessions", `{"title":`,
			"The request body is not valid JSON: it ends before the JSON value does."},
		{"a syntax error", "POST", "/api/sessions", `{title:"x"}`,
			"The request body is not valid JSON: invalid character 't' looking for beginning of object key string (at byte 2)."},
		{"trailing data", "PATCH", "/api/sessions/" + sid, `{"title":"x"} {"title":"y"}`,
			"The request body has data after the JSON object."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, msg := apiError(t, ts, tt.method, tt.path, tt.body)
			if st != http.StatusBadRequest || msg != tt.want {
				t.Errorf("%s %s %s = %d %q, want 400 %q", tt.method, tt.path, tt.body, st, msg, tt.want)
			}
		})
	}
}

// Length limits count characters (runes), as their messages say: 200 two-byte characters make
// a valid title or label, 201 do not.
func TestLengthLimitsCountCharacters(t *testing.T) {
	ts, sid := shareServer(t)
	for _, ch := range []string{"é", "界", "🙂"} {
		t.Run(ch, func(t *testing.T) {
			at, over := strings.Repeat(ch, 200), strings.Repeat(ch, 201)
			var sess agent.Session
			if st := ts.call(t, "POST", "/api/sessions", map[string]string{"title": at, "model": "faux:one"}, &sess); st != 201 || sess.Title != at {
				t.Errorf("a title of 200 %q (%d bytes) = %d, want 201", ch, len(at), st)
			}
			body, _ := json.Marshal(map[string]string{"title": over, "model": "faux:one"})
			if st, msg := apiError(t, ts, "POST", "/api/sessions", string(body)); st != 400 || msg != "Title is too long (at most 200 characters)." {
				t.Errorf("a title of 201 = %d %q", st, msg)
			}
			if st := ts.call(t, "PATCH", "/api/sessions/"+sid, map[string]string{"title": at}, nil); st != 200 {
				t.Errorf("a rename to 200 %q = %d, want 200", ch, st)
			}
			body, _ = json.Marshal(map[string]string{"title": over})
			if st, msg := apiError(t, ts, "PATCH", "/api/sessions/"+sid, string(body)); st != 400 || msg != "Title is too long (at most 200 characters)." {
				t.Errorf("a rename to 201 = %d %q", st, msg)
			}
			if st := ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "viewer", "label": at}, nil); st != 201 {
				t.Errorf("a label of 200 %q = %d, want 201", ch, st)
			}
			body, _ = json.Marshal(map[string]string{"role": "viewer", "label": over})
			if st, msg := apiError(t, ts, "POST", "/api/sessions/"+sid+"/shares", string(body)); st != 400 || msg != "Label is too long (at most 200 characters)." {
				t.Errorf("a label of 201 = %d %q", st, msg)
			}
		})
	}
}

// Renaming: the API and the page's form; an empty title is refused; the session's other pages
// get the new title live.
func TestRenameASession(t *testing.T) {
	ts, sid := shareServer(t)
	live := ts.ownerLive(t, sid)
	readMessage(t, live) // the resync
	var sess agent.Session
	if st := ts.call(t, "PATCH", "/api/sessions/"+sid, map[string]string{"title": "  Release 2.0 review  "}, &sess); st != 200 || sess.Title != "Release 2.0 review" {
		t.Fatalf("rename = %d %+v", st, sess)
	}
	if msg := readMessage(t, live); !strings.Contains(msg, `<h1 id="session-title">Release 2.0 review</h1>`) {
		t.Errorf("the live update lacks the new title: %.300s", msg)
	}
	if st, msg := apiError(t, ts, "PATCH", "/api/sessions/"+sid, `{"title":"   "}`); st != 400 || !strings.Contains(msg, "The title is empty") {
		t.Errorf("an empty title = %d %q", st, msg)
	}
	if st, _ := apiError(t, ts, "PATCH", "/api/sessions/nope", `{"title":"x"}`); st != 404 {
		t.Errorf("renaming an unknown session = %d, want 404", st)
	}

	// The page's form: 303 back to the session without htmx, the heading with htmx.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("POST", ts.URL+"/sessions/"+sid+"/title", strings.NewReader("title=From+the+form"))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/sessions/"+sid {
		t.Errorf("the form = %d to %q, want 303 to the session", res.StatusCode, res.Header.Get("Location"))
	}
	req, _ = http.NewRequest("POST", ts.URL+"/sessions/"+sid+"/title", strings.NewReader("title=With+htmx"))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("HX-Request", "true")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `id="session-heading"`) || !strings.Contains(string(b), "With htmx") {
		t.Errorf("the form with htmx = %d %.300s", res.StatusCode, b)
	}
	if st, page := ts.do(t, "GET", "/", "", "", nil); st != 200 || !strings.Contains(page, ">With htmx</a>") {
		t.Errorf("the session list (%d) does not show the new title", st)
	}
}

// Searching the list by title: the page (?q=, without script) and the API; case-insensitive.
func TestSearchSessionsByTitle(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	for _, title := range []string{"Alpha release", "beta notes", "ALPHABET soup"} {
		ts.call(t, "POST", "/api/sessions", map[string]string{"title": title, "model": "faux:one"}, nil)
	}
	var out struct{ Sessions []agent.Session }
	ts.call(t, "GET", "/api/sessions?q=alpha", nil, &out)
	var got []string
	for _, s := range out.Sessions {
		got = append(got, s.Title)
	}
	if strings.Join(got, "|") != "ALPHABET soup|Alpha release" {
		t.Errorf("?q=alpha found %q, want the two alpha sessions, newest first", got)
	}
	_, page := ts.do(t, "GET", "/?q=ALPHA", "", "", nil)
	if !strings.Contains(page, "Alpha release") || !strings.Contains(page, "ALPHABET soup") || strings.Contains(page, "beta notes") {
		t.Error("the page's search does not narrow the list to the alpha sessions")
	}
	if !strings.Contains(page, `name="q" value="ALPHA"`) {
		t.Error("the search box does not keep the query")
	}
	_, page = ts.do(t, "GET", "/?q=gamma", "", "", nil)
	if !strings.Contains(page, "No session title contains") || strings.Contains(page, "Alpha release") {
		t.Error("a search without hits does not say so")
	}
}

// Deleting: refused while a run is busy (409: Stop first); then the session goes with its
// transcript, approvals, grants and share links; its share links answer 404 and its open live
// sockets (the owner's page, a reviewer's, the API's events) close.
func TestDeleteASession(t *testing.T) {
	ts, sid := shareServer(t)
	var link struct{ ID, URL string }
	ts.call(t, "POST", "/api/sessions/"+sid+"/shares", map[string]string{"role": "viewer"}, &link)
	rc := reviewer(t, ts, link.URL, "Vic")
	u, _ := url.Parse(link.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shared, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+u.Path+"/live", &websocket.DialOptions{HTTPClient: rc})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.CloseNow()
	readMessage(t, shared)
	owner := ts.ownerLive(t, sid)
	readMessage(t, owner)
	events := ts.events(t, sid)
	next(t, events, "snapshot")

	// A run parked on an approval: deleting is refused, and nothing is deleted.
	ts.call(t, "POST", "/api/sessions/"+sid+"/messages", map[string]string{"text": "go"}, nil)
	ev := next(t, events, "approval_requested")
	if st, msg := apiError(t, ts, "DELETE", "/api/sessions/"+sid, ""); st != 409 || !strings.Contains(msg, "press Stop first") {
		t.Errorf("delete while busy = %d %q, want 409 saying to Stop first", st, msg)
	}
	st, _ := ts.do(t, "POST", "/sessions/"+sid+"/delete", "", "", nil)
	if st != 409 {
		t.Errorf("the page's delete while busy = %d, want 409", st)
	}
	approvalID := ev["approval"].(map[string]any)["id"].(string)
	ts.call(t, "POST", "/api/approvals/"+approvalID+"/decision", map[string]string{"decision": "approve_session"}, nil)
	next(t, events, "agent_end")
	testkit.Eventually(t, "the run to end", func() bool { return !ts.runner.Busy(sid) })
	if as, _ := ts.db.Approvals(context.Background(), sid, ""); len(as) == 0 {
		t.Fatal("no approvals before the delete")
	}
	if gs, _ := ts.db.Grants(context.Background(), sid); len(gs) == 0 {
		t.Fatal("no grant before the delete")
	}

	if st := ts.call(t, "DELETE", "/api/sessions/"+sid, nil, nil); st != 204 {
		t.Fatalf("delete = %d, want 204", st)
	}
	// The sockets close: the pages' with 1008 and the reason they show, the API's after the event.
	for name, c := range map[string]*websocket.Conn{"owner": owner, "reviewer": shared} {
		var ce websocket.CloseError
		for {
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _, err := c.Read(rctx)
			rcancel()
			if err != nil {
				if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "This session was deleted") {
					t.Errorf("the %s's live socket ended with %v, want 1008 saying the session was deleted", name, err)
				}
				break
			}
		}
	}
	next(t, events, "session_deleted")
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	var any map[string]any
	if err := wsjson.Read(rctx, events, &any); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("the API's event socket after session_deleted: %v, want a normal close", err)
	}

	if st, _ := ts.do(t, "GET", "/api/sessions/"+sid, "", "", nil); st != 404 {
		t.Errorf("the deleted session = %d, want 404", st)
	}
	if st, _ := ts.do(t, "GET", "/sessions/"+sid, "", "", nil); st != 404 {
		t.Errorf("the deleted session's page = %d, want 404", st)
	}
	res, err := rc.Get(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Errorf("its share link = %d, want 404", res.StatusCode)
	}
	ctx2 := context.Background()
	if es, _ := ts.db.Entries(ctx2, sid); len(es) != 0 {
		t.Errorf("%d transcript entries remain", len(es))
	}
	if as, _ := ts.db.Approvals(ctx2, sid, ""); len(as) != 0 {
		t.Errorf("%d approvals remain", len(as))
	}
	if gs, _ := ts.db.Grants(ctx2, sid); len(gs) != 0 {
		t.Errorf("%d grants remain", len(gs))
	}
	if ls, _ := ts.db.Shares(ctx2, sid); len(ls) != 0 {
		t.Errorf("%d share links remain", len(ls))
	}
	if st, _ := ts.do(t, "DELETE", "/api/sessions/"+sid, "", "", nil); st != 404 {
		t.Errorf("deleting it again = %d, want 404", st)
	}
	if err := ts.runner.Send(ctx2, sid, "hello?"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("a message to the deleted session: %v, want not found", err)
	}
}

// The page's Delete: 303 to the list without htmx, HX-Redirect with it.
func TestThePagesDeleteLandsOnTheList(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	for _, hx := range []bool{false, true} {
		var sess agent.Session
		ts.call(t, "POST", "/api/sessions", map[string]string{"title": fmt.Sprint("htmx ", hx), "model": "faux:one"}, &sess)
		req, _ := http.NewRequest("POST", ts.URL+"/sessions/"+sess.ID+"/delete", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if hx {
			req.Header.Set("HX-Request", "true")
		}
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		switch {
		case hx && (res.StatusCode != 200 || res.Header.Get("HX-Redirect") != "/"):
			t.Errorf("with htmx = %d HX-Redirect %q, want 200 to /", res.StatusCode, res.Header.Get("HX-Redirect"))
		case !hx && (res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/"):
			t.Errorf("without htmx = %d to %q, want 303 to /", res.StatusCode, res.Header.Get("Location"))
		}
		if st, _ := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil); st != 404 {
			t.Errorf("after the page's delete the session = %d, want 404", st)
		}
	}
}

// Logout lands on a page that says so and how to log in again (without the token), and the
// login's open live pages close; the bearer token's sockets are not a login and stay.
func TestLogoutLandsOnLoggedOutAndClosesTheLoginsSockets(t *testing.T) {
	ts, sid := shareServer(t)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	res, err := browser.Get(ts.URL + "/login?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	page, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/sessions/"+sid+"/live", &websocket.DialOptions{HTTPClient: browser})
	if err != nil {
		t.Fatal(err)
	}
	defer page.CloseNow()
	readMessage(t, page)
	api := ts.ownerLive(t, sid)
	readMessage(t, api)

	res, err = browser.Post(ts.URL+"/logout", "application/x-www-form-urlencoded", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Request.URL.Path != "/logged-out" {
		t.Fatalf("logout landed on %s with %d, want /logged-out", res.Request.URL.Path, res.StatusCode)
	}
	text := string(body)
	for _, want := range []string{"You are logged out", "Countersign listening on http://" + strings.TrimPrefix(ts.URL, "http://") + "/login?token=…"} {
		if !strings.Contains(text, want) {
			t.Errorf("the logged-out page lacks %q", want)
		}
	}
	if strings.Contains(text, token) || strings.Contains(text, ">Log out<") {
		t.Error("the logged-out page shows the token or the owner's header")
	}
	expectPolicyClose(t, page, "You logged out. This page no longer updates; log in again to see it.")
	if st := ts.call(t, "PATCH", "/api/sessions/"+sid, map[string]string{"title": "still here"}, nil); st != 200 {
		t.Fatalf("rename = %d", st)
	}
	if msg := readMessage(t, api); !strings.Contains(msg, "still here") {
		t.Errorf("the bearer token's socket closed or missed the update: %.200s", msg)
	}
	res, err = browser.Get(ts.URL + "/sessions/" + sid)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 401 {
		t.Errorf("the old page after logout = %d, want 401", res.StatusCode)
	}
}

// The share panel's form keeps what was typed (role, label, expiry, rights) after a refusal.
func TestShareFormKeepsWhatWasTypedAfterARefusal(t *testing.T) {
	ts, sid := shareServer(t)
	form := url.Values{"role": {"approver"}, "label": {"Design review <b>"}, "expiresIn": {"tomorrow"}, "canEdit": {"1"}}
	st, html := ts.do(t, "POST", "/sessions/"+sid+"/shares", "application/x-www-form-urlencoded", form.Encode(), nil)
	if st != 400 || !strings.Contains(html, `Expires in &#34;tomorrow&#34;`) && !strings.Contains(html, `Expires in &quot;tomorrow&quot;`) {
		t.Fatalf("refused form = %d: %.500s", st, html)
	}
	for _, want := range []string{`<option value="approver" selected>`, `name="label" value="Design review &lt;b&gt;"`,
		`name="expiresIn" value="tomorrow"`, `name="canEdit" value="1" checked`} {
		if !strings.Contains(html, want) {
			t.Errorf("the refused form lacks %s", want)
		}
	}
	if strings.Contains(html, `name="canRemember" value="1" checked`) {
		t.Error("an unticked right came back ticked")
	}
	// A link that is made leaves a fresh form.
	form.Set("expiresIn", "24h")
	_, html = ts.do(t, "POST", "/sessions/"+sid+"/shares", "application/x-www-form-urlencoded", form.Encode(), nil)
	if strings.Contains(html, `value="24h"`) || strings.Contains(html, `<option value="approver" selected>`) {
		t.Error("the form keeps its values after a link was made")
	}
}

// 60 tools of one MCP server stay usable: every group is a <details> that folds, each tool is
// one checkbox named by its name (SPEC §6), with its name for the filter, and the filter box is
// there (manage.js shows it).
func TestToolsPanelWithSixtyToolsFoldsAndFilters(t *testing.T) {
	var tools []*tool.Tool
	var names []string
	for i := 1; i <= 60; i++ {
		name := fmt.Sprintf("many__tool_%02d", i)
		names = append(names, name)
		tools = append(tools, &tool.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`),
			Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
				return tool.Result{}, nil
			}})
	}
	ts := newTestServerConfig(t, map[string]string{"one": oneCall}, func(c *web.Config, _ *http.Server) {
		c.Sources = func() []web.ToolSource {
			return []web.ToolSource{{Name: "many", Kind: "MCP stdio", State: "up", Tools: names}}
		}
	}, tools...)
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "sixty", "model": "faux:one"}, &sess)
	_, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	for _, want := range []string{`<form role="group" aria-label="Tools"`, `<details class="tool-group" open data-tool-group="Built-in">`,
		`<details class="tool-group" open data-tool-group="many">`, `>60 tools</span>`, `class="tools-filter-input"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the panel lacks %s", want)
		}
	}
	many := page[strings.Index(page, `data-tool-group="many"`):]
	for _, n := range names {
		if !strings.Contains(many, `<li data-tool-name="`+n+`">`) || !strings.Contains(many, `aria-label="`+n+`"`) {
			t.Fatalf("the many group lacks %s's row or checkbox", n)
		}
	}
	if got := strings.Count(page, `type="checkbox" name="active"`); got != 61 {
		t.Errorf("%d tool checkboxes, want 61 (shell and 60 MCP tools)", got)
	}
}
