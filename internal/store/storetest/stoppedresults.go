package storetest

import (
	"context"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/store"
	"countersign/internal/tool"
)

// StoppedResultsBefore stores, in session sessionID (which must exist), three tool results as
// they were stored before a result carried `stopped` (issue 29): a call its run's Stop ended
// ("Run stopped by owner", an error), a call that failed, and a call whose output merely starts
// with the same words (not an error). The migration that marks stopped results must mark only the
// first; CheckStoppedResults says whether it did.
func StoppedResultsBefore(t *testing.T, ctx context.Context, db store.Backend, sessionID string) {
	t.Helper()
	for _, r := range []struct {
		id   string
		text string
		err  bool
	}{{"stopped", "Run stopped by owner", true}, {"failed", "exit status 1", true}, {"said", "Run stopped by the user, it printed", false}} {
		m := agent.Message{ID: r.id, Role: agent.ToolResult, ToolCallID: "call-" + r.id, ToolName: "run_command",
			Result: &tool.Result{Content: []tool.Content{tool.Text(r.text)}, IsError: r.err}}
		if _, err := db.AppendEntry(ctx, sessionID, m); err != nil {
			t.Fatal(err)
		}
	}
}

// CheckStoppedResults checks the entries StoppedResultsBefore stored, after the migration: only
// the call the Stop ended is marked stopped, and the texts are kept.
func CheckStoppedResults(t *testing.T, entries []agent.Entry) {
	t.Helper()
	seen := 0
	for _, e := range entries {
		if e.Message.Result == nil {
			continue
		}
		seen++
		want := e.Message.ID == "stopped"
		if got := e.Message.Result.Stopped; got != want {
			t.Errorf("result %s: stopped = %v after the migration, want %v", e.Message.ID, got, want)
		}
		if e.Message.Result.TextOf() == "" {
			t.Errorf("result %s lost its text", e.Message.ID)
		}
	}
	if seen != 3 {
		t.Fatalf("%d tool results read back, want 3", seen)
	}
}
