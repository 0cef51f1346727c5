// Package store keeps Countersign's sessions, transcript entries and approvals in SQLite
// (modernc.org/sqlite, pure Go, WAL mode; SPEC §8). It implements agent.Store and gate.Store and
// turns driver errors into apperr codes: a duplicate key is apperr.Conflict, an unknown id
// apperr.NotFound, a value the schema refuses apperr.Invalid; anything else is internal.
//
// Backend is the store contract the program uses; the PostgreSQL store (internal/store/pg)
// implements it too, and both pass one conformance suite (internal/store/storetest; SPEC §16).
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"countersign/internal/agent"
	"countersign/internal/apperr"
)

// Compile-time check: the store is what the agent (and through it the gate) needs.
var _ agent.Store = (*DB)(nil)

//go:embed migrations/*.sql
var migrationFS embed.FS

// readers is the size of the read pool. WAL lets readers run alongside the writer and each
// other; a few connections are enough for a handful of browsers re-rendering from the store.
const readers = 4

// timeFormat is how times are stored: RFC 3339 in UTC with all nine fractional digits. Fixed
// width, so text order is time order, and exact to the nanosecond.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

// DB is a Countersign database: one SQLite file opened with a one-connection write pool and a
// small read pool. It is safe for concurrent use. Create it with Open and release it with Close.
type DB struct {
	// Now is the clock for times the store fills in itself: an entry's created_at, a session's
	// CreatedAt or a resolution's At left zero. Open sets time.Now; tests may replace it before
	// first use.
	Now func() time.Time
	// OnCommit, when set before the first write, is told how long each commit of a group of
	// writes took (the transaction with its sync, or a lone statement) and how many writes it
	// held: the store commit latency of SPEC §16's metrics.
	OnCommit func(d time.Duration, writes int)

	path  string
	write *sql.DB // exactly one connection: every write, and every transaction
	read  *sql.DB // query_only connections for plain reads
	ckpt  *sql.DB // one connection for the background checkpoints
	// writes and reads prepare the statements of the hot paths (a transcript entry, an
	// approval, a session) once per connection instead of once per call: compiling the SQL
	// cost as much as running it.
	writes, reads *stmtCache
	commits       committer   // the hot writes' FIFO queue to the write connection (commit.go)
	notify        notifySetup // webhook receivers (SetNotify); none: no outbox rows

	stopCheckpoints context.CancelFunc
	checkpointsDone chan struct{}
}

// checkpointInterval is how often the background checkpointer copies the WAL into the database
// file. Why in the background: a checkpoint fsyncs the WAL and the database, which takes from a
// fraction of a millisecond to tens of milliseconds here; SQLite's automatic checkpoint runs it
// inside whichever commit crosses the threshold, so an approval or a transcript entry would wait
// for it. A PASSIVE checkpoint blocks neither the writer nor the readers. The write connection
// keeps a high automatic threshold (walAutoCheckpoint) only as a bound on the WAL's size should
// the checkpointer fall behind. Durability is unchanged: a commit is in the WAL either way.
const checkpointInterval = 500 * time.Millisecond

// walAutoCheckpoint is the write connection's automatic checkpoint threshold, in pages (4 KiB
// each; SQLite's default is 1000).
const walAutoCheckpoint = 16384

// Open opens (creating if needed) the database at path, creating its parent folder, and applies
// any migration not yet applied. The path is a file path, never ":memory:" (the pools would each
// see a different database).
func Open(ctx context.Context, path string) (_ *DB, err error) {
	defer apperr.Wrap(&err, "store.Open(%s)", path)
	if path == "" || path == ":memory:" {
		return nil, errors.New("a database file path is required")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, err
	}
	// The database holds transcripts and approvals: owner-only (issue 15). SQLite would create
	// the file 0644, and creates its -wal and -shm with the main file's mode, so the file is
	// created here first, 0600; an existing file keeps its mode.
	if f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	// busy_timeout comes first so the pragmas after it wait for a lock instead of failing with
	// SQLITE_BUSY (another process may hold the file). WAL: readers never block the writer, nor
	// the writer them. synchronous=NORMAL in WAL mode survives a process crash (a power loss may
	// drop the last commits, never corrupt); approvals and decisions switch to FULL for their
	// commit (commitDurable). foreign_keys is per connection and off by default.
	// _txlock=immediate makes BEGIN take the write lock at once, so a transaction that reads
	// then writes cannot fail halfway with SQLITE_BUSY on lock upgrade.
	file := "file:" + (&url.URL{Path: abs}).EscapedPath()
	pragmas := "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"
	// Page caches are bounded below SQLite's default of 2 MiB per connection (a cache, once
	// filled, stays allocated: six connections could hold 12 MiB). The writer's cache stays
	// valid across its transactions, so it keeps 512 KiB for the pages it touches most (the
	// upper levels and last leaves of tables and indexes); a reader's or the checkpointer's is
	// emptied whenever another connection has written in between, so 256 KiB loses nothing
	// there. Pages not cached are read again from the OS's file cache.
	write, err := sql.Open("sqlite", file+"?"+pragmas+fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", walAutoCheckpoint)+
		"&_pragma=cache_size(-512)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	// SQLite allows one writer at a time. One connection serialises our own writes in the pool's
	// queue instead of having our goroutines meet as SQLITE_BUSY inside SQLite.
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)
	// Connect the writer first: it switches the file to WAL before any reader opens it.
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		return nil, err
	}
	// query_only makes a write through the read pool an error instead of a second writer.
	read, err := sql.Open("sqlite", file+"?"+pragmas+"&_pragma=cache_size(-256)&_pragma=query_only(1)")
	if err != nil {
		write.Close()
		return nil, err
	}
	read.SetMaxOpenConns(readers)
	read.SetMaxIdleConns(readers)
	ckpt, err := sql.Open("sqlite", file+"?"+pragmas+"&_pragma=cache_size(-256)")
	if err != nil {
		write.Close()
		read.Close()
		return nil, err
	}
	ckpt.SetMaxOpenConns(1)
	db := &DB{Now: time.Now, path: abs, write: write, read: read, ckpt: ckpt,
		writes: newStmtCache(write), reads: newStmtCache(read)}
	if err := db.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.Background())
	db.stopCheckpoints, db.checkpointsDone = cancel, make(chan struct{})
	go db.checkpoints(cctx)
	return db, nil
}

