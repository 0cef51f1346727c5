package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"countersign/internal/notify"
	"countersign/internal/store/sqlite"
	"countersign/internal/web"
)

// TestRouteTableHasNoDuplicatesAndFewPublicRoutes: every pattern is in the table once (also
// up to the names of its wildcards, which ServeMux would refuse at start), every class is a
// known one, and the public routes are exactly the ones that must be: a new route is open to
// everyone only if this list says so.
func TestRouteTableHasNoDuplicatesAndFewPublicRoutes(t *testing.T) {
	wildcard := regexp.MustCompile(`\{[^}]*\}`)
	seen := map[string]string{}
	var public []string
	for _, rt := range web.Routes() {
		key := wildcard.ReplaceAllString(rt.Pattern, "{}")
		if prev, ok := seen[key]; ok {
			t.Errorf("pattern %q duplicates %q", rt.Pattern, prev)
		}
		seen[key] = rt.Pattern
		switch rt.Access {
		case "public":
			public = append(public, rt.Pattern)
		case "owner", "owner-api", "link-viewer", "link-approver", "decision-link", "agent-token", "aap-instance", "aap-provisioner":
		default:
			t.Errorf("%s: unknown access class %q", rt.Pattern, rt.Access)
		}
	}
	want := []string{"GET /healthz", "GET /readyz", "GET /login", "GET /logged-out", "GET /static/", "GET /favicon.ico", "GET /static/chroma.css"}
	slices.Sort(public)
	slices.Sort(want)
	if !slices.Equal(public, want) {
		t.Errorf("public routes %q, want %q", public, want)
	}
}

