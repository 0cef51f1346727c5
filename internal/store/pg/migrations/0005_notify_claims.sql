-- 0005_notify_claims: the SQLite store's 0017 (issue 21, SPEC §15 and §16) in PostgreSQL's
-- dialect: claims on webhook outbox rows, so that replicas sharing this database attempt each
-- row once. A worker claims due rows (SELECT … FOR UPDATE SKIP LOCKED inside the claiming
-- transaction, under a per-receiver advisory lock), claimed_by naming it until claimed_until;
-- it renews the claim just before each attempt, and recording the attempt ends it. A row whose
-- claim ended without a record (its replica died mid-attempt) is claimable again. NULL both:
-- unclaimed.
ALTER TABLE notify_outbox ADD COLUMN claimed_by text COLLATE "C";
ALTER TABLE notify_outbox ADD COLUMN claimed_until text COLLATE "C";
CREATE INDEX notify_outbox_claims ON notify_outbox (receiver_id, claimed_until) WHERE claimed_by IS NOT NULL;
