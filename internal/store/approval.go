package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"unsafe"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// approvalColumns are the approvals table's columns, in the order of the approval row: its
// values (appendApprovalRow, appendApprovalsJSON) and its scan (scanApproval). The row is
// described here and nowhere else.
const approvalColumns = `id, session_id, message_id, tool_call_id, parent_tool_call_id, tool_name,
	tool_title, arguments, edited_arguments, annotations, requested_by, status, automatic,
	decided_by, reason, scope, created_at, decided_at, derived_from, decided_via_link_id, decided_via_link_label,
	ask_reason, decision_source, rule_id, rule_text, rule_source, mode, rule_scope, count, last_at, preview,
	approvers, reviewers, expires_at`

// CreateApproval stores a, pending or already decided (automatic approvals are stored decided),
// every field as given; a zero CreatedAt is stored as db.Now(). Arguments and EditedArguments are
// kept byte for byte (nil stays nil); Annotations keep the difference between an absent hint and
// false. A grouped record (a.Count > 0, issue 19) whose id exists is merged into the stored row
// instead: its count grows by a.Count and its last_at becomes the later of the two, every other
// column stays the first record's (mergeGrouped). Errors: apperr.Invalid for a missing id,
// invalid JSON, an unknown status or scope, or (PostgreSQL) a text with a NUL byte or invalid
// UTF-8; apperr.Conflict for an id that exists (an ordinary record); apperr.NotFound for an
// unknown session.
func (db *SQL) CreateApproval(ctx context.Context, a gate.Approval) (err error) {
	defer apperr.Wrap(&err, "store.CreateApproval(%s)", a.ID)
	args, err := db.approvalRow(a)
	if err != nil {
		return err
	}
	if a.Status == gate.Pending && !a.Grouped() && len(db.notify.receivers) > 0 {
		// With its decision links and approval.requested events (SPEC §15), in one transaction.
		return db.approvalError(a, db.createNotifiedApproval(ctx, a, args))
	}
	insert := insertApproval
	if a.Grouped() {
		insert = upsertApproval
	}
	// A decided approval (an automatic record: its call runs next) is durable; a pending one need
	// not be, since nothing has run on it, and its decision's durable commit syncs it too (SQLite
	// syncs its WAL in order). That keeps one sync, not two, on a person's approval round trip.
	var mode WriteMode
	if a.Status != gate.Pending {
		mode = Durable
	}
	_, err = db.exec1(ctx, mode, insert, args...)
	return db.approvalError(a, err)
}

// CreateApprovals stores several approvals, as CreateApproval does, in one transaction: all of
// them or none (the first failure, with CreateApproval's error codes, rolls the batch back). The
// agent writes the automatic audit records of nested calls this way, in batches (SPEC §3: every
// gated call is listed; one commit per batch instead of one per call). Grouped records (Count >
// 0) are merged into their stored row as CreateApproval merges them, also when one batch holds
// the same group twice.
func (db *SQL) CreateApprovals(ctx context.Context, as []gate.Approval) (err error) {
	defer apperr.Wrap(&err, "store.CreateApprovals(%d)", len(as))
	if len(as) == 0 {
		return nil
	}
	return db.write(ctx, Atomic|Durable, func(tx Querier) error {
		return db.insertApprovals(ctx, tx, as)
	})
}

// insertApprovals inserts as within tx (CreateApprovals' rows and errors): the ordinary records
// with a plain insert (an id that exists is a conflict), then the grouped ones (Count > 0) with
// an upsert that merges each into its row (mergeGrouped).
func (db *SQL) insertApprovals(ctx context.Context, tx Querier, as []gate.Approval) error {
	grouped := 0
	for i := range as {
		if as[i].Grouped() {
			grouped++
		}
	}
	switch grouped {
	case 0:
		return db.insertRows(ctx, tx, as, false)
	case len(as):
		return db.insertRows(ctx, tx, as, true)
	}
	ordinary, groups := make([]gate.Approval, 0, len(as)-grouped), make([]gate.Approval, 0, grouped)
	for _, a := range as {
		if a.Grouped() {
			groups = append(groups, a)
		} else {
			ordinary = append(ordinary, a)
		}
	}
	if err := db.insertRows(ctx, tx, ordinary, false); err != nil {
		return err
	}
	return db.insertRows(ctx, tx, groups, true)
}

