package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/share"
)

const shareColumns = `id, session_id, role, label, token_hash, created_at, expires_at, revoked_at, last_used_at, can_edit, can_remember, for_name`

// CreateShare stores a share link (its token hash, never the token) with its rights and the
// person it was made for (For, empty for none). Errors: apperr.NotFound
// for an unknown session, apperr.Conflict for a duplicate id or hash.
func (db *DB) CreateShare(ctx context.Context, l share.Link) (err error) {
	defer apperr.Wrap(&err, "store.CreateShare")
	_, err = db.write.ExecContext(ctx, `INSERT INTO shares (`+shareColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		l.ID, l.SessionID, string(l.Role), l.Label, l.TokenHash, formatTime(l.CreatedAt),
		nullTime(l.ExpiresAt), nullTime(l.RevokedAt), nullTime(l.LastUsedAt), l.CanEdit, l.CanRemember, l.For)
	switch {
	case isForeignKey(err):
		return apperr.Errorf(apperr.NotFound, "session %s not found", l.SessionID)
	case isUnique(err):
		return apperr.Errorf(apperr.Conflict, "share link already exists")
	}
	return err
}

// Share returns link id, or apperr.NotFound.
func (db *DB) Share(ctx context.Context, id string) (share.Link, error) {
	return db.oneShare(ctx, `SELECT `+shareColumns+` FROM shares WHERE id = ?`, id)
}

// ShareByHash returns the link whose token hashes to tokenHash, or apperr.NotFound.
func (db *DB) ShareByHash(ctx context.Context, tokenHash string) (share.Link, error) {
	return db.oneShare(ctx, `SELECT `+shareColumns+` FROM shares WHERE token_hash = ?`, tokenHash)
}

// Shares lists a session's links, newest first.
func (db *DB) Shares(ctx context.Context, sessionID string) (_ []share.Link, err error) {
	defer apperr.Wrap(&err, "store.Shares(%s)", sessionID)
	return queryAll(ctx, db.read, scanShare, `SELECT `+shareColumns+` FROM shares WHERE session_id = ? ORDER BY created_at DESC, rowid DESC`, sessionID)
}

// RevokeShare marks link id revoked at at (once: a revoked link keeps its first time) and
// returns it; apperr.NotFound for an unknown id.
func (db *DB) RevokeShare(ctx context.Context, id string, at time.Time) (share.Link, error) {
	if _, err := db.write.ExecContext(ctx, `UPDATE shares SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, formatTime(at), id); err != nil {
		return share.Link{}, err
	}
	return db.oneShareWrite(ctx, id)
}

// TouchShare records a use of link id.
func (db *DB) TouchShare(ctx context.Context, id string, at time.Time) error {
	_, err := db.write.ExecContext(ctx, `UPDATE shares SET last_used_at = ? WHERE id = ?`, formatTime(at), id)
	return err
}

func (db *DB) oneShareWrite(ctx context.Context, id string) (share.Link, error) {
	l, err := scanShare(db.write.QueryRowContext(ctx, `SELECT `+shareColumns+` FROM shares WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return share.Link{}, apperr.Errorf(apperr.NotFound, "share link %s not found", id)
	}
	return l, err
}

func (db *DB) oneShare(ctx context.Context, query string, arg string) (share.Link, error) {
	l, err := scanShare(db.read.QueryRowContext(ctx, query, arg))
	if errors.Is(err, sql.ErrNoRows) {
		return share.Link{}, apperr.Errorf(apperr.NotFound, "share link not found")
	}
	return l, err
}

func scanShare(r scanner) (share.Link, error) {
	var (
		l                          share.Link
		role, created              string
		expires, revoked, lastUsed sql.NullString
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
	for _, p := range []struct {
		s   sql.NullString
		dst **time.Time
	}{{expires, &l.ExpiresAt}, {revoked, &l.RevokedAt}, {lastUsed, &l.LastUsedAt}} {
		if p.s.Valid {
			t, err := parseTime(p.s.String)
			if err != nil {
				return share.Link{}, err
			}
			*p.dst = &t
		}
	}
	return l, nil
}
