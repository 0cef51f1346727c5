package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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

const insertApproval = `INSERT INTO approvals (` + approvalColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
		$21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33)`

// upsertApproval is insertApproval for a grouped record (issue 19): a row whose id exists is
// merged — its count grows by the record's, its last_at becomes the later of the two (greatest
// skips a NULL; fixed-width text, so text order is time order), every other column stays the
// first record's.
const upsertApproval = insertApproval + `
	ON CONFLICT (id) DO UPDATE SET count = approvals.count + excluded.count,
		last_at = greatest(approvals.last_at, excluded.last_at)`

// CreateApproval stores a, pending or already decided, every field as given (store.DB's
// CreateApproval): a zero CreatedAt is db.Now(); a grouped record (a.Count > 0) whose id exists
// is merged into it. Errors: apperr.Invalid for a missing id, invalid JSON, an unknown status or
// scope, or a text PostgreSQL cannot hold; apperr.Conflict for an id that exists (an ordinary
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
	query := insertApproval
	if a.Grouped() {
		query = upsertApproval
	}
	_, err = db.exec(ctx, query, args...)
	return approvalError(a, err)
}

// CreateApprovals stores several approvals, as CreateApproval does, in one transaction: all of
// them or none (the first failure, with CreateApproval's codes, rolls the batch back). Grouped
// records are merged as CreateApproval merges them, also when one batch holds a group twice.
func (db *DB) CreateApprovals(ctx context.Context, as []gate.Approval) (err error) {
	defer apperr.Wrap(&err, "store.CreateApprovals(%d)", len(as))
	if len(as) == 0 {
		return nil
	}
	return db.inTx(ctx, func(tx pgx.Tx) error { return db.insertApprovals(ctx, tx, as) })
}

// insertApprovals inserts as within tx, in one round trip (a pgx batch): the ordinary records
// first, then the grouped ones, merged, as the SQLite store orders them, so the same bad record
// is named. Each row is its own statement: one INSERT … ON CONFLICT DO UPDATE may not touch a
// row twice, and a batch may hold a group twice.
func (db *DB) insertApprovals(ctx context.Context, tx pgx.Tx, as []gate.Approval) error {
	if len(as) == 0 {
		return nil
	}
	ordered := make([]gate.Approval, 0, len(as))
	for _, grouped := range []bool{false, true} {
		for _, a := range as {
			if a.Grouped() == grouped {
				ordered = append(ordered, a)
			}
		}
	}
	var b pgx.Batch
	for _, a := range ordered {
		args, err := db.approvalRow(a)
		if err != nil {
			return err
		}
		query := insertApproval
		if a.Grouped() {
			query = upsertApproval
		}
		b.Queue(query, args...)
	}
	res := tx.SendBatch(ctx, &b)
	for _, a := range ordered {
		if _, err := res.Exec(); err != nil {
			res.Close()
			return approvalError(a, err)
		}
	}
	return res.Close()
}

// approvalRow is a's column values in approvalColumns order.
func (db *DB) approvalRow(a gate.Approval) ([]any, error) {
	if a.ID == "" {
		return nil, apperr.Errorf(apperr.Invalid, "an approval needs an id")
	}
	if a.CreatedAt.IsZero() {
		a.CreatedAt = db.Now()
	}
	annotations, err := json.Marshal(a.Annotations)
	if err != nil {
		return nil, err
	}
	var preview any
	if a.Preview != nil {
		b, err := json.Marshal(a.Preview)
		if err != nil {
			return nil, err
		}
		preview = string(b)
	}
	viaID, viaLabel := linkColumns(a.DecidedVia)
	return []any{a.ID, a.SessionID, a.MessageID, a.ToolCallID, a.ParentToolCallID, a.ToolName,
		a.ToolTitle, nullJSON(a.Arguments), nullJSON(a.EditedArguments), string(annotations),
		a.RequestedBy, string(a.Status), a.Automatic, a.DecidedBy, a.Reason, string(a.Scope),
		formatTime(a.CreatedAt), nullTime(a.DecidedAt), a.DerivedFrom, viaID, viaLabel, a.AskReason,
		string(a.DecisionSource), a.RuleID, a.RuleText, string(a.RuleSource), string(a.Mode), string(a.RuleScope),
		a.Count, nullTime(a.LastAt), preview, a.Approvers, namesColumn(a.Reviewers)}, nil
}

// approvalError turns a server error of an approval insert into its apperr code, with the SQLite
// store's messages.
func approvalError(a gate.Approval, err error) error {
	switch {
	case isUnique(err):
		return apperr.Errorf(apperr.Conflict, "approval %s already exists", a.ID)
	case isForeignKey(err):
		return apperr.Errorf(apperr.NotFound, "session %s not found", a.SessionID)
	case isInvalid(err):
		return apperr.Errorf(apperr.Invalid,
			"approval %s cannot be stored: invalid JSON arguments, status %q or scope %q", a.ID, a.Status, a.Scope)
	}
	return err
}

// ResolveApproval applies r to the pending approval id and returns the approval as now stored.
// One UPDATE … WHERE status = 'pending': of two racing decisions, on this process or another,
// the second waits for the first's row lock, then finds the row decided and loses. A zero r.At is
// db.Now(). Errors: apperr.Invalid when r.Status is not a final status or the decision cannot be
// stored, apperr.NotFound for an unknown id, apperr.Conflict ("approval already resolved") when
// the approval is no longer pending.
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
	var notified int64
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if a, err = db.resolveIn(ctx, tx, id, r); err != nil {
			return err
		}
		if a.Quorum() {
			if a.Votes, err = votesIn(ctx, tx, id); err != nil {
				return err
			}
		}
		if len(db.notify.receivers) == 0 {
			return nil
		}
		// The resolution's events, for the receivers told of the request (SPEC §15).
		tag, err := tx.Exec(ctx, outboxResolved, string(notify.EventOf(a.Status)), formatTime(r.At), id)
		notified = tag.RowsAffected()
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

// resolveIn applies r (its At set) to pending approval id through q, with ResolveApproval's
// errors.
func (db *DB) resolveIn(ctx context.Context, q querier, id string, r gate.Resolution) (gate.Approval, error) {
	viaID, viaLabel := linkColumns(r.DecidedVia)
	a, err := scanApproval(q.QueryRow(ctx, resolveApproval,
		string(r.Status), r.DecidedBy, r.Reason, string(r.Scope), nullJSON(r.EditedArguments), r.Automatic,
		formatTime(r.At), r.DerivedFrom, viaID, viaLabel, string(r.Source), r.RuleID, r.RuleText,
		string(r.RuleSource), string(r.RuleScope), id))
	if errors.Is(err, pgx.ErrNoRows) {
		var n int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE id = $1`, id).Scan(&n); err != nil {
			return a, err
		}
		if n == 0 {
			return a, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
		}
		return a, apperr.Errorf(apperr.Conflict, "approval already resolved")
	}
	if isInvalid(err) {
		return a, apperr.Errorf(apperr.Invalid,
			"decision cannot be stored: invalid JSON edited arguments or scope %q", r.Scope)
	}
	return a, err
}

