package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The seam between the one SQL store (SQL, the table code of every backend, written once) and a
// backend (internal/store/sqlite, internal/store/pg): a backend opens its database, applies its
// migrations and hands the store a Conn, which runs statements, and a Dialect, which says how
// its SQL and its errors differ. The table code writes its SQL once, with ? placeholders (?N
// where a value is used twice) and a few {form} marks the dialect fills in.

// Row is one row of a result: *sql.Row, pgx.Row.
type Row interface {
	Scan(dest ...any) error
}

// Rows is a result of any number of rows, read with Next and Scan and closed with Close.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Querier runs statements: a Conn's write transaction, or (without one) the statement alone.
// Exec returns the rows a statement affected. A Row or Rows with no row gives an error that
// errors.Is sql.ErrNoRows.
type Querier interface {
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Batcher is a Querier that can send several statements in one round trip (pgx's batches):
// ExecBatch runs queries[i] with args[i] in order and stops at the first failure, returning its
// index and error. Where a Querier is not one, the statements run one by one.
type Batcher interface {
	ExecBatch(ctx context.Context, queries []string, args [][]any) (failed int, err error)
}

// WriteMode says how a write is committed.
type WriteMode uint8

const (
	// Atomic: the write runs more than one statement that must be committed together (a
	// transaction); without it the write is one statement, committed by itself.
	Atomic WriteMode = 1 << iota
	// Durable: the commit is on disk before Write returns, also where the backend otherwise
	// syncs lazily (SQLite's synchronous=NORMAL; see the sqlite package's commitOne).
	Durable
)

// Conn is what the store needs of a backend's connections: reads (Query, QueryRow, outside any
// transaction) and writes (Write: fn runs the write's statements through tx, committed when fn
// returns nil, rolled back otherwise; a write that is not Atomic runs exactly one statement).
type Conn interface {
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Row
	Write(ctx context.Context, mode WriteMode, fn func(tx Querier) error) error
}

// ErrKind is what a driver error means to the store.
type ErrKind uint8

const (
	ErrOther      ErrKind = iota
	ErrUnique             // a PRIMARY KEY or UNIQUE constraint: the row exists
	ErrForeignKey         // a FOREIGN KEY constraint: the row it belongs to (a session) does not exist
	ErrCheck              // a CHECK constraint: a value the schema refuses
	ErrBadText            // a text the database cannot hold (PostgreSQL: NUL, invalid UTF-8, not JSON)
)

// Dialect is how a backend's SQL and errors differ from the store's SQL text.
type Dialect struct {
	// Numbered: placeholders are $1, $2… (PostgreSQL); otherwise ? and ?N as written (SQLite).
	Numbered bool
	// Forms fills in the {name} marks of the store's SQL: "ord" (the column that keeps insertion
	// order), "greatest" (the larger of two values), "forUpdate" (a row lock on a SELECT inside
	// a write), "skipLocked" (the same, skipping rows another transaction holds), "noEntries" (a
	// session row without transcript entries, as seen by an UPDATE of it), "pendingIndex" (an
	// index hint for the pending approvals of every session), "nowMicros" (the database's clock
	// in microseconds since the Unix epoch, an integer).
	Forms map[string]string
	// Kind says what a driver error means.
	Kind func(err error) ErrKind
	// NoLimit is a LIMIT's value for "no limit".
	NoLimit any
	// SeqCounter: a transcript entry's seq comes from its session row's counter
	// (sessions.last_entry_seq, incremented in the entry's transaction: the row lock orders
	// concurrent appends) rather than from MAX(seq) + 1 under the one writer.
	SeqCounter bool
	// JSONRows: several approvals are inserted by one statement that reads them from one JSON
	// text parameter (SQLite's jsonb_each; see insertRows).
	JSONRows bool
	// ClaimLock, when set, is a query run first in ClaimDeliveries: given ?1 the time now, it
	// returns the receiver ids with due rows whose lock it could take without waiting (held to
	// the transaction's end); only their rows are claimed. RenewLock, when set, is run first in
	// RenewClaim with ?1 the row's id: it waits for that row's receiver's lock.
	ClaimLock, RenewLock string
	// Clock, when set, is a query of the database's clock as a timestamp (SQL.Clock); without it
	// the store's Now is the database's clock (SQLite: one process).
	Clock string
}

// SQL is the store (Backend, less the operations a backend adds: SetOnCommit, Ready, Close)
// over a backend's Conn and Dialect: every table's code, once. Create it with New; a backend
// embeds it.
type SQL struct {
	// Now is the clock for times the store fills in itself: an entry's created_at, a session's
	// CreatedAt or a resolution's At left zero. New sets time.Now; tests may replace it before
	// first use.
	Now func() time.Time

	conn    Conn
	d       Dialect
	notify  notifySetup // webhook receivers (SetNotify); none: no outbox rows
	queries sync.Map    // the store's SQL text → the dialect's
}

// New returns the store over conn, whose SQL is d's.
func New(conn Conn, d Dialect) *SQL {
	return &SQL{Now: time.Now, conn: conn, d: d}
}

// q is query in the dialect's SQL: its {forms} filled in and, for a numbered dialect, its
// placeholders numbered. Made once per query text.
func (s *SQL) q(query string) string {
	if v, ok := s.queries.Load(query); ok {
		return v.(string)
	}
	out := query
	for name, form := range s.d.Forms {
		out = strings.ReplaceAll(out, "{"+name+"}", form)
	}
	if strings.Contains(out, "{") && !strings.Contains(out, "'{") {
		panic(fmt.Sprintf("store: a form the dialect lacks in %s", out))
	}
	if s.d.Numbered {
		out = numbered(out)
	}
	s.queries.Store(query, out)
	return out
}

// numbered rewrites ? and ?N placeholders (outside quoted strings) as $k and $N.
func numbered(query string) string {
	var b strings.Builder
	n, quoted := 0, false
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			if j > i+1 {
				b.WriteString("$" + query[i+1:j])
				i = j - 1
			} else {
				n++
				b.WriteString("$" + strconv.Itoa(n))
			}
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// The store's statements, through q.

func (s *SQL) exec(ctx context.Context, tx Querier, query string, args ...any) (int64, error) {
	return tx.Exec(ctx, s.q(query), args...)
}

func (s *SQL) queryRow(ctx context.Context, tx Querier, query string, args ...any) Row {
	return tx.QueryRow(ctx, s.q(query), args...)
}

// read is the Conn's reads as a Querier (reads never Exec).
type read struct{ Conn }

func (read) Exec(context.Context, string, ...any) (int64, error) {
	return 0, errors.New("store: a write outside Write")
}

// reads is a Querier of s's reads outside any write.
func (s *SQL) reads() Querier { return read{s.conn} }

// write runs fn as one write of mode.
func (s *SQL) write(ctx context.Context, mode WriteMode, fn func(tx Querier) error) error {
	return s.conn.Write(ctx, mode, fn)
}

// exec1 runs one write statement by itself and returns the rows it affected.
func (s *SQL) exec1(ctx context.Context, mode WriteMode, query string, args ...any) (n int64, err error) {
	err = s.write(ctx, mode, func(tx Querier) error {
		n, err = s.exec(ctx, tx, query, args...)
		return err
	})
	return n, err
}

// kind is what err means (Dialect.Kind); ErrOther for nil.
func (s *SQL) kind(err error) ErrKind {
	if err == nil {
		return ErrOther
	}
	return s.d.Kind(err)
}

func (s *SQL) isUnique(err error) bool     { return s.kind(err) == ErrUnique }
func (s *SQL) isForeignKey(err error) bool { return s.kind(err) == ErrForeignKey }

// isInvalid: a value the schema refuses or a text the database cannot hold.
func (s *SQL) isInvalid(err error) bool {
	k := s.kind(err)
	return k == ErrCheck || k == ErrBadText
}

// queryAll runs query through tx and scans every row with scan, in order.
func queryAll[T any](ctx context.Context, s *SQL, tx Querier, scan func(Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := tx.Query(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// isNoRows reports whether err says a query returned no row.
func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// timeFormat is how times are stored: RFC 3339 in UTC with all nine fractional digits. Fixed
// width, so text order is time order (PostgreSQL: COLLATE "C"), and exact to the nanosecond.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

// FormatTime returns t as stored: UTC, fixed width, nanoseconds.
func FormatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

// formatTime is FormatTime.
func formatTime(t time.Time) string { return FormatTime(t) }

// ParseTime reads a stored time back, in UTC.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored time %q: %w", s, err)
	}
	return t.UTC(), nil
}

func parseTime(s string) (time.Time, error) { return ParseTime(s) }

// nullTime is a nullable stored time: SQL NULL for nil.
func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return formatTime(*t)
}

// parseNullTime reads a nullable stored time back: nil for NULL.
func parseNullTime(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := parseTime(s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
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

// extraRow scans a row whose first columns are another scanner's and whose last are extra.
type extraRow struct {
	r     Row
	extra []any
}

func (e extraRow) Scan(dest ...any) error { return e.r.Scan(append(dest, e.extra...)...) }

// prefixRow scans first and then the destinations it is given, from one row.
type prefixRow struct {
	r     Row
	first []any
}

func (p prefixRow) Scan(dest ...any) error { return p.r.Scan(append(p.first, dest...)...) }
