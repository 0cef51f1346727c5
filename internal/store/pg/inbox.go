package pg

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/store"
)

// inboxColumns are approvalColumns read from the approvals table aliased a, then the session's
// title and workspace.
var inboxColumns = func() string {
	cols := strings.Split(approvalColumns, ",")
	for i, c := range cols {
		cols[i] = "a." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ") + ", s.title, s.workspace"
}()

// Inbox lists the pending approvals of every session (q.SessionID "") or of one, oldest first
// (CreatedAt, then insertion order), each with its session's title and workspace: at most q.Limit
// (0: no limit), after approval q.After when set (an After no longer pending reads on after it;
// an unknown one reads nothing), as store.DB.Inbox. Through the partial index
// approvals_pending_all.
func (db *DB) Inbox(ctx context.Context, q agent.InboxQuery) (_ []agent.InboxItem, err error) {
	defer apperr.Wrap(&err, "store.Inbox(%+v)", q)
	var limit any // NULL: no limit
	if q.Limit > 0 {
		limit = q.Limit
	}
	items, err := queryAll(ctx, db, func(r pgx.Row) (agent.InboxItem, error) {
		var it agent.InboxItem
		a, err := scanApproval(extraRow{r, []any{&it.SessionTitle, &it.Workspace}})
		it.Approval = a
		return it, err
	}, `SELECT `+inboxColumns+` FROM approvals a JOIN sessions s ON s.id = a.session_id
		WHERE a.status = 'pending' AND ($1 = '' OR a.session_id = $1)
			AND ($2 = '' OR (a.created_at, a.ord) > (SELECT created_at, ord FROM approvals WHERE id = $2))
		ORDER BY a.created_at, a.ord LIMIT $3`, q.SessionID, q.After, limit)
	if err != nil {
		return nil, err
	}
	return items, store.InboxVotes(ctx, items, db.withVotes)
}

// PendingCount is how many approvals wait for a person in every session (sessionID "") or in
// one: the inbox badge's count (SPEC §15).
func (db *DB) PendingCount(ctx context.Context, sessionID string) (n int, err error) {
	defer apperr.Wrap(&err, "store.PendingCount(%q)", sessionID)
	if sessionID == "" {
		err = db.pool.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE status = 'pending'`).Scan(&n)
		return n, err
	}
	err = db.pool.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE session_id = $1 AND status = 'pending'`, sessionID).Scan(&n)
	return n, err
}
