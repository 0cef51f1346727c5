package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/store"
	"countersign/internal/tool"
)

func TestTmpBatchSpeed(t *testing.T) {
	ctx := context.Background()
	for _, seq := range []bool{false, true} {
	db, _ := store.Open(ctx, filepath.Join(t.TempDir(), "x.db"))
	db.CreateSession(ctx, agent.Session{ID: "s", Title: "t", Model: "m", Workspace: "/"})
	k := 0
	mk := func(i int) gate.Approval {
		now := time.Now().UTC()
		id := gate.NewID()
		if seq { k++; id = fmt.Sprintf("%016d%s", k, id[:10]) }
		return gate.Approval{ID: id, SessionID: "s", MessageID: "m1", ToolCallID: fmt.Sprintf("rd/%d", i), ParentToolCallID: "rd",
			ToolName: "run_checks", Arguments: json.RawMessage(`{}`), Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true), OpenWorldHint: tool.Bool(false)},
			RequestedBy: "review_diff", Status: gate.Approved, Automatic: true, DecidedBy: "policy", Reason: "annotations allow it without approval", CreatedAt: now, DecidedAt: &now}
	}
	for _, bs := range []int{256, 256} {
		n := 20000
		t0 := time.Now()
		for i := 0; i < n; i += bs {
			var b []gate.Approval
			for j := 0; j < bs; j++ { b = append(b, mk(i+j)) }
			if err := db.CreateApprovals(ctx, b); err != nil { t.Fatal(err) }
		}
		t.Logf("seq %v batch %d: %.2f µs/row", seq, bs, float64(time.Since(t0).Microseconds())/float64(n))
	}
	db.Close()
	}
}
