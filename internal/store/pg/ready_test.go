package pg_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/pgtest"
	"countersign/internal/store/pg"
)

// withPassword is dbURL with a password in it (the test server trusts local connections and
// never asks for it), so a test can check that it shows nowhere.
func withPassword(t *testing.T, dbURL, password string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

// readyChanges calls db.Ready until its answer is nil (wantNil) or an error, with a generous
// deadline for a slow machine, and returns the last error.
func readyChanges(t *testing.T, db *pg.DB, wantNil bool) error {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := db.Ready(context.Background())
		if (err == nil) == wantNil {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready = %v for a minute, want nil: %v", err, wantNil)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadyFollowsTheDatabaseDownAndBack (SPEC §16, issue 21 acceptance 6): with the database
// behind a proxy, Ready fails, saying the database does not answer, while the proxy refuses
// connections, and is nil again once they are let through; while the database hangs (bytes held,
// nothing closed), Ready gives up after its own ReadyTimeout even for a caller with no deadline.
// No error shows the URL's password.
func TestReadyFollowsTheDatabaseDownAndBack(t *testing.T) {
	const password = "s3cret-readyz-pw"
	proxy := pgtest.NewProxy(t, pgtest.Database(t))
	db := open(t, withPassword(t, proxy.URL(), password), time.Now)
	t.Cleanup(func() { db.Close() })
	// First of all cleanups: a Ready still hanging (the failure this test looks for) holds a
	// connection Close would wait for; down, the connection breaks and Ready returns.
	t.Cleanup(proxy.Down)
	if err := db.Ready(context.Background()); err != nil {
		t.Fatalf("Ready = %v, want nil", err)
	}
	check := func(err error, wantMessage string) {
		t.Helper()
		if apperr.MessageOf(err) != wantMessage || strings.Contains(err.Error(), password) {
			t.Errorf("Ready = %v (message %q); want the message %q and no password", err, apperr.MessageOf(err), wantMessage)
		}
	}

	proxy.Down()
	check(readyChanges(t, db, false), "the database does not answer")
	proxy.Up()
	readyChanges(t, db, true)

	proxy.Hang()
	done := make(chan error, 1)
	go func() { done <- db.Ready(context.Background()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Ready = nil while the database hangs")
		}
		check(err, "the database did not answer within "+pg.ReadyTimeout.String())
	case <-time.After(time.Minute):
		t.Fatal("Ready did not return within a minute while the database hangs: it has no timeout of its own")
	}
	proxy.Up()
	readyChanges(t, db, true)
}
