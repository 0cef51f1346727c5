-- 0016_token_failures: failed token attempts per client address (SPEC §16, issue 33), shared by
-- every replica and counted by the database's clock (store.SQL.FailToken): three replicas give
-- a client one allowance, not three. tat is a token bucket's theoretical arrival time in
-- microseconds since the Unix epoch.

CREATE TABLE token_failures (
	client text COLLATE "C" PRIMARY KEY,
	tat    bigint NOT NULL
);