// insertRows inserts as within tx, each merged into its row when grouped is set (as are then
// all grouped records). Where the dialect reads rows from JSON (SQLite), two or more rows go in
// one statement that reads them from a single JSON text parameter (insertApprovalsJSON):
// binding 33 parameters a row through database/sql cost about 2 KB of garbage a row, which the
// audit writer of nested calls turned into collections in the running tool's loop. A batch with
// a text that is not valid UTF-8 (JSON cannot carry it byte for byte) goes a row at a time
// instead. Elsewhere each row is its own statement (one INSERT … ON CONFLICT DO UPDATE may not
// touch a row twice, and a batch may hold a group twice), sent in one round trip where the
// Querier is a Batcher (PostgreSQL).
func (db *SQL) insertRows(ctx context.Context, tx Querier, as []gate.Approval, grouped bool) error {
	many, one := insertApprovalsJSON, insertApproval
	if grouped {
		many, one = upsertApprovalsJSON, upsertApproval
	}
	if len(as) > 1 && db.d.JSONRows {
		buf := approvalJSONBuffers.Get().(*[]byte)
		defer approvalJSONBuffers.Put(buf)
		rows, ok, err := db.appendApprovalsJSON((*buf)[:0], as)
		if err != nil {
			return err
		}
		*buf = rows
		if ok {
			// The statement reads the text while Exec runs (the driver copies a bound text into
			// SQLite's memory), and buf is not written to again before it returns.
			if _, err := db.exec(ctx, tx, many, unsafe.String(unsafe.SliceData(rows), len(rows))); err != nil {
				return db.approvalsError(ctx, tx, as, one, err)
			}
			return nil
		}
	}
	if b, ok := tx.(Batcher); ok && len(as) > 1 {
		queries, args := make([]string, len(as)), make([][]any, len(as))
		for i, a := range as {
			row, err := db.approvalRow(a)
			if err != nil {
				return err
			}
			queries[i], args[i] = db.q(one), row
		}
		if i, err := b.ExecBatch(ctx, queries, args); err != nil {
			return db.approvalError(as[i], err)
		}
		return nil
	}
	for _, a := range as {
		row, err := db.approvalRow(a)
		if err != nil {
			return err
		}
		if _, err := db.exec(ctx, tx, one, row...); err != nil {
			return db.approvalError(a, err)
		}
	}
	return nil
}

// approvalsError finds which row of a failed multi-row insert broke a constraint, by inserting
// them one at a time (with the one-row statement one) inside a savepoint that is then rolled
// back (the batch fails either way), so the error names the approval as CreateApproval's would.
func (db *SQL) approvalsError(ctx context.Context, tx Querier, chunk []gate.Approval, one string, cause error) error {
	if _, err := tx.Exec(ctx, `SAVEPOINT find_bad_row`); err != nil {
		return cause
	}
	defer tx.Exec(ctx, `ROLLBACK TO find_bad_row`)
	for _, a := range chunk {
		row, err := db.approvalRow(a)
		if err != nil {
			return err
		}
		if _, err := db.exec(ctx, tx, one, row...); err != nil {
			return db.approvalError(a, err)
		}
	}
	return cause
}

// approvalColumnCount is how many columns approvalColumns names.
var approvalColumnCount = strings.Count(approvalColumns, ",") + 1

// insertApprovalsJSON inserts the rows of its one parameter, a JSON array with one array per row
// holding the approvalColumnCount column values in approvalColumns order (appendApprovalsJSON).
// jsonb_each keeps the array's order (and hands each row over as JSONB, so ->> does not parse
// its text again); ->> turns a JSON string into its text, byte for byte, null
// into NULL and 0/1 into an integer. The columns' constraints apply as to any insert.
var insertApprovalsJSON = func() string {
	cols := make([]string, approvalColumnCount)
	for i := range cols {
		cols[i] = fmt.Sprintf("value->>%d", i)
	}
	return `INSERT INTO approvals (` + approvalColumns + `) SELECT ` + strings.Join(cols, ", ") + ` FROM jsonb_each(?)`
}()

// upsertApprovalsJSON is insertApprovalsJSON for grouped records: a row whose id exists is merged
// (mergeGrouped). SQLite only (Dialect.JSONRows). "WHERE true": SQLite needs a WHERE before ON CONFLICT in an INSERT … SELECT, or
// it would read ON as the start of a join constraint.
var upsertApprovalsJSON = insertApprovalsJSON + ` WHERE true` + mergeGrouped

