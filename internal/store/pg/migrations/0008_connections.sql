-- 0008_connections: the agents people already run, connected on the Agents page (SPEC §18,
-- issue 30); the same as the SQLite store's 0019_connections. Only a hash of each connection's
-- token is stored (hex SHA-256), looked up by it (UNIQUE). A revoked connection keeps its row.

CREATE TABLE connections (
	id           text COLLATE "C" PRIMARY KEY,
	ord          bigint GENERATED ALWAYS AS IDENTITY,
	label        text COLLATE "C" NOT NULL CHECK (label <> ''),
	kind         text COLLATE "C" NOT NULL CHECK (kind IN ('claude-code', 'codex', 'gemini', 'cursor', 'copilot', 'mcp', 'api')),
	token_hash   text COLLATE "C" NOT NULL UNIQUE,
	created_at   text COLLATE "C" NOT NULL,
	last_used_at text COLLATE "C",
	revoked_at   text COLLATE "C"
);

CREATE INDEX connections_newest ON connections (created_at DESC, ord DESC);
