-- 0028_outside_calls_claimed: when a decision of an outside call was taken to run (or refuse) the
-- call (Door 2, store.ClaimOutsideCall): one conditional update, so a decision is used once even
-- when two requests (two replicas, or two identical calls in flight) find it at the same instant.
-- NULL for a call whose decision was not used yet, and for calls stored before it.
ALTER TABLE outside_calls ADD COLUMN claimed_at TEXT;
