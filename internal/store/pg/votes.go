package pg

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// Several approvers (SPEC §15), as the SQLite store keeps them: an approval's required approvers
// and reviewers are columns of its row; each person's vote is a row of approval_votes.

// namesColumn is a list of names as its column holds it: a JSON array, NULL (nil) for none.
func namesColumn(names []string) any {
	if len(names) == 0 {
		return nil
	}
	b, _ := json.Marshal(names) // strings always marshal
	return string(b)
}

// namesOf reads a names column (namesColumn); nil for NULL.
func namesOf(s *string) ([]string, error) {
	if s == nil {
		return nil, nil
	}
	var names []string
	if err := json.Unmarshal([]byte(*s), &names); err != nil {
		return nil, err
	}
	return names, nil
}

// CastVote stores person v.By's vote on pending approval id, which needs need distinct
// approvals, in one transaction with the count (store.DB.CastVote): a deny resolves it denied at
// once; the need-th approve resolves it approved; otherwise it stays pending. It returns the
// approval as now stored with its Votes, and counted false when v.By had already approved. The
// transaction first locks the approval's row (SELECT … FOR UPDATE), so votes on one approval,
// from any replica, are counted one after the other: two approvals at once that make the
// quorum resolve it exactly once. Errors: apperr.Invalid for a vote that neither approves nor
// denies; apperr.NotFound for an unknown id; apperr.Conflict for an approval no longer pending
// or a person who voted otherwise before.
func (db *DB) CastVote(ctx context.Context, id string, v gate.Vote, need int) (a gate.Approval, counted bool, err error) {
	defer apperr.Wrap(&err, "store.CastVote(%s, %s)", id, v.By)
	if v.Decision != gate.Approved && v.Decision != gate.Denied {
		return gate.Approval{}, false, apperr.Errorf(apperr.Invalid, "a vote approves or denies, not %q", v.Decision)
	}
	if v.At.IsZero() {
		v.At = db.Now()
	}
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		counted = false
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM approvals WHERE id = $1 FOR UPDATE`, id).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return apperr.Errorf(apperr.NotFound, "approval %s not found", id)
		}
		if err != nil {
			return err
		}
		if gate.Status(status) != gate.Pending {
			return apperr.Errorf(apperr.Conflict, "approval already resolved")
		}
		var prev string
		err = tx.QueryRow(ctx, `SELECT decision FROM approval_votes WHERE approval_id = $1 AND name = $2`, id, v.By).Scan(&prev)
		switch {
		case err == nil && prev == string(gate.Approved) && v.Decision == gate.Approved:
			a, err = db.approvalIn(ctx, tx, id)
			return err
		case err == nil:
			return apperr.Errorf(apperr.Conflict, "%s already %s this call: one vote per person.", v.By, prev)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		viaID, viaLabel := linkColumns(v.Via)
		if _, err := tx.Exec(ctx, `INSERT INTO approval_votes (approval_id, name, link_id, link_label, decision, reason, at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, id, v.By, viaID, viaLabel, string(v.Decision), v.Reason, formatTime(v.At)); err != nil {
			if isUnique(err) {
				return apperr.Errorf(apperr.Conflict, "%s already voted on this call: one vote per person.", v.By)
			}
			return err
		}
		counted = true
		resolve := v.Decision == gate.Denied
		if !resolve {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM approval_votes WHERE approval_id = $1 AND decision = 'approved'`,
				id).Scan(&n); err != nil {
				return err
			}
			resolve = n >= need
		}
		if resolve {
			a, err = db.resolveIn(ctx, tx, id, gate.Resolution{Status: v.Decision, DecidedBy: v.By, DecidedVia: v.Via, Reason: v.Reason,
				Scope: gate.Once, At: v.At, Source: gate.FromPerson})
		} else {
			a, err = db.approvalIn(ctx, tx, id)
		}
		if err != nil {
			return err
		}
		a.Votes, err = votesIn(ctx, tx, id)
		return err
	})
	if err != nil {
		return gate.Approval{}, false, err
	}
	return a, counted, nil
}

// querier is what reads: the pool, a transaction or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// approvalIn reads approval id through q, with its votes.
func (db *DB) approvalIn(ctx context.Context, q querier, id string) (gate.Approval, error) {
	a, err := scanApproval(q.QueryRow(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return gate.Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if err != nil {
		return gate.Approval{}, err
	}
	a.Votes, err = votesIn(ctx, q, id)
	return a, err
}

// votesIn lists approval id's votes in the order they came (then by name).
func votesIn(ctx context.Context, q querier, id string) ([]gate.Vote, error) {
	rows, err := q.Query(ctx, `SELECT name, link_id, link_label, decision, reason, at FROM approval_votes
		WHERE approval_id = $1 ORDER BY at, name`, id)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (gate.Vote, error) {
		var v gate.Vote
		var linkID, linkLabel, decision, at string
		if err := r.Scan(&v.By, &linkID, &linkLabel, &decision, &v.Reason, &at); err != nil {
			return v, err
		}
		v.Via, v.Decision = linkRef(linkID, linkLabel), gate.Status(decision)
		var err error
		v.At, err = parseTime(at)
		return v, err
	})
}

// withVotes fills in the Votes of the approvals in as that need several approvers: one query for
// all of them.
func (db *DB) withVotes(ctx context.Context, as []gate.Approval) error {
	var ids []string
	at := map[string]int{}
	for i, a := range as {
		if a.Quorum() {
			ids = append(ids, a.ID)
			at[a.ID] = i
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := db.pool.Query(ctx, `SELECT approval_id, name, link_id, link_label, decision, reason, at FROM approval_votes
		WHERE approval_id = ANY($1) ORDER BY at, name`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var v gate.Vote
		var id, linkID, linkLabel, decision, when string
		if err := rows.Scan(&id, &v.By, &linkID, &linkLabel, &decision, &v.Reason, &when); err != nil {
			return err
		}
		v.Via, v.Decision = linkRef(linkID, linkLabel), gate.Status(decision)
		if v.At, err = parseTime(when); err != nil {
			return err
		}
		i := at[id]
		as[i].Votes = append(as[i].Votes, v)
	}
	return rows.Err()
}
