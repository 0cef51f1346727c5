package store

import (
	"context"
	"database/sql"
	"encoding/json"

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
// counted false when v.By (or a name that is the same person) had already approved (then nothing
// changed). Errors: apperr.NotFound
// for an unknown id; apperr.Conflict for an approval no longer pending ("approval already
// resolved") or a person who voted otherwise before (one vote per person: names are compared by
// gate.PersonKey, so "alice" and "аlice" with a Cyrillic а are one person).
func (db *SQL) CastVote(ctx context.Context, id string, v gate.Vote, need int) (a gate.Approval, counted bool, err error) {
	defer apperr.Wrap(&err, "store.CastVote(%s, %s)", id, v.By)
	if v.Decision != gate.Approved && v.Decision != gate.Denied {
		return gate.Approval{}, false, apperr.Errorf(apperr.Invalid, "a vote approves or denies, not %q", v.Decision)
	}
	if v.At.IsZero() {
		v.At = db.Now()
	}
	var notified int64
	err = db.write(ctx, Atomic|Durable, func(tx Querier) error {
		counted, notified = false, 0
		var status string
		err := db.queryRow(ctx, tx, `SELECT status FROM approvals WHERE id = ?{forUpdate}`, id).Scan(&status)
		if isNoRows(err) {
			return apperr.Errorf(apperr.NotFound, "approval %s not found", id)
		}
		if err != nil {
			return err
		}
		if gate.Status(status) != gate.Pending {
			return apperr.Errorf(apperr.Conflict, "approval already resolved")
		}
		// People are compared by gate.PersonKey, not by the name as given: links for "alice" and
		// "аlice" (Cyrillic а) are one person, who votes once. The approval's row is locked (or
		// the write is the only one), so no vote lands between this read and the insert.
		votes, err := db.votesIn(ctx, tx, id)
		if err != nil {
			return err
		}
		approvals := map[string]bool{gate.PersonKey(v.By): v.Decision == gate.Approved}
		for _, prev := range votes {
			if gate.SamePerson(prev.By, v.By) {
				if prev.Decision == gate.Approved && v.Decision == gate.Approved {
					// The same person approving again counts once: nothing changes.
					a, err = db.approvalIn(ctx, tx, id)
					return err
				}
				return apperr.Errorf(apperr.Conflict, "%s already %s this call: one vote per person.", v.By, prev.Decision)
			}
			if prev.Decision == gate.Approved {
				approvals[gate.PersonKey(prev.By)] = true
			}
		}
		viaID, viaLabel := linkColumns(v.Via)
		if _, err := db.exec(ctx, tx, `INSERT INTO approval_votes (approval_id, name, link_id, link_label, decision, reason, at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, id, v.By, viaID, viaLabel, string(v.Decision), v.Reason, formatTime(v.At)); err != nil {
			if db.isUnique(err) {
				return apperr.Errorf(apperr.Conflict, "%s already voted on this call: one vote per person.", v.By)
			}
			return err
		}
		counted = true
		n := 0 // distinct people who approved, this vote included
		for _, ok := range approvals {
			if ok {
				n++
			}
		}
		resolve := v.Decision == gate.Denied || n >= need
		if resolve {
			a, err = db.resolveIn(ctx, tx, id, gate.Resolution{Status: v.Decision, DecidedBy: v.By, DecidedVia: v.Via, Reason: v.Reason,
				Scope: gate.Once, At: v.At, Source: gate.FromPerson})
			if err == nil {
				// The receivers told of its request are told of its resolution, as ResolveApproval does.
				notified, err = db.outboxResolved(ctx, tx, a, v.At)
			}
		} else {
			a, err = db.approvalIn(ctx, tx, id)
		}
		if err != nil {
			return err
		}
		a.Votes, err = db.votesIn(ctx, tx, id)
		return err
	})
	if err != nil {
		return gate.Approval{}, false, err
	}
	if notified > 0 {
		db.notify.wake()
	}
	return a, counted, nil
}

// approvalIn reads approval id inside a write, with its votes.
func (db *SQL) approvalIn(ctx context.Context, tx Querier, id string) (gate.Approval, error) {
	a, err := scanApproval(db.queryRow(ctx, tx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if isNoRows(err) {
		return gate.Approval{}, apperr.Errorf(apperr.NotFound, "approval %s not found", id)
	}
	if err != nil {
		return gate.Approval{}, err
	}
	a.Votes, err = db.votesIn(ctx, tx, id)
	return a, err
}

// votesIn lists approval id's votes in the order they came (then by name).
func (db *SQL) votesIn(ctx context.Context, tx Querier, id string) ([]gate.Vote, error) {
	rows, err := tx.Query(ctx, db.q(`SELECT name, link_id, link_label, decision, reason, at FROM approval_votes
		WHERE approval_id = ? ORDER BY at, name`), id)
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
// have none): one query per votesChunk of them. Every query names exactly votesChunk ids (the last
// chunk repeats its last id), so a session with many such approvals neither passes PostgreSQL's
// 65535 parameters or SQLite's variable limit nor adds a query text per count to the dialect's
// cache (review of issue 29; the PostgreSQL store used ANY($1) before).
func (db *SQL) withVotes(ctx context.Context, as []gate.Approval) error {
	var ids []any
	at := map[string]int{}
	for i, a := range as {
		if a.Quorum() {
			ids = append(ids, a.ID)
			at[a.ID] = i
		}
	}
	for len(ids) > 0 {
		chunk := make([]any, votesChunk)
		n := copy(chunk, ids)
		for i := n; i < votesChunk; i++ {
			chunk[i] = chunk[n-1]
		}
		ids = ids[n:]
		if err := db.votesOf(ctx, chunk, func(id string, v gate.Vote) {
			i := at[id]
			as[i].Votes = append(as[i].Votes, v)
		}); err != nil {
			return err
		}
	}
	return nil
}

// votesChunk is how many approvals' votes one query of withVotes reads.
const votesChunk = 256

// votesQuery reads the votes of votesChunk approvals.
var votesQuery = `SELECT approval_id, name, link_id, link_label, decision, reason, at FROM approval_votes
		WHERE approval_id IN (` + placeholders(1, votesChunk) + `) ORDER BY at, name`

// votesOf hands each vote on the approvals ids (votesChunk of them) to add, in vote order.
func (db *SQL) votesOf(ctx context.Context, ids []any, add func(id string, v gate.Vote)) error {
	rows, err := db.reads().Query(ctx, db.q(votesQuery), ids...)
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
		add(id, v)
	}
	return rows.Err()
}
