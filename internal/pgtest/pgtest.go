// Package pgtest gives tests a real PostgreSQL database (issue 21: the PostgreSQL store is tested
// against a real server, never a mock).
//
// The server is the one COUNTERSIGN_TEST_POSTGRES names (a postgres:// URL with rights to create
// databases); `make test` and .ci/run start a throwaway cluster and set it
// (scripts/with-postgres.sh). Each call of Database creates a fresh, empty database on it, named
// after the test, and drops it when the test ends, so tests never see each other's rows and may
// run in parallel.
//
// Without the variable a test calling Database is skipped with a message saying so, except under
// CI=true, where it fails: CI must never skip the PostgreSQL cases.
package pgtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL is the environment variable naming the test server.
const EnvURL = "COUNTERSIGN_TEST_POSTGRES"

// ServerURL is the test server's URL, or "" after skipping t (or failing it under CI=true) when
// EnvURL is not set.
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set under CI=true: CI must run the PostgreSQL cases (make test starts a cluster with scripts/with-postgres.sh)", EnvURL)
		}
		t.Skipf("PostgreSQL case skipped: %s is not set (make test starts a throwaway cluster when Debian's postgresql is installed)", EnvURL)
	}
	return u
}

// Database creates an empty database for t on the test server and returns its URL; it is
// dropped (its connections terminated) when t ends. Skips or fails t as ServerURL does.
func Database(t testing.TB) string {
	t.Helper()
	server := ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", redact(server), err)
	}
	defer admin.Close(context.Background())
	name := dbName(t.Name())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			t.Errorf("pgtest: connect to drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(server)
	if err != nil {
		t.Fatalf("pgtest: %s is not a URL: %v", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

// dbName is a database name for a test: its name in lower case letters, digits and _, cut to
// leave room for a random suffix within PostgreSQL's 63 bytes.
func dbName(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 40 {
		s = s[:40]
	}
	return fmt.Sprintf("t_%s_%s", s, strings.ToLower(rand.Text()[:10]))
}

// redact is a URL without its password, for messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}
