-- 0001_init: sessions, their transcript entries, and approvals (SPEC §8).
-- Times are fixed-width RFC 3339 text in UTC with nanoseconds ("2006-01-02T15:04:05.000000000Z"),
-- so they round-trip exactly and sort as text. JSON columns hold JSON text.

CREATE TABLE sessions (
	id           TEXT PRIMARY KEY,
	title        TEXT NOT NULL,
	model        TEXT NOT NULL,
	workspace    TEXT NOT NULL,
	state        TEXT NOT NULL,
	active_tools TEXT CHECK (active_tools IS NULL OR json_valid(active_tools)), -- JSON array of names; NULL = the registry's default
	created_at   TEXT NOT NULL
);

CREATE INDEX sessions_created_at ON sessions (created_at);
CREATE INDEX sessions_state ON sessions (state);

CREATE TABLE entries (
	session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq          INTEGER NOT NULL, -- 1, 2, ... per session, assigned as max+1 by the inserting statement
	role         TEXT NOT NULL,
	tool_call_id TEXT NOT NULL DEFAULT '', -- tool results only
	message      TEXT NOT NULL CHECK (json_valid(message)), -- agent.Message as JSON
	created_at   TEXT NOT NULL,
	PRIMARY KEY (session_id, seq)
);

CREATE TABLE approvals (
	id                  TEXT PRIMARY KEY,
	session_id          TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	message_id          TEXT NOT NULL,
	tool_call_id        TEXT NOT NULL,
	parent_tool_call_id TEXT NOT NULL DEFAULT '',
	tool_name           TEXT NOT NULL,
	tool_title          TEXT NOT NULL DEFAULT '',
	arguments           TEXT CHECK (arguments IS NULL OR json_valid(arguments)),
	edited_arguments    TEXT CHECK (edited_arguments IS NULL OR json_valid(edited_arguments)),
	annotations         TEXT NOT NULL CHECK (json_valid(annotations)), -- tool.Annotations: absent hints stay absent
	requested_by        TEXT NOT NULL,
	status              TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'timed_out', 'cancelled')),
	automatic           INTEGER NOT NULL CHECK (automatic IN (0, 1)),
	decided_by          TEXT NOT NULL DEFAULT '',
	reason              TEXT NOT NULL DEFAULT '',
	scope               TEXT NOT NULL DEFAULT '' CHECK (scope IN ('', 'once', 'session')),
	created_at          TEXT NOT NULL,
	decided_at          TEXT
);

CREATE INDEX approvals_session_created ON approvals (session_id, created_at);
CREATE INDEX approvals_session_status ON approvals (session_id, status);
-- PendingApprovals scans every session at restart.
CREATE INDEX approvals_status ON approvals (status);
