package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"

	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// Several approvers (SPEC §15, migration 0016): an approval's required approvers and reviewers
// are columns of its row; each person's vote is a row of approval_votes, one per name.

// namesColumn is a list of names as its column holds it: a JSON array, NULL (nil) for none.
func namesColumn(names []string) any {
	if len(names) == 0 {
		return nil
	}
	b, _ := json.Marshal(names) // strings always marshal
	return string(b)
}

// namesOf reads a names column (namesColumn); nil for NULL.
func namesOf(s sql.NullString) ([]string, error) {
	if !s.Valid {
		return nil, nil
	}
	var names []string
	if err := json.Unmarshal([]byte(s.String), &names); err != nil {
		return nil, err
	}
	return names, nil
}

// CastVote stores person v.By's vote on pending approval id, which needs need distinct approvals
// (gate.Store.CastVote; SPEC §15), in one transaction with the count, so two votes at once are
// both stored and exactly one of them can resolve the approval: a deny resolves it denied at
// once (decided by v.By, with v's reason); the need-th approve resolves it approved (decided by
// v.By); otherwise it stays pending. It returns the approval as now stored with its Votes, and
// counted false when v.By had already approved (then nothing changed). Errors: apperr.NotFound
// for an unknown id; apperr.Conflict for an approval no longer pending ("approval already
// resolved") or a person who voted otherwise before (one vote per name).
func (db *DB) CastVote(ctx context.Context, id string, v gate.Vote, need int) (a gate.Approval, counted bool, err error) {
	defer apperr.Wrap(&err, "store.CastVote(%s, %s)", id, v.By)
	if v.Decision != gate.Approved && v.Decision != gate.Denied {
		return gate.Approval{}, false, apperr.Errorf(apperr.Invalid, "a vote approves or denies, not %q", v.Decision)
	}
	if v.At.IsZero() {
		v.At = db.Now()
	}
	err = db.commitDurable(ctx, true, func(w *writeTx) error {
		counted = false
		var status string
		err := w.tx.QueryRowContext(w.ctx, `SELECT status FROM approvals WHERE id = ?`, id).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return apperr.Errorf(apperr.NotFound, "approval %s not found", id)
		}
		if err != nil {
			return err
		}
		if gate.Status(status) != gate.Pending {
			return apperr.Errorf(apperr.Conflict, "approval already resolved")
		}
		var prev string
		err = w.tx.QueryRowContext(w.ctx, `SELECT decision FROM approval_votes WHERE approval_id = ? AND name = ?`, id, v.By).Scan(&prev)
		switch {
		case err == nil && prev == string(gate.Approved) && v.Decision == gate.Approved:
			// The same person approving again counts once: nothing changes.
			a, err = db.approvalIn(w, id)
			return err
		case err == nil:
			return apperr.Errorf(apperr.Conflict, "%s already %s this call: one vote per person.", v.By, prev)
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		viaID, viaLabel := linkColumns(v.Via)
		if _, err := w.tx.ExecContext(w.ctx, `INSERT INTO approval_votes (approval_id, name, link_id, link_label, decision, reason, at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, id, v.By, viaID, viaLabel, string(v.Decision), v.Reason, formatTime(v.At)); err != nil {
			if isUnique(err) {
				return apperr.Errorf(apperr.Conflict, "%s already voted on this call: one vote per person.", v.By)
			}
			return err
		}
		counted = true
		resolve := v.Decision == gate.Denied
		if !resolve {
			var n int
			if err := w.tx.QueryRowContext(w.ctx, `SELECT COUNT(*) FROM approval_votes WHERE approval_id = ? AND decision = 'approved'`,
				id).Scan(&n); err != nil {
				return err
			}
			resolve = n >= need
		}
		if resolve {
			a, err = db.resolveIn(w, id, gate.Resolution{Status: v.Decision, DecidedBy: v.By, DecidedVia: v.Via, Reason: v.Reason,
				Scope: gate.Once, At: v.At, Source: gate.FromPerson})
		} else {
			a, err = db.approvalIn(w, id)
		}
		if err != nil {
			return err
		}
		a.Votes, err = votesIn(w.ctx, w.tx, id)
		return err
	}, resolveApproval)
	if err != nil {
		return gate.Approval{}, false, err
	}
	return a, counted, nil
}

// approvalIn reads approval id inside a write, with its votes.
func (db *DB) approvalIn(w *writeTx, id string) (gate.Approval, error) {
	a, err := scanApproval(w.tx.QueryRowContext(w.ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return gate.Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if err != nil {
		return gate.Approval{}, err
	}
	a.Votes, err = votesIn(w.ctx, w.tx, id)
	return a, err
}

// querier is what reads votes: the read pool or a write's transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// votesIn lists approval id's votes in the order they came (then by name).
func votesIn(ctx context.Context, q querier, id string) ([]gate.Vote, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, link_id, link_label, decision, reason, at FROM approval_votes
		WHERE approval_id = ? ORDER BY at, name`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []gate.Vote
	for rows.Next() {
		var v gate.Vote
		var linkID, linkLabel, decision, at string
		if err := rows.Scan(&v.By, &linkID, &linkLabel, &decision, &v.Reason, &at); err != nil {
			return nil, err
		}
		v.Via, v.Decision = linkRef(linkID, linkLabel), gate.Status(decision)
		if v.At, err = parseTime(at); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// withVotes fills in the Votes of the approvals in as that need several approvers (the others
// have none): one query for all of them.
func (db *DB) withVotes(ctx context.Context, as []gate.Approval) error {
	var ids []any
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
	rows, err := db.read.QueryContext(ctx, `SELECT approval_id, name, link_id, link_label, decision, reason, at FROM approval_votes
		WHERE approval_id IN (?`+strings.Repeat(", ?", len(ids)-1)+`) ORDER BY at, name`, ids...)
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
