package store

import (
	"context"
	"database/sql"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// Rules people made (SPEC §14), migration 0009: the policy file's rules are never stored. Session
// grants ("Approve for session") are grant-shaped rules (gate.Rule.GrantShaped); Grants, Grant,
// CreateGrant and DeleteGrant are views over them, kept for the issue-15 grants API.

const ruleColumns = `id, effect, tool, specifier, when_expr, scope, session_id, workspace, source, created_by,
	created_via_link_id, created_via_link_label, created_at, expires_at, note, from_approval, hits, last_used_at,
	approvers, reviewers`

// grantShaped selects the rules that are session grants (gate.Rule.GrantShaped).
const grantShaped = `effect = 'allow' AND scope = 'session' AND source = 'prompt' AND specifier = '' AND when_expr = ''
	AND expires_at IS NULL`

// CreateRule stores r as given (its ID and CreatedAt set by the caller; a zero CreatedAt is
// db.Now()). Errors: apperr.Invalid for a missing id, an unknown effect, scope or source (the
// policy file's rules are not stored) or a session rule without a session; apperr.Conflict for an
// id that exists; apperr.NotFound for a session rule of an unknown session.
func (db *SQL) CreateRule(ctx context.Context, r gate.Rule) (err error) {
	defer apperr.Wrap(&err, "store.CreateRule(%s)", r.ID)
	if r.ID == "" {
		return apperr.Errorf(apperr.Invalid, "a rule needs an id")
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = db.Now()
	}
	var session any
	if r.SessionID != "" {
		session = r.SessionID
	}
	viaID, viaLabel := linkColumns(r.CreatedVia)
	_, err = db.exec1(ctx, Durable, insertRule, r.ID, string(r.Effect), r.Tool, r.Specifier, r.When,
		string(r.Scope), session, r.Workspace, string(r.Source), r.CreatedBy, viaID, viaLabel,
		formatTime(r.CreatedAt), nullTime(r.ExpiresAt), r.Note, r.FromApproval, r.Hits, nullTime(r.LastUsedAt),
		r.Approvers, namesColumn(r.Reviewers))
	switch {
	case db.isUnique(err):
		return apperr.Errorf(apperr.Conflict, "rule %s already exists", r.ID)
	case db.isForeignKey(err):
		return apperr.Errorf(apperr.NotFound, "session %s not found", r.SessionID)
	case db.isInvalid(err):
		return apperr.Errorf(apperr.Invalid, "rule %s cannot be stored: effect %q, scope %q (session %q) or source %q",
			r.ID, r.Effect, r.Scope, r.SessionID, r.Source)
	}
	return err
}

const insertRule = `INSERT INTO rules (` + ruleColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// Rules lists every stored rule, oldest first (then by id).
func (db *SQL) Rules(ctx context.Context) (_ []gate.Rule, err error) {
	defer apperr.Wrap(&err, "store.Rules")
	return db.queryRules(ctx, `SELECT `+ruleColumns+` FROM rules ORDER BY created_at, id`)
}

// DeleteRule deletes rule id. Errors: apperr.NotFound when there is none.
func (db *SQL) DeleteRule(ctx context.Context, id string) (err error) {
	defer apperr.Wrap(&err, "store.DeleteRule(%s)", id)
	return db.deleteRules(ctx, apperr.Errorf(apperr.NotFound, "rule %s not found", id), `DELETE FROM rules WHERE id = ?`, id)
}

func (db *SQL) deleteRules(ctx context.Context, notFound error, query string, args ...any) error {
	n, err := db.exec1(ctx, 0, query, args...)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFound
	}
	return nil
}

// AddRuleHits adds each entry's hits to its rule and moves its last use forward (never back);
// rules that are gone are skipped. One transaction.
func (db *SQL) AddRuleHits(ctx context.Context, hits []gate.RuleHits) (err error) {
	defer apperr.Wrap(&err, "store.AddRuleHits(%d)", len(hits))
	if len(hits) == 0 {
		return nil
	}
	return db.write(ctx, Atomic, func(tx Querier) error {
		queries, args := make([]string, len(hits)), make([][]any, len(hits))
		for i, h := range hits {
			last := formatTime(h.LastUsedAt)
			queries[i], args[i] = db.q(addRuleHits), []any{h.Hits, last, last, h.ID}
		}
		if b, ok := tx.(Batcher); ok {
			_, err := b.ExecBatch(ctx, queries, args)
			return err
		}
		for i := range queries {
			if _, err := tx.Exec(ctx, queries[i], args[i]...); err != nil {
				return err
			}
		}
		return nil
	})
}

const addRuleHits = `UPDATE rules SET hits = hits + ?,
	last_used_at = CASE WHEN last_used_at IS NULL OR last_used_at < ? THEN ? ELSE last_used_at END WHERE id = ?`

