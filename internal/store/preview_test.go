package store

import (
	"context"
	"encoding/json"
	"testing"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// previewed are write_file approvals with each kind of stored preview (issue 19): a file's
// content then, a new file, a file it could not show; and one without a preview.
func previewed() []gate.Approval {
	w := func(id, path string, p *tool.Preview) gate.Approval {
		return gate.Approval{ID: id, SessionID: "s1", MessageID: "m1", ToolCallID: "call_" + id, ToolName: "write_file",
			Arguments: json.RawMessage(`{"path":"` + path + `","content":"new\n"}`), RequestedBy: "model",
			Status: gate.Pending, CreatedAt: t0, Preview: p}
	}
	return []gate.Approval{
		w("p1", "notes.txt", &tool.Preview{Path: "notes.txt", Exists: true, Content: "old \"line\"\n\ttab\\ é\n"}),
		w("p2", "new.txt", &tool.Preview{Path: "new.txt"}),
		w("p3", "big.bin", &tool.Preview{Path: "big.bin", Exists: true, Error: "big.bin is too large to preview (2000000 bytes)"}),
		w("p4", "none.txt", nil),
	}
}

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