// Path is the absolute path of the database file.
func (db *DB) Path() string { return db.path }

// Close closes both pools. Statements in flight finish first; the WAL is checkpointed when the
// last connection closes.
func (db *DB) Close() error {
	if db.stopCheckpoints != nil {
		db.stopCheckpoints()
		<-db.checkpointsDone
	}
	return errors.Join(db.reads.close(), db.writes.close(), db.read.Close(), db.write.Close(), db.ckpt.Close())
}

// stmtCache prepares each query once and keeps it: database/sql then prepares it on each
// connection of the pool at its first use there and reuses it. Only constant query texts go
// through it, so it holds a few dozen statements at most. Preparing takes a connection of the
// pool: never call it while a transaction holds the write pool's only connection.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB) *stmtCache { return &stmtCache{db: db, m: map[string]*sql.Stmt{}} }

func (c *stmtCache) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.m[query] = st
	return st, nil
}

// ExecContext is sql.DB's, with the statement prepared once.
func (c *stmtCache) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// QueryRowContext is sql.DB's, with the statement prepared once.
func (c *stmtCache) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return c.db.QueryRowContext(ctx, query, args...) // reports the same error
	}
	return st.QueryRowContext(ctx, args...)
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for q, st := range c.m {
		errs = append(errs, st.Close())
		delete(c.m, q)
	}
	return errors.Join(errs...)
}

// checkpoints runs a PASSIVE checkpoint every checkpointInterval until ctx ends (see
// checkpointInterval for why). A failed checkpoint is retried at the next tick; SQLite's own
// threshold still bounds the WAL.
func (db *DB) checkpoints(ctx context.Context) {
	defer close(db.checkpointsDone)
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, _ = db.ckpt.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`)
	}
}

// migrate applies, in name order, every embedded migration not yet recorded in the migrations
// table, each in its own transaction together with its record. Applied migrations are skipped,
// so running it again is a no-op.
func (db *DB) migrate(ctx context.Context) (err error) {
	defer apperr.Wrap(&err, "migrate")
	if _, err := db.write.ExecContext(ctx,
		`CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		return err
	}
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		if err := db.migrateFile(ctx, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func (db *DB) migrateFile(ctx context.Context, name string) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM migrations WHERE name = ?`, path.Base(name)).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	body, err := migrationFS.ReadFile(name)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, string(body)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO migrations (name, applied_at) VALUES (?, ?)`,
		path.Base(name), formatTime(db.Now())); err != nil {
		return err
	}
	return tx.Commit()
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

// nullTime is a nullable stored time: SQL NULL for nil.
func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return formatTime(*t)
}

// nullJSON stores raw JSON as text, or SQL NULL when it is nil, so nil and set survive the trip.
func nullJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// rawJSON reads a nullable JSON text column back: nil for NULL.
func rawJSON(s sql.NullString) []byte {
	if !s.Valid {
		return nil
	}
	return []byte(s.String)
}

// sqliteCode returns the extended result code of a driver error, or 0.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// isUnique reports whether err is a PRIMARY KEY or UNIQUE constraint failure.
func isUnique(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// isForeignKey reports whether err is a FOREIGN KEY constraint failure (an unknown session).
func isForeignKey(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY }

// isCheck reports whether err is a CHECK constraint failure (a value the schema refuses).
func isCheck(err error) bool { return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_CHECK }

// ReadyTimeout bounds Ready: a database that hangs (a disk that stopped answering) makes Ready
// fail after it rather than keep GET /readyz waiting.
const ReadyTimeout = 2 * time.Second

// Ready reports whether the database answers, within ReadyTimeout, and has every embedded
// migration applied (GET /readyz, SPEC §16): nil, or an error whose apperr message (code
// internal) says which part failed in words safe to show anyone — "the database does not
// answer", "the database did not answer within 2s", "3 of 5 migrations applied" — with the
// driver's error behind it for the log.
func (db *DB) Ready(ctx context.Context) (err error) {
	defer apperr.Wrap(&err, "store.Ready")
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	var applied int
	if err := db.read.QueryRowContext(ctx, `SELECT COUNT(*) FROM migrations`).Scan(&applied); err != nil {
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
