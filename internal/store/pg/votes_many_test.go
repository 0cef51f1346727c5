package pg_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"countersign/internal/agent"
	"countersign/internal/gate"
)

// TestApprovalsOfASessionWithManyMultiApproverCalls (review of issue 29): a session's approvals
// read back however many of them need several approvers. Before the one SQL store the PostgreSQL
// store read their votes with approval_id = ANY($1) (one parameter); store.SQL.withVotes builds
// IN (?1, …, ?N) with one parameter per approval, and PostgreSQL's protocol holds at most 65535:
// past that, Approvals (the session page, recovery, the export) and PendingApprovals fail.
func TestApprovalsOfASessionWithManyMultiApproverCalls(t *testing.T) {
	ctx := context.Background()
	db := replicas(t, 1)[0]
	if err := db.CreateSession(ctx, agent.Session{ID: "s1", Title: "t", Model: "m", Workspace: "/w"}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateApproval(ctx, gate.Approval{ID: "q0", SessionID: "s1", MessageID: "m", ToolCallID: "c0",
		ToolName: "run_command", RequestedBy: "model", Status: gate.Pending, Approvers: 2}); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, db.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	const more = 65535 // 65536 approvals in all, each needing two approvers
	cols := `session_id, message_id, tool_call_id, parent_tool_call_id, tool_name,
	tool_title, arguments, edited_arguments, annotations, requested_by, status, automatic,
	decided_by, reason, scope, created_at, decided_at, derived_from, decided_via_link_id, decided_via_link_label,
	ask_reason, decision_source, rule_id, rule_text, rule_source, mode, rule_scope, count, last_at, preview,
	approvers, reviewers`
	sel := strings.Replace(cols, "tool_call_id,", "tool_call_id || g,", 1)
	if _, err := c.Exec(ctx, `INSERT INTO approvals (id, `+cols+`) SELECT 'q' || g, `+sel+`
		FROM approvals, generate_series(1, $1::int) g WHERE id = 'q0'`, more); err != nil {
		t.Fatal(err)
	}
	as, err := db.Approvals(ctx, "s1", "")
	if err != nil {
		t.Fatalf("Approvals of a session with %d multi-approver calls: %v", more+1, err)
	}
	if len(as) != more+1 {
		t.Fatalf("Approvals = %d, want %d", len(as), more+1)
	}
	if _, err := db.PendingApprovals(ctx); err != nil {
		t.Fatalf("PendingApprovals: %v", err)
	}
}
