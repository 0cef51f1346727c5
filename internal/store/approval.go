package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/notify"
	"countersign/internal/tool"
)

const approvalColumns = `id, session_id, message_id, tool_call_id, parent_tool_call_id, tool_name,
	tool_title, arguments, edited_arguments, annotations, requested_by, status, automatic,
	decided_by, reason, scope, created_at, decided_at, derived_from, decided_via_link_id, decided_via_link_label,
	ask_reason, decision_source, rule_id, rule_text, rule_source, mode, rule_scope, count, last_at, preview,
	approvers, reviewers`

// CreateApproval stores a, pending or already decided (automatic approvals are stored decided),
// every field as given; a zero CreatedAt is stored as db.Now(). Arguments and EditedArguments are
// kept byte for byte (nil stays nil); Annotations keep the difference between an absent hint and
// false. A grouped record (a.Count > 0, issue 19) whose id exists is merged into the stored row
// instead: its count grows by a.Count and its last_at becomes the later of the two, every other
// column stays the first record's (mergeGrouped). Errors: apperr.Invalid for a missing id,
// invalid JSON or an unknown status or scope; apperr.Conflict for an id that exists (an ordinary
// record); apperr.NotFound for an unknown session.
func (db *DB) CreateApproval(ctx context.Context, a gate.Approval) (err error) {
	defer apperr.Wrap(&err, "store.CreateApproval(%s)", a.ID)
	args, err := db.approvalRow(a)
	if err != nil {
		return err
	}
	if a.Status == gate.Pending && !a.Grouped() && len(db.notify.receivers) > 0 {
		// With its decision links and approval.requested events (SPEC §15), in one transaction.
		return approvalError(a, db.createNotifiedApproval(ctx, a, args))
	}
	insert := insertApproval
	if a.Grouped() {
		insert = upsertApproval
	}
	// A decided approval (an automatic record: its call runs next) is durable; a pending one need
	// not be, since nothing has run on it, and its decision's FULL commit syncs it too (the WAL
	// is synced in order). That keeps one sync, not two, on a person's approval round trip.
	write := db.commit
	if a.Status != gate.Pending {
		write = db.commitDurable
	}
	err = write(ctx, false, func(w *writeTx) error {
		_, err := w.stmt(insert).ExecContext(w.ctx, args...)
		return err
	}, insert)
	return approvalError(a, err)
}

// CreateApprovals stores several approvals, as CreateApproval does, in one transaction: all of
// them or none (the first failure, with CreateApproval's error codes, rolls the batch back). The
// agent writes the automatic audit records of nested calls this way, in batches (SPEC §3: every
// gated call is listed; one commit per batch instead of one per call). Grouped records (Count >
// 0) are merged into their stored row as CreateApproval merges them, also when one batch holds
// the same group twice.
func (db *DB) CreateApprovals(ctx context.Context, as []gate.Approval) (err error) {
	defer apperr.Wrap(&err, "store.CreateApprovals(%d)", len(as))
	if len(as) == 0 {
		return nil
	}
	return db.commitDurable(ctx, true, func(w *writeTx) error {
		return db.insertApprovals(w, as)
	}, insertApproval, insertApprovalsJSON, upsertApproval, upsertApprovalsJSON)
}

// insertApprovals inserts as within tx (CreateApprovals' rows and errors): the ordinary records
// with a plain insert (an id that exists is a conflict), then the grouped ones (Count > 0) with
// an upsert that merges each into its row (mergeGrouped).
func (db *DB) insertApprovals(w *writeTx, as []gate.Approval) error {
	grouped := 0
	for i := range as {
		if as[i].Grouped() {
			grouped++
		}
	}
	switch grouped {
	case 0:
		return db.insertRows(w, as, false)
	case len(as):
		return db.insertRows(w, as, true)
	}
	ordinary, groups := make([]gate.Approval, 0, len(as)-grouped), make([]gate.Approval, 0, grouped)
	for _, a := range as {
		if a.Grouped() {
			groups = append(groups, a)
		} else {
			ordinary = append(ordinary, a)
		}
	}
	if err := db.insertRows(w, ordinary, false); err != nil {
		return err
	}
	return db.insertRows(w, groups, true)
}