// insertApproval inserts one approval row (appendApprovalRow's values).
var insertApproval = `INSERT INTO approvals (` + approvalColumns + `)
	VALUES (` + strings.Repeat("?, ", approvalColumnCount-1) + `?)`

// upsertApproval is insertApproval for one grouped record.
var upsertApproval = insertApproval + mergeGrouped

// mergeGrouped merges a grouped record into its stored row (issue 19): the row's count grows by
// the record's, its last_at becomes the later of the two (times are fixed-width text, so text
// order is time order; SQLite's max() of a NULL is NULL, hence the coalesce), and every other
// column keeps the first record's — its created_at and decided_at are the group's first call's.
const mergeGrouped = `
	ON CONFLICT (id) DO UPDATE SET count = approvals.count + excluded.count,
		last_at = coalesce({greatest}(approvals.last_at, excluded.last_at), excluded.last_at, approvals.last_at)`

// approvalRow is a's column values in approvalColumns order.
func (db *SQL) approvalRow(a gate.Approval) ([]any, error) {
	return db.appendApprovalRow(make([]any, 0, approvalColumnCount), a)
}

// appendApprovalRow appends a's column values, in approvalColumns order, to args.
func (db *SQL) appendApprovalRow(args []any, a gate.Approval) ([]any, error) {
	if a.ID == "" {
		return args, apperr.Errorf(apperr.Invalid, "an approval needs an id")
	}
	if a.CreatedAt.IsZero() {
		a.CreatedAt = db.Now()
	}
	annotations, err := json.Marshal(a.Annotations)
	if err != nil {
		return args, err
	}
	preview, err := previewColumn(a.Preview)
	if err != nil {
		return args, err
	}
	viaID, viaLabel := linkColumns(a.DecidedVia)
	return append(args, a.ID, a.SessionID, a.MessageID, a.ToolCallID, a.ParentToolCallID, a.ToolName,
		a.ToolTitle, nullJSON(a.Arguments), nullJSON(a.EditedArguments), string(annotations),
		a.RequestedBy, string(a.Status), a.Automatic, a.DecidedBy, a.Reason, string(a.Scope),
		formatTime(a.CreatedAt), nullTime(a.DecidedAt), a.DerivedFrom, viaID, viaLabel, a.AskReason,
		string(a.DecisionSource), a.RuleID, a.RuleText, string(a.RuleSource), string(a.Mode), string(a.RuleScope),
		a.Count, nullTime(a.LastAt), preview, a.Approvers, namesColumn(a.Reviewers), nullTime(a.ExpiresAt)), nil
}

// approvalError turns a driver error of an approval insert into its apperr code.
func (db *SQL) approvalError(a gate.Approval, err error) error {
	switch {
	case db.isUnique(err):
		return apperr.Errorf(apperr.Conflict, "approval %s already exists", a.ID)
	case db.isForeignKey(err):
		return apperr.Errorf(apperr.NotFound, "session %s not found", a.SessionID)
	case db.isInvalid(err):
		return apperr.Errorf(apperr.Invalid,
			"approval %s cannot be stored: invalid JSON arguments, status %q or scope %q", a.ID, a.Status, a.Scope)
	}
	return err
}

// ResolveApproval applies r to the pending approval id and returns the approval as now stored.
// It is atomic: one UPDATE … WHERE status = 'pending', so of two racing decisions exactly one
// wins. A zero r.At is stored as db.Now(); r.EditedArguments nil means not edited. Errors:
// apperr.Invalid when r.Status is not a final status, apperr.NotFound for an unknown id,
// apperr.Conflict ("approval already resolved") when the approval is no longer pending.
func (db *SQL) ResolveApproval(ctx context.Context, id string, r gate.Resolution) (a gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.ResolveApproval(%s)", id)
	switch r.Status {
	case gate.Approved, gate.Denied, gate.TimedOut, gate.Cancelled:
	default:
		return gate.Approval{}, apperr.Errorf(apperr.Invalid, "a decision must resolve the approval, not set it %q", r.Status)
	}
	if r.At.IsZero() {
		r.At = db.Now()
	}
	// One transaction so that "no row updated" and the existence check that explains it see the
	// same database (PostgreSQL: of two racing decisions, the second waits for the first's row
	// lock, then finds the row decided and loses).
	var notified int64
	err = db.write(ctx, Atomic|Durable, func(tx Querier) error {
		var err error
		a, err = db.resolveIn(ctx, tx, id, r)
		if err == nil && a.Quorum() {
			a.Votes, err = db.votesIn(ctx, tx, id)
		}
		if err != nil {
			return err
		}
		notified, err = db.outboxResolved(ctx, tx, a, r.At)
		return err
	})
	if err != nil {
		return gate.Approval{}, err
	}
	if notified > 0 {
		db.notify.wake()
	}
	return a, nil
}

