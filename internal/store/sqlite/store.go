// Package sqlite keeps Countersign's sessions, transcript entries and approvals in SQLite
// (modernc.org/sqlite, pure Go, WAL mode; SPEC §8): the one SQL store (store.SQL, which holds
// every table's code and turns driver errors into apperr codes) over SQLite's connections. This
// package opens the file with its pragmas, applies its migrations, keeps the background
// checkpoints, and runs every write through one FIFO queue to the one write connection
// (commit.go), with the hot statements prepared once.
//
// store.Backend is the store contract the program uses; the PostgreSQL store (internal/store/pg)
// implements it too, and both pass one conformance suite (internal/store/storetest; SPEC §16).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"countersign/internal/apperr"
	"countersign/internal/store"
)

// Compile-time check: the SQLite store is a store.Backend.
var _ store.Backend = (*DB)(nil)

//go:embed migrations/*.sql
var migrationFS embed.FS

// readers is the size of the read pool. WAL lets readers run alongside the writer and each
// other; a few connections are enough for a handful of browsers re-rendering from the store.
const readers = 4

// DB is a Countersign database: one SQLite file opened with a one-connection write pool and a
// small read pool. It is safe for concurrent use. Create it with Open and release it with Close.
type DB struct {
	// SQL is the store's table code (and its clock, Now, which tests may replace before first
	// use).
	*store.SQL
	// OnCommit, when set before the first write, is told how long each write's commit took (the
	// transaction with its sync, or a lone statement) and how many writes it held (always 1):
	// the store commit latency of SPEC §16's metrics.
	OnCommit func(d time.Duration, writes int)

	path  string
	write *sql.DB // exactly one connection: every write, and every transaction
	read  *sql.DB // query_only connections for plain reads
	ckpt  *sql.DB // one connection for the background checkpoints
	// writes and reads prepare the statements of the hot paths (a transcript entry, an
	// approval, a session) once per connection instead of once per call: compiling the SQL
	// cost as much as running it.
	writes, reads *stmtCache
	commits       committer // the writes' FIFO queue to the write connection (commit.go)
	// written and synced count the writes committed and, of those, the durable ones
	// (store.Durable: synced before they returned): WriteCounts.
	written, synced atomic.Int64

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
	// commit (store.Durable, commitOne). foreign_keys is per connection and off by default.
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
	db := &DB{path: abs, write: write, read: read, ckpt: ckpt,
		writes: newStmtCache(write), reads: newStmtCache(read)}
	db.SQL = store.New(conn{db}, dialect)
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
// connection of the pool at its first use there and reuses it. The store's query texts are
// constant but for the few with an IN list of n placeholders, so it holds a few dozen statements;
// past maxStmts (a bound should that change) a query runs without being kept. Preparing takes a
// connection of the pool: never call stmt while a transaction holds the write pool's only
// connection (a write's transaction uses cached, then prepares what it missed after its commit).
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

// maxStmts bounds a stmtCache.
const maxStmts = 256

func newStmtCache(db *sql.DB) *stmtCache { return &stmtCache{db: db, m: map[string]*sql.Stmt{}} }

// stmt returns query prepared, preparing it now if needed; nil (and no error) once the cache is
// full.
func (c *stmtCache) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	if len(c.m) >= maxStmts {
		return nil, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.m[query] = st
	return st, nil
}

// cached returns query's statement if it is prepared already.
func (c *stmtCache) cached(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
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
// table, each in its own transaction together with its record (store.SQL.Migrate), straight on
// the write connection: Open has not handed the store out yet.
func (db *DB) migrate(ctx context.Context) error {
	return db.Migrate(ctx, store.Migration{Files: migrationFS, Table: "migrations",
		First: []string{`CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`},
		InTx: func(ctx context.Context, fn func(tx store.Querier) error) error {
			tx, err := db.write.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			// A write of its own, whose statements are not kept prepared (writeOp.missed).
			if err := fn(&writeTx{db: db, tx: tx, op: &writeOp{}}); err != nil {
				return err
			}
			return tx.Commit()
		}})
}

// sqliteCode returns the extended result code of a driver error, or 0.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// errKind is what a driver error means to the store (store.Dialect.Kind).
func errKind(err error) store.ErrKind {
	switch sqliteCode(err) {
	case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return store.ErrUnique
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return store.ErrForeignKey // an unknown session
	case sqlite3.SQLITE_CONSTRAINT_CHECK:
		return store.ErrCheck // a value the schema refuses
	}
	return store.ErrOther
}

// dialect is SQLite's SQL (store.Dialect): ? placeholders as written; insertion order is the
// rowid; max() of two values; no row locks (one writer: every write waits its turn in the
// queue); the partial index approvals_pending_all named (SQLite's planner would not pick it for
// the inbox's ORDER BY on its own); several approvals inserted from one JSON text.
var dialect = store.Dialect{
	Forms: map[string]string{
		"ord":      "rowid",
		"greatest": "max",
		// The clock in microseconds since the Unix epoch (store.SQL.FailToken); julianday keeps
		// about 0.1 ms.
		"nowMicros":    "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
		"forUpdate":    "",
		"skipLocked":   "",
		"noEntries":    "NOT EXISTS (SELECT 1 FROM entries WHERE entries.session_id = sessions.id)",
		"pendingIndex": "INDEXED BY approvals_pending_all",
	},
	Kind:     errKind,
	NoLimit:  -1,
	JSONRows: true,
}

// WriteCounts reports how many writes db committed since it opened (each a transaction or a
// lone statement, failed ones included) and how many of them were durable (store.Durable: synced
// at synchronous=FULL before they returned). Tests read what a path costs the one writer with it.
func (db *DB) WriteCounts() (writes, synced int64) { return db.written.Load(), db.synced.Load() }

// SetOnCommit sets db.OnCommit (store.Backend).
func (db *DB) SetOnCommit(fn func(d time.Duration, writes int)) { db.OnCommit = fn }

// ReadyTimeout bounds Ready (store.ReadyTimeout).
const ReadyTimeout = store.ReadyTimeout

// Ready reports whether the database answers, within ReadyTimeout, and has every embedded
// migration applied (GET /readyz, SPEC §16; store.SQL.CheckReady): nil, or an error whose apperr
// message (code internal) says which part failed in words safe to show anyone, with the
// driver's error behind it for the log.
func (db *DB) Ready(ctx context.Context) (err error) {
	defer apperr.Wrap(&err, "store.Ready")
	return db.CheckReady(ctx, migrationFS, "migrations")
}
