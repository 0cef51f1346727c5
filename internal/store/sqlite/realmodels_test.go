package sqlite

import (
	"context"
	"testing"
)

// TestMigrationGivesOlderSessionsNoInstructionsAndNoUsage: migration 0011 (issue 18) leaves a
// session stored before it with "" instructions (no system prompt, as its requests were sent)
// and zero usage.
func TestMigrationGivesOlderSessionsNoInstructionsAndNoUsage(t *testing.T) {
	ctx := context.Background()
	p, raw := migratedBefore(t, "0011")
	if _, err := raw.Exec(`INSERT INTO sessions (id, title, model, workspace, state, created_at) VALUES ('old', 't', 'm', '/w', 'idle', '2025-01-01T00:00:00.000000000Z')`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db := mustOpenPath(t, p)
	s, err := db.Session(ctx, "old")
	if err != nil || s.Instructions != "" || !s.Usage.IsZero() {
		t.Fatalf("older session: instructions %q, usage %+v, %v; want none", s.Instructions, s.Usage, err)
	}
}
