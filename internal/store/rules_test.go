package store

import (
	"context"
	"testing"

	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// TestMigrationTurnsGrantsIntoSessionRules: migration 0009 (issue 17) moves every session grant
// into a session allow rule for its tool, source prompt, made by the granter through the link
// they granted through, and drops the grants table; the grants views read the rules.
func TestMigrationTurnsGrantsIntoSessionRules(t *testing.T) {
	ctx := context.Background()
	p, raw := migratedBefore(t, "0009")
	for _, q := range []string{
		`INSERT INTO sessions (id, title, model, workspace, state, created_at) VALUES ('s1', 't', 'm', '/w', 'idle', '2025-01-01T00:00:00.000000000Z')`,
		`INSERT INTO grants VALUES ('s1', 'run_command', 'a1', 'bob', '2025-01-02T00:00:00.000000000Z', 'L1', 'for bob')`,
		`INSERT INTO grants VALUES ('s1', 'write_file', 'a2', 'owner', '2025-01-03T00:00:00.000000000Z', '', '')`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close()
	db := mustOpenPath(t, p)
	rules, err := db.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 {
		t.Fatalf("%d rules, want 2: %+v", len(rules), rules)
	}
	r := rules[0]
	if r.Effect != gate.Allow || r.Tool != "run_command" || r.Scope != gate.ScopeSession || r.SessionID != "s1" ||
		r.Source != gate.SourcePrompt || r.CreatedBy != "bob" || r.CreatedVia == nil || *r.CreatedVia != (gate.LinkRef{LinkID: "L1", Label: "for bob"}) ||
		r.FromApproval != "a1" || !r.GrantShaped() {
		t.Errorf("migrated grant = %+v", r)
	}
	if rules[1].CreatedVia != nil || rules[1].CreatedBy != "owner" {
		t.Errorf("owner's grant = %+v", rules[1])
	}
	gs, err := db.Grants(ctx, "s1")
	if err != nil || len(gs) != 2 || gs[0].ToolName != "run_command" || gs[0].ApprovalID != "a1" || gs[0].GrantedBy != "bob" {
		t.Errorf("Grants = %+v, %v", gs, err)
	}
	if _, err := db.write.Exec(`SELECT 1 FROM grants`); err == nil {
		t.Error("the grants table is still there")
	}
	s, err := db.Session(ctx, "s1")
	if err != nil || s.Mode != gate.ModeDefault {
		t.Errorf("an older session's mode = %q, %v; want default", s.Mode, err)
	}
}

// TestRulesAreStoredCountedAndDeleted: a rule round-trips field for field; hits add up and the
// last use only moves forward; refused rules say why; deleting a session deletes its rules.
func TestRulesAreStoredCountedAndDeleted(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))
	exp := t0.Add(48 * 3600e9)
	want := gate.Rule{ID: "r1", Effect: gate.Deny, Tool: "write_file", Specifier: "secrets/**", When: "parent == null",
		Scope: gate.ScopeWorkspace, Workspace: "/w", Source: gate.SourceAPI, CreatedBy: "owner", CreatedAt: t0,
		ExpiresAt: &exp, Note: "never", Hits: 0}
	if err := db.CreateRule(ctx, want); err != nil {
		t.Fatal(err)
	}
	sess := gate.Rule{ID: "r2", Effect: gate.Allow, Tool: "read_file", Scope: gate.ScopeSession, SessionID: "s1",
		Source: gate.SourcePrompt, CreatedBy: "ana", CreatedVia: &gate.LinkRef{LinkID: "L", Label: "x"}, CreatedAt: t0.Add(1)}
	if err := db.CreateRule(ctx, sess); err != nil {
		t.Fatal(err)
	}
	got, err := db.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Rules", got, []gate.Rule{want, sess})

	later, earlier := t0.Add(10e9), t0.Add(5e9)
	if err := db.AddRuleHits(ctx, []gate.RuleHits{{ID: "r1", Hits: 3, LastUsedAt: later}, {ID: "gone", Hits: 1, LastUsedAt: later}}); err != nil {
		t.Fatal(err)
	}
	if err := db.AddRuleHits(ctx, []gate.RuleHits{{ID: "r1", Hits: 2, LastUsedAt: earlier}}); err != nil {
		t.Fatal(err)
	}
	got, _ = db.Rules(ctx)
	if got[0].Hits != 5 || got[0].LastUsedAt == nil || !got[0].LastUsedAt.Equal(later) {
		t.Errorf("hits %d, last used %v; want 5 and %v", got[0].Hits, got[0].LastUsedAt, later)
	}

	for _, tc := range []struct {
		name string
		rule gate.Rule
		code apperr.Code
		msg  string
	}{
		{"no id", gate.Rule{Effect: gate.Allow}, apperr.Invalid, "a rule needs an id"},
		{"same id", want, apperr.Conflict, "rule r1 already exists"},
		{"policy-file rules are not stored", gate.Rule{ID: "p", Effect: gate.Allow, Tool: "x", Scope: gate.ScopeServer, Source: gate.SourcePolicyFile},
			apperr.Invalid, `rule p cannot be stored: effect "allow", scope "server" (session "") or source "policy-file"`},
		{"session rule without a session", gate.Rule{ID: "q", Effect: gate.Allow, Tool: "x", Scope: gate.ScopeSession, Source: gate.SourceAPI},
			apperr.Invalid, `rule q cannot be stored: effect "allow", scope "session" (session "") or source "api"`},
		{"unknown session", gate.Rule{ID: "u", Effect: gate.Allow, Tool: "x", Scope: gate.ScopeSession, SessionID: "nope", Source: gate.SourceAPI},
			apperr.NotFound, "session nope not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertErr(t, db.CreateRule(ctx, tc.rule), tc.code, tc.msg)
		})
	}
	assertErr(t, db.DeleteRule(ctx, "nope"), apperr.NotFound, "rule nope not found")
	if err := db.DeleteRule(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.Rules(ctx); len(got) != 0 {
		t.Errorf("rules left: %+v", got)
	}
}

