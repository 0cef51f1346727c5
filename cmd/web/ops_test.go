package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
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
	if res := get(owner, login); res.StatusCode != 200 {
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
