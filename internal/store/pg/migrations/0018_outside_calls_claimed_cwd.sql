-- 0018_outside_calls_claimed_cwd: as SQLite's 0028. When a decision of an outside call was taken
-- to run (or refuse) the call (store.ClaimOutsideCall), and the agent's working directory as the
-- event that created the call reported it; NULL before.
ALTER TABLE outside_calls ADD COLUMN claimed_at text COLLATE "C";
ALTER TABLE outside_calls ADD COLUMN cwd text COLLATE "C";
