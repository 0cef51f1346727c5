package store

import (
	"context"
	"time"

	"countersign/internal/apperr"
)

// Failed token attempts (SPEC §16: the failed-token limit is shared through the database), one
// row per client address in token_failures: a token bucket kept as its "theoretical arrival
// time" (GCRA), tat, in microseconds since the Unix epoch by the database's clock ({nowMicros}),
// so every replica counts against one allowance and none trusts its own clock. A client has
// burst failures in hand when tat ≤ now; each failure moves tat on by every (from now, if tat
// was past); a failure is refused, not counted, while fewer than one is left (tat − now >
// (burst−1)·every), as golang.org/x/time/rate's AllowN does. Rows whose tat is past are full
// buckets and are deleted.

// FailToken counts a failed token attempt of client against an allowance of burst failures
// refilled one per every.
func (s *SQL) FailToken(ctx context.Context, client string, every time.Duration, burst int) (err error) {
	defer apperr.Wrap(&err, "FailToken")
	_, err = s.exec1(ctx, 0, `
		INSERT INTO token_failures (client, tat) VALUES (?1, {nowMicros} + ?2)
		ON CONFLICT (client) DO UPDATE SET tat = CASE
			WHEN token_failures.tat - {nowMicros} > ?3 THEN token_failures.tat
			ELSE {greatest}(token_failures.tat, {nowMicros}) + ?2 END`,
		client, every.Microseconds(), int64(burst-1)*every.Microseconds())
	if err != nil {
		return err
	}
	_, err = s.exec1(ctx, 0, `DELETE FROM token_failures WHERE tat < {nowMicros}`)
	return err
}

// TokenWait is how long client must wait before its next token attempt counts under an
// allowance of burst failures refilled one per every: 0 while it has at least one left.
func (s *SQL) TokenWait(ctx context.Context, client string, every time.Duration, burst int) (_ time.Duration, err error) {
	defer apperr.Wrap(&err, "TokenWait")
	var ahead int64
	err = s.queryRow(ctx, s.reads(), `SELECT tat - {nowMicros} FROM token_failures WHERE client = ?1`, client).Scan(&ahead)
	if isNoRows(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if wait := time.Duration(ahead)*time.Microsecond - time.Duration(burst-1)*every; wait > 0 {
		return wait, nil
	}
	return 0, nil
}
