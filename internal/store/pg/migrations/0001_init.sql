-- 0001_init: the PostgreSQL store's schema (issue 21, SPEC §8, §16): the SQLite store's tables as
-- its migrations 0001–0013 left them, in PostgreSQL's dialect. Same columns, constraints and
-- meanings; the differences, and why:
--
-- * Times are the same fixed-width RFC 3339 text in UTC with nine fractional digits
--   ("2006-01-02T15:04:05.000000000Z"), not timestamptz: timestamptz keeps microseconds, and the
--   store keeps times exactly (the conformance suite round-trips nanoseconds). Fixed width, so
--   text order is time order.
-- * Every text column is COLLATE "C": ordering and comparison by bytes, as SQLite's, whatever
--   locale the database was created with (a locale's collation would order ids differently and
--   may ignore punctuation).
-- * JSON columns are json, not jsonb: json keeps the text byte for byte (a call's arguments as
--   the model sent them, spacing and key order included) and accepts the \u0000 escape, which
--   jsonb refuses; both check the syntax, as SQLite's json_valid checks did. Nothing queries
--   inside them.
-- * The flags are boolean, where SQLite has 0/1 integers.
-- * SQLite's rowid, the tie-breaker of "newest first" and "in creation order", is an identity
--   column `ord` on sessions, approvals and shares.
-- * sessions.last_entry_seq is the session's last transcript seq: AppendEntry takes the next one
--   by incrementing it (UPDATE … RETURNING), which locks the session's row until the entry's
--   commit, so appends to one session are serialised and seqs are 1, 2, 3… without gaps or
--   duplicates under any concurrency (max(seq)+1 would hand two concurrent transactions the same
--   seq under READ COMMITTED). SetSessionInstructions' "no entry yet" checks it on that same row.

CREATE TABLE sessions (
	id                text COLLATE "C" PRIMARY KEY,
	ord               bigint GENERATED ALWAYS AS IDENTITY,
	title             text COLLATE "C" NOT NULL,
	model             text COLLATE "C" NOT NULL,
	workspace         text COLLATE "C" NOT NULL,
	state             text COLLATE "C" NOT NULL,
	active_tools      json, -- JSON array of names; NULL = the registry's default
	created_at        text COLLATE "C" NOT NULL,
	mode              text COLLATE "C" NOT NULL DEFAULT 'default' CHECK (mode IN ('default', 'plan', 'accept-edits')),
	instructions      text COLLATE "C" NOT NULL DEFAULT '',
	usage_input       bigint NOT NULL DEFAULT 0,
	usage_output      bigint NOT NULL DEFAULT 0,
	usage_cache_read  bigint NOT NULL DEFAULT 0,
	usage_cache_write bigint NOT NULL DEFAULT 0,
	last_entry_seq    bigint NOT NULL DEFAULT 0
);

CREATE INDEX sessions_newest ON sessions (created_at DESC, ord DESC);
CREATE INDEX sessions_state ON sessions (state);

CREATE TABLE entries (
	session_id   text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq          bigint NOT NULL, -- 1, 2, … per session (sessions.last_entry_seq)
	role         text COLLATE "C" NOT NULL,
	tool_call_id text COLLATE "C" NOT NULL DEFAULT '', -- tool results only
	message      json NOT NULL, -- agent.Message as JSON
	created_at   text COLLATE "C" NOT NULL,
	PRIMARY KEY (session_id, seq)
);

