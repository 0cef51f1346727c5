-- 0002_approvers: the SQLite store's 0016 (issue 20, SPEC §15) in PostgreSQL's dialect, as
-- 0001_init explains it: several approvers and named reviewers. An ask rule's approvers (0 for one person, else
-- 2..20) and reviewers (a JSON array of names, NULL for anyone), kept by the approval it opens;
-- each person's vote, one per name per approval; the person a share link was made for.
ALTER TABLE rules ADD COLUMN approvers integer NOT NULL DEFAULT 0 CHECK (approvers = 0 OR approvers BETWEEN 2 AND 20);
ALTER TABLE rules ADD COLUMN reviewers json;
ALTER TABLE approvals ADD COLUMN approvers integer NOT NULL DEFAULT 0 CHECK (approvers = 0 OR approvers BETWEEN 2 AND 20);
ALTER TABLE approvals ADD COLUMN reviewers json;

CREATE TABLE approval_votes (
	approval_id text COLLATE "C" NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	name        text COLLATE "C" NOT NULL,
	link_id     text COLLATE "C" NOT NULL DEFAULT '',
	link_label  text COLLATE "C" NOT NULL DEFAULT '',
	decision    text COLLATE "C" NOT NULL CHECK (decision IN ('approved', 'denied')),
	reason      text COLLATE "C" NOT NULL DEFAULT '',
	at          text COLLATE "C" NOT NULL,
	PRIMARY KEY (approval_id, name)
);

ALTER TABLE shares ADD COLUMN for_name text COLLATE "C" NOT NULL DEFAULT '';
