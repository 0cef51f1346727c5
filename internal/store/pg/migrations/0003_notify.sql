-- 0003_notify: the SQLite store's 0015 (issue 20, SPEC §15) in PostgreSQL's dialect, as
-- 0001_init explains it (an identity ord for "in the order they were written").
--
-- Webhook deliveries and decision links. notify_outbox holds one row per receiver and
-- event, written in the transaction of the approval (approval.requested) or of its resolution
-- (approval.resolved, approval.timed_out); next_at is when the next attempt is due, NULL once
-- delivered or given up.
CREATE TABLE notify_outbox (
	id           text COLLATE "C" PRIMARY KEY, -- "<approval id>/<receiver id>/<event>": the webhook-id header
	ord          bigint GENERATED ALWAYS AS IDENTITY,
	approval_id  text COLLATE "C" NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	receiver_id  text COLLATE "C" NOT NULL,
	event        text COLLATE "C" NOT NULL CHECK (event IN ('approval.requested', 'approval.resolved', 'approval.timed_out')),
	link_id      text COLLATE "C" NOT NULL DEFAULT '', -- the decision link an approval.requested row carries
	created_at   text COLLATE "C" NOT NULL,
	attempts     integer NOT NULL DEFAULT 0,
	next_at      text COLLATE "C",
	delivered_at text COLLATE "C",
	failed       boolean NOT NULL DEFAULT false
);
CREATE INDEX notify_outbox_due ON notify_outbox (next_at, ord) WHERE next_at IS NOT NULL;
CREATE INDEX notify_outbox_approval ON notify_outbox (approval_id);

-- Every attempt at an outbox row, for the session's audit page.
CREATE TABLE notify_attempts (
	outbox_id   text COLLATE "C" NOT NULL REFERENCES notify_outbox (id) ON DELETE CASCADE,
	n           integer NOT NULL, -- 1, 2, …
	at          text COLLATE "C" NOT NULL,
	status      integer NOT NULL DEFAULT 0, -- the receiver's HTTP status; 0: no answer (error)
	error       text COLLATE "C" NOT NULL DEFAULT '',
	duration_ns bigint NOT NULL,
	PRIMARY KEY (outbox_id, n)
);

-- One decision link per receiver and pending approval: only its token's SHA-256 is kept, with
-- the SHA-256 of the approval's canonical arguments it was made for; used_at: single use.
CREATE TABLE decision_links (
	id               text COLLATE "C" PRIMARY KEY,
	token_hash       text COLLATE "C" NOT NULL UNIQUE,
	approval_id      text COLLATE "C" NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	receiver_id      text COLLATE "C" NOT NULL,
	recipient        text COLLATE "C" NOT NULL,
	arguments_sha256 text COLLATE "C" NOT NULL,
	created_at       text COLLATE "C" NOT NULL,
	used_at          text COLLATE "C"
);
CREATE INDEX decision_links_approval ON decision_links (approval_id);

