package store

import (
	"context"
	"database/sql"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/share"
)

const shareColumns = `id, session_id, role, label, token_hash, created_at, expires_at, revoked_at, last_used_at, can_edit, can_remember, for_name`

// CreateShare stores a share link (its token hash, never the token) with its rights and the
// person it was made for (For, empty for none). Errors: apperr.NotFound
// for an unknown session, apperr.Conflict for a duplicate id or hash.
func (db *SQL) CreateShare(ctx context.Context, l share.Link) (err error) {
	defer apperr.Wrap(&err, "store.CreateShare")
	_, err = db.exec1(ctx, 0, `INSERT INTO shares (`+shareColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		l.ID, l.SessionID, string(l.Role), l.Label, l.TokenHash, formatTime(l.CreatedAt),
		nullTime(l.ExpiresAt), nullTime(l.RevokedAt), nullTime(l.LastUsedAt), l.CanEdit, l.CanRemember, l.For)
	switch {
	case db.isForeignKey(err):
		return apperr.Errorf(apperr.NotFound, "session %s not found", l.SessionID)
	case db.isUnique(err):
		return apperr.Errorf(apperr.Conflict, "share link already exists")
	case db.isInvalid(err):
		return apperr.Errorf(apperr.Invalid, "share link cannot be stored: role %q", l.Role)
	}
	return err
}

// Share returns link id, or apperr.NotFound.
func (db *SQL) Share(ctx context.Context, id string) (share.Link, error) {
	return db.oneShare(ctx, `SELECT `+shareColumns+` FROM shares WHERE id = ?`, id)
}

// ShareByHash returns the link whose token hashes to tokenHash, or apperr.NotFound.
func (db *SQL) ShareByHash(ctx context.Context, tokenHash string) (share.Link, error) {
	return db.oneShare(ctx, `SELECT `+shareColumns+` FROM shares WHERE token_hash = ?`, tokenHash)
}

// Shares lists a session's links, newest first.
func (db *SQL) Shares(ctx context.Context, sessionID string) (_ []share.Link, err error) {
	defer apperr.Wrap(&err, "store.Shares(%s)", sessionID)
	return queryAll(ctx, db, db.reads(), scanShare, `SELECT `+shareColumns+` FROM shares WHERE session_id = ? ORDER BY created_at DESC, {ord} DESC`, sessionID)
}

// RevokeShare marks link id revoked at at (once: a revoked link keeps its first time) and
// returns it; apperr.NotFound for an unknown id.
func (db *SQL) RevokeShare(ctx context.Context, id string, at time.Time) (l share.Link, err error) {
	err = db.write(ctx, 0, func(tx Querier) error {
		var err error
		l, err = scanShare(db.queryRow(ctx, tx, `UPDATE shares SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?
			RETURNING `+shareColumns, formatTime(at), id))
		return err
	})
	if isNoRows(err) {
		return share.Link{}, apperr.Errorf(apperr.NotFound, "share link %s not found", id)
	}
	return l, err
}

// TouchShare records a use of link id.
func (db *SQL) TouchShare(ctx context.Context, id string, at time.Time) error {
	_, err := db.exec1(ctx, 0, `UPDATE shares SET last_used_at = ? WHERE id = ?`, formatTime(at), id)
	return err
}

func (db *SQL) oneShare(ctx context.Context, query string, arg string) (share.Link, error) {
	l, err := scanShare(db.queryRow(ctx, db.reads(), query, arg))
	if isNoRows(err) {
		return share.Link{}, apperr.Errorf(apperr.NotFound, "share link not found")
	}
	return l, err
}

func scanShare(r Row) (share.Link, error) {
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
