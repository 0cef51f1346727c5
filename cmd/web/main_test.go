package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/testkit"
)

// server starts run() on a free port and returns the login URL it printed.
func startServer(t *testing.T, args []string, env map[string]string) (loginURL string) {
	t.Helper()
	return startServerLogging(t, args, env, io.Discard)
}

// startServerLogging is startServer with the server's log written to stderr.
func startServerLogging(t *testing.T, args []string, env map[string]string, stderr io.Writer) (loginURL string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	base := []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "db", "cs.db"), "-workspace", t.TempDir()}
	go func() {
		done <- run(ctx, append(base, args...), func(k string) string { return env[k] }, pw, stderr)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("server did not shut down within 15s")
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	go io.Copy(io.Discard, pr)
	if err != nil {
		t.Fatalf("reading the login line: %v", err)
	}
	m := regexp.MustCompile(`^Countersign listening on (http://127\.0\.0\.1:\d+/login\?token=\S+)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("login line %q does not match SPEC §11", line)
	}
	return m[1]
}

func TestLoginLineHealthzAndOwnerOnly(t *testing.T) {
	const s3cret = "s3cret-owner-token-s3cret-s3cret-x"
	login := startServer(t, []string{"-token", s3cret}, nil)
	base := strings.SplitN(login, "/login", 2)[0]
	if strings.Contains(login, s3cret) || !strings.HasSuffix(login, "/login?token=…") {
		t.Fatalf("login line %s: want the -token's place, not the token (the operator set it)", login)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	get := func(c *http.Client, path string) *http.Response {
		t.Helper()
		res, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	if res := get(noRedirect, "/healthz"); res.StatusCode != 200 {
		t.Errorf("/healthz = %d, want 200 without login", res.StatusCode)
	}
	for _, path := range []string{"/", "/sessions/x", "/sessions/x/live", "/nope", "/login?token=wrong", "/login"} {
		if res := get(noRedirect, path); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the cookie = %d, want 401", path, res.StatusCode)
		}
	}
	for _, path := range []string{"/sessions", "/sessions/x/messages", "/sessions/x/stop", "/sessions/x/approvals/y/decision", "/logout"} {
		res, err := noRedirect.Post(base+path, "application/x-www-form-urlencoded", strings.NewReader("text=hi"))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST %s without the cookie = %d, want 401", path, res.StatusCode)
		}
	}

	res := get(noRedirect, "/login?token="+s3cret)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		t.Fatalf("login = %d to %q, want 303 to /", res.StatusCode, res.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "countersign_owner" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("owner cookie %+v, want HttpOnly and SameSite=Strict", cookie)
	}
	if strings.Contains(cookie.Value, s3cret) {
		t.Error("the cookie holds the token in clear")
	}
	jar, _ := cookiejar.New(nil)
	owner := &http.Client{Jar: jar}
	if res := get(owner, "/login?token="+s3cret); res.StatusCode != 200 {
		t.Fatalf("session list after login = %d", res.StatusCode)
	}
	if res := get(owner, "/nope"); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown page as owner = %d, want 404", res.StatusCode)
	}
	if res := get(owner, "/sessions/unknown"); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown session as owner = %d, want 404", res.StatusCode)
	}
}

func TestScriptsFolderAppearsInNewSessionForm(t *testing.T) {
	dir := t.TempDir()
	script := `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`
	if err := os.WriteFile(filepath.Join(dir, "my-script.json"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	// Set by environment variable; the flag would win.
	login := startServer(t, nil, map[string]string{"COUNTERSIGN_SCRIPTS": dir, "COUNTERSIGN_TOKEN": "envtoken-from-the-environment-0123"})
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	res, err := c.Get(loginURL(strings.SplitN(login, "/login", 2)[0], "envtoken-from-the-environment-0123"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`<option value="faux:demo"`, `<option value="faux:my-script"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the New-session form lacks %s", want)
		}
	}
}

