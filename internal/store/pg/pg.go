// Package pg is Countersign's PostgreSQL store (issue 21, SPEC §16): the store contract
// (store.Backend) on a PostgreSQL server through github.com/jackc/pgx/v5's pgxpool, for a team
// service whose replicas share one database. Its table code is the one SQL store's (store.SQL),
// over this package's connections and dialect (conn.go); this package opens the pool, applies
// its migrations under an advisory lock and says what its errors mean. It passes the same
// conformance suite as the SQLite store (internal/store/storetest) and turns driver errors into
// the same apperr codes: a duplicate key is apperr.Conflict, an unknown id apperr.NotFound, a
// value the schema refuses apperr.Invalid; anything else is internal.
//
// Where it differs from the SQLite store: PostgreSQL's text cannot hold a NUL byte or invalid
// UTF-8, so a text with either is apperr.Invalid here (SQLite keeps it byte for byte); and every
// commit is durable (synchronous_commit), where SQLite syncs only decisions.
//
// Concurrency: any number of processes may use one database. Each write is one statement or one
// transaction at READ COMMITTED; the races that matter are settled by row locks: a decision is
// UPDATE … WHERE status = 'pending' (of two, the second waits for the first's row lock, sees the
// row no longer pending and gets apperr.Conflict), and a transcript entry takes its seq by
// incrementing its session's counter row (migrations/0001_init.sql). What several servers on one
// database need of each other (session leases, the event relay, the record of calls' starts, the
// key fingerprints) is internal/relay's, over this store's pool (Pool); its tables' migrations
// are here, with the others.
package pg

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"countersign/internal/apperr"
	"countersign/internal/store"
)

// Compile-time check: the PostgreSQL store is a store.Backend.
var _ store.Backend = (*DB)(nil)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLock is the key of the advisory lock held while migrating, so replicas starting
// together apply each migration once ("cs" "mi" in ASCII).
const migrationLock = 0x6373_6d69

// defaultMaxConns is the pool's size unless the URL's pool_max_conns sets it.
const defaultMaxConns = 16

// DB is a Countersign database on a PostgreSQL server: a pgxpool pool. It is safe for concurrent
// use, also by several processes. Create it with Open and release it with Close.
type DB struct {
	// SQL is the store's table code (and its clock, Now, which tests may replace before first
	// use). Times are stored as the SQLite store stores them (store.FormatTime): fixed-width
	// text, so text order (COLLATE "C") is time order, and exact to the nanosecond, which
	// timestamptz is not.
	*store.SQL
	// OnCommit, when set before the first write, is told how long each write took (its
	// statement, or its transaction from BEGIN to COMMIT) and how many writes it held (always
	// 1): the store commit latency of SPEC §16's metrics.
	OnCommit func(d time.Duration, writes int)

	url  string
	pool *pgxpool.Pool
}

// Open connects to the PostgreSQL database at url (postgres://user:password@host:port/db?…, as
// pgxpool.ParseConfig reads it, pool settings included; defaultMaxConns connections unless
// pool_max_conns says otherwise) and applies any migration not yet applied. Errors: the URL's, the connection's (the password redacted), a migration's.
func Open(ctx context.Context, url string) (_ *DB, err error) {
	defer apperr.Wrap(&err, "pg.Open(%s)", redact(url))
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("not a PostgreSQL URL") // ParseConfig's error may quote the password
	}
	// pgxpool's default is max(4, CPUs) connections: on a small machine a few slow page renders
	// would queue every write behind them. pool_max_conns in the URL still wins.
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	db := &DB{url: url, pool: pool}
	db.SQL = store.New(conn{db}, dialect)
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// URL is the URL the store was opened with.
func (db *DB) URL() string { return db.url }

// Pool is the store's connection pool, for what shares the database without being the store:
// the replicas' relay (internal/relay), which keeps its own tables (migrations 0004, 0006).
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Close closes the pool's connections; it waits for the ones in use to be released.
func (db *DB) Close() error {
	db.pool.Close()
	return nil
}

