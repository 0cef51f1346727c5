package sqlite

import (
	"context"
	"testing"

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