// resolveIn applies r to pending approval id inside write w (ResolveApproval's statement and
// errors); r.At is set.
func (db *SQL) resolveIn(ctx context.Context, tx Querier, id string, r gate.Resolution) (a gate.Approval, err error) {
	viaID, viaLabel := linkColumns(r.DecidedVia)
	a, err = scanApproval(db.queryRow(ctx, tx, resolveApproval,
		string(r.Status), r.DecidedBy, r.Reason, string(r.Scope), nullJSON(r.EditedArguments), r.Automatic,
		formatTime(r.At), r.DerivedFrom, viaID, viaLabel, string(r.Source), string(r.Source), r.RuleID, r.RuleID,
		r.RuleText, r.RuleText, string(r.RuleSource), string(r.RuleSource), string(r.RuleScope), string(r.RuleScope), id))
	if isNoRows(err) {
		var n int
		if err := db.queryRow(ctx, tx, `SELECT COUNT(*) FROM approvals WHERE id = ?`, id).Scan(&n); err != nil {
			return a, err
		}
		if n == 0 {
			return a, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
		}
		return a, apperr.Errorf(apperr.Conflict, "approval already resolved")
	}
	if db.isInvalid(err) {
		return a, apperr.Errorf(apperr.Invalid,
			"decision cannot be stored: invalid JSON edited arguments or scope %q", r.Scope)
	}
	return a, err
}

const resolveApproval = `UPDATE approvals
	SET status = ?, decided_by = ?, reason = ?, scope = ?, edited_arguments = ?, automatic = ?, decided_at = ?, derived_from = ?,
		decided_via_link_id = ?, decided_via_link_label = ?,
		decision_source = CASE WHEN ? = '' THEN decision_source ELSE ? END, rule_id = CASE WHEN ? = '' THEN rule_id ELSE ? END,
		rule_text = CASE WHEN ? = '' THEN rule_text ELSE ? END, rule_source = CASE WHEN ? = '' THEN rule_source ELSE ? END,
		rule_scope = CASE WHEN ? = '' THEN rule_scope ELSE ? END
	WHERE id = ? AND status = 'pending'
	RETURNING ` + approvalColumns

