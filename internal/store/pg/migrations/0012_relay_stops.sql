-- 0012_relay_stops: the Stop requests the replicas relay (issue 33, SPEC §16 "Trust between
-- replicas"). A replica asked to stop a run another replica drives stores the request here and
-- notifies its id; the replica driving the run stops it only if the row exists, is recent and
-- names that session, and it takes "who stopped it" from the row, never from the notification.
-- A role that may NOTIFY but not write this table stops nothing. Rows are deleted with old
-- session_events (relay.EventRetention).
CREATE TABLE relay_stops (
	id         text COLLATE "C" PRIMARY KEY,
	session_id text COLLATE "C" NOT NULL,
	by_name    text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX relay_stops_created ON relay_stops (created_at);
