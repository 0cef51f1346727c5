-- 0023_aap_requests: Door 3's approval requests (SPEC §18, issue 32: the Agent Approval Protocol
-- v1, AAP v1 §4 "Requests and Decisions", §5 "HTTP API"). One row per request an AAP instance (a
-- connection of kind api) created, beside the approval that carries its decision (the same
-- approvals row as every gated call: the inbox, decision links, several approvers and the audit
-- serve it). The request's submitted fields are kept as sent (arguments and context as compacted
-- JSON) and never change; its status is its approval's. An idempotency key names one request per
-- connection (UNIQUE), with the digest of the parsed submission it was first used with (a replay
-- with other values is idempotency_conflict). Rows are kept as long as their approval (AAP v1 §5
-- "Retention": at least seven days after the decision).
CREATE TABLE aap_requests (
	id              TEXT PRIMARY KEY, -- a UUID
	connection_id   TEXT NOT NULL,
	idempotency_key TEXT NOT NULL,
	digest          TEXT NOT NULL,
	approval_id     TEXT NOT NULL UNIQUE REFERENCES approvals (id) ON DELETE CASCADE,
	session_id      TEXT NOT NULL,
	tool            TEXT NOT NULL,
	arguments       TEXT NOT NULL CHECK (json_valid(arguments)),
	timeout         TEXT NOT NULL,
	agent_reasoning TEXT,
	context         TEXT CHECK (context IS NULL OR json_valid(context)),
	created_at      TEXT NOT NULL,
	deadline_at     TEXT NOT NULL,
	UNIQUE (connection_id, idempotency_key)
);
CREATE INDEX aap_requests_deadline ON aap_requests (deadline_at);
