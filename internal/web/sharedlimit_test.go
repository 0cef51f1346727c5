package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"countersign/internal/store/sqlite"
	"countersign/internal/web"
)

// TestFailedTokenAttemptsAreCountedOnceAcrossReplicas (SPEC §16, issue 33): with the failures
// counted in the database the replicas share (Config.FailedTokens), guesses spread over three
// servers spend one allowance: after ten in all, the next on any server is answered 429, even
// with the right token; another address is not affected.
func TestFailedTokenAttemptsAreCountedOnceAcrossReplicas(t *testing.T) {
	shared, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "shared.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.Close() })
	var replicas []http.Handler
	for range 3 {
		ts := newTestServerConfig(t, nil, func(c *web.Config, _ *http.Server) { c.FailedTokens = shared })
		replicas = append(replicas, ts.Server.Config.Handler)
	}
	get := func(replica int, addr, path string) int {
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = addr + ":40000"
		rec := httptest.NewRecorder()
		replicas[replica].ServeHTTP(rec, req)
		return rec.Code
	}
	const mallory, alice = "192.0.2.66", "192.0.2.1"
	for i := range 10 {
		if st := get(i%3, mallory, "/login?token=guess"+fmt.Sprint(i)); st != http.StatusUnauthorized {
			t.Fatalf("guess %d on replica %d = %d, want 401", i, i%3, st)
		}
	}
	for i := range 3 {
		if st := get(i, mallory, "/login?token="+token); st != http.StatusTooManyRequests {
			t.Errorf("the right token on replica %d after ten guesses spread over three = %d, want 429", i, st)
		}
	}
	if st := get(2, alice, "/login?token="+token); st != http.StatusSeeOther {
		t.Errorf("another address's login = %d, want 303", st)
	}
}
