-- 0004_replicas: several replicas on one database (issue 21, SPEC §16). PostgreSQL only: a SQLite
-- file has one server.
--
-- session_leases: which replica drives a session's run. A replica holds a row while its run of
-- the session lives (running or parked on an approval), renews it every second or so, and
-- deletes it when the run ends; a row whose expires_at has passed belongs to a dead replica, and
-- another replica takes the session over (SPEC §8's recovery). run is the run's token, so a run
-- that ends never releases a later run's lease. Times are the database's clock (now()), never a
-- replica's.
CREATE TABLE session_leases (
	session_id text COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	replica    text COLLATE "C" NOT NULL,
	run        text COLLATE "C" NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX session_leases_replica ON session_leases (replica);

-- session_events: the events a replica published, each with the next number of its session's
-- event sequence (sessions.last_event_seq, incremented under the session row's lock, so numbers
-- commit in order), for the other replicas: a NOTIFY names the row, and a replica that missed
-- notifications (its LISTEN connection was cut) reads every row after the last number it
-- delivered. Text deltas and progress are never stored (notifications only). Rows are kept for a
-- while (pg.EventRetention), then deleted: a replica away longer than that reloads its pages.
ALTER TABLE sessions ADD COLUMN last_event_seq bigint NOT NULL DEFAULT 0;
CREATE TABLE session_events (
	session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq        bigint NOT NULL,
	origin     text COLLATE "C" NOT NULL, -- the replica that published it
	body       json NOT NULL,             -- the event as its viewers get it
	created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (session_id, seq)
);
CREATE INDEX session_events_created ON session_events (created_at);

-- call_starts: the model-issued calls a person approved that started running (MarkStarted), one
-- row each, written before the call runs. A replica taking a session over runs an approved call
-- without a row here (its decision reached no live replica) and ends one with a row as
-- interrupted: it may have had side effects (SPEC §8).
CREATE TABLE call_starts (
	approval_id text COLLATE "C" PRIMARY KEY REFERENCES approvals (id) ON DELETE CASCADE,
	started_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
