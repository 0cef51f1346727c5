-- 0006_key_fingerprints: the keys every replica must share (issue 21, SPEC §16). The share-link
-- key and the webhooks' key live in files beside each server, never in the database; a replica
-- started with another file would answer 404 to every link the others made, sign webhooks
-- differently and refuse their decision links. The first server records each key's fingerprint
-- (an HMAC of a fixed text under the key: it reveals nothing of the key); a later server whose
-- key's fingerprint differs refuses to start (pg.DB.CheckKey).
CREATE TABLE key_fingerprints (
	name        text COLLATE "C" PRIMARY KEY, -- "share", "notify"
	fingerprint text COLLATE "C" NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now()
);
