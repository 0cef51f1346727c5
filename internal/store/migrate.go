package store

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"

	"countersign/internal/apperr"
)

// Migration is how a backend applies its migrations (Migrate).
type Migration struct {
	// Files holds the migrations, migrations/*.sql, applied in name order.
	Files fs.FS
	// Table records the applied ones: name, applied_at.
	Table string
	// First are statements run at the start of each migration's transaction, in the dialect's
	// SQL as it is: a lock (PostgreSQL: replicas starting together apply each migration once),
	// the record table's creation (CREATE TABLE IF NOT EXISTS).
	First []string
	// InTx runs fn in one transaction, committed when fn returns nil.
	InTx func(ctx context.Context, fn func(tx Querier) error) error
}

// Migrate applies every migration of m not yet recorded in m.Table, each in its own transaction
// together with its record. Applied migrations are skipped, so running it again is a no-op.
// Errors name the migration that failed. A database with a migration recorded whose number is
// past all of m's is refused before anything is applied, with NewerSchema's error.
func (db *SQL) Migrate(ctx context.Context, m Migration) (err error) {
	defer apperr.Wrap(&err, "migrate")
	names, err := fs.Glob(m.Files, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	var refused error
	for i, name := range names {
		err := m.InTx(ctx, func(tx Querier) error {
			for _, q := range m.First {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
			if i == 0 {
				// Before anything is applied: a database a newer binary migrated is refused
				// (SPEC §16), not given this binary's idea of the tables.
				var newest sql.NullString
				if err := db.queryRow(ctx, tx, `SELECT MAX(name) FROM `+m.Table).Scan(&newest); err != nil {
					return err
				}
				if refused = NewerSchema(newest.String, names); refused != nil {
					return refused
				}
			}
			var n int
			if err := db.queryRow(ctx, tx, `SELECT COUNT(*) FROM `+m.Table+` WHERE name = ?`, path.Base(name)).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			body, err := fs.ReadFile(m.Files, name)
			if err != nil {
				return err
			}
			// As it is, without arguments (PostgreSQL: the simple protocol, which runs a file of
			// several statements).
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return err
			}
			_, err = db.exec(ctx, tx, `INSERT INTO `+m.Table+` (name, applied_at) VALUES (?, ?)`, path.Base(name), formatTime(db.Now()))
			return err
		})
		if refused != nil {
			return refused
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}
