package web_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/web"
)

// lockedBuffer is a log destination safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A request on a share link that fails inside the server is logged with its path, but never
// with the link's token (SPEC §16).
func TestFailingShareLinkRequestLogsNoToken(t *testing.T) {
	logs := &lockedBuffer{}
	ts := newTestServerConfig(t, map[string]string{"one": oneCall}, func(c *web.Config, _ *http.Server) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "shared", "model": "faux:one"}, &sess)
	var link struct{ URL string }
	if st := ts.call(t, "POST", "/api/sessions/"+sess.ID+"/shares", map[string]string{"role": "approver"}, &link); st != 201 {
		t.Fatalf("create link = %d", st)
	}
	u, err := url.Parse(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimPrefix(u.Path, "/r/")

	// The store fails from now on: every request is an internal error, logged.
	ts.db.Close()
	for _, req := range []struct{ method, path string }{
		{"GET", u.Path}, {"GET", u.Path + "/live"}, {"POST", u.Path + "/name"},
		{"POST", u.Path + "/approvals/x/decision"},
	} {
		res, err := http.Post(ts.URL+req.path, "application/x-www-form-urlencoded", strings.NewReader("name=Rita"))
		if req.method == "GET" {
			res, err = http.Get(ts.URL + req.path)
		}
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusInternalServerError {
			t.Errorf("%s %s with a failing store = %d, want 500", req.method, req.path, res.StatusCode)
		}
	}
	got := logs.String()
	if !strings.Contains(got, "path=/r/<redacted>/name") {
		t.Errorf("the log does not name the redacted path:\n%s", got)
	}
	if strings.Contains(got, tok) {
		t.Errorf("the log holds the share token %s:\n%s", tok, got)
	}
}

func TestLoggablePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/sessions/abc", "/sessions/abc"},
		{"/r/SECRET", "/r/<redacted>"},
		{"/r/SECRET/live", "/r/<redacted>/live"},
		{"/d/SECRET/approve?x=1", "/d/<redacted>/approve?x=1"},
		{"/login?token=SECRET", "/login?token=redacted"},
		{"/api/x?a=b&Token=SECRET", "/api/x?Token=redacted&a=b"},
		{"/rx/notatoken", "/rx/notatoken"},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := web.Loggable(u); got != tc.want {
			t.Errorf("Loggable(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
