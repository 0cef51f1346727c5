-- 0013_approval_preview: the tool's preview stored with the approval (issue 19; SPEC §3 "What a
-- prompt shows"). When a call's approval opens, a tool with a preview (write_file: the file's
-- content then, or that it is new) computes it once; the prompt's diff is drawn from it, live,
-- on reload and after an edit, and it says which content the call was approved against. JSON
-- (tool.Preview); NULL when the tool has none, and on every approval stored before.
ALTER TABLE approvals ADD COLUMN preview TEXT CHECK (preview IS NULL OR json_valid(preview));
