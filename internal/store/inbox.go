package store

import (
	"context"
	"strings"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// inboxColumns are approvalColumns read from the approvals table aliased a (the inbox joins
// sessions, whose id and created_at would be ambiguous), then the session's title and workspace.
var inboxColumns = func() string {
	cols := strings.Split(approvalColumns, ",")
	for i, c := range cols {
		cols[i] = "a." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ") + ", s.title, s.workspace"
}()

// inboxQuery reads the pending approvals oldest first (ties in insertion order) with their
// sessions, through the partial index approvals_pending_all (migration 0014): the literal
// 'pending' lets SQLite use it (a bound parameter would not), and the index's order is the
// ORDER BY's (rowid, the {ord} of SQLite, is its last column), so nothing is sorted. An empty ?1 reads every session,
// else only session ?1 (an approver link's inbox); an empty ?2 starts at the oldest, else after
// approval ?2 (the next page); ?3 is the most rows read (Dialect.NoLimit: no limit); an empty ?4
// reads every approval, else only those whose reviewers are none or name person ?4 (forPerson).
const inboxQuery = `FROM approvals a {pendingIndex} JOIN sessions s ON s.id = a.session_id
	WHERE a.status = 'pending' AND (?1 = '' OR a.session_id = ?1)
		AND (?2 = '' OR (a.created_at, a.{ord}) > (SELECT created_at, {ord} FROM approvals WHERE id = ?2))
		AND ` + forPerson + `
	ORDER BY a.created_at, a.{ord} LIMIT ?3`

// forPerson keeps an approval that person ?4 may decide as far as its reviewers go (gate.Approval
// MayDecide): no reviewers, or reviewers (a JSON array of names; text in SQLite, json in
// PostgreSQL, so read as text) that name ?4, compared without case; ?4 is the name lower-cased
// with LIKE's wildcards escaped (likeName); an empty ?4 keeps every approval.
const forPerson = `(?4 = '' OR a.reviewers IS NULL OR CAST(a.reviewers AS TEXT) IN ('', '[]', 'null')
		OR LOWER(CAST(a.reviewers AS TEXT)) LIKE '%"' || ?4 || '"%' ESCAPE '\')`

// likeName is person as forPerson compares it: lower-cased, with LIKE's % and _ (and the escape
// character) escaped, so a name matches only itself.
func likeName(person string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(strings.ToLower(person))
}

// Inbox lists the pending approvals of every session (q.SessionID "") or of one, oldest first
// (CreatedAt, then insertion order), each with its session's title and workspace, in one query
// through an index (SPEC §15 "The inbox"; TestInboxUsesItsIndex): at most q.Limit of them (0: no
// limit), after approval q.After when set (the inbox's next page; an After that is no longer
// pending or unknown reads from the oldest after it, or nothing). Empty when nothing waits.
func (db *SQL) Inbox(ctx context.Context, q agent.InboxQuery) (_ []agent.InboxItem, err error) {
	defer apperr.Wrap(&err, "store.Inbox(%+v)", q)
	var limit any = q.Limit
	if q.Limit <= 0 {
		limit = db.d.NoLimit
	}
	items, err := queryAll(ctx, db, db.reads(), func(r Row) (agent.InboxItem, error) {
		var it agent.InboxItem
		a, err := scanApproval(extraRow{r, []any{&it.SessionTitle, &it.Workspace}})
		it.Approval = a
		return it, err
	}, `SELECT `+inboxColumns+` `+inboxQuery, q.SessionID, q.After, limit, likeName(q.For))
	if err != nil {
		return nil, err
	}
	return items, inboxVotes(ctx, items, db.withVotes)
}

// PendingCount is how many approvals wait for a person in every session (sessionID "") or in
// one: the inbox badge's count (SPEC §15). Counted in the partial index, not the table.
func (db *SQL) PendingCount(ctx context.Context, sessionID string) (n int, err error) {
	defer apperr.Wrap(&err, "store.PendingCount(%q)", sessionID)
	if sessionID == "" {
		err = db.queryRow(ctx, db.reads(), `SELECT COUNT(*) FROM approvals {pendingIndex} WHERE status = 'pending'`).Scan(&n)
		return n, err
	}
	err = db.queryRow(ctx, db.reads(), `SELECT COUNT(*) FROM approvals WHERE session_id = ? AND status = 'pending'`, sessionID).Scan(&n)
	return n, err
}

// PendingCountFor is PendingCount of the approvals person may decide as far as their reviewers
// go (InboxQuery.For): the owner's inbox badge ("owner") leaves out the calls whose reviewers do
// not name them (SPEC §15). An empty person counts every approval, as PendingCount.
func (db *SQL) PendingCountFor(ctx context.Context, sessionID, person string) (n int, err error) {
	defer apperr.Wrap(&err, "store.PendingCountFor(%q, %q)", sessionID, person)
	if person == "" {
		return db.PendingCount(ctx, sessionID)
	}
	err = db.queryRow(ctx, db.reads(), `SELECT COUNT(*) FROM approvals a {pendingIndex}
		WHERE a.status = 'pending' AND (?1 = '' OR a.session_id = ?1) AND `+
		strings.ReplaceAll(forPerson, "?4", "?2"), sessionID, likeName(person)).Scan(&n)
	return n, err
}

// inboxVotes fills in the votes of items' approvals through withVotes (a store's own reader of
// votes for a list of approvals): the inbox shows "1 of 2 approvals — approved by alice" like
// every page. Both stores' Inbox use it.
func inboxVotes(ctx context.Context, items []agent.InboxItem, withVotes func(context.Context, []gate.Approval) error) error {
	as := make([]gate.Approval, len(items))
	for i := range items {
		as[i] = items[i].Approval
	}
	if err := withVotes(ctx, as); err != nil {
		return err
	}
	for i := range items {
		items[i].Approval = as[i]
	}
	return nil
}
