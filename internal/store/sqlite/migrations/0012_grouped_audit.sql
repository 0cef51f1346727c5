-- 0012_grouped_audit: grouped audit records (issue 19; SPEC §3, §14 "The audit"). The nested calls
-- of one parent call that rules allowed the same way are recorded as one row standing for `count`
-- calls; created_at and decided_at stay the first call's, last_at is when the last counted call
-- was decided. A later batch of the same group adds to its row (INSERT … ON CONFLICT(id) DO
-- UPDATE). count is 0 on every other row, which stands for one call; last_at NULL.
-- (0011 is another change's; migrations are applied by name, each one missing, in name order.)
ALTER TABLE approvals ADD COLUMN count INTEGER NOT NULL DEFAULT 0 CHECK (count >= 0);
ALTER TABLE approvals ADD COLUMN last_at TEXT;
