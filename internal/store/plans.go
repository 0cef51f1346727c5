package store

import "strings"

// PlannedQueries are reads whose query plans the SQLite store's tests check (that they read the
// partial indexes of the pending approvals and sort nothing), as the dialect runs them, by name:
// "inbox" (?1 session or ”, ?2 after or ”, ?3 limit, ?4 person or ”), "pendingCount", "sessionPending" and
// "pending" (an approval list by pending status, ?1 the session), "session" (?1 the id).
func (db *SQL) PlannedQueries() map[string]string {
	return map[string]string{
		"inbox":          db.q(`SELECT ` + inboxColumns + ` ` + inboxQuery),
		"pendingCount":   db.q(`SELECT COUNT(*) FROM approvals {pendingIndex} WHERE status = 'pending'`),
		"sessionPending": db.q(strings.Replace(approvalsPending, "?", "?1", 1)),
		"pending":        db.q(pendingApprovals),
		"session":        db.q(selectSession + ` WHERE id = ?1`),
	}
}
