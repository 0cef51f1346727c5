package sqlite

import (
	"context"
	"database/sql"

	"countersign/internal/store"
)

// conn is the SQLite store's store.Conn: reads go to the read pool (query_only connections),
// writes through the write queue (Write, commit.go) to the one write connection. Statements are
// prepared once and kept (stmtCache): compiling the SQL cost as much as running it on the hot
// paths (a transcript entry, an approval, a session).
type conn struct{ db *DB }

// Query runs a read.
func (c conn) Query(ctx context.Context, query string, args ...any) (store.Rows, error) {
	return queryWith(ctx, c.db.reads, query, args)
}

// QueryRow runs a read of one row.
func (c conn) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	return queryRowWith(ctx, c.db.reads, query, args)
}

// writeConn runs a write's one statement on the write connection, outside a transaction (SQLite
// commits it itself). Its statements run without their context's cancellation (Write).
type writeConn struct{ db *DB }

func (w writeConn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return w.db.execCached(context.WithoutCancel(ctx), query, args...)
}

func (w writeConn) Query(ctx context.Context, query string, args ...any) (store.Rows, error) {
	return queryWith(context.WithoutCancel(ctx), w.db.writes, query, args)
}

func (w writeConn) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	return queryRowWith(context.WithoutCancel(ctx), w.db.writes, query, args)
}

// execCached runs a statement on the write connection, prepared once; only outside a
// transaction.
func (db *DB) execCached(ctx context.Context, query string, args ...any) (int64, error) {
	st, err := db.writes.stmt(ctx, query)
	if err != nil {
		return 0, err
	}
	var res sql.Result
	if st != nil {
		res, err = st.ExecContext(ctx, args...)
	} else {
		res, err = db.write.ExecContext(ctx, query, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// writeTx runs a write's statements in its transaction: a statement already prepared on the
// write connection is bound to the transaction (no compiling); one not yet prepared runs as it
// is, and is prepared after the commit (writeOp.missed), since preparing on the pool would wait
// for the connection the transaction holds.
type writeTx struct {
	db *DB
	tx *sql.Tx
	op *writeOp
}

// stmt is query's prepared statement bound to the transaction, or nil.
func (w *writeTx) stmt(ctx context.Context, query string) *sql.Stmt {
	st := w.db.writes.cached(query)
	if st == nil {
		w.op.missed = append(w.op.missed, query)
		return nil
	}
	return w.tx.StmtContext(ctx, st)
}

func (w *writeTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	ctx = context.WithoutCancel(ctx)
	var res sql.Result
	var err error
	if st := w.stmt(ctx, query); st != nil {
		res, err = st.ExecContext(ctx, args...)
	} else {
		res, err = w.tx.ExecContext(ctx, query, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (w *writeTx) Query(ctx context.Context, query string, args ...any) (store.Rows, error) {
	ctx = context.WithoutCancel(ctx)
	if st := w.stmt(ctx, query); st != nil {
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return nil, err
		}
		return sqlRows{rows}, nil
	}
	rows, err := w.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (w *writeTx) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	ctx = context.WithoutCancel(ctx)
	if st := w.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return w.tx.QueryRowContext(ctx, query, args...)
}

// queryWith runs query through c's prepared statement (or, with the cache full, as it is).
func queryWith(ctx context.Context, c *stmtCache, query string, args []any) (store.Rows, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	var rows *sql.Rows
	if st != nil {
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = c.db.QueryContext(ctx, query, args...)
	}
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

// queryRowWith is queryWith for one row.
func queryRowWith(ctx context.Context, c *stmtCache, query string, args []any) store.Row {
	st, err := c.stmt(ctx, query)
	if err != nil || st == nil {
		return c.db.QueryRowContext(ctx, query, args...) // reports the same error
	}
	return st.QueryRowContext(ctx, args...)
}

// sqlRows is *sql.Rows as store.Rows.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }
