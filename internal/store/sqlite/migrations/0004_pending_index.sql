-- 0004_pending_index: only pending approvals are looked up by status (a page's or API client's
-- pending prompts, and every session's at restart). Most approvals are automatic records, stored
-- already decided (a tool may make thousands of nested calls), so the two indexes on status
-- became one partial index on the pending ones: each record updates two B-trees fewer.
-- Queries by another status use approvals_session_created and filter.

DROP INDEX approvals_session_status;
DROP INDEX approvals_status;
CREATE INDEX approvals_pending ON approvals (session_id, created_at) WHERE status = 'pending';
