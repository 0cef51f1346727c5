-- 0009_agent_sessions: agent sessions and their outside calls (SPEC §18, issue 30); the same as
-- the SQLite store's 0020_agent_sessions.
ALTER TABLE sessions ADD COLUMN agent_kind text COLLATE "C";
ALTER TABLE sessions ADD COLUMN connection_id text COLLATE "C";
ALTER TABLE sessions ADD COLUMN agent_session_id text COLLATE "C";
ALTER TABLE sessions ADD COLUMN agent_permission_mode text COLLATE "C";
ALTER TABLE sessions ADD COLUMN agent_transcript_path text COLLATE "C";
ALTER TABLE sessions ADD COLUMN agent_model text COLLATE "C";
ALTER TABLE sessions ADD COLUMN agent_prompt_id text COLLATE "C";
ALTER TABLE sessions ADD COLUMN agent_state text COLLATE "C";
CREATE UNIQUE INDEX sessions_agent ON sessions (connection_id, agent_session_id) WHERE agent_kind IS NOT NULL;

CREATE TABLE outside_calls (
	approval_id        text COLLATE "C" PRIMARY KEY REFERENCES approvals (id) ON DELETE CASCADE,
	session_id         text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	tool_use_id        text COLLATE "C" NOT NULL DEFAULT '',
	match_key          text COLLATE "C" NOT NULL,
	edited_key         text COLLATE "C",
	event              text COLLATE "C" NOT NULL,
	editable           boolean NOT NULL DEFAULT false,
	stopped_waiting_at text COLLATE "C",
	outcome            json,
	outcome_at         text COLLATE "C",
	created_at         text COLLATE "C" NOT NULL
);
CREATE INDEX outside_calls_key ON outside_calls (session_id, match_key);
CREATE INDEX outside_calls_tool_use ON outside_calls (session_id, tool_use_id);
CREATE INDEX outside_calls_edited_key ON outside_calls (session_id, edited_key) WHERE edited_key IS NOT NULL;