// TestSessionModeIsStored: SetSessionMode switches a session's mode; an unknown mode or session
// is refused.
func TestSessionModeIsStored(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))
	if err := db.SetSessionMode(ctx, "s1", gate.ModePlan); err != nil {
		t.Fatal(err)
	}
	if s, _ := db.Session(ctx, "s1"); s.Mode != gate.ModePlan {
		t.Errorf("mode = %q", s.Mode)
	}
	assertErr(t, db.SetSessionMode(ctx, "s1", "yolo"), apperr.Invalid, `mode must be default, plan or accept-edits, not "yolo"`)
	assertErr(t, db.SetSessionMode(ctx, "s9", gate.ModePlan), apperr.NotFound, "session s9 not found")
}

// TestApprovalsKeepWhatDecidedThem: the audit fields of SPEC §14 (decision source, rule id, text
// and source, mode) round-trip through the one-row insert, the batched JSON insert and a
// resolution.
func TestApprovalsKeepWhatDecidedThem(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))
	now := t0.Add(1e9)
	rec := func(id string) gate.Approval {
		return gate.Approval{ID: id, SessionID: "s1", MessageID: "m", ToolCallID: "c" + id, ToolName: "write_file",
			Arguments: []byte(`{}`), RequestedBy: "model", Status: gate.Denied, Automatic: true, DecidedBy: gate.ByRule,
			Reason: "rule write_file(secrets/**) denies the call", CreatedAt: t0, DecidedAt: &now,
			DecisionSource: gate.FromRule, RuleID: "r1", RuleText: "write_file(secrets/**)", RuleSource: gate.SourceAPI, Mode: gate.ModePlan}
	}
	if err := db.CreateApproval(ctx, rec("a1")); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateApprovals(ctx, []gate.Approval{rec("a2"), rec("a3")}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		got, err := db.Approval(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, id, got, rec(id))
	}
	p := rec("p")
	p.Status, p.Automatic, p.DecidedBy, p.Reason, p.DecidedAt, p.DecisionSource, p.RuleID, p.RuleText, p.RuleSource =
		gate.Pending, false, "", "", nil, gate.FromAnnotations, "", "", ""
	if err := db.CreateApproval(ctx, p); err != nil {
		t.Fatal(err)
	}
	got, err := db.ResolveApproval(ctx, "p", gate.Resolution{Status: gate.Approved, Automatic: true, DecidedBy: gate.ByRule,
		Source: gate.FromRule, RuleID: "r9", RuleText: "write_file", RuleSource: gate.SourcePrompt})
	if err != nil {
		t.Fatal(err)
	}
	if got.DecisionSource != gate.FromRule || got.RuleID != "r9" || got.RuleText != "write_file" || got.RuleSource != gate.SourcePrompt || got.Mode != gate.ModePlan {
		t.Errorf("resolved = %+v", got)
	}
}
