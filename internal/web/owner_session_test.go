package web_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/web"
)

// clock is an injectable clock for tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// recordingSessions records the ids the server stores.
type recordingSessions struct {
	web.OwnerSessions
	created []string
}

func (r *recordingSessions) CreateOwnerSession(ctx context.Context, idHash string, createdAt, expiresAt time.Time) error {
	r.created = append(r.created, idHash)
	return r.OwnerSessions.CreateOwnerSession(ctx, idHash, createdAt, expiresAt)
}

// ownerLogin logs in with the owner token and returns the owner cookie the server set.
func ownerLogin(t *testing.T, ts *testServer) *http.Cookie {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Get(ts.URL + "/login?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("login = %d, want 303", res.StatusCode)
	}
	for _, ck := range res.Cookies() {
		if ck.Name == "countersign_owner" {
			return ck
		}
	}
	t.Fatal("login set no owner cookie")
	return nil
}

// withCookie sends method path with only the cookie given (a copy of the browser's).
func withCookie(t *testing.T, ts *testServer, method, path string, ck *http.Cookie) int {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// The owner's login is a server-side session: its cookie lasts -session-ttl, an expired login
// is 401, and logout ends it on the server, so a copy of the cookie stops working too. The
// owner's bearer token is not a login and keeps working.
func TestOwnerLoginExpiresAndLogoutEndsItOnTheServer(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	rec := &recordingSessions{}
	ts := newTestServerConfig(t, nil, func(c *web.Config, _ *http.Server) {
		c.SessionTTL, c.Now = time.Hour, clk.Now
		rec.OwnerSessions, c.OwnerSessions = c.OwnerSessions, rec
	})

	ck := ownerLogin(t, ts)
	if ck.MaxAge != 3600 || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Errorf("owner cookie %+v, want Max-Age 3600, HttpOnly, SameSite=Strict", ck)
	}
	if strings.Contains(ck.Value, token) {
		t.Error("the cookie holds the owner token")
	}
	if len(rec.created) != 1 || rec.created[0] == ck.Value || len(rec.created[0]) != 64 {
		t.Errorf("stored %q for cookie %q, want one hex SHA-256 of it", rec.created, ck.Value)
	}
	if st := withCookie(t, ts, "GET", "/", ck); st != http.StatusOK {
		t.Fatalf("session list with the cookie = %d, want 200", st)
	}

	t.Run("expired", func(t *testing.T) {
		clk.Advance(59 * time.Minute)
		if st := withCookie(t, ts, "GET", "/", ck); st != http.StatusOK {
			t.Errorf("a minute before expiry = %d, want 200", st)
		}
		clk.Advance(time.Minute)
		if st := withCookie(t, ts, "GET", "/", ck); st != http.StatusUnauthorized {
			t.Errorf("at expiry = %d, want 401", st)
		}
		if st := ts.call(t, "GET", "/api/sessions", nil, nil); st != http.StatusOK {
			t.Errorf("the bearer token after the login expired = %d, want 200", st)
		}
	})

	t.Run("logged out", func(t *testing.T) {
		browser := ownerLogin(t, ts)
		copied := &http.Cookie{Name: browser.Name, Value: browser.Value}
		if st := withCookie(t, ts, "GET", "/", copied); st != http.StatusOK {
			t.Fatalf("the copied cookie before logout = %d, want 200", st)
		}
		if st := withCookie(t, ts, "POST", "/logout", browser); st != http.StatusOK {
			t.Fatalf("logout = %d, want 200", st)
		}
		if st := withCookie(t, ts, "GET", "/", copied); st != http.StatusUnauthorized {
			t.Errorf("the copied cookie after logout = %d, want 401", st)
		}
	})
}
