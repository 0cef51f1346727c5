package relay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestDatabaseAwayTellsAnOutageFromARefusal: the writer waits for a database that did not
// answer, and drops after 5 attempts a batch that the server refused or that cannot be encoded
// (issue 33).
func TestDatabaseAwayTellsAnOutageFromARefusal(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"cut mid-statement", fmt.Errorf("batch: %w", io.ErrUnexpectedEOF), true},
		{"unreachable", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{"server shutting down", &pgconn.PgError{Code: "57P01"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"a unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"invalid text", &pgconn.PgError{Code: "22021"}, false},
		{"cannot encode", errors.New("unable to encode x into text format"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := databaseAway(c.err); got != c.want {
				t.Errorf("databaseAway(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}
