package store

import (
	"context"
	"time"

	"countersign/internal/apperr"
)

// CreateOwnerSession stores an owner login (issue 15 item 11): idHash is the hex SHA-256 of the
// random id its cookie holds, never the id; it is valid until expiresAt. Logins that expired by
// createdAt are deleted in the same commit, so the table holds only live ones and those of the
// last ttl. Errors: apperr.Conflict for an idHash that exists.
func (db *SQL) CreateOwnerSession(ctx context.Context, idHash string, createdAt, expiresAt time.Time) (err error) {
	defer apperr.Wrap(&err, "store.CreateOwnerSession")
	err = db.write(ctx, Atomic, func(tx Querier) error {
		if _, err := db.exec(ctx, tx, deleteExpiredOwnerSessions, formatTime(createdAt)); err != nil {
			return err
		}
		_, err := db.exec(ctx, tx, insertOwnerSession, idHash, formatTime(createdAt), formatTime(expiresAt))
		return err
	})
	if db.isUnique(err) {
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
func (db *SQL) OwnerSessionExpiry(ctx context.Context, idHash string) (_ time.Time, err error) {
	defer apperr.Wrap(&err, "store.OwnerSessionExpiry")
	var at string
	err = db.queryRow(ctx, db.reads(), `SELECT expires_at FROM owner_sessions WHERE id_hash = ?`, idHash).Scan(&at)
	if isNoRows(err) {
		return time.Time{}, apperr.Errorf(apperr.NotFound, "owner session not found")
	}
	if err != nil {
		return time.Time{}, err
	}
	return parseTime(at)
}

// DeleteOwnerSession ends the owner login idHash (logout); deleting one that does not exist is
// not an error.
func (db *SQL) DeleteOwnerSession(ctx context.Context, idHash string) (err error) {
	defer apperr.Wrap(&err, "store.DeleteOwnerSession")
	_, err = db.exec1(ctx, 0, deleteOwnerSession, idHash)
	return err
}

const deleteOwnerSession = `DELETE FROM owner_sessions WHERE id_hash = ?`
