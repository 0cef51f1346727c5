-- The scope of the rule a person's decision saved ("Always allow…": session or workspace;
-- "Approve for session": session), so the audit says how far the decision reaches (SPEC §14).
-- '' when the decision saved no rule, and on approvals stored before.
ALTER TABLE approvals ADD COLUMN rule_scope TEXT NOT NULL DEFAULT '';