// Approval returns the approval with the given id, or apperr.NotFound.
func (db *SQL) Approval(ctx context.Context, id string) (a gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.Approval(%s)", id)
	a, err = scanApproval(db.queryRow(ctx, db.reads(), `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if isNoRows(err) {
		return gate.Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if err == nil && a.Quorum() {
		a.Votes, err = db.votesIn(ctx, db.reads(), id)
	}
	return a, err
}

// Approvals lists a session's approvals in creation order (CreatedAt, then insertion order);
// status "" means every status. Empty for an unknown session.
func (db *SQL) Approvals(ctx context.Context, sessionID string, status gate.Status) (_ []gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.Approvals(%s, %q)", sessionID, status)
	if status == "" {
		return db.queryApprovals(ctx, `SELECT `+approvalColumns+` FROM approvals
			WHERE session_id = ? ORDER BY created_at, {ord}`, sessionID)
	}
	if status == gate.Pending {
		// The literal lets the database use the partial index approvals_pending (a bound
		// parameter would not).
		return db.queryApprovals(ctx, approvalsPending, sessionID)
	}
	return db.queryApprovals(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE session_id = ? AND status = ? ORDER BY created_at, {ord}`, sessionID, string(status))
}

// PendingApprovals lists the pending approvals of every session in creation order. At restart
// these are the calls parked by an earlier process (SPEC §8): each stays pending until decided.
func (db *SQL) PendingApprovals(ctx context.Context) (_ []gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.PendingApprovals")
	return db.queryApprovals(ctx, pendingApprovals)
}

// approvalsPending lists a session's pending approvals, pendingApprovals every session's.
const (
	approvalsPending = `SELECT ` + approvalColumns + ` FROM approvals
		WHERE session_id = ? AND status = 'pending' ORDER BY created_at, {ord}`
	pendingApprovals = `SELECT ` + approvalColumns + ` FROM approvals
		WHERE status = 'pending' ORDER BY created_at, {ord}`
)

func (db *SQL) queryApprovals(ctx context.Context, query string, args ...any) ([]gate.Approval, error) {
	as, err := queryAll(ctx, db, db.reads(), scanApproval, query, args...)
	if err != nil {
		return nil, err
	}
	return as, db.withVotes(ctx, as)
}

// scanApproval reads an approval row (approvalColumns).
func scanApproval(r Row) (gate.Approval, error) {
	var (
		a                       gate.Approval
		args, edited, decidedAt sql.NullString
		lastAt, preview         sql.NullString
		annotations, status     string
		scope, createdAt        string
		viaID, viaLabel         string
		source, ruleSrc, mode   string
		ruleScope               string
		reviewers, expiresAt    sql.NullString
	)
	if err := r.Scan(&a.ID, &a.SessionID, &a.MessageID, &a.ToolCallID, &a.ParentToolCallID, &a.ToolName,
		&a.ToolTitle, &args, &edited, &annotations, &a.RequestedBy, &status, &a.Automatic,
		&a.DecidedBy, &a.Reason, &scope, &createdAt, &decidedAt, &a.DerivedFrom, &viaID, &viaLabel, &a.AskReason,
		&source, &a.RuleID, &a.RuleText, &ruleSrc, &mode, &ruleScope, &a.Count, &lastAt, &preview,
		&a.Approvers, &reviewers, &expiresAt); err != nil {
		return gate.Approval{}, err
	}
	var err error
	if a.Reviewers, err = namesOf(reviewers); err != nil {
		return gate.Approval{}, fmt.Errorf("approval %s reviewers: %w", a.ID, err)
	}
	a.DecidedVia = linkRef(viaID, viaLabel)
	a.RuleScope = gate.RuleScope(ruleScope)
	a.DecisionSource, a.RuleSource, a.Mode = gate.DecisionSource(source), gate.RuleSource(ruleSrc), gate.Mode(mode)
	a.Arguments, a.EditedArguments = rawJSON(args), rawJSON(edited)
	a.Status, a.Scope = gate.Status(status), gate.Scope(scope)
	if err := json.Unmarshal([]byte(annotations), &a.Annotations); err != nil {
		return gate.Approval{}, fmt.Errorf("approval %s annotations: %w", a.ID, err)
	}
	if a.CreatedAt, err = parseTime(createdAt); err != nil {
		return gate.Approval{}, err
	}
	if decidedAt.Valid {
		t, err := parseTime(decidedAt.String)
		if err != nil {
			return gate.Approval{}, err
		}
		a.DecidedAt = &t
	}
	if lastAt.Valid {
		t, err := parseTime(lastAt.String)
		if err != nil {
			return gate.Approval{}, err
		}
		a.LastAt = &t
	}
	if a.ExpiresAt, err = parseNullTime(expiresAt); err != nil {
		return gate.Approval{}, err
	}
	if preview.Valid {
		a.Preview = new(tool.Preview)
		if err := json.Unmarshal([]byte(preview.String), a.Preview); err != nil {
			return gate.Approval{}, fmt.Errorf("approval %s preview: %w", a.ID, err)
		}
	}
	return a, nil
}

// previewColumn is the preview column's value: the preview as JSON, NULL (nil) for none.
func previewColumn(p *tool.Preview) (any, error) {
	if p == nil {
		return nil, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// linkColumns are a link reference's two columns: id and label, "" for none.
func linkColumns(l *gate.LinkRef) (id, label string) {
	if l == nil {
		return "", ""
	}
	return l.LinkID, l.Label
}

// linkRef is the link reference two columns hold; nil when the id is "".
func linkRef(id, label string) *gate.LinkRef {
	if id == "" {
		return nil
	}
	return &gate.LinkRef{LinkID: id, Label: label}
}