func TestFlagsWinOverEnvironment(t *testing.T) {
	env := map[string]string{"COUNTERSIGN_ADDR": "127.0.0.1:1", "COUNTERSIGN_APPROVAL_TIMEOUT": "2s", "COUNTERSIGN_DB": "env.db"}
	getenv := func(k string) string { return env[k] }
	c, err := parseConfig([]string{"-addr", "127.0.0.1:9999", "-workspace", t.TempDir()}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.addr != "127.0.0.1:9999" || c.approvalTimeout != 2*time.Second || c.db != "env.db" {
		t.Errorf("config %+v: want the -addr flag over the environment, the rest from it", c)
	}
	if len(c.token) < 32 {
		t.Errorf("random token %q is %d characters, want at least 32", c.token, len(c.token))
	}
	defaults, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	short := func(k string) string { return map[string]string{"COUNTERSIGN_TOKEN": "envtoken"}[k] }
	if _, err := parseConfig(nil, short, io.Discard); err == nil || !strings.Contains(err.Error(), "an owner token needs at least 32") {
		t.Errorf("COUNTERSIGN_TOKEN=envtoken: err %v, want a refusal naming the 32-character minimum", err)
	}
	if p, err := parseConfig([]string{"-pass-env", "GOPROXY, GOFLAGS"}, getenv, io.Discard); err != nil || !slices.Equal(p.passEnv, []string{"GOPROXY", "GOFLAGS"}) {
		t.Errorf("-pass-env GOPROXY, GOFLAGS = %q, %v", p.passEnv, err)
	}
	if defaults.addr != "127.0.0.1:8080" || defaults.db != "countersign.db" || defaults.approvalTimeout != 15*time.Minute {
		t.Errorf("defaults %+v do not match SPEC §11", defaults)
	}
	for _, bad := range [][]string{{"-approval-timeout", "soon"}, {"-workspace", "/no/such/folder"}, {"extra"}, {"-pass-env", "GOPROXY,NOT=A-NAME"},
		{"-token", "short-token-of-31-characters-xx"}} {
		if _, err := parseConfig(bad, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("parseConfig(%q) accepted bad input", bad)
		}
	}
}

// An owner token must be hard to guess and print as it is: at least 32 characters, at least 8
// distinct ones, no whitespace, control or invisible characters. The refusal names the rule.
func TestWeakOwnerTokensAreRefused(t *testing.T) {
	for _, tt := range []struct{ name, token, want string }{
		{"40 spaces", strings.Repeat(" ", 40), "holds whitespace or an invisible or control character (U+0020 at character 1)"},
		{"a space inside", "an-owner-token-of-forty characters-xyzw", "(U+0020 at character 24)"},
		{"a tab at the end", "an-owner-token-of-forty-characters-xyzw\t", "(U+0009 at character 40)"},
		{"a newline", "an-owner-token-of-forty\ncharacters-xyzw", "(U+000A at character 24)"},
		{"a NUL", "an-owner-token-of-forty\x00characters-xyzw", "(U+0000 at character 24)"},
		{"a zero-width space", "an-owner-token-of-forty\u200bcharacters-xyzw", "(U+200B at character 24)"},
		{"one character repeated", strings.Repeat("a", 40), "uses only 1 distinct characters; an owner token needs at least 8"},
		{"seven distinct characters", strings.Repeat("abcdefg", 6), "uses only 7 distinct characters; an owner token needs at least 8"},
		{"31 characters", "short-token-of-31-characters-xx", "is 31 characters; an owner token needs at least 32"},
		{"32 bytes, 16 characters", strings.Repeat("éà", 8), "is 16 characters; an owner token needs at least 32"},
		{"not UTF-8", "an-owner-token-of-forty-characters-\xff\xfe\xfd\xfc", "is not valid UTF-8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, from := range []struct {
				args []string
				env  map[string]string
			}{{[]string{"-token", tt.token}, nil}, {nil, map[string]string{"COUNTERSIGN_TOKEN": tt.token}}} {
				_, err := parseConfig(from.args, func(k string) string { return from.env[k] }, io.Discard)
				if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "-token (COUNTERSIGN_TOKEN)") ||
					!strings.Contains(err.Error(), "leave it unset for a random one") {
					t.Errorf("%q (args %q): err %v, want one that names -token and says %q", tt.token, from.args, err, tt.want)
				}
			}
		})
	}
	for _, ok := range []string{testToken, "eight-distinct-abcdefgh" + strings.Repeat("h", 9), "Ünïcödé-owner-tökén-of-32-chars!"} {
		if _, err := parseConfig([]string{"-token", ok}, func(string) string { return "" }, io.Discard); err != nil {
			t.Errorf("-token %q refused: %v", ok, err)
		}
	}
}

