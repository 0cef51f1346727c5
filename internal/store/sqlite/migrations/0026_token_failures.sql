-- 0026_token_failures: failed token attempts per client address (SPEC §16, issue 33), counted in
-- the database by its clock (store.SQL.FailToken) rather than in each server's memory. tat is a
-- token bucket's theoretical arrival time in microseconds since the Unix epoch.

CREATE TABLE token_failures (
	client TEXT PRIMARY KEY,
	tat    INTEGER NOT NULL
);
