-- 0011: a session's instructions (its system prompt) and the sum of its assistant messages' token
-- usage (SPEC §17). Sessions stored before get '' — no system prompt, which is what their
-- requests sent — and zero usage: no message stored before carried usage.
ALTER TABLE sessions ADD COLUMN instructions TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN usage_input INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_output INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_cache_read INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_cache_write INTEGER NOT NULL DEFAULT 0;
