-- 0003_shares: share links (SPEC §7). Only a hash of each token is stored.

CREATE TABLE shares (
	id           TEXT PRIMARY KEY,
	session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	role         TEXT NOT NULL CHECK (role IN ('viewer', 'approver')),
	label        TEXT NOT NULL DEFAULT '',
	token_hash   TEXT NOT NULL UNIQUE,
	created_at   TEXT NOT NULL,
	expires_at   TEXT,
	revoked_at   TEXT,
	last_used_at TEXT
);

CREATE INDEX shares_session ON shares (session_id, created_at);
