package pg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"countersign/internal/apperr"
)

// CreateOwnerSession stores an owner login: idHash is the hex SHA-256 of the random id its cookie
// holds, never the id; it is valid until expiresAt. Logins that expired by createdAt are deleted
// in the same transaction. Errors: apperr.Conflict for an idHash that exists.
func (db *DB) CreateOwnerSession(ctx context.Context, idHash string, createdAt, expiresAt time.Time) (err error) {
	defer apperr.Wrap(&err, "store.CreateOwnerSession")
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM owner_sessions WHERE expires_at <= $1`, formatTime(createdAt)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO owner_sessions (id_hash, created_at, expires_at) VALUES ($1, $2, $3)`,
			idHash, formatTime(createdAt), formatTime(expiresAt))
		return err
	})
	if isUnique(err) {
		return apperr.Errorf(apperr.Conflict, "owner session exists")
	}
	return err
}

// OwnerSessionExpiry returns when the owner login idHash expires, or apperr.NotFound when there
// is none.
func (db *DB) OwnerSessionExpiry(ctx context.Context, idHash string) (_ time.Time, err error) {
	defer apperr.Wrap(&err, "store.OwnerSessionExpiry")
	var at string
	err = db.pool.QueryRow(ctx, `SELECT expires_at FROM owner_sessions WHERE id_hash = $1`, idHash).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
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
	_, err = db.exec(ctx, `DELETE FROM owner_sessions WHERE id_hash = $1`, idHash)
	return err
}