func (db *SQL) queryRules(ctx context.Context, query string, args ...any) ([]gate.Rule, error) {
	return queryAll(ctx, db, db.reads(), scanRule, query, args...)
}

func scanRule(sc Row) (gate.Rule, error) {
	var (
		r                              gate.Rule
		effect, scope, source, created string
		session, expires, last         sql.NullString
		viaID, viaLabel                string
		reviewers                      sql.NullString
	)
	if err := sc.Scan(&r.ID, &effect, &r.Tool, &r.Specifier, &r.When, &scope, &session, &r.Workspace, &source,
		&r.CreatedBy, &viaID, &viaLabel, &created, &expires, &r.Note, &r.FromApproval, &r.Hits, &last,
		&r.Approvers, &reviewers); err != nil {
		return gate.Rule{}, err
	}
	var err error
	if r.Reviewers, err = namesOf(reviewers); err != nil {
		return gate.Rule{}, err
	}
	r.Effect, r.Scope, r.Source, r.SessionID = gate.Effect(effect), gate.RuleScope(scope), gate.RuleSource(source), session.String
	r.CreatedVia = linkRef(viaID, viaLabel)
	if r.CreatedAt, err = parseTime(created); err != nil {
		return gate.Rule{}, err
	}
	for _, p := range []struct {
		s   sql.NullString
		dst **time.Time
	}{{expires, &r.ExpiresAt}, {last, &r.LastUsedAt}} {
		if p.s.Valid {
			t, err := parseTime(p.s.String)
			if err != nil {
				return gate.Rule{}, err
			}
			*p.dst = &t
		}
	}
	return r, nil
}

// CreateGrant stores a session grant as a grant-shaped rule (id "g-<session>-<tool>"): later
// calls of g.ToolName in g.SessionID need no prompt. Granting a tool that already has one keeps
// the first (no error). Errors: apperr.NotFound for an unknown session.
func (db *SQL) CreateGrant(ctx context.Context, g gate.Grant) error {
	err := db.CreateRule(ctx, gate.Rule{ID: "g-" + g.SessionID + "-" + g.ToolName, Effect: gate.Allow, Tool: g.ToolName,
		Scope: gate.ScopeSession, SessionID: g.SessionID, Source: gate.SourcePrompt, CreatedBy: g.GrantedBy,
		CreatedVia: g.GrantedVia, CreatedAt: g.CreatedAt, FromApproval: g.ApprovalID})
	if apperr.CodeOf(err) == apperr.Conflict {
		return nil
	}
	return err
}

// Grant returns the session's grant for toolName (its oldest grant-shaped rule), or
// apperr.NotFound when there is none.
func (db *SQL) Grant(ctx context.Context, sessionID, toolName string) (g gate.Grant, err error) {
	defer apperr.Wrap(&err, "store.Grant(%s, %s)", sessionID, toolName)
	r, err := scanRule(db.queryRow(ctx, db.reads(), `SELECT `+ruleColumns+` FROM rules
		WHERE session_id = ? AND tool = ? AND `+grantShaped+` ORDER BY created_at, id LIMIT 1`, sessionID, toolName))
	if isNoRows(err) {
		return gate.Grant{}, apperr.Errorf(apperr.NotFound, "no grant for %s", toolName)
	}
	if err != nil {
		return gate.Grant{}, err
	}
	return gate.GrantOf(r), nil
}

// Grants lists a session's grants (its grant-shaped rules), oldest first (then by tool name).
// Empty for an unknown session.
func (db *SQL) Grants(ctx context.Context, sessionID string) (_ []gate.Grant, err error) {
	defer apperr.Wrap(&err, "store.Grants(%s)", sessionID)
	rules, err := db.queryRules(ctx, `SELECT `+ruleColumns+` FROM rules
		WHERE session_id = ? AND `+grantShaped+` ORDER BY created_at, tool`, sessionID)
	if err != nil {
		return nil, err
	}
	var out []gate.Grant
	for _, r := range rules {
		out = append(out, gate.GrantOf(r))
	}
	return out, nil
}

// DeleteGrant deletes the session's grants for toolName: the next call of that tool asks again.
// Errors: apperr.NotFound when there is none.
func (db *SQL) DeleteGrant(ctx context.Context, sessionID, toolName string) (err error) {
	defer apperr.Wrap(&err, "store.DeleteGrant(%s, %s)", sessionID, toolName)
	return db.deleteRules(ctx, apperr.Errorf(apperr.NotFound, "There is no session grant for %s.", toolName),
		`DELETE FROM rules WHERE session_id = ? AND tool = ? AND `+grantShaped, sessionID, toolName)
}
