-- 0008_ask_reason: why a call waited for a person (issue 16, item 5; SPEC §3, §13), as its
-- prompt said it after "asks because": "server files is not trusted", "destructiveHint is true".
-- '' on rules' records and on approvals stored before this migration.
ALTER TABLE approvals ADD COLUMN ask_reason TEXT NOT NULL DEFAULT '';
