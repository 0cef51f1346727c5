-- 0014_inbox_index: the inbox (issue 20; SPEC §15) lists every session's pending approvals,
-- oldest first, and every owner page's header counts them. approvals_pending is (session_id,
-- created_at): ordering across sessions through it means a sort of every pending row. This
-- partial index keeps them in created_at order (rowid breaks ties, as it is the index's last
-- column), so the inbox reads them in order and the badge counts them without touching the
-- table; like approvals_pending it holds only the pending rows, so the automatic records that
-- are most approvals cost it nothing.
CREATE INDEX approvals_pending_all ON approvals (created_at) WHERE status = 'pending';
