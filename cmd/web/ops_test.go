package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/store/sqlite"
	"countersign/internal/tool"
)

// TestJSONLogsHaveAnAccessLogWithoutTokens (SPEC §16, issue 21 acceptance 6): with -log-format
// json every line of the server's log is a JSON object, each request has an access-log line
// (method, path, status), and neither the owner token nor a share link's token appears in any
// line, though both were sent in URLs.
func TestJSONLogsHaveAnAccessLogWithoutTokens(t *testing.T) {
	const s3cret = "s3cret-owner-token-s3cret-s3cret-json"
	var logs syncBuffer
	login := startServerLogging(t, []string{"-token", s3cret, "-log-format", "json"}, nil, &logs)
	base := strings.SplitN(login, "/login", 2)[0]
	jar, _ := cookiejar.New(nil)
	owner := &http.Client{Jar: jar}
	get := func(c *http.Client, u string) *http.Response {
		t.Helper()
		res, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	if res := get(owner, loginURL(base, s3cret)); res.StatusCode != 200 { // a token set with -token is not printed
		t.Fatalf("login = %d", res.StatusCode)
	}
	// A session and a share link on it, opened as a reviewer would.
	api := func(method, path, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+s3cret)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := api("POST", "/api/sessions", `{"model":"faux:demo"}`)
	var sess struct{ ID string }
	json.NewDecoder(res.Body).Decode(&sess)
	res.Body.Close()
	if sess.ID == "" {
		t.Fatalf("create session = %d", res.StatusCode)
	}
	res = api("POST", "/api/sessions/"+sess.ID+"/shares", `{"role":"viewer"}`)
	var link struct{ URL string }
	json.NewDecoder(res.Body).Decode(&link)
	res.Body.Close()
	u, err := url.Parse(link.URL)
	if err != nil || !strings.HasPrefix(u.Path, "/r/") {
		t.Fatalf("share link %q (status %d)", link.URL, res.StatusCode)
	}
	shareToken := strings.TrimPrefix(u.Path, "/r/")
	get(http.DefaultClient, base+u.Path)
	get(http.DefaultClient, base+"/r/"+shareToken+"x") // a wrong one is logged too, redacted
	get(http.DefaultClient, base+"/readyz")

	var access []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		line := sc.Text()
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line is not JSON: %q (%v)", line, err)
		}
		if strings.Contains(line, s3cret) || strings.Contains(line, shareToken) {
			t.Errorf("a log line holds a token: %s", line)
		}
		if m["log"] == "access" {
			access = append(access, m)
		}
	}
	want := map[string]bool{"/login?token=%5Bredacted%5D": false, "/r/[redacted]": false, "/readyz": false, "/api/sessions": false}
	for _, m := range access {
		if p, _ := m["path"].(string); p != "" {
			if _, ok := want[p]; ok {
				want[p] = true
			}
		}
		if _, ok := m["status"].(float64); !ok || m["method"] == nil || m["ms"] == nil {
			t.Errorf("access line without method, status or ms: %v", m)
		}
	}
	for p, seen := range want {
		if !seen {
			t.Errorf("no access-log line for %s among %d", p, len(access))
		}
	}
}

// TestReadyzAndBadOpsFlags: /readyz is public and 200 on a started server; a bad -log-format or
// -trusted-proxies refuses to start with a message naming the flag.
func TestReadyzAndBadOpsFlags(t *testing.T) {
	login := startServer(t, nil, nil)
	base := strings.SplitN(login, "/login", 2)[0]
	res, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || strings.TrimSpace(string(body)) != "ready" {
		t.Errorf("/readyz = %d %q, want 200 ready", res.StatusCode, body)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-log-format", "xml"}, "-log-format"},
		{[]string{"-trusted-proxies", "10.0.0.0/8,not-an-ip"}, "-trusted-proxies"},
	} {
		_, err := parseConfig(tt.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want one naming %s", tt.args, err, tt.want)
		}
	}
}

// TestRetainDeletesSessionsIdleLongerThanIt (SPEC §16 -retain): of three sessions, the one
// created and last used 100 days ago is deleted; the one created then but used yesterday and the
// one created yesterday are kept; -retain's forms are read, bad ones refused.
func TestRetainDeletesSessionsIdleLongerThanIt(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := now.Add(-100 * 24 * time.Hour)
	db.Now = func() time.Time { return clock }
	broker := agent.NewBroker()
	runner := agent.New(agent.Config{Store: db, Broker: broker, Models: noModels{}, Tools: tool.NewRegistry()})
	mk := func(title string, created time.Time) agent.Session {
		t.Helper()
		s := agent.Session{ID: title + "-id", Title: title, Model: "faux:demo", Workspace: t.TempDir(), State: agent.Idle, CreatedAt: created, Mode: "default"}
		if err := db.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	old := mk("old", now.Add(-100*24*time.Hour))
	used := mk("used", now.Add(-100*24*time.Hour))
	clock = now.Add(-24 * time.Hour)
	if _, err := db.AppendEntry(ctx, used.ID, agent.Message{Role: agent.User, Content: []agent.Block{{Type: "text", Text: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	recent := mk("recent", now.Add(-24*time.Hour))

	if n := deleteIdle(ctx, slog.New(slog.DiscardHandler), db, runner, 90*24*time.Hour, now); n != 1 {
		t.Errorf("deleted %d sessions, want 1", n)
	}
	if _, err := db.Session(ctx, old.ID); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("the idle session is still there (%v)", err)
	}
	for _, s := range []agent.Session{used, recent} {
		if _, err := db.Session(ctx, s.ID); err != nil {
			t.Errorf("session %q was deleted: %v", s.Title, err)
		}
	}

	for in, want := range map[string]time.Duration{"": 0, "0": 0, "90d": 90 * 24 * time.Hour, "36h": 36 * time.Hour} {
		if got, err := parseRetain(in); err != nil || got != want {
			t.Errorf("parseRetain(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-3d", "xd", "10m", "soon"} {
		if _, err := parseRetain(bad); err == nil || !strings.Contains(err.Error(), "-retain") {
			t.Errorf("parseRetain(%q): err %v, want one naming -retain", bad, err)
		}
	}
}

// noModels offers the faux demo model by name but never runs one: the retain test sends nothing.
type noModels struct{}

func (noModels) Model(string) (agent.Model, error) { return nil, nil }
func (noModels) Names() []string                   { return []string{"faux:demo"} }
