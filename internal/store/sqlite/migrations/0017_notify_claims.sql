-- 0017_notify_claims: claims on webhook outbox rows (issue 21, SPEC §15 and §16).
--
-- Several delivery workers may share one outbox (replicas on one PostgreSQL database; here, one
-- process owns the file, but the store keeps the same contract): a worker claims the rows it is
-- about to attempt, claimed_by naming it until claimed_until (a stored time, as next_at), and
-- renews the claim just before each attempt; recording the attempt ends the claim. A row whose
-- claim ended without a record (its worker died) is claimable again. NULL both: unclaimed.
ALTER TABLE notify_outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE notify_outbox ADD COLUMN claimed_until TEXT;
CREATE INDEX notify_outbox_claims ON notify_outbox (receiver_id, claimed_until) WHERE claimed_by IS NOT NULL;
