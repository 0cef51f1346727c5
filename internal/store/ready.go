package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"countersign/internal/apperr"
)

// ReadyTimeout bounds Ready: a database that hangs (a disk that stopped answering, a network
// partition, a stuck server) makes Ready fail after it rather than keep GET /readyz waiting.
const ReadyTimeout = 2 * time.Second

// CheckReady is a backend's Ready (Backend): whether the database answers, within ReadyTimeout,
// and has every migration of migrations (its files migrations/*.sql) applied, as countApplied
// (a query of one count, on the backend's record of its migrations) counts them. The error's apperr message (code
// internal) says which part failed in words safe to show anyone — "the database does not
// answer", "the database did not answer within 2s", "3 of 5 migrations applied" — with the
// driver's error behind it for the log.
func (db *SQL) CheckReady(ctx context.Context, migrations fs.FS, countApplied string) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	want := len(names)
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	var applied int
	if err := db.conn.QueryRow(ctx, countApplied).Scan(&applied); err != nil {
		msg := "the database does not answer"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			msg = fmt.Sprintf("the database did not answer within %v", ReadyTimeout)
		}
		return fmt.Errorf("%w: %w", apperr.Errorf(apperr.Internal, "%s", msg), err)
	}
	if applied < want {
		return apperr.Errorf(apperr.Internal, "%d of %d migrations applied", applied, want)
	}
	return nil
}
