-- 0005_entries_without_rowid: transcript entries are kept in one B-tree ordered by their primary
-- key (session_id, seq), instead of a rowid table plus the index of that key: every append
-- writes one page fewer (a turn appends two entries), and reading a transcript walks one tree.
-- Same columns and constraints as 0001.

CREATE TABLE entries_new (
	session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq          INTEGER NOT NULL,
	role         TEXT NOT NULL,
	tool_call_id TEXT NOT NULL DEFAULT '',
	message      TEXT NOT NULL CHECK (json_valid(message)),
	created_at   TEXT NOT NULL,
	PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

INSERT INTO entries_new (session_id, seq, role, tool_call_id, message, created_at)
	SELECT session_id, seq, role, tool_call_id, message, created_at FROM entries;
DROP TABLE entries;
ALTER TABLE entries_new RENAME TO entries;
