-- 0025_random_decision_links: decision-link tokens are random (SPEC §15, issue 33), no longer
-- HMAC(webhook secret, link id), which every receiver could compute from a copy of the database.
-- The token is stored hashed in decision_links as before; the approval.requested row that carries
-- it keeps it sealed (notify.LinkTokens: AES-GCM under a key derived from the share key file,
-- which receivers never hold) until the row is delivered or given up, then ''.
--
-- Links made by an older version are derivable, so the unused ones are deleted here: they answer
-- 404 from now on, and their pending approvals are decided on the session page or in the inbox
-- (a request not yet delivered is sent without a decision link). Used links stay for the record.
ALTER TABLE notify_outbox ADD COLUMN link_token TEXT NOT NULL DEFAULT '';
DELETE FROM decision_links WHERE used_at IS NULL;
