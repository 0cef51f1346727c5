-- 0009_rules: rules and modes (SPEC §14, issue 17).
--
-- rules keeps the rules people made (sources prompt and api; the policy file's stay in memory).
-- Text columns hold '' for "none"; created_via_* '' when no share link was used.
CREATE TABLE rules (
	id                     TEXT PRIMARY KEY,
	effect                 TEXT NOT NULL CHECK (effect IN ('allow', 'ask', 'deny')),
	tool                   TEXT NOT NULL,
	specifier              TEXT NOT NULL DEFAULT '',
	when_expr              TEXT NOT NULL DEFAULT '',
	scope                  TEXT NOT NULL CHECK (scope IN ('session', 'workspace', 'server')),
	session_id             TEXT REFERENCES sessions (id) ON DELETE CASCADE, -- scope session only
	workspace              TEXT NOT NULL DEFAULT '',
	source                 TEXT NOT NULL CHECK (source IN ('prompt', 'api')),
	created_by             TEXT NOT NULL,
	created_via_link_id    TEXT NOT NULL DEFAULT '',
	created_via_link_label TEXT NOT NULL DEFAULT '',
	created_at             TEXT NOT NULL,
	expires_at             TEXT,
	note                   TEXT NOT NULL DEFAULT '',
	from_approval          TEXT NOT NULL DEFAULT '',
	hits                   INTEGER NOT NULL DEFAULT 0,
	last_used_at           TEXT,
	CHECK ((scope = 'session') = (session_id IS NOT NULL))
);
CREATE INDEX rules_session ON rules (session_id);

-- "Approve for session" grants become session allow rules for the tool (source prompt), made by
-- the granter through the link they granted through; the grants table goes.
INSERT INTO rules (id, effect, tool, scope, session_id, source, created_by, created_via_link_id,
		created_via_link_label, created_at, from_approval)
	SELECT 'g-' || lower(hex(randomblob(8))), 'allow', tool_name, 'session', session_id, 'prompt', granted_by,
		granted_via_link_id, granted_via_link_label, created_at, approval_id
	FROM grants;
DROP TABLE grants;

-- A session's mode (SPEC §14); a new session gets the server's default mode, older ones 'default'.
ALTER TABLE sessions ADD COLUMN mode TEXT NOT NULL DEFAULT 'default' CHECK (mode IN ('default', 'plan', 'accept-edits'));

-- What decided each approval (SPEC §14 audit): handler, rule, mode, annotation default, person;
-- the rule's id, text and source; the session's mode. '' on approvals stored before.
ALTER TABLE approvals ADD COLUMN decision_source TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN rule_id TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN rule_text TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN rule_source TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN mode TEXT NOT NULL DEFAULT '';
