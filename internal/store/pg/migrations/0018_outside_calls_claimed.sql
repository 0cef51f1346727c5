-- 0018_outside_calls_claimed: as SQLite's 0028. When a decision of an outside call was taken to
-- run (or refuse) the call (store.ClaimOutsideCall); NULL before.
ALTER TABLE outside_calls ADD COLUMN claimed_at text COLLATE "C";
