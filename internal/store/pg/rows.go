package pg

import "github.com/jackc/pgx/v5"

// extraRow scans a row whose first columns are another scanner's and whose last are extra.
type extraRow struct {
	r     pgx.Row
	extra []any
}

func (e extraRow) Scan(dest ...any) error { return e.r.Scan(append(dest, e.extra...)...) }

// prefixRow scans first and then the destinations it is given, from one row.
type prefixRow struct {
	r     pgx.Row
	first []any
}

func (p prefixRow) Scan(dest ...any) error { return p.r.Scan(append(p.first, dest...)...) }