// resolveApproval decides a pending approval; the rule columns keep their stored value when the
// resolution leaves them "".
const resolveApproval = `UPDATE approvals
	SET status = $1, decided_by = $2, reason = $3, scope = $4, edited_arguments = $5, automatic = $6, decided_at = $7,
		derived_from = $8, decided_via_link_id = $9, decided_via_link_label = $10,
		decision_source = CASE WHEN $11 = '' THEN decision_source ELSE $11 END,
		rule_id = CASE WHEN $12 = '' THEN rule_id ELSE $12 END,
		rule_text = CASE WHEN $13 = '' THEN rule_text ELSE $13 END,
		rule_source = CASE WHEN $14 = '' THEN rule_source ELSE $14 END,
		rule_scope = CASE WHEN $15 = '' THEN rule_scope ELSE $15 END
	WHERE id = $16 AND status = 'pending'
	RETURNING ` + approvalColumns

// Approval returns the approval with the given id, or apperr.NotFound.
func (db *DB) Approval(ctx context.Context, id string) (a gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.Approval(%s)", id)
	a, err = scanApproval(db.pool.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return gate.Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if err == nil && a.Quorum() {
		a.Votes, err = votesIn(ctx, db.pool, id)
	}
	return a, err
}

// Approvals lists a session's approvals in creation order (CreatedAt, then insertion order);
// status "" means every status. Empty for an unknown session.
func (db *DB) Approvals(ctx context.Context, sessionID string, status gate.Status) (_ []gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.Approvals(%s, %q)", sessionID, status)
	switch status {
	case "":
		return db.queryApprovals(ctx, `SELECT `+approvalColumns+` FROM approvals
			WHERE session_id = $1 ORDER BY created_at, ord`, sessionID)
	case gate.Pending:
		// The literal matches the partial index approvals_pending.
		return db.queryApprovals(ctx, `SELECT `+approvalColumns+` FROM approvals
			WHERE session_id = $1 AND status = 'pending' ORDER BY created_at, ord`, sessionID)
	}
	return db.queryApprovals(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE session_id = $1 AND status = $2 ORDER BY created_at, ord`, sessionID, string(status))
}

// PendingApprovals lists the pending approvals of every session in creation order.
func (db *DB) PendingApprovals(ctx context.Context) (_ []gate.Approval, err error) {
	defer apperr.Wrap(&err, "store.PendingApprovals")
	return db.queryApprovals(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE status = 'pending' ORDER BY created_at, ord`)
}

// queryApprovals runs a query of approvalColumns and fills in the votes of those that need
// several approvers.
func (db *DB) queryApprovals(ctx context.Context, query string, args ...any) ([]gate.Approval, error) {
	as, err := queryAll(ctx, db, scanApproval, query, args...)
	if err != nil {
		return nil, err
	}
	return as, db.withVotes(ctx, as)
}

func scanApproval(r pgx.Row) (gate.Approval, error) {
	var (
		a                                gate.Approval
		args, edited, decidedAt          *string
		lastAt, preview                  *string
		annotations, status, scope, at   string
		viaID, viaLabel, source, ruleSrc string
		mode, ruleScope                  string
		reviewers                        *string
	)
	if err := r.Scan(&a.ID, &a.SessionID, &a.MessageID, &a.ToolCallID, &a.ParentToolCallID, &a.ToolName,
		&a.ToolTitle, &args, &edited, &annotations, &a.RequestedBy, &status, &a.Automatic,
		&a.DecidedBy, &a.Reason, &scope, &at, &decidedAt, &a.DerivedFrom, &viaID, &viaLabel, &a.AskReason,
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
	if a.CreatedAt, err = parseTime(at); err != nil {
		return gate.Approval{}, err
	}
	if a.DecidedAt, err = parseNullTime(decidedAt); err != nil {
		return gate.Approval{}, err
	}
	if a.LastAt, err = parseNullTime(lastAt); err != nil {
		return gate.Approval{}, err
	}
	if preview != nil {
		a.Preview = new(tool.Preview)
		if err := json.Unmarshal([]byte(*preview), a.Preview); err != nil {
			return gate.Approval{}, fmt.Errorf("approval %s preview: %w", a.ID, err)
		}
	}
	return a, nil
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