// SetOnCommit sets db.OnCommit (store.Backend).
func (db *DB) SetOnCommit(fn func(d time.Duration, writes int)) { db.OnCommit = fn }

// Identity names the database among all PostgreSQL databases, for the marker of the processes
// tool calls start (procenv.Call.Store: a server restarting on this database kills what its
// interrupted calls left running, and nothing of another database's servers): "postgres:" and
// the cluster's system identifier (made by initdb, pg_control_system()) and the database's oid,
// "postgres:7715576550223431664/16384". Where pg_control_system() is not granted to the
// server's role, the server's address and port and the database's name stand in for the
// identifier: "postgres:10.0.0.5:5432/countersign/16384" ("local" for a Unix socket). Errors:
// the database's.
func (db *DB) Identity(ctx context.Context) (id string, err error) {
	defer apperr.Wrap(&err, "pg.Identity")
	var oid string
	if err := db.pool.QueryRow(ctx, `SELECT oid::text FROM pg_database WHERE datname = current_database()`).Scan(&oid); err != nil {
		return "", err
	}
	var cluster string
	err = db.pool.QueryRow(ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&cluster)
	if err != nil {
		err = db.pool.QueryRow(ctx, `SELECT coalesce(host(inet_server_addr()), 'local') || ':' ||
			coalesce(inet_server_port()::text, '') || '/' || current_database()`).Scan(&cluster)
	}
	if err != nil {
		return "", err
	}
	return "postgres:" + cluster + "/" + oid, nil
}

// ReadyTimeout bounds Ready (store.ReadyTimeout).
const ReadyTimeout = store.ReadyTimeout

// Ready reports whether the database answers, within ReadyTimeout, and has every embedded
// migration applied (GET /readyz, SPEC §16; store.SQL.CheckReady): nil, or an error whose apperr
// message (code internal) says which part failed in words safe to show anyone, with the
// driver's error (never the URL's password) behind it for the log.
func (db *DB) Ready(ctx context.Context) (err error) {
	defer apperr.Wrap(&err, "pg.Ready")
	return db.CheckReady(ctx, migrationFS, "schema_migrations")
}

// LeasesHeld counts the sessions whose lease replica (relay.Relay.ID) holds and has not let
// expire, by the database's clock (the session_leases_held metric, SPEC §16).
func (db *DB) LeasesHeld(ctx context.Context, replica string) (n int, err error) {
	defer apperr.Wrap(&err, "pg.LeasesHeld")
	err = db.pool.QueryRow(ctx, `SELECT count(*) FROM session_leases WHERE replica = $1 AND expires_at > now()`, replica).Scan(&n)
	return n, err
}

// migrate applies, in name order, every embedded migration not yet recorded in the
// schema_migrations table, each in its own transaction together with its record
// (store.SQL.Migrate), under an advisory lock so that replicas starting together apply each
// once. Running it again is a no-op.
func (db *DB) migrate(ctx context.Context) error {
	return db.Migrate(ctx, store.Migration{Files: migrationFS, Table: "schema_migrations",
		First: []string{fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d)`, int64(migrationLock)),
			`CREATE TABLE IF NOT EXISTS schema_migrations (
				name text COLLATE "C" PRIMARY KEY, applied_at text COLLATE "C" NOT NULL)`},
		InTx: func(ctx context.Context, fn func(tx store.Querier) error) error {
			return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error { return fn(txQuerier{tx}) })
		}})
}

// inTx runs fn in one transaction, committed when fn returns nil and rolled back otherwise.
func (db *DB) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	start := time.Now()
	err := pgx.BeginFunc(ctx, db.pool, fn)
	db.committed(start, err)
	return err
}

func (db *DB) committed(start time.Time, err error) {
	if db.OnCommit != nil && err == nil {
		db.OnCommit(time.Since(start), 1)
	}
}

// pgCode is the SQLSTATE of a server error, or "".
func pgCode(err error) string {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// redact is a URL without its password, for messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}
