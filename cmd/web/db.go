package main

import (
	"context"
	"log/slog"
	"strings"

	"countersign/internal/agent"
	"countersign/internal/metrics"
	"countersign/internal/relay"
	"countersign/internal/store"
	"countersign/internal/store/pg"
	"countersign/internal/store/sqlite"
	"countersign/internal/web"
)

// isPostgres reports whether -db names a PostgreSQL database (a postgres:// or postgresql://
// URL, SPEC §16) rather than a SQLite file.
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// openStore opens the store -db names, migrated: the PostgreSQL store for a postgres:// URL (any
// number of servers may share it: replicaLinkOf), else the SQLite store on that file (whose lock
// run takes before). close releases the store.
func openStore(ctx context.Context, dsn string) (_ store.Backend, close func(), err error) {
	if !isPostgres(dsn) {
		db, err := sqlite.Open(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		return db, func() { db.Close() }, nil
	}
	db, err := pg.Open(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	return db, func() { db.Close() }, nil
}

// replicaLink is this server's link to the other servers sharing its database (SPEC §16): the
// runner's leases and relay (agent.Replicas, Start with the runner's Replica), the web layer's
// (web.Peers), and the check that every replica has the same key files (CheckKey: its links
// would be 404 elsewhere and its webhooks signed differently).
type replicaLink interface {
	agent.Replicas
	web.Peers
	Start(ctx context.Context, target relay.Target) (stop func(), err error)
	CheckKey(ctx context.Context, name, fingerprint, file string) error
}

// replicaLinkOf is db's link to the other replicas: over the PostgreSQL store's pool, a relay
// signing and checking its notifications under a key derived from key (the share-link key file's,
// which every replica has the same of), whose notification lag, re-reads, writes and rejected
// notifications met counts (leases decide who drives each session's run); for a SQLite file,
// which has one server, the relay that does nothing.
func replicaLinkOf(db store.Backend, key []byte, log *slog.Logger, met *metrics.Metrics) replicaLink {
	p, ok := db.(*pg.DB)
	if !ok {
		return &relay.Single{}
	}
	rel := relay.New(p.Pool(), key, log.With("component", "replicas"))
	rel.OnLag, rel.OnReread, rel.OnCommit, rel.OnReject = met.ReplicaLag, met.Reread, met.Commit, met.RelayRejected
	return rel
}

// leasesOf counts the session leases link holds (the session_leases_held metric): through the
// PostgreSQL store, by the relay's replica id; nil for a SQLite file, which has no leases.
func leasesOf(db store.Backend, link replicaLink) func(context.Context) (int, error) {
	p, ok := db.(*pg.DB)
	rel, isRelay := link.(*relay.Relay)
	if !ok || !isRelay {
		return nil
	}
	return func(ctx context.Context) (int, error) { return p.LeasesHeld(ctx, rel.ID()) }
}
