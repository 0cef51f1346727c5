package store

import (
	"context"
	"database/sql"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/connections"
)

const connectionColumns = `id, label, kind, token_hash, created_at, last_used_at, revoked_at`

// CreateConnection stores a connection (SPEC §18): its token's hash, never the token. Errors:
// apperr.Invalid for an empty label or an unknown kind (checked here, and by the schema),
// apperr.Conflict for a duplicate id or token hash.
func (db *SQL) CreateConnection(ctx context.Context, c connections.Connection) (err error) {
	defer apperr.Wrap(&err, "store.CreateConnection")
	if _, err := connections.CheckLabel(c.Label); err != nil {
		return err
	}
	if _, err := connections.CheckKind(string(c.Kind)); err != nil {
		return err
	}
	if c.TokenHash == "" {
		return apperr.Errorf(apperr.Invalid, "A connection needs its token's hash.")
	}
	_, err = db.exec1(ctx, 0, `INSERT INTO connections (`+connectionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		c.ID, c.Label, string(c.Kind), c.TokenHash, formatTime(c.CreatedAt), nullTime(c.LastUsedAt), nullTime(c.RevokedAt))
	switch {
	case db.isUnique(err):
		return apperr.Errorf(apperr.Conflict, "connection already exists")
	case db.isInvalid(err):
		return apperr.Errorf(apperr.Invalid, "connection cannot be stored: kind %q, label %q", c.Kind, c.Label)
	}
	return err
}

// Connection returns connection id, or apperr.NotFound.
func (db *SQL) Connection(ctx context.Context, id string) (connections.Connection, error) {
	return db.oneConnection(ctx, `SELECT `+connectionColumns+` FROM connections WHERE id = ?`, id)
}

// ConnectionByTokenHash returns the connection whose token hashes to hash (revoked or not), or
// apperr.NotFound. It is the only way a token is looked up: by its hash, never compared.
func (db *SQL) ConnectionByTokenHash(ctx context.Context, hash string) (connections.Connection, error) {
	return db.oneConnection(ctx, `SELECT `+connectionColumns+` FROM connections WHERE token_hash = ?`, hash)
}

// Connections lists every connection, revoked ones included, newest first (equal times: the
// last stored first).
func (db *SQL) Connections(ctx context.Context) (_ []connections.Connection, err error) {
	defer apperr.Wrap(&err, "store.Connections")
	return queryAll(ctx, db, db.reads(), scanConnection, `SELECT `+connectionColumns+` FROM connections ORDER BY created_at DESC, {ord} DESC`)
}

// RevokeConnection marks connection id revoked at at (once: a revoked connection keeps its first
// time) and returns it; apperr.NotFound for an unknown id.
func (db *SQL) RevokeConnection(ctx context.Context, id string, at time.Time) (c connections.Connection, err error) {
	err = db.write(ctx, 0, func(tx Querier) error {
		var err error
		c, err = scanConnection(db.queryRow(ctx, tx, `UPDATE connections SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?
			RETURNING `+connectionColumns, formatTime(at), id))
		return err
	})
	if isNoRows(err) {
		return connections.Connection{}, apperr.Errorf(apperr.NotFound, "connection %s not found", id)
	}
	return c, err
}

// TouchConnection records a use of connection id at at; apperr.NotFound for an unknown id.
func (db *SQL) TouchConnection(ctx context.Context, id string, at time.Time) error {
	n, err := db.exec1(ctx, 0, `UPDATE connections SET last_used_at = ? WHERE id = ?`, formatTime(at), id)
	if err == nil && n == 0 {
		return apperr.Errorf(apperr.NotFound, "connection %s not found", id)
	}
	return err
}

func (db *SQL) oneConnection(ctx context.Context, query string, arg string) (connections.Connection, error) {
	c, err := scanConnection(db.queryRow(ctx, db.reads(), query, arg))
	if isNoRows(err) {
		return connections.Connection{}, apperr.Errorf(apperr.NotFound, "connection not found")
	}
	return c, err
}

func scanConnection(r Row) (connections.Connection, error) {
	var (
		c                 connections.Connection
		kind, created     string
		lastUsed, revoked sql.NullString
	)
	if err := r.Scan(&c.ID, &c.Label, &kind, &c.TokenHash, &created, &lastUsed, &revoked); err != nil {
		return connections.Connection{}, err
	}
	c.Kind = connections.Kind(kind)
	var err error
	if c.CreatedAt, err = parseTime(created); err != nil {
		return connections.Connection{}, err
	}
	for _, p := range []struct {
		s   sql.NullString
		dst **time.Time
	}{{lastUsed, &c.LastUsedAt}, {revoked, &c.RevokedAt}} {
		if p.s.Valid {
			t, err := parseTime(p.s.String)
			if err != nil {
				return connections.Connection{}, err
			}
			*p.dst = &t
		}
	}
	return c, nil
}
