package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheREADMENamesTheFilesToBackUp (issue 33): README.md's "Backups, upgrades and keys" names
// the key files the server really keeps — beside a SQLite file, and beside a PostgreSQL team's
// share key — and the tables its key rotation steps touch exist in both stores' migrations.
func TestTheREADMENamesTheFilesToBackUp(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Backups, upgrades and keys\n")
	section, _, _ = strings.Cut(section, "\n## ")
	if !ok {
		t.Fatal(`README.md has no "## Backups, upgrades and keys"`)
	}
	lite := config{db: "countersign.db"}
	team := config{db: "postgres://countersign@db/countersign", shareKey: "team.share-key"}
	for _, file := range []string{lite.shareKeyFile(), lite.notifyKeyFile(), team.shareKeyFile(), team.notifyKeyFile()} {
		if !strings.Contains(section, "`"+file+"`") {
			t.Errorf("the backup section does not name %s", file)
		}
	}
	for _, table := range []string{"owner_sessions", "key_fingerprints"} {
		if !strings.Contains(section, table) {
			t.Errorf("the backup section no longer names %s", table)
			continue
		}
		for _, dir := range []string{"../../internal/store/sqlite/migrations", "../../internal/store/pg/migrations"} {
			if table == "key_fingerprints" && strings.Contains(dir, "sqlite") {
				continue // PostgreSQL only: one SQLite server has nobody to agree with
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*.sql"))
			found := false
			for _, f := range files {
				b, _ := os.ReadFile(f)
				found = found || strings.Contains(string(b), "CREATE TABLE "+table)
			}
			if !found {
				t.Errorf("the README's %s is no table of %s", table, dir)
			}
		}
	}
}
