package store

import "testing"

// TestNumberedPlaceholders: PostgreSQL's placeholders are numbered from the store's ? (in order)
// and ?N (as written); a ? inside a quoted string is text.
func TestNumberedPlaceholders(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = $1 AND c = $2`},
		{`UPDATE t SET a = ?3 WHERE b = ?1 AND c <> ?1 AND d > ?2`, `UPDATE t SET a = $3 WHERE b = $1 AND c <> $1 AND d > $2`},
		{`SELECT '?', 'it''s ?' FROM t WHERE a = ?`, `SELECT '?', 'it''s ?' FROM t WHERE a = $1`},
		{`INSERT INTO t (a) VALUES (?12)`, `INSERT INTO t (a) VALUES ($12)`},
	} {
		if got := numbered(tc.in); got != tc.want {
			t.Errorf("numbered(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestTheDialectFillsInItsForms: q fills in the {forms} and numbers the placeholders once per
// query text; a form the dialect lacks is a bug, caught at the first use of the query.
func TestTheDialectFillsInItsForms(t *testing.T) {
	db := New(nil, Dialect{Numbered: true, Forms: map[string]string{"ord": "ord", "forUpdate": " FOR UPDATE"}})
	q := `SELECT a FROM t WHERE b = ?{forUpdate} ORDER BY {ord}`
	if got, want := db.q(q), `SELECT a FROM t WHERE b = $1 FOR UPDATE ORDER BY ord`; got != want {
		t.Fatalf("q = %q, want %q", got, want)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a query with a form the dialect lacks did not panic")
		}
	}()
	db.q(`SELECT {greatest}(a, b) FROM t`)
}
