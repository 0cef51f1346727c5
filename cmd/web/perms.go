package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// tightenPermissions makes the database's files owner-only (issue 15: they hold transcripts,
// approvals and the share key): the database, its -wal and -shm, "<db>.share-key" and
// "<db>.lock", under the name db as given and under its real path (symlinks resolved), wherever
// one exists with a group or other permission bit set (left by an earlier version, or made by
// hand). Each such file is changed to 0600, and log gets one warning line per file: "tightened
// permissions of PATH from 0644 to 0600".
//
// Why before SQLite opens the database: SQLite creates -wal and -shm with the database file's
// mode, so they follow once the database is 0600. Errors: a file that cannot be inspected or
// changed (not the server's user's, say), named with its mode.
func tightenPermissions(log *slog.Logger, db string) error {
	bases := []string{db}
	if real, err := filepath.EvalSymlinks(db); err == nil && real != db {
		bases = []string{real, db}
	}
	seen := map[string]bool{}
	for _, base := range bases {
		for _, path := range []string{base, base + "-wal", base + "-shm", base + ".share-key", base + ".lock"} {
			if seen[path] {
				continue
			}
			seen[path] = true
			fi, err := os.Stat(path)
			if os.IsNotExist(err) {
				continue
			}
			if err != nil {
				return err
			}
			perm := fi.Mode().Perm()
			if perm&0o077 == 0 {
				continue
			}
			if err := os.Chmod(path, 0o600); err != nil {
				return fmt.Errorf("%s is %04o (readable beyond its owner) and cannot be made 0600: %w", path, perm, err)
			}
			log.Warn(fmt.Sprintf("tightened permissions of %s from %04o to 0600", path, perm))
		}
	}
	return nil
}
