-- 0020_agent_sessions: agent sessions and their outside calls (SPEC §18, issue 30).
--
-- An agent session is a session whose calls come from an outside agent (Claude Code, Codex…)
-- through its hooks: its provenance is kept on the session (all NULL for Countersign's own
-- sessions; agent_kind is set exactly on agent sessions), one per connection and agent session
-- id. Its workspace is the agent's cwd.
ALTER TABLE sessions ADD COLUMN agent_kind TEXT;
ALTER TABLE sessions ADD COLUMN connection_id TEXT;
ALTER TABLE sessions ADD COLUMN agent_session_id TEXT;
ALTER TABLE sessions ADD COLUMN agent_permission_mode TEXT;
ALTER TABLE sessions ADD COLUMN agent_transcript_path TEXT;
ALTER TABLE sessions ADD COLUMN agent_model TEXT;
ALTER TABLE sessions ADD COLUMN agent_prompt_id TEXT;
ALTER TABLE sessions ADD COLUMN agent_state TEXT;
CREATE UNIQUE INDEX sessions_agent ON sessions (connection_id, agent_session_id) WHERE agent_kind IS NOT NULL;

-- An outside call is one tool call an agent's hook asked about, beside its approval (the same
-- approvals row as every gated call): the key that pairs its PreToolUse with its
-- PermissionRequest (hooks.MatchKey), when the agent stopped waiting (its hook's deadline
-- passed with no decision), and the outcome its PostToolUse reported.
CREATE TABLE outside_calls (
	approval_id        TEXT PRIMARY KEY REFERENCES approvals (id) ON DELETE CASCADE,
	session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	tool_use_id        TEXT NOT NULL DEFAULT '',
	match_key          TEXT NOT NULL,
	edited_key         TEXT, -- the match key of the input a person's edit approved (its later events carry it)
	event              TEXT NOT NULL,
	editable           INTEGER NOT NULL DEFAULT 0, -- the agent honours an edited input on this event
	stopped_waiting_at TEXT,
	outcome            TEXT CHECK (outcome IS NULL OR json_valid(outcome)),
	outcome_at         TEXT,
	created_at         TEXT NOT NULL
);
CREATE INDEX outside_calls_key ON outside_calls (session_id, match_key);
CREATE INDEX outside_calls_tool_use ON outside_calls (session_id, tool_use_id);
CREATE INDEX outside_calls_edited_key ON outside_calls (session_id, edited_key) WHERE edited_key IS NOT NULL;
