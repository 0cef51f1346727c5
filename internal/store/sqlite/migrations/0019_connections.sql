-- 0019_connections: the agents people already run, connected on the Agents page (SPEC §18,
-- issue 30). Only a hash of each connection's token is stored (hex SHA-256), so a copy of the
-- database authenticates nobody; the token is looked up by it (UNIQUE). A revoked connection
-- keeps its row (and its first revocation time) so its sessions still name it.

CREATE TABLE connections (
	id           TEXT PRIMARY KEY,
	label        TEXT NOT NULL CHECK (label <> ''),
	kind         TEXT NOT NULL CHECK (kind IN ('claude-code', 'codex', 'gemini', 'cursor', 'copilot', 'mcp', 'api')),
	token_hash   TEXT NOT NULL UNIQUE,
	created_at   TEXT NOT NULL,
	last_used_at TEXT,
	revoked_at   TEXT
);

CREATE INDEX connections_newest ON connections (created_at);
