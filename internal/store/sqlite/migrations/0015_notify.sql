-- 0015_notify: webhook deliveries and decision links (issue 20, SPEC §15).
--
-- notify_outbox: one row per receiver and event, written in the transaction that writes the
-- approval (approval.requested) or its resolution (approval.resolved / approval.timed_out), so an
-- event is never lost nor sent for an approval that was not stored. The delivery worker builds
-- the payload when it sends it; the row holds no payload and no token. next_at is when the next
-- attempt is due, NULL once delivered (delivered_at) or given up (failed = 1).
CREATE TABLE notify_outbox (
	id           TEXT PRIMARY KEY, -- "<approval id>/<receiver id>/<event>": the webhook-id header
	approval_id  TEXT NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	receiver_id  TEXT NOT NULL,
	event        TEXT NOT NULL CHECK (event IN ('approval.requested', 'approval.resolved', 'approval.timed_out')),
	link_id      TEXT NOT NULL DEFAULT '', -- the decision link an approval.requested row carries
	created_at   TEXT NOT NULL,
	attempts     INTEGER NOT NULL DEFAULT 0,
	next_at      TEXT,
	delivered_at TEXT,
	failed       INTEGER NOT NULL DEFAULT 0 CHECK (failed IN (0, 1))
);
CREATE INDEX notify_outbox_due ON notify_outbox (next_at) WHERE next_at IS NOT NULL;
CREATE INDEX notify_outbox_approval ON notify_outbox (approval_id);

-- notify_attempts: every attempt at a row, listed on the session's audit page.
CREATE TABLE notify_attempts (
	outbox_id   TEXT NOT NULL REFERENCES notify_outbox (id) ON DELETE CASCADE,
	n           INTEGER NOT NULL, -- 1, 2, …
	at          TEXT NOT NULL,
	status      INTEGER NOT NULL DEFAULT 0, -- the receiver's HTTP status; 0: no answer (error)
	error       TEXT NOT NULL DEFAULT '',
	duration_ns INTEGER NOT NULL,
	PRIMARY KEY (outbox_id, n)
) WITHOUT ROWID;

-- decision_links: one per receiver and pending approval. The token is derived from the id with
-- the server's key (beside the database); only its SHA-256 is kept, with the SHA-256 of the
-- approval's canonical arguments it was made for. used_at: single use.
CREATE TABLE decision_links (
	id               TEXT PRIMARY KEY,
	token_hash       TEXT NOT NULL UNIQUE,
	approval_id      TEXT NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	receiver_id      TEXT NOT NULL,
	recipient        TEXT NOT NULL,
	arguments_sha256 TEXT NOT NULL,
	created_at       TEXT NOT NULL,
	used_at          TEXT
);
CREATE INDEX decision_links_approval ON decision_links (approval_id);
