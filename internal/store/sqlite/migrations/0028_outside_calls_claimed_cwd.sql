-- 0028_outside_calls_claimed_cwd: claimed_at is when a decision of an outside call was taken to
-- run (or refuse) the call (Door 2, store.ClaimOutsideCall): one conditional update, so a
-- decision is used once even when two requests (two replicas, or two identical calls in flight)
-- find it at the same instant; NULL before. cwd is the agent's working directory as the event
-- that created the call reported it (hook events' cwd): where its command runs and its relative
-- paths open, which the prompt shows; NULL when none was reported, and for calls stored before.
ALTER TABLE outside_calls ADD COLUMN claimed_at TEXT;
ALTER TABLE outside_calls ADD COLUMN cwd TEXT;
