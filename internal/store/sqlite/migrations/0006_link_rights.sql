-- 0006_link_rights: what an approver link may do besides deciding once, and which link made each
-- decision (issue 15, items 1 and 10; SPEC §7).
-- A share link's rights: edit a call's arguments before approving (can_edit), approve a tool for
-- the whole session (can_remember). Links made before this migration have neither.
ALTER TABLE shares ADD COLUMN can_edit INTEGER NOT NULL DEFAULT 0 CHECK (can_edit IN (0, 1));
ALTER TABLE shares ADD COLUMN can_remember INTEGER NOT NULL DEFAULT 0 CHECK (can_remember IN (0, 1));

-- The share link a reviewer decided through, its id and its label at the time ('' for the owner
-- and for rules), so two reviewers with the same name are told apart in the audit.
ALTER TABLE approvals ADD COLUMN decided_via_link_id TEXT NOT NULL DEFAULT '';
ALTER TABLE approvals ADD COLUMN decided_via_link_label TEXT NOT NULL DEFAULT '';

-- The same for a session grant ('' when the owner granted it).
ALTER TABLE grants ADD COLUMN granted_via_link_id TEXT NOT NULL DEFAULT '';
ALTER TABLE grants ADD COLUMN granted_via_link_label TEXT NOT NULL DEFAULT '';