// insertRows inserts as within tx, each merged into its row when grouped is set (as are then
// all grouped records). Two or more rows go in one statement that reads them from a single JSON
// text parameter (insertApprovalsJSON): binding 22 parameters a row through database/sql cost
// about 2 KB of garbage a row, which the audit writer of nested calls turned into collections in
// the running tool's loop. A batch with a text that is not valid UTF-8 (JSON cannot carry it
// byte for byte) goes a row at a time instead.
func (db *DB) insertRows(w *writeTx, as []gate.Approval, grouped bool) error {
	many, one := insertApprovalsJSON, insertApproval
	if grouped {
		many, one = upsertApprovalsJSON, upsertApproval
	}
	if len(as) > 1 {
		buf := approvalJSONBuffers.Get().(*[]byte)
		defer approvalJSONBuffers.Put(buf)
		rows, ok, err := db.appendApprovalsJSON((*buf)[:0], as)
		if err != nil {
			return err
		}
		*buf = rows
		if ok {
			// The statement reads the text while ExecContext runs (the driver copies a bound text
			// into SQLite's memory), and buf is not written to again before it returns.
			if _, err := w.stmt(many).ExecContext(w.ctx, unsafe.String(unsafe.SliceData(rows), len(rows))); err != nil {
				return db.approvalsError(w, as, one, err)
			}
			return nil
		}
	}
	for _, a := range as {
		row, err := db.approvalRow(a)
		if err != nil {
			return err
		}
		if _, err := w.stmt(one).ExecContext(w.ctx, row...); err != nil {
			return approvalError(a, err)
		}
	}
	return nil
}

// approvalsError finds which row of a failed multi-row insert broke a constraint, by inserting
// them one at a time (with the one-row statement one) inside a savepoint that is then rolled
// back (the batch fails either way), so the error names the approval as CreateApproval's would.
func (db *DB) approvalsError(w *writeTx, chunk []gate.Approval, one string, cause error) error {
	if _, err := w.tx.ExecContext(w.ctx, `SAVEPOINT find_bad_row`); err != nil {
		return cause
	}
	defer w.tx.ExecContext(w.ctx, `ROLLBACK TO find_bad_row`)
	st := w.stmt(one)
	for _, a := range chunk {
		row, err := db.approvalRow(a)
		if err != nil {
			return err
		}
		if _, err := st.ExecContext(w.ctx, row...); err != nil {
			return approvalError(a, err)
		}
	}
	return cause
}

const approvalColumnCount = 33

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
// (mergeGrouped). "WHERE true": SQLite needs a WHERE before ON CONFLICT in an INSERT … SELECT, or
// it would read ON as the start of a join constraint.
var upsertApprovalsJSON = insertApprovalsJSON + ` WHERE true` + mergeGrouped

const insertApproval = `INSERT INTO approvals (` + approvalColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// upsertApproval is insertApproval for one grouped record.
const upsertApproval = insertApproval + mergeGrouped

// mergeGrouped merges a grouped record into its stored row (issue 19): the row's count grows by
// the record's, its last_at becomes the later of the two (times are fixed-width text, so text
// order is time order; max() of a NULL is NULL, hence the coalesce), and every other column keeps
// the first record's — its created_at and decided_at are the group's first call's.
const mergeGrouped = `
	ON CONFLICT (id) DO UPDATE SET count = approvals.count + excluded.count,
		last_at = coalesce(max(approvals.last_at, excluded.last_at), excluded.last_at, approvals.last_at)`

// approvalRow is a's column values in approvalColumns order.
func (db *DB) approvalRow(a gate.Approval) ([]any, error) {
	return db.appendApprovalRow(make([]any, 0, approvalColumnCount), a)
}

// appendApprovalRow appends a's column values, in approvalColumns order, to args.
func (db *DB) appendApprovalRow(args []any, a gate.Approval) ([]any, error) {
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
		a.Count, nullTime(a.LastAt), preview, a.Approvers, namesColumn(a.Reviewers)), nil
}

