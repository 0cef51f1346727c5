package pg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"countersign/internal/apperr"
	"countersign/internal/share"
)

const shareColumns = `id, session_id, role, label, token_hash, created_at, expires_at, revoked_at, last_used_at, can_edit, can_remember, for_name`

// CreateShare stores a share link (its token hash, never the token) with its rights. Errors:
// apperr.NotFound for an unknown session, apperr.Conflict for a duplicate id or hash.
func (db *DB) CreateShare(ctx context.Context, l share.Link) (err error) {
	defer apperr.Wrap(&err, "store.CreateShare")
	_, err = db.exec(ctx, `INSERT INTO shares (`+shareColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		l.ID, l.SessionID, string(l.Role), l.Label, l.TokenHash, formatTime(l.CreatedAt),
		nullTime(l.ExpiresAt), nullTime(l.RevokedAt), nullTime(l.LastUsedAt), l.CanEdit, l.CanRemember, l.For)
	switch {
	case isForeignKey(err):
		return apperr.Errorf(apperr.NotFound, "session %s not found", l.SessionID)
	case isUnique(err):
		return apperr.Errorf(apperr.Conflict, "share link already exists")
	case isInvalid(err):
		return apperr.Errorf(apperr.Invalid, "share link cannot be stored: role %q", l.Role)
	}
	return err
}

// Share returns link id, or apperr.NotFound.
func (db *DB) Share(ctx context.Context, id string) (share.Link, error) {
	return db.oneShare(ctx, `SELECT `+shareColumns+` FROM shares WHERE id = $1`, id)
}

// ShareByHash returns the link whose token hashes to tokenHash, or apperr.NotFound.
func (db *DB) ShareByHash(ctx context.Context, tokenHash string) (share.Link, error) {
	return db.oneShare(ctx, `SELECT `+shareColumns+` FROM shares WHERE token_hash = $1`, tokenHash)
}

// Shares lists a session's links, newest first (equal times, last stored first).
func (db *DB) Shares(ctx context.Context, sessionID string) (_ []share.Link, err error) {
	defer apperr.Wrap(&err, "store.Shares(%s)", sessionID)
	return queryAll(ctx, db, scanShare, `SELECT `+shareColumns+` FROM shares WHERE session_id = $1
		ORDER BY created_at DESC, ord DESC`, sessionID)
}

// RevokeShare marks link id revoked at at (once: a revoked link keeps its first time) and
// returns it; apperr.NotFound for an unknown id.
func (db *DB) RevokeShare(ctx context.Context, id string, at time.Time) (_ share.Link, err error) {
	start := time.Now()
	l, err := scanShare(db.pool.QueryRow(ctx, `UPDATE shares SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2
		RETURNING `+shareColumns, formatTime(at), id))
	db.committed(start, err)
	if errors.Is(err, pgx.ErrNoRows) {
		return share.Link{}, apperr.Errorf(apperr.NotFound, "share link %s not found", id)
	}
	return l, err
}

// TouchShare records a use of link id.
func (db *DB) TouchShare(ctx context.Context, id string, at time.Time) error {
	_, err := db.exec(ctx, `UPDATE shares SET last_used_at = $1 WHERE id = $2`, formatTime(at), id)
	return err
}

func (db *DB) oneShare(ctx context.Context, query string, arg string) (share.Link, error) {
	l, err := scanShare(db.pool.QueryRow(ctx, query, arg))
	if errors.Is(err, pgx.ErrNoRows) {
		return share.Link{}, apperr.Errorf(apperr.NotFound, "share link not found")
	}
	return l, err
}

func scanShare(r pgx.Row) (share.Link, error) {
	var (
		l                          share.Link
		role, created              string
		expires, revoked, lastUsed *string
	)
	if err := r.Scan(&l.ID, &l.SessionID, &role, &l.Label, &l.TokenHash, &created, &expires, &revoked, &lastUsed,
		&l.CanEdit, &l.CanRemember, &l.For); err != nil {
		return share.Link{}, err
	}
	l.Role = share.Role(role)
	var err error
	if l.CreatedAt, err = parseTime(created); err != nil {
		return share.Link{}, err
	}
	if l.ExpiresAt, err = parseNullTime(expires); err != nil {
		return share.Link{}, err
	}
	if l.RevokedAt, err = parseNullTime(revoked); err != nil {
		return share.Link{}, err
	}
	if l.LastUsedAt, err = parseNullTime(lastUsed); err != nil {
		return share.Link{}, err
	}
	return l, nil
}
