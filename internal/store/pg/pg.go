// Package pg is Countersign's PostgreSQL store (issue 21, SPEC §16): the store contract
// (store.Backend) on a PostgreSQL server through github.com/jackc/pgx/v5's pgxpool, for a team
// service whose replicas share one database. It passes the same conformance suite as the SQLite
// store (internal/store/storetest) and turns driver errors into the same apperr codes: a
// duplicate key is apperr.Conflict, an unknown id apperr.NotFound, a value the schema refuses
// apperr.Invalid; anything else is internal.
//
// Where it differs from the SQLite store: PostgreSQL's text cannot hold a NUL byte or invalid
// UTF-8, so a text with either is apperr.Invalid here (SQLite keeps it byte for byte); and every
// commit is durable (synchronous_commit), where SQLite syncs only decisions.
//
// Concurrency: any number of processes may use one database. Each write is one statement or one
// transaction at READ COMMITTED; the races that matter are settled by row locks: a decision is
// UPDATE … WHERE status = 'pending' (of two, the second waits for the first's row lock, sees the
// row no longer pending and gets apperr.Conflict), and a transcript entry takes its seq by
// incrementing its session's counter row (migrations/0001_init.sql). Replicas (replicas.go) is
// what several servers on one database need of each other: session leases, the event relay and
// the record of calls' starts.
package pg

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"sort"
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

// timeFormat is how times are stored, as the SQLite store stores them: RFC 3339 in UTC with all
// nine fractional digits. Fixed width, so text order (COLLATE "C") is time order, and exact to
// the nanosecond, which timestamptz is not.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

// migrationLock is the key of the advisory lock held while migrating, so replicas starting
// together apply each migration once ("cs" "mi" in ASCII).
const migrationLock = 0x6373_6d69

// defaultMaxConns is the pool's size unless the URL's pool_max_conns sets it.
const defaultMaxConns = 16

// DB is a Countersign database on a PostgreSQL server: a pgxpool pool. It is safe for concurrent
// use, also by several processes. Create it with Open and release it with Close.
type DB struct {
	// Now is the clock for times the store fills in itself (an entry's created_at, a session's
	// CreatedAt or a resolution's At left zero). Open sets time.Now; tests may replace it before
	// first use.
	Now func() time.Time
	// OnCommit, when set before the first write, is told how long each write took (its
	// statement, or its transaction from BEGIN to COMMIT) and how many writes it held (always
	// 1): the store commit latency of SPEC §16's metrics.
	OnCommit func(d time.Duration, writes int)

	url    string
	pool   *pgxpool.Pool
	notify notifySetup // webhook receivers (SetNotify); none: no outbox rows
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
	db := &DB{Now: time.Now, url: url, pool: pool}
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// URL is the URL the store was opened with.
func (db *DB) URL() string { return db.url }

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

// ReadyTimeout bounds Ready: a database that hangs (a network partition, a stuck server) makes
// Ready fail after it rather than keep GET /readyz waiting.
const ReadyTimeout = 2 * time.Second

// Ready reports whether the database answers, within ReadyTimeout, and has every embedded
// migration applied (GET /readyz, SPEC §16): nil, or an error whose apperr message (code
// internal) says which part failed in words safe to show anyone — "the database does not
// answer", "the database did not answer within 2s", "3 of 5 migrations applied" — with the
// driver's error (never the URL's password) behind it for the log.
func (db *DB) Ready(ctx context.Context) (err error) {
	defer apperr.Wrap(&err, "pg.Ready")
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	var applied int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&applied); err != nil {
		msg := "the database does not answer"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			msg = fmt.Sprintf("the database did not answer within %v", ReadyTimeout)
		}
		return fmt.Errorf("%w: %w", apperr.Errorf(apperr.Internal, "%s", msg), err)
	}
	if applied < len(names) {
		return apperr.Errorf(apperr.Internal, "%d of %d migrations applied", applied, len(names))
	}
	return nil
}

// migrate applies, in name order, every embedded migration not yet recorded in the
// schema_migrations table, each in its own transaction together with its record, under an
// advisory lock so that replicas starting together apply each once. Running it again is a no-op.
func (db *DB) migrate(ctx context.Context) (err error) {
	defer apperr.Wrap(&err, "migrate")
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	names = append([]string{""}, names...) // "": the version table itself
	for _, name := range names {
		if err := db.migrateFile(ctx, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func (db *DB) migrateFile(ctx context.Context, name string) error {
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return err
		}
		if name == "" {
			_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				name text COLLATE "C" PRIMARY KEY, applied_at text COLLATE "C" NOT NULL)`)
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE name = $1`, path.Base(name)).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return err
		}
		// No arguments: the simple protocol, which runs a file of several statements.
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO schema_migrations (name, applied_at) VALUES ($1, $2)`,
			path.Base(name), formatTime(db.Now()))
		return err
	})
}

// exec runs one write statement (committed by itself) and returns the rows it affected.
func (db *DB) exec(ctx context.Context, query string, args ...any) (int64, error) {
	start := time.Now()
	tag, err := db.pool.Exec(ctx, query, args...)
	db.committed(start, err)
	return tag.RowsAffected(), err
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

// formatTime returns t as stored: UTC, fixed width, nanoseconds.
func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

// parseTime reads a stored time back, in UTC.
func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored time %q: %w", s, err)
	}
	return t.UTC(), nil
}

// nullTime is a nullable stored time: NULL for nil.
func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return formatTime(*t)
}

// parseNullTime reads a nullable stored time back: nil for NULL.
func parseNullTime(s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, err := parseTime(*s)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// nullJSON is a nullable json column's value: NULL when b is nil, else its text as it is.
func nullJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// rawJSON reads a nullable json column back: nil for NULL.
func rawJSON(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

// pgCode is the SQLSTATE of a server error, or "".
func pgCode(err error) string {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// isUnique reports whether err is a PRIMARY KEY or UNIQUE violation.
func isUnique(err error) bool { return pgCode(err) == "23505" }

// isForeignKey reports whether err is a FOREIGN KEY violation (an unknown session).
func isForeignKey(err error) bool { return pgCode(err) == "23503" }

// isInvalid reports whether err is a value the schema refuses: a CHECK violation, text that is
// not JSON in a json column (22P02), or a text PostgreSQL cannot hold (22021: a NUL byte or
// invalid UTF-8).
func isInvalid(err error) bool {
	switch pgCode(err) {
	case "23514", "22P02", "22021":
		return true
	}
	return false
}

// redact is a URL without its password, for messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}