// A -token flag is visible to every user in ps: the server says so at start, and not when the
// token comes from COUNTERSIGN_TOKEN.
func TestTokenFlagIsWarnedAbout(t *testing.T) {
	const warning = "prefer the COUNTERSIGN_TOKEN environment variable"
	var flagged, env syncBuffer
	startServerLogging(t, []string{"-token", testToken}, nil, &flagged)
	startServerLogging(t, nil, map[string]string{"COUNTERSIGN_TOKEN": testToken}, &env)
	if !strings.Contains(flagged.String(), warning) {
		t.Errorf("with -token the log lacks %q:\n%s", warning, flagged.String())
	}
	if strings.Contains(env.String(), warning) {
		t.Errorf("with COUNTERSIGN_TOKEN the log warns about -token:\n%s", env.String())
	}
}

// The database, its share key and its lock file are created owner-only (issue 15).
func TestDatabaseFilesAreCreatedOwnerOnly(t *testing.T) {
	db := filepath.Join(t.TempDir(), "data", "cs.db")
	startServer(t, []string{"-db", db, "-token", testToken}, nil)
	for _, f := range []string{db, db + ".share-key", db + ".lock"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s has mode %v, want -rw-------", filepath.Base(f), got)
		}
	}
}

// Files an earlier version left readable by others (0644) are made owner-only at start, one
// warning line each, before SQLite opens the database: the -wal and -shm it makes then are 0600
// too (issue 15).
func TestStartTightensDatabaseFilesLeftReadable(t *testing.T) {
	for _, tt := range []struct {
		name     string
		existing []string // suffixes of the database's path made 0644 before the start
	}{
		{"all of them", []string{"", "-wal", "-shm", ".share-key", ".lock"}},
		{"the database only", []string{""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir()) // the log names real paths
			if err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(dir, "data", "cs.db")
			if err := os.MkdirAll(filepath.Dir(db), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, suffix := range tt.existing {
				var b []byte
				if suffix == ".share-key" {
					b = []byte(strings.Repeat("k", 32))
				}
				if err := os.WriteFile(db+suffix, b, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(db+suffix, 0o644); err != nil { // whatever the umask
					t.Fatal(err)
				}
			}
			var log syncBuffer
			startServerLogging(t, []string{"-db", db, "-token", testToken}, nil, &log)
			// While it serves, so the -wal and -shm are there.
			for _, suffix := range []string{"", "-wal", "-shm", ".share-key", ".lock"} {
				fi, err := os.Stat(db + suffix)
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Mode().Perm(); got != 0o600 {
					t.Errorf("%s has mode %v, want -rw-------", filepath.Base(db+suffix), got)
				}
			}
			logged := log.String()
			for _, suffix := range tt.existing {
				want := fmt.Sprintf("tightened permissions of %s from 0644 to 0600", db+suffix)
				if n := strings.Count(logged, want); n != 1 {
					t.Errorf("the log says %q %d times, want once:\n%s", want, n, logged)
				}
			}
			if n, want := strings.Count(logged, "tightened permissions"), len(tt.existing); n != want {
				t.Errorf("%d lines say they tightened permissions, want %d:\n%s", n, want, logged)
			}
		})
	}
}

// The server bounds slow clients: headers, whole requests, responses and idle connections
// (issue 15 item 7; web's tests show WebSockets outlive these limits).
func TestHTTPServerHasTimeouts(t *testing.T) {
	hs := newHTTPServer(http.NotFoundHandler(), context.Background())
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": hs.ReadHeaderTimeout,
		"ReadTimeout": hs.ReadTimeout, "WriteTimeout": hs.WriteTimeout, "IdleTimeout": hs.IdleTimeout} {
		if d <= 0 {
			t.Errorf("%s is not set", name)
		}
	}
}

