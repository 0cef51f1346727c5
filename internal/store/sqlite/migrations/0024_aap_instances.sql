-- 0024_aap_instances: AAP instances and their request.resolved events (SPEC §18 Door 3, issue 32;
-- AAP v1 §5 "Provision an Instance", §7 "Asynchronous Mode"). An instance is an api connection
-- with a UUID, a name and, optionally, a verified webhook receiver; its credential and the
-- receiver's signing secret are kept sealed (aap.Sealer, keyed by the provisioner token), for
-- provisioning replays and for signing. A deleted instance keeps its row (deleted_at). An event
-- is made once per request that became terminal while its instance had delivery (UNIQUE
-- request_id), then retried until acknowledged or seven days after the decision.
CREATE TABLE aap_instances (
	id               TEXT PRIMARY KEY,
	connection_id    TEXT NOT NULL UNIQUE,
	name             TEXT NOT NULL,
	url              TEXT,
	registration_id  TEXT,
	sealed_secret    TEXT,
	delivery_since   TEXT,
	provision_key    TEXT NOT NULL UNIQUE,
	provision_digest TEXT NOT NULL,
	sealed_token     TEXT NOT NULL,
	created_at       TEXT NOT NULL,
	deleted_at       TEXT
);
CREATE TABLE aap_events (
	id           TEXT PRIMARY KEY,
	instance_id  TEXT NOT NULL REFERENCES aap_instances (id),
	request_id   TEXT NOT NULL UNIQUE REFERENCES aap_requests (id) ON DELETE CASCADE,
	created_at   TEXT NOT NULL,
	attempts     INTEGER NOT NULL DEFAULT 0,
	next_at      TEXT,
	delivered_at TEXT,
	ended_at     TEXT
);
CREATE INDEX aap_events_due ON aap_events (next_at) WHERE delivered_at IS NULL AND ended_at IS NULL;

-- An instance update's idempotency key (AAP v1 §5 "Update an Instance": scoped to the instance)
-- with the digest of its input and its original response, for replays.
CREATE TABLE aap_instance_updates (
	instance_id     TEXT NOT NULL REFERENCES aap_instances (id),
	idempotency_key TEXT NOT NULL,
	digest          TEXT NOT NULL,
	response        TEXT NOT NULL,
	created_at      TEXT NOT NULL,
	PRIMARY KEY (instance_id, idempotency_key)
);