// TestEveryRouteRefusesWhoItMust walks the route table as an attacker: every owner route (page
// or API) is sent no credential, a wrong bearer token, a forged owner cookie and an approver's
// own cookies, and answers 401; every link route is sent an unknown token and a revoked link's
// and answers 404; every approver route is also sent a viewer link (with the viewer's name
// cookie) and answers 404, and an approver link before its reviewer gave a name and answers
// 401; every decision-link route is sent an unknown token, a live link's token tampered with,
// and a share link's token with its reviewer's cookies, and answers 404. None of it changes the session, its approvals, tools, grants, links or the rules, nor
// runs a tool.
func TestEveryRouteRefusesWhoItMust(t *testing.T) {
	ts, sid := shareServerConfig(t, func(c *web.Config, _ *http.Server) {
		c.Store.(*sqlite.DB).SetNotify([]notify.Receiver{aliceHook}, decisionLinks, nil)
		c.Receivers = []notify.Receiver{aliceHook}
	})
	ctx := context.Background()
	approver := createLink(t, ts, sid, map[string]any{"role": "approver", "label": "a", "canEdit": true, "canRemember": true})
	viewer := createLink(t, ts, sid, map[string]any{"role": "viewer", "label": "v"})
	revoked := createLink(t, ts, sid, map[string]any{"role": "approver", "label": "r", "canEdit": true})
	if st := ts.call(t, "DELETE", "/api/shares/"+revoked.ID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("revoke = %d", st)
	}
	approverClient := reviewer(t, ts, approver.URL, "Ada")
	viewerClient := reviewer(t, ts, viewer.URL, "Val")
	var rule struct{ ID string }
	if st := ts.call(t, "POST", "/api/rules", map[string]any{"text": "write_file(secrets/**)", "effect": "deny",
		"scope": "session", "sessionId": sid}, &rule); st != http.StatusCreated {
		t.Fatalf("create rule = %d", st)
	}
	var conn struct {
		Token      string
		Connection struct{ ID string }
	}
	if st := ts.call(t, "POST", "/api/connections", map[string]any{"label": "laptop", "kind": "claude-code"}, &conn); st != http.StatusCreated {
		t.Fatalf("create connection = %d", st)
	}
	hookToken := conn.Token
	events := ts.events(t, sid)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sid+"/messages", map[string]string{"text": "go"}, nil)
	aid := next(t, events, "approval_requested")["approval"].(map[string]any)["id"].(string)
	ds, err := ts.db.Deliveries(ctx, sid)
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries %+v, %v", ds, err)
	}
	live := linkToken(t, ds[0])
	tampered := live[:len(live)-1] + map[bool]string{true: "b", false: "a"}[strings.HasSuffix(live, "a")]

	// state is what an attack must not change, read through the owner's API and the store.
	state := func() string {
		t.Helper()
		var b strings.Builder
		for _, p := range []string{"/api/sessions", "/api/sessions/" + sid, "/api/sessions/" + sid + "/approvals",
			"/api/sessions/" + sid + "/tools", "/api/sessions/" + sid + "/grants", "/api/rules", "/api/connections"} {
			var v any
			if st := ts.call(t, "GET", p, nil, &v); st != http.StatusOK {
				t.Fatalf("GET %s = %d", p, st)
			}
			out, _ := json.Marshal(v)
			fmt.Fprintf(&b, "%s %s\n", p, out)
		}
		for _, id := range []string{approver.ID, viewer.ID, revoked.ID} {
			l, err := ts.db.Share(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "link %s revoked=%v\n", id, l.RevokedAt != nil)
		}
		fmt.Fprintf(&b, "tool runs %d\n", ts.runs.Load())
		return b.String()
	}
	before := state()

	tokenOf := func(link string) string {
		u, _ := url.Parse(link)
		return strings.TrimPrefix(u.Path, "/r/")
	}
	cookiesFor := func(c *http.Client, link string) []*http.Cookie {
		u, _ := url.Parse(link)
		return c.Jar.Cookies(u)
	}
	// Every request comes from its own address, so the limit on failed token attempts
	// (tokenFailures) never answers 429 in place of the route's own refusal.
	addr := 0
	send := func(method, path string, api bool, header http.Header, cookies []*http.Cookie) int {
		addr++
		var body string
		if api {
			body = `{"text":"hi","title":"x","decision":"approve","role":"approver","active":[],"effect":"allow","tool":"shell","scope":"session","sessionId":"` + sid + `"}`
		} else {
			body = url.Values{"text": {"hi"}, "title": {"x"}, "decision": {"approve"}, "name": {"Mallory"}, "role": {"approver"},
				"arguments": {`{"command":"rm -rf /"}`}, "mode": {"auto"}, "text_rule": {"shell"}}.Encode()
		}
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.RemoteAddr = fmt.Sprintf("10.9.%d.%d:1234", addr/250, addr%250+1)
		if api {
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for k, v := range header {
			req.Header[k] = v
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		ts.Config.Handler.ServeHTTP(rec, req)
		return rec.Code
	}

	for _, rt := range web.Routes() {
		if rt.Access == "public" {
			continue
		}
		method, pattern, ok := strings.Cut(rt.Pattern, " ")
		if !ok { // a catch-all: any method, any path under it
			method, pattern = "GET", rt.Pattern+"nowhere"
		}
		// fill gives the pattern's wildcards real values, so a request that got through would
		// act on something that exists.
		fill := func(token string) string {
			p := strings.NewReplacer("{$}", "", "{aid}", aid, "{sid}", approver.ID, "{tool}", "shell", "{token}", token).Replace(pattern)
			id := sid
			switch {
			case strings.HasPrefix(p, "/api/approvals/"):
				id = aid
			case strings.HasPrefix(p, "/api/shares/"):
				id = approver.ID
			case strings.HasPrefix(p, "/api/rules/"), strings.HasPrefix(p, "/rules/"):
				id = rule.ID
			case strings.HasPrefix(p, "/api/connections/"), strings.HasPrefix(p, "/agents/"):
				id = conn.Connection.ID
			}
			return strings.ReplaceAll(p, "{id}", id)
		}
		api := strings.HasPrefix(pattern, "/api/")
		type attack struct {
			name    string
			path    string
			header  http.Header
			cookies []*http.Cookie
			want    int
		}
		var attacks []attack
		switch rt.Access {
		case "owner", "owner-api":
			p := fill("")
			attacks = []attack{
				{"no credential", p, nil, nil, http.StatusUnauthorized},
				{"wrong bearer token", p, http.Header{"Authorization": {"Bearer wrong-" + token}}, nil, http.StatusUnauthorized},
				{"forged owner cookie", p, nil, []*http.Cookie{{Name: "countersign_owner", Value: token}}, http.StatusUnauthorized},
				{"an approver's cookies", p, nil, cookiesFor(approverClient, approver.URL), http.StatusUnauthorized},
			}
		case "link-viewer", "link-approver":
			attacks = []attack{
				{"unknown token", fill("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), nil, nil, http.StatusNotFound},
				{"revoked link", fill(tokenOf(revoked.URL)), nil, nil, http.StatusNotFound},
			}
			if rt.Access == "link-approver" {
				attacks = append(attacks,
					attack{"viewer link", fill(tokenOf(viewer.URL)), nil, cookiesFor(viewerClient, viewer.URL), http.StatusNotFound},
					attack{"approver link before a name", fill(tokenOf(approver.URL)), nil, nil, http.StatusUnauthorized})
			}
		case "decision-link":
			attacks = []attack{
				{"unknown token", fill("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), nil, nil, http.StatusNotFound},
				{"a live link's token tampered with", fill(tampered), nil, nil, http.StatusNotFound},
				{"an approver's share token and cookies", fill(tokenOf(approver.URL)), nil, cookiesFor(approverClient, approver.URL), http.StatusNotFound},
				{"the owner's cookie and an unknown token", fill("nothing"), nil, []*http.Cookie{{Name: "countersign_owner", Value: token}}, http.StatusNotFound},
			}
		case "agent-token":
			// Door 1 (SPEC §18): a connection's bearer token, never the owner's credentials.
			p := strings.ReplaceAll(pattern, "{kind}", "claude-code")
			attacks = []attack{
				{"no credential", p, nil, nil, http.StatusUnauthorized},
				{"wrong bearer token", p, http.Header{"Authorization": {"Bearer wrong-" + token}}, nil, http.StatusUnauthorized},
				{"the owner's token", p, http.Header{"Authorization": {"Bearer " + token}}, nil, http.StatusUnauthorized},
				{"the owner's cookie", p, nil, []*http.Cookie{{Name: "countersign_owner", Value: token}}, http.StatusUnauthorized},
			}
		case "aap-instance":
			// Door 3 (SPEC §18): an api connection's token (the AAP instance credential), never
			// the owner's credentials nor another kind's connection.
			p := fill("7ab8c8ec-7b2d-4fd6-9b52-752f9515eb71")
			attacks = []attack{
				{"no credential", p, nil, nil, http.StatusUnauthorized},
				{"wrong bearer token", p, http.Header{"Authorization": {"Bearer wrong-" + token}}, nil, http.StatusUnauthorized},
				{"the owner's token", p, http.Header{"Authorization": {"Bearer " + token}}, nil, http.StatusUnauthorized},
				{"the owner's cookie", p, nil, []*http.Cookie{{Name: "countersign_owner", Value: token}}, http.StatusUnauthorized},
				{"a claude-code connection's token", p, http.Header{"Authorization": {"Bearer " + hookToken}}, nil, http.StatusUnauthorized},
			}
		case "aap-provisioner":
			// AAP instance provisioning: the owner's bearer token only.
			p := fill("b29a43a7-1949-4b9f-9d61-b7ae66f85d31")
			attacks = []attack{
				{"no credential", p, nil, nil, http.StatusUnauthorized},
				{"wrong bearer token", p, http.Header{"Authorization": {"Bearer wrong-" + token}}, nil, http.StatusUnauthorized},
				{"the owner's cookie", p, nil, []*http.Cookie{{Name: "countersign_owner", Value: token}}, http.StatusUnauthorized},
				{"a connection's token", p, http.Header{"Authorization": {"Bearer " + hookToken}}, nil, http.StatusUnauthorized},
			}
		default:
			t.Fatalf("%s: unknown access class %q", rt.Pattern, rt.Access)
		}
		for _, a := range attacks {
			if got := send(method, a.path, api, a.header, a.cookies); got != a.want {
				t.Errorf("%s (%s), %s: %s %s = %d, want %d", rt.Pattern, rt.Access, a.name, method, a.path, got, a.want)
			}
		}
	}
	if after := state(); after != before {
		t.Errorf("the attacks changed something:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// TestAPathUnderALinkPrefixIsNotFoundNotUnauthorized (issue 34): `/d/<token>/` (a trailing
// slash, a mistyped path) and any other path under /d/ or /r/ names no link: 404 with no detail,
// as an unknown token, never the owner's 401.
func TestAPathUnderALinkPrefixIsNotFoundNotUnauthorized(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, p := range []string{"/d/unknown-token", "/d/unknown-token/", "/d/unknown-token/more", "/d/", "/r/unknown-token/", "/r/unknown-token/x/y"} {
		req := httptest.NewRequest("GET", p, nil)
		rec := httptest.NewRecorder()
		ts.Config.Handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", p, rec.Code)
		}
		if strings.Contains(rec.Body.String(), "token") && !strings.Contains(rec.Body.String(), "Not found") {
			t.Errorf("GET %s says more than not found: %s", p, rec.Body)
		}
	}
}
