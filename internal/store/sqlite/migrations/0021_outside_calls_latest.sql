-- 0021_outside_calls_latest: the latest outside call of a session with a match key (the gate asks
-- on every PreToolUse and PermissionRequest, store.OutsideCallByKey) is read from the index in
-- its order instead of sorting every call with that key: an agent that makes the same call again
-- in one turn (the same key, another tool_use_id) made each hook sort all the earlier ones
-- (issue 30's hooks bench: 1,200 `git status` calls in one agent session, a third of the
-- handler's CPU time in that sort).
DROP INDEX outside_calls_key;
CREATE INDEX outside_calls_key ON outside_calls (session_id, match_key, created_at, approval_id);
