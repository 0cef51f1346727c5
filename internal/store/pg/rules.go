package pg

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"countersign/internal/apperr"
	"countersign/internal/gate"
)

const ruleColumns = `id, effect, tool, specifier, when_expr, scope, session_id, workspace, source, created_by,
	created_via_link_id, created_via_link_label, created_at, expires_at, note, from_approval, hits, last_used_at,
	approvers, reviewers`

// grantShaped selects the rules that are session grants (gate.Rule.GrantShaped).
const grantShaped = `effect = 'allow' AND scope = 'session' AND source = 'prompt' AND specifier = '' AND when_expr = ''
	AND expires_at IS NULL`

// CreateRule stores r as given (a zero CreatedAt is db.Now()). Errors: apperr.Invalid for a
// missing id, an unknown effect, scope or source, or a session rule without a session;
// apperr.Conflict for an id that exists; apperr.NotFound for a session rule of an unknown
// session.
func (db *DB) CreateRule(ctx context.Context, r gate.Rule) (err error) {
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
	_, err = db.exec(ctx, `INSERT INTO rules (`+ruleColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)`,
		r.ID, string(r.Effect), r.Tool, r.Specifier, r.When, string(r.Scope), session, r.Workspace, string(r.Source),
		r.CreatedBy, viaID, viaLabel, formatTime(r.CreatedAt), nullTime(r.ExpiresAt), r.Note, r.FromApproval, r.Hits,
		nullTime(r.LastUsedAt), r.Approvers, namesColumn(r.Reviewers))
	switch {
	case isUnique(err):
		return apperr.Errorf(apperr.Conflict, "rule %s already exists", r.ID)
	case isForeignKey(err):
		return apperr.Errorf(apperr.NotFound, "session %s not found", r.SessionID)
	case isInvalid(err):
		return apperr.Errorf(apperr.Invalid, "rule %s cannot be stored: effect %q, scope %q (session %q) or source %q",
			r.ID, r.Effect, r.Scope, r.SessionID, r.Source)
	}
	return err
}

// Rules lists every stored rule, oldest first (then by id).
func (db *DB) Rules(ctx context.Context) (_ []gate.Rule, err error) {
	defer apperr.Wrap(&err, "store.Rules")
	return queryAll(ctx, db, scanRule, `SELECT `+ruleColumns+` FROM rules ORDER BY created_at, id`)
}

// DeleteRule deletes rule id. Errors: apperr.NotFound when there is none.
func (db *DB) DeleteRule(ctx context.Context, id string) (err error) {
	defer apperr.Wrap(&err, "store.DeleteRule(%s)", id)
	n, err := db.exec(ctx, `DELETE FROM rules WHERE id = $1`, id)
	if err == nil && n == 0 {
		return apperr.Errorf(apperr.NotFound, "rule %s not found", id)
	}
	return err
}

// AddRuleHits adds each entry's hits to its rule and moves its last use forward (never back);
// rules that are gone are skipped. One transaction.
func (db *DB) AddRuleHits(ctx context.Context, hits []gate.RuleHits) (err error) {
	defer apperr.Wrap(&err, "store.AddRuleHits(%d)", len(hits))
	if len(hits) == 0 {
		return nil
	}
	return db.inTx(ctx, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, h := range hits {
			b.Queue(`UPDATE rules SET hits = hits + $1,
				last_used_at = CASE WHEN last_used_at IS NULL OR last_used_at < $2 THEN $2 ELSE last_used_at END
				WHERE id = $3`, h.Hits, formatTime(h.LastUsedAt), h.ID)
		}
		return tx.SendBatch(ctx, &b).Close()
	})
}

func scanRule(sc pgx.Row) (gate.Rule, error) {
	var (
		r                              gate.Rule
		effect, scope, source, created string
		session, expires, last         *string
		viaID, viaLabel                string
		reviewers                      *string
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
	r.Effect, r.Scope, r.Source = gate.Effect(effect), gate.RuleScope(scope), gate.RuleSource(source)
	if session != nil {
		r.SessionID = *session
	}
	r.CreatedVia = linkRef(viaID, viaLabel)
	if r.CreatedAt, err = parseTime(created); err != nil {
		return gate.Rule{}, err
	}
	if r.ExpiresAt, err = parseNullTime(expires); err != nil {
		return gate.Rule{}, err
	}
	if r.LastUsedAt, err = parseNullTime(last); err != nil {
		return gate.Rule{}, err
	}
	return r, nil
}

// CreateGrant stores a session grant as a grant-shaped rule (id "g-<session>-<tool>"), as
// store.DB.CreateGrant does; granting a tool that already has one keeps the first (no error).
// Errors: apperr.NotFound for an unknown session.
func (db *DB) CreateGrant(ctx context.Context, g gate.Grant) error {
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
func (db *DB) Grant(ctx context.Context, sessionID, toolName string) (g gate.Grant, err error) {
	defer apperr.Wrap(&err, "store.Grant(%s, %s)", sessionID, toolName)
	r, err := scanRule(db.pool.QueryRow(ctx, `SELECT `+ruleColumns+` FROM rules
		WHERE session_id = $1 AND tool = $2 AND `+grantShaped+` ORDER BY created_at, id LIMIT 1`, sessionID, toolName))
	if errors.Is(err, pgx.ErrNoRows) {
		return gate.Grant{}, apperr.Errorf(apperr.NotFound, "no grant for %s", toolName)
	}
	if err != nil {
		return gate.Grant{}, err
	}
	return gate.GrantOf(r), nil
}

// Grants lists a session's grants, oldest first (then by tool name). Empty for an unknown
// session.
func (db *DB) Grants(ctx context.Context, sessionID string) (_ []gate.Grant, err error) {
	defer apperr.Wrap(&err, "store.Grants(%s)", sessionID)
	rules, err := queryAll(ctx, db, scanRule, `SELECT `+ruleColumns+` FROM rules
		WHERE session_id = $1 AND `+grantShaped+` ORDER BY created_at, tool`, sessionID)
	if err != nil {
		return nil, err
	}
	var out []gate.Grant
	for _, r := range rules {
		out = append(out, gate.GrantOf(r))
	}
	return out, nil
}

// DeleteGrant deletes the session's grants for toolName. Errors: apperr.NotFound when there is
// none.
func (db *DB) DeleteGrant(ctx context.Context, sessionID, toolName string) (err error) {
	defer apperr.Wrap(&err, "store.DeleteGrant(%s, %s)", sessionID, toolName)
	n, err := db.exec(ctx, `DELETE FROM rules WHERE session_id = $1 AND tool = $2 AND `+grantShaped, sessionID, toolName)
	if err == nil && n == 0 {
		return apperr.Errorf(apperr.NotFound, "There is no session grant for %s.", toolName)
	}
	return err
}
