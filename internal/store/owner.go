package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"countersign/internal/apperr"
)

// CreateOwnerSession stores an owner login (issue 15 item 11): idHash is the hex SHA-256 of the
// random id its cookie holds, never the id; it is valid until expiresAt. Logins that expired by
// createdAt are deleted in the same commit, so the table holds only live ones and those of the
// last ttl. Errors: apperr.Conflict for an idHash that exists.
func (db *DB) CreateOwnerSession(ctx context.Context, idHash string, createdAt, expiresAt time.Time) (err error) {
	defer apperr.Wrap(&err, "store.CreateOwnerSession")
	err = db.commit(ctx, true, func(w *writeTx) error {
		if _, err := w.stmt(deleteExpiredOwnerSessions).ExecContext(w.ctx, formatTime(createdAt)); err != nil {
			return err
		}
		_, err := w.stmt(insertOwnerSession).ExecContext(w.ctx, idHash, formatTime(createdAt), formatTime(expiresAt))
		return err
	}, deleteExpiredOwnerSessions, insertOwnerSession)
	if isUnique(err) {
		return apperr.Errorf(apperr.Conflict, "owner session exists")
	}
	return err
}

const (
	deleteExpiredOwnerSessions = `DELETE FROM owner_sessions WHERE expires_at <= ?`
	insertOwnerSession         = `INSERT INTO owner_sessions (id_hash, created_at, expires_at) VALUES (?, ?, ?)`
)

// OwnerSessionExpiry returns when the owner login idHash expires, or apperr.NotFound when there
// is none (never created, logged out, or deleted after expiring). The caller compares the time
// with its clock.
func (db *DB) OwnerSessionExpiry(ctx context.Context, idHash string) (_ time.Time, err error) {
	defer apperr.Wrap(&err, "store.OwnerSessionExpiry")
	var at string
	err = db.reads.QueryRowContext(ctx, `SELECT expires_at FROM owner_sessions WHERE id_hash = ?`, idHash).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, apperr.Errorf(apperr.NotFound, "owner session not found")
	}
	if err != nil {
		return time.Time{}, err
	}
	return parseTime(at)
}

// DeleteOwnerSession ends the owner login idHash (logout); deleting one that does not exist is
// not an error.
func (db *DB) DeleteOwnerSession(ctx context.Context, idHash string) (err error) {
	defer apperr.Wrap(&err, "store.DeleteOwnerSession")
	return db.commit(ctx, false, func(w *writeTx) error {
		_, err := w.stmt(deleteOwnerSession).ExecContext(w.ctx, idHash)
		return err
	}, deleteOwnerSession)
}

const deleteOwnerSession = `DELETE FROM owner_sessions WHERE id_hash = ?`
