package main

import (
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"countersign/internal/pgtest"
	"countersign/internal/store/pg"
)

// TestReadyzFollowsThePostgreSQLDatabaseDownAndBack (SPEC §16, issue 21 acceptance 6): a
// server whose PostgreSQL database is behind a proxy answers /readyz 200 while the database
// answers, 503 saying why while it is down (connections refused) and while it hangs (bytes
// held: the answer still comes, after the store's ReadyTimeout), and 200 again once it is back;
// no answer shows the URL, its password or the database's address.
func TestReadyzFollowsThePostgreSQLDatabaseDownAndBack(t *testing.T) {
	const password = "s3cret-readyz-pw"
	proxy := pgtest.NewProxy(t, pgtest.Database(t))
	u, err := url.Parse(proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password) // the test server trusts local connections
	dbURL := u.String()
	key := filepath.Join(t.TempDir(), "share-key")
	login := startServer(t, []string{"-db", dbURL, "-share-key", key, "-token", testToken}, nil)
	base := strings.SplitN(login, "/login", 2)[0]

	client := &http.Client{Timeout: time.Minute} // a hanging /readyz fails the test, not hangs it
	readyz := func() (int, string) {
		t.Helper()
		res, err := client.Get(base + "/readyz")
		if err != nil {
			t.Fatalf("GET /readyz: %v", err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	// until polls /readyz until it answers status, with a generous deadline for a slow machine.
	until := func(status int) string {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			got, body := readyz()
			if got == status {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz = %d %q for a minute, want %d", got, body, status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	secretFree := func(body string) {
		t.Helper()
		for _, s := range []string{password, u.Host, u.Port(), strings.TrimPrefix(u.Path, "/"), "postgres://"} {
			if strings.Contains(body, s) {
				t.Errorf("/readyz body %q shows %q", body, s)
			}
		}
	}

	if got, body := readyz(); got != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz with the database up = %d %q, want 200 ready", got, body)
	}
	proxy.Down()
	body := until(http.StatusServiceUnavailable)
	if body != "not ready: the database does not answer\n" {
		t.Errorf("/readyz while the database is down: %q, want the reason", body)
	}
	secretFree(body)
	proxy.Up()
	until(http.StatusOK)

	proxy.Hang()
	body = until(http.StatusServiceUnavailable)
	if body != "not ready: the database did not answer within "+pg.ReadyTimeout.String()+"\n" {
		t.Errorf("/readyz while the database hangs: %q, want the reason", body)
	}
	secretFree(body)
	proxy.Up()
	until(http.StatusOK)
}
