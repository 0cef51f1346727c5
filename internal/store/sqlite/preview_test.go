package sqlite

import (
	"context"
	"testing"

	"countersign/internal/gate"
	"countersign/internal/store/fixture"
)

func previewed() []gate.Approval { return fixture.Previewed() }

// TestPreviewMigrationKeepsEveryRow: a database from before 0013 keeps its approvals, none with a
// preview, and stores previews after it.
func TestPreviewMigrationKeepsEveryRow(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0))
	old := approvals()
	mustCreateApprovals(t, db, old...)
	for _, q := range []string{
		`ALTER TABLE approvals DROP COLUMN preview`,
		`DELETE FROM migrations WHERE name = '0013_approval_preview.sql'`,
	} {
		if _, err := db.write.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range old {
		got, err := db.Approval(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "approval "+w.ID+" after 0013", got, w)
		if got.Preview != nil {
			t.Errorf("%s has a preview after 0013: %+v", w.ID, got.Preview)
		}
	}
	p := previewed()[0]
	mustCreateApprovals(t, db, p)
	got, err := db.Approval(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "a preview stored after 0013", got.Preview, p.Preview)
}