CREATE TABLE approvals (
	id                     text COLLATE "C" PRIMARY KEY,
	ord                    bigint GENERATED ALWAYS AS IDENTITY,
	session_id             text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	message_id             text COLLATE "C" NOT NULL,
	tool_call_id           text COLLATE "C" NOT NULL,
	parent_tool_call_id    text COLLATE "C" NOT NULL DEFAULT '',
	tool_name              text COLLATE "C" NOT NULL,
	tool_title             text COLLATE "C" NOT NULL DEFAULT '',
	arguments              json,
	edited_arguments       json,
	annotations            json NOT NULL, -- tool.Annotations: absent hints stay absent
	requested_by           text COLLATE "C" NOT NULL,
	status                 text COLLATE "C" NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'timed_out', 'cancelled')),
	automatic              boolean NOT NULL,
	decided_by             text COLLATE "C" NOT NULL DEFAULT '',
	reason                 text COLLATE "C" NOT NULL DEFAULT '',
	scope                  text COLLATE "C" NOT NULL DEFAULT '' CHECK (scope IN ('', 'once', 'session')),
	created_at             text COLLATE "C" NOT NULL,
	decided_at             text COLLATE "C",
	derived_from           text COLLATE "C" NOT NULL DEFAULT '',
	decided_via_link_id    text COLLATE "C" NOT NULL DEFAULT '',
	decided_via_link_label text COLLATE "C" NOT NULL DEFAULT '',
	ask_reason             text COLLATE "C" NOT NULL DEFAULT '',
	decision_source        text COLLATE "C" NOT NULL DEFAULT '',
	rule_id                text COLLATE "C" NOT NULL DEFAULT '',
	rule_text              text COLLATE "C" NOT NULL DEFAULT '',
	rule_source            text COLLATE "C" NOT NULL DEFAULT '',
	mode                   text COLLATE "C" NOT NULL DEFAULT '',
	rule_scope             text COLLATE "C" NOT NULL DEFAULT '',
	count                  integer NOT NULL DEFAULT 0 CHECK (count >= 0), -- grouped audit records (issue 19)
	last_at                text COLLATE "C",
	preview                json -- tool.Preview; NULL when the tool has none
);

CREATE INDEX approvals_session_created ON approvals (session_id, created_at, ord);
-- Only pending approvals are looked up by status (SQLite's 0004): a session's, and every
-- session's at restart.
CREATE INDEX approvals_pending ON approvals (session_id, created_at, ord) WHERE status = 'pending';
CREATE INDEX approvals_pending_all ON approvals (created_at, ord) WHERE status = 'pending';

CREATE TABLE shares (
	id           text COLLATE "C" PRIMARY KEY,
	ord          bigint GENERATED ALWAYS AS IDENTITY,
	session_id   text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	role         text COLLATE "C" NOT NULL CHECK (role IN ('viewer', 'approver')),
	label        text COLLATE "C" NOT NULL DEFAULT '',
	token_hash   text COLLATE "C" NOT NULL UNIQUE, -- only a hash of each token is stored
	created_at   text COLLATE "C" NOT NULL,
	expires_at   text COLLATE "C",
	revoked_at   text COLLATE "C",
	last_used_at text COLLATE "C",
	can_edit     boolean NOT NULL DEFAULT false,
	can_remember boolean NOT NULL DEFAULT false
);

CREATE INDEX shares_session ON shares (session_id, created_at, ord);

-- The owner's browser logins: the SHA-256 (hex) of the cookie's random id, never the id.
CREATE TABLE owner_sessions (
	id_hash    text COLLATE "C" PRIMARY KEY,
	created_at text COLLATE "C" NOT NULL,
	expires_at text COLLATE "C" NOT NULL
);

-- Rules people made (SPEC §14); session grants are grant-shaped rules.
CREATE TABLE rules (
	id                     text COLLATE "C" PRIMARY KEY,
	effect                 text COLLATE "C" NOT NULL CHECK (effect IN ('allow', 'ask', 'deny')),
	tool                   text COLLATE "C" NOT NULL,
	specifier              text COLLATE "C" NOT NULL DEFAULT '',
	when_expr              text COLLATE "C" NOT NULL DEFAULT '',
	scope                  text COLLATE "C" NOT NULL CHECK (scope IN ('session', 'workspace', 'server')),
	session_id             text COLLATE "C" REFERENCES sessions (id) ON DELETE CASCADE, -- scope session only
	workspace              text COLLATE "C" NOT NULL DEFAULT '',
	source                 text COLLATE "C" NOT NULL CHECK (source IN ('prompt', 'api')),
	created_by             text COLLATE "C" NOT NULL,
	created_via_link_id    text COLLATE "C" NOT NULL DEFAULT '',
	created_via_link_label text COLLATE "C" NOT NULL DEFAULT '',
	created_at             text COLLATE "C" NOT NULL,
	expires_at             text COLLATE "C",
	note                   text COLLATE "C" NOT NULL DEFAULT '',
	from_approval          text COLLATE "C" NOT NULL DEFAULT '',
	hits                   bigint NOT NULL DEFAULT 0,
	last_used_at           text COLLATE "C",
	CHECK ((scope = 'session') = (session_id IS NOT NULL))
);
CREATE INDEX rules_session ON rules (session_id);
