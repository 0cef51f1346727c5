package main

import (
	"context"
	"log/slog"
	"strings"

	"countersign/internal/store"
	"countersign/internal/store/pg"
)

// isPostgres reports whether -db names a PostgreSQL database (a postgres:// or postgresql://
// URL, SPEC §16) rather than a SQLite file.
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// openStore opens the store -db names, migrated: the PostgreSQL store for a postgres:// URL,
// with its link to the other replicas of the database (SPEC §16: any number of servers may share
// it; leases decide who drives each session's run), else the SQLite store on that file (whose
// lock run takes before; replicas is nil). close releases the store.
func openStore(ctx context.Context, dsn string, log *slog.Logger) (_ store.Backend, replicas *pg.Replicas, close func(), err error) {
	if !isPostgres(dsn) {
		db, err := store.Open(ctx, dsn)
		if err != nil {
			return nil, nil, nil, err
		}
		return db, nil, func() { db.Close() }, nil
	}
	db, err := pg.Open(ctx, dsn)
	if err != nil {
		return nil, nil, nil, err
	}
	return db, pg.NewReplicas(db, log.With("component", "replicas")), func() { db.Close() }, nil
}

// sameKeyOnEveryReplica refuses to start a server whose key file name ("share", "notify") is not
// the one the other servers of its PostgreSQL database use (pg.DB.CheckKey): its links would be
// 404 elsewhere and its webhooks signed differently. A SQLite file has one server: nil.
func sameKeyOnEveryReplica(ctx context.Context, db store.Backend, name, fingerprint, file string) error {
	if p, ok := db.(*pg.DB); ok {
		return p.CheckKey(ctx, name, fingerprint, file)
	}
	return nil
}
