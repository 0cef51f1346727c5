-- 0002_grants: session grants ("Approve for session", SPEC §3) and, on approvals, the human
-- decision an automatic one derives from.

ALTER TABLE approvals ADD COLUMN derived_from TEXT NOT NULL DEFAULT '';

CREATE TABLE grants (
	session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	tool_name   TEXT NOT NULL,
	approval_id TEXT NOT NULL, -- the human decision that granted it
	granted_by  TEXT NOT NULL,
	created_at  TEXT NOT NULL,
	PRIMARY KEY (session_id, tool_name)
);
