-- 0010_outside_calls_latest: as SQLite's 0021. The latest outside call of a session with a match
-- key (store.OutsideCallByKey, on every PreToolUse and PermissionRequest) is read from the index
-- in its order instead of sorting every call with that key.
DROP INDEX outside_calls_key;
CREATE INDEX outside_calls_key ON outside_calls (session_id, match_key, created_at, approval_id);
