package main

import (
	"context"
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
// holding the database's server lock (pg.DB.LockServer: one server per database until replicas
// hold leases), else the SQLite store on that file (whose lock run takes before). close releases
// the lock and the store.
func openStore(ctx context.Context, dsn string) (_ store.Backend, close func(), err error) {
	if !isPostgres(dsn) {
		db, err := store.Open(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		return db, func() { db.Close() }, nil
	}
	db, err := pg.Open(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	unlock, err := db.LockServer(ctx)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, func() { db.Close(); unlock() }, nil
}