// -fixture-tools is a boolean flag (issue 16 item 9): alone it means true, =false turns off what
// the environment turned on, and COUNTERSIGN_FIXTURE_TOOLS still takes true or false. A word
// after the bare flag is not its value but a stray argument, refused.
func TestFixtureToolsIsABooleanFlag(t *testing.T) {
	ws := t.TempDir()
	tests := []struct {
		name string
		args []string
		env  string
		want bool
	}{
		{"default", nil, "", false},
		{"bare flag", []string{"-fixture-tools"}, "", true},
		{"flag=true", []string{"-fixture-tools=true"}, "", true},
		{"flag=false over env true", []string{"-fixture-tools=false"}, "true", false},
		{"env true", nil, "true", true},
		{"env false", nil, "false", false},
		{"bare flag before another flag", []string{"-fixture-tools", "-addr", "127.0.0.1:1"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == "COUNTERSIGN_FIXTURE_TOOLS" {
					return tt.env
				}
				return ""
			}
			c, err := parseConfig(append([]string{"-workspace", ws}, tt.args...), getenv, io.Discard)
			if err != nil {
				t.Fatalf("parseConfig(%q): %v", tt.args, err)
			}
			if c.fixtureTools != tt.want {
				t.Errorf("parseConfig(%q) with COUNTERSIGN_FIXTURE_TOOLS=%q: fixtureTools = %v, want %v", tt.args, tt.env, c.fixtureTools, tt.want)
			}
		})
	}
	t.Run("a value after the bare flag is a stray argument", func(t *testing.T) {
		_, err := parseConfig([]string{"-workspace", ws, "-fixture-tools", "true"}, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "unexpected arguments: true") {
			t.Errorf("err = %v, want unexpected arguments: true", err)
		}
	})
	t.Run("a bad environment value", func(t *testing.T) {
		_, err := parseConfig([]string{"-workspace", ws}, func(k string) string { return map[string]string{"COUNTERSIGN_FIXTURE_TOOLS": "maybe"}[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `COUNTERSIGN_FIXTURE_TOOLS "maybe": want true or false`) {
			t.Errorf("err = %v, want a refusal naming the variable", err)
		}
	})
}

// TestTheOwnerTokenIsPrintedOnlyWhenTheServerMadeIt (issue 33): a token the server generated is
// printed in the login line, once, and that URL logs in; a token set with COUNTERSIGN_TOKEN or
// -token is in no line of stdout or stderr.
func TestTheOwnerTokenIsPrintedOnlyWhenTheServerMadeIt(t *testing.T) {
	login := startServer(t, nil, nil)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noRedirect.Get(login)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || strings.HasSuffix(login, "…") {
		t.Fatalf("the generated token's login URL %s = %d, want 303", login, res.StatusCode)
	}

	const set = "operator+set/token=with&odd%chars-0123"
	for _, how := range []struct {
		args []string
		env  map[string]string
	}{{nil, map[string]string{"COUNTERSIGN_TOKEN": set}}, {[]string{"-token", set}, nil}} {
		var stdout, stderr bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		args := append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "cs.db"), "-workspace", t.TempDir()}, how.args...)
		var mu sync.Mutex
		out := lockedWriter{&mu, &stdout}
		go func() {
			done <- run(ctx, args, func(k string) string { return how.env[k] }, out, lockedWriter{&mu, &stderr})
		}()
		testkit.Eventually(t, "the login line", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(stdout.String(), "listening on")
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if all := stdout.String() + stderr.String(); strings.Contains(all, set) || strings.Contains(all, url.QueryEscape(set)) {
			t.Fatalf("a token set by the operator (%v %v) was printed:\n%s", how.args, how.env, all)
		}
	}
}

// lockedWriter is an io.Writer under a lock, for a buffer the server writes while a test reads.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestALoginURLEncodesItsToken (issue 33): a token with +, /, =, & and % logs in through the URL
// loginURL makes of it (a + sent as it is would read as a space and answer 401).
func TestALoginURLEncodesItsToken(t *testing.T) {
	const odd = "a+b/c=d&e%f-owner-token-0123456789"
	login := startServer(t, nil, map[string]string{"COUNTERSIGN_TOKEN": odd})
	base := strings.SplitN(login, "/login", 2)[0]
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct {
		url  string
		want int
	}{{loginURL(base, odd), http.StatusSeeOther}, {base + "/login?token=" + odd, http.StatusUnauthorized}} {
		res, err := noRedirect.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("GET %s = %d, want %d", c.url, res.StatusCode, c.want)
		}
	}
}
