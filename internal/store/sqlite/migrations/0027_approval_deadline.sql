-- 0027_approval_deadline: a pending approval's absolute deadline (SPEC §16, issue 33), fixed when
-- it opens, so a restart or a takeover by another server keeps it rather than counting its own
-- -approval-timeout from the approval's creation. NULL: an automatic record, or an approval
-- opened by an older version (then creation + timeout, as before).

ALTER TABLE approvals ADD COLUMN expires_at TEXT;
