-- 0012_aap_requests: as SQLite's 0023. Door 3's approval requests (SPEC §18, issue 32: AAP v1),
-- one per request an AAP instance created, beside the approval that carries its decision; the
-- submitted fields as sent, an idempotency key per connection (UNIQUE) with the digest of its
-- parsed submission.
CREATE TABLE aap_requests (
	id              text COLLATE "C" PRIMARY KEY,
	connection_id   text COLLATE "C" NOT NULL,
	idempotency_key text COLLATE "C" NOT NULL,
	digest          text COLLATE "C" NOT NULL,
	approval_id     text COLLATE "C" NOT NULL UNIQUE REFERENCES approvals (id) ON DELETE CASCADE,
	session_id      text COLLATE "C" NOT NULL,
	tool            text COLLATE "C" NOT NULL,
	arguments       text NOT NULL,
	timeout         text COLLATE "C" NOT NULL,
	agent_reasoning text,
	context         text,
	created_at      text COLLATE "C" NOT NULL,
	deadline_at     text COLLATE "C" NOT NULL,
	UNIQUE (connection_id, idempotency_key)
);
CREATE INDEX aap_requests_deadline ON aap_requests (deadline_at);
