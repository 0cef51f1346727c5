package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"time"

	"countersign/internal/apperr"
)

// ReadyTimeout bounds Ready: a database that hangs (a disk that stopped answering, a network
// partition, a stuck server) makes Ready fail after it rather than keep GET /readyz waiting.
const ReadyTimeout = 2 * time.Second

// CheckReady is a backend's Ready (Backend): whether the database answers, within ReadyTimeout,
// has every migration of migrations (its files migrations/*.sql) applied, and has none newer than
// them, as table (the backend's record of its migrations: name, applied_at) says. The error's
// apperr message (code internal) says which part failed in words safe to show anyone — "the
// database does not answer", "the database did not answer within 2s", "3 of 5 migrations
// applied", "the database's schema (migration 0026) is newer than this binary's (0025)" — with
// the driver's error behind it for the log.
func (db *SQL) CheckReady(ctx context.Context, migrations fs.FS, table string) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	want := len(names)
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	var applied int
	var newest sql.NullString
	if err := db.conn.QueryRow(ctx, `SELECT COUNT(*), MAX(name) FROM `+table).Scan(&applied, &newest); err != nil {
		msg := "the database does not answer"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			msg = fmt.Sprintf("the database did not answer within %v", ReadyTimeout)
		}
		return fmt.Errorf("%w: %w", apperr.Errorf(apperr.Internal, "%s", msg), err)
	}
	if err := NewerSchema(newest.String, names); err != nil {
		return err
	}
	if applied < want {
		return apperr.Errorf(apperr.Internal, "%d of %d migrations applied", applied, want)
	}
	return nil
}

// migrationNumber is the number a migration's file name starts with ("0025_x.sql": 25), -1 for a
// name that does not start with digits.
func migrationNumber(name string) int {
	name = path.Base(name)
	end := 0
	for end < len(name) && name[end] >= '0' && name[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(name[:end])
	if err != nil {
		return -1
	}
	return n
}

// NewerSchema is the error of a database whose newest recorded migration (newest, a file name as
// recorded; "" for none) is numbered past every migration of the binary (files, its
// migrations/*.sql): such a database was migrated by a newer binary, whose tables and rows this
// one does not know how to keep (SPEC §16: it refuses to start, naming both). Code internal; the
// message names both versions and is safe to show anyone (GET /readyz). nil otherwise.
func NewerSchema(newest string, files []string) error {
	if newest == "" {
		return nil
	}
	binary, binaryName := -1, ""
	for _, f := range files {
		if n := migrationNumber(f); n > binary {
			binary, binaryName = n, path.Base(f)
		}
	}
	if n := migrationNumber(newest); n > binary {
		return apperr.Errorf(apperr.Internal, "the database's schema (migration %04d, %s) is newer than this binary's (migration %04d, %s): run a binary at least as new as the one that migrated it",
			n, path.Base(newest), binary, binaryName)
	}
	return nil
}
