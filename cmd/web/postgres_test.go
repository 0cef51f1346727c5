package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"countersign/internal/pgtest"
	"countersign/internal/store/pg"
)

// TestPostgresDB (SPEC §16): -db postgres://… serves from PostgreSQL: /readyz is 200, a session
// made through the API is in the database, the share key is the -share-key file; a second server
// on the same database refuses to start, saying why; without -share-key the flags are refused.
func TestPostgresDB(t *testing.T) {
	url := pgtest.Database(t)
	key := filepath.Join(t.TempDir(), "keys", "share-key")
	login := startServer(t, []string{"-db", url, "-share-key", key, "-token", testToken}, nil)
	base := strings.SplitN(login, "/login", 2)[0]

	res, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("/readyz = %d %q, want 200", res.StatusCode, body)
	}
	b, _ := json.Marshal(map[string]string{"title": "in postgres", "model": "faux:demo"})
	req, _ := http.NewRequest("POST", base+"/api/sessions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/sessions = %d %s", res.StatusCode, body)
	}

	ctx := context.Background()
	db, err := pg.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sessions, err := db.Sessions(ctx)
	if err != nil || len(sessions) != 1 || sessions[0].Title != "in postgres" {
		t.Fatalf("sessions in PostgreSQL: %+v, %v; want the one made through the API", sessions, err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("share key file: %v, %v; want it made, 0600", fi, err)
	}

	// A second server on the same database (SPEC §16: several replicas share one) starts and
	// serves what the first stored.
	second := strings.SplitN(startServer(t, []string{"-db", url, "-share-key", key, "-token", testToken}, nil), "/login", 2)[0]
	req, _ = http.NewRequest("GET", second+"/api/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), "in postgres") {
		t.Fatalf("GET /api/sessions on a second server = %d %s, want the session the first one made", res.StatusCode, body)
	}

	_, err = parseConfig([]string{"-db", url}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-share-key") {
		t.Fatalf("postgres -db without -share-key: %v, want it refused", err)
	}
}

// TestKeyFilesWithPostgres: with a PostgreSQL -db the keys live where -share-key says (the
// webhook key beside it), and the file tools' protected files are those keys and the policy,
// never a path made from the URL; with SQLite they stay beside the database.
func TestKeyFilesWithPostgres(t *testing.T) {
	pgCfg := config{db: "postgres://u:p@db.example/cs", shareKey: "/etc/cs/team.share-key", policy: "/etc/cs/policy.json"}
	if got := pgCfg.notifyKeyFile(); got != "/etc/cs/team.notify-key" {
		t.Errorf("notify key with PostgreSQL = %q", got)
	}
	if got := strings.Join(ownFiles(pgCfg), " "); got != "/etc/cs/team.share-key /etc/cs/team.notify-key /etc/cs/policy.json" {
		t.Errorf("ownFiles with PostgreSQL = %q", got)
	}
	sq := config{db: "/var/cs/cs.db"}
	if sq.shareKeyFile() != "/var/cs/cs.db.share-key" || sq.notifyKeyFile() != "/var/cs/cs.db.notify-key" {
		t.Errorf("SQLite keys: %q, %q", sq.shareKeyFile(), sq.notifyKeyFile())
	}
}
