-- 0013_aap_instances: as SQLite's 0024. AAP instances (api connections with a UUID, a name and an
-- optional verified receiver; credential and signing secret sealed) and their request.resolved
-- events (one per request, retried until acknowledged or seven days after the decision).
CREATE TABLE aap_instances (
	id               text COLLATE "C" PRIMARY KEY,
	connection_id    text COLLATE "C" NOT NULL UNIQUE,
	name             text NOT NULL,
	url              text,
	registration_id  text COLLATE "C",
	sealed_secret    text,
	delivery_since   text COLLATE "C",
	provision_key    text COLLATE "C" NOT NULL UNIQUE,
	provision_digest text COLLATE "C" NOT NULL,
	sealed_token     text NOT NULL,
	created_at       text COLLATE "C" NOT NULL,
	deleted_at       text COLLATE "C"
);
CREATE TABLE aap_events (
	id           text COLLATE "C" PRIMARY KEY,
	instance_id  text COLLATE "C" NOT NULL REFERENCES aap_instances (id),
	request_id   text COLLATE "C" NOT NULL UNIQUE REFERENCES aap_requests (id) ON DELETE CASCADE,
	created_at   text COLLATE "C" NOT NULL,
	attempts     integer NOT NULL DEFAULT 0,
	next_at      text COLLATE "C",
	delivered_at text COLLATE "C",
	ended_at     text COLLATE "C"
);
CREATE INDEX aap_events_due ON aap_events (next_at) WHERE delivered_at IS NULL AND ended_at IS NULL;

CREATE TABLE aap_instance_updates (
	instance_id     text COLLATE "C" NOT NULL REFERENCES aap_instances (id),
	idempotency_key text COLLATE "C" NOT NULL,
	digest          text COLLATE "C" NOT NULL,
	response        text NOT NULL,
	created_at      text COLLATE "C" NOT NULL,
	PRIMARY KEY (instance_id, idempotency_key)
);
