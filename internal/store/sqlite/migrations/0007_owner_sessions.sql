-- 0007_owner_sessions: the owner's browser logins (issue 15 item 11). The cookie names a login by
-- a random id; only its SHA-256 (hex) is stored, so a copy of the database logs nobody in. A
-- login ends when it expires or at logout (its row is deleted).

CREATE TABLE owner_sessions (
	id_hash    TEXT PRIMARY KEY,
	created_at TEXT NOT NULL,
	expires_at TEXT NOT NULL
) WITHOUT ROWID;
