-- 0016_approvers: several approvers and named reviewers (SPEC §15, issue 20 acceptance 5 and 6).
--
-- An ask rule may need several people: approvers (0 for one person, else 2..20) and the only
-- reviewers who may decide (a JSON array of names, NULL for anyone). The approval it opens keeps
-- both, so a restart or a rule deleted meanwhile changes nothing of what the call needs.
ALTER TABLE rules ADD COLUMN approvers INTEGER NOT NULL DEFAULT 0 CHECK (approvers = 0 OR approvers BETWEEN 2 AND 20);
ALTER TABLE rules ADD COLUMN reviewers TEXT CHECK (reviewers IS NULL OR json_valid(reviewers));
ALTER TABLE approvals ADD COLUMN approvers INTEGER NOT NULL DEFAULT 0 CHECK (approvers = 0 OR approvers BETWEEN 2 AND 20);
ALTER TABLE approvals ADD COLUMN reviewers TEXT CHECK (reviewers IS NULL OR json_valid(reviewers));

-- Each person's answer to an approval that needs several: one vote per name per approval (a
-- person approving twice counts once), the link it came through ('' for the owner), approved
-- or denied, the reason, and when. The approval's own row says how it ended.
CREATE TABLE approval_votes (
	approval_id TEXT NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	name        TEXT NOT NULL,
	link_id     TEXT NOT NULL DEFAULT '',
	link_label  TEXT NOT NULL DEFAULT '',
	decision    TEXT NOT NULL CHECK (decision IN ('approved', 'denied')),
	reason      TEXT NOT NULL DEFAULT '',
	at          TEXT NOT NULL,
	PRIMARY KEY (approval_id, name)
) WITHOUT ROWID;

-- A share link created for a named person: its name is fixed ('' for a link whose holder gives
-- one).
ALTER TABLE shares ADD COLUMN for_name TEXT NOT NULL DEFAULT '';