// approvalError turns a driver error of an approval insert into its apperr code.
func approvalError(a gate.Approval, err error) error {
	switch {
	case isUnique(err):
		return apperr.Errorf(apperr.Conflict, "approval %s already exists", a.ID)
	case isForeignKey(err):
		return apperr.Errorf(apperr.NotFound, "session %s not found", a.SessionID)
	case isCheck(err):
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
func (db *DB) ResolveApproval(ctx context.Context, id string, r gate.Resolution) (a gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.ResolveApproval(%s)", id)
	switch r.Status {
	case gate.Approved, gate.Denied, gate.TimedOut, gate.Cancelled:
	default:
		return gate.Approval{}, apperr.Errorf(apperr.Invalid, "a decision must resolve the approval, not set it %q", r.Status)
	}
	if r.At.IsZero() {
		r.At = db.Now()
	}
	// One transaction (a savepoint in a group) so that "no row updated" and the existence check
	// that explains it see the same database.
	var notified int64
	err = db.commitDurable(ctx, true, func(w *writeTx) error {
		var err error
		a, err = db.resolveIn(w, id, r)
		if err == nil && a.Quorum() {
			a.Votes, err = votesIn(w.ctx, w.tx, id)
		}
		if err != nil || len(db.notify.receivers) == 0 {
			return err
		}
		// The resolution's events, for the receivers told of the request (SPEC §15).
		res, err := w.tx.ExecContext(w.ctx, outboxResolved, string(notify.EventOf(a.Status)), formatTime(r.At), id)
		if err != nil {
			return err
		}
		notified, _ = res.RowsAffected()
		return nil
	}, resolveApproval)
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
func (db *DB) resolveIn(w *writeTx, id string, r gate.Resolution) (a gate.Approval, err error) {
	viaID, viaLabel := linkColumns(r.DecidedVia)
	a, err = scanApproval(w.stmt(resolveApproval).QueryRowContext(w.ctx,
		string(r.Status), r.DecidedBy, r.Reason, string(r.Scope), nullJSON(r.EditedArguments), r.Automatic,
		formatTime(r.At), r.DerivedFrom, viaID, viaLabel, string(r.Source), string(r.Source), r.RuleID, r.RuleID,
		r.RuleText, r.RuleText, string(r.RuleSource), string(r.RuleSource), string(r.RuleScope), string(r.RuleScope), id))
	if errors.Is(err, sql.ErrNoRows) {
		var n int
		if err := w.tx.QueryRowContext(w.ctx, `SELECT COUNT(*) FROM approvals WHERE id = ?`, id).Scan(&n); err != nil {
			return a, err
		}
		if n == 0 {
			return a, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
		}
		return a, apperr.Errorf(apperr.Conflict, "approval already resolved")
	}
	if isCheck(err) {
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
func (db *DB) Approval(ctx context.Context, id string) (a gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.Approval(%s)", id)
	a, err = scanApproval(db.reads.QueryRowContext(ctx,
		`SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return gate.Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if err == nil && a.Quorum() {
		a.Votes, err = votesIn(ctx, db.read, id)
	}
	return a, err
}

// Approvals lists a session's approvals in creation order (CreatedAt, then insertion order);
// status "" means every status. Empty for an unknown session.
func (db *DB) Approvals(ctx context.Context, sessionID string, status gate.Status) (_ []gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.Approvals(%s, %q)", sessionID, status)
	if status == "" {
		return db.queryApprovals(ctx, `SELECT `+approvalColumns+` FROM approvals
			WHERE session_id = ? ORDER BY created_at, rowid`, sessionID)
	}
	if status == gate.Pending {
		// The literal lets SQLite use the partial index approvals_pending (a bound parameter
		// would not).
		return db.queryApprovals(ctx, `SELECT `+approvalColumns+` FROM approvals
			WHERE session_id = ? AND status = 'pending' ORDER BY created_at, rowid`, sessionID)
	}
	return db.queryApprovals(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE session_id = ? AND status = ? ORDER BY created_at, rowid`, sessionID, string(status))
}

// PendingApprovals lists the pending approvals of every session in creation order. At restart
// these are the calls parked by an earlier process (SPEC §8): each stays pending until decided.
func (db *DB) PendingApprovals(ctx context.Context) (_ []gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.PendingApprovals")
	return db.queryApprovals(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE status = 'pending' ORDER BY created_at, rowid`)
}

func (db *DB) queryApprovals(ctx context.Context, query string, args ...any) ([]gate.Approval, error) {
	as, err := queryAll(ctx, db.read, scanApproval, query, args...)
	if err != nil {
		return nil, err
	}
	return as, db.withVotes(ctx, as)
}

func scanApproval(r scanner) (gate.Approval, error) {
	var (
		a                       gate.Approval
		args, edited, decidedAt sql.NullString
		lastAt, preview         sql.NullString
		annotations, status     string
		scope, createdAt        string
		viaID, viaLabel         string
		source, ruleSrc, mode   string
		ruleScope               string
		reviewers               sql.NullString
	)
	if err := r.Scan(&a.ID, &a.SessionID, &a.MessageID, &a.ToolCallID, &a.ParentToolCallID, &a.ToolName,
		&a.ToolTitle, &args, &edited, &annotations, &a.RequestedBy, &status, &a.Automatic,
		&a.DecidedBy, &a.Reason, &scope, &createdAt, &decidedAt, &a.DerivedFrom, &viaID, &viaLabel, &a.AskReason,
		&source, &a.RuleID, &a.RuleText, &ruleSrc, &mode, &ruleScope, &a.Count, &lastAt, &preview,
		&a.Approvers, &reviewers); err != nil {
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
