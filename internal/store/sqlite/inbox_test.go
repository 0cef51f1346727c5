package sqlite

import (
	"context"
	"strings"
	"testing"
)

// TestInboxUsesItsIndex: the inbox and the badge's count read the partial index of migration
// 0014 in its order (no sort of the pending rows, no scan of the table).
func TestInboxUsesItsIndex(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	plans := db.PlannedQueries()
	for _, q := range []string{
		strings.NewReplacer("?1", "''", "?2", "''", "?3", "100", "?4", "''").Replace(plans["inbox"]),
		strings.NewReplacer("?1", "''", "?2", "'a1'", "?3", "100", "?4", "''").Replace(plans["inbox"]),
		strings.NewReplacer("?1", "''", "?2", "''", "?3", "100", "?4", "'owner'").Replace(plans["inbox"]),
		plans["pendingCount"],
	} {
		rows, err := db.read.QueryContext(ctx, `EXPLAIN QUERY PLAN `+q)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		p := strings.Join(plan, "; ")
		if !strings.Contains(p, "approvals_pending_all") || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("plan of %q = %q, want approvals_pending_all and no sort", q, plan)
		}
	}
}
