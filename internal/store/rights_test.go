package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/share"
	"countersign/internal/tool"
)

// TestLinkRightsDecidedViaAndGrantsRoundTrip: migration 0006's columns keep a link's rights, the
// link a decision was made through (by a single insert, a batch insert and a resolution) and the
// link a grant was made through; a grant can be listed and deleted.
func TestLinkRightsDecidedViaAndGrantsRoundTrip(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))

	for _, l := range []share.Link{
		{ID: "l1", SessionID: "s1", Role: share.Approver, Label: "Design review", TokenHash: "h1", CreatedAt: t0, CanEdit: true},
		{ID: "l2", SessionID: "s1", Role: share.Approver, Label: "Ops", TokenHash: "h2", CreatedAt: t0, CanRemember: true},
		{ID: "l3", SessionID: "s1", Role: share.Viewer, TokenHash: "h3", CreatedAt: t0},
	} {
		if err := db.CreateShare(ctx, l); err != nil {
			t.Fatal(err)
		}
		got, err := db.Share(ctx, l.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "share "+l.ID, got, l)
	}

	via1, via2 := &gate.LinkRef{LinkID: "l1", Label: "Design review"}, &gate.LinkRef{LinkID: "l2", Label: "Ops"}
	decided := t0.Add(time.Minute)
	mk := func(id string, via *gate.LinkRef) gate.Approval {
		return gate.Approval{ID: id, SessionID: "s1", MessageID: "m1", ToolCallID: "c-" + id, ToolName: "shell",
			Arguments: json.RawMessage(`{}`), Annotations: tool.Annotations{}, RequestedBy: "model",
			Status: gate.Approved, DecidedBy: "alice", DecidedVia: via, Scope: gate.Once, CreatedAt: t0, DecidedAt: &decided}
	}
	one := mk("a1", via1)
	if err := db.CreateApproval(ctx, one); err != nil {
		t.Fatal(err)
	}
	batch := []gate.Approval{mk("a2", via2), mk("a3", nil)}
	if err := db.CreateApprovals(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]gate.Approval{one}, batch...) {
		got, err := db.Approval(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "approval "+want.ID, got, want)
	}

	pending := mk("a4", nil)
	pending.Status, pending.DecidedBy, pending.Scope, pending.DecidedAt = gate.Pending, "", "", nil
	if err := db.CreateApproval(ctx, pending); err != nil {
		t.Fatal(err)
	}
	got, err := db.ResolveApproval(ctx, "a4", gate.Resolution{Status: gate.Denied, DecidedBy: "alice", DecidedVia: via2, Scope: gate.Once})
	if err != nil {
		t.Fatal(err)
	}
	if got.DecidedVia == nil || *got.DecidedVia != *via2 {
		t.Errorf("resolved via %+v, want %+v", got.DecidedVia, via2)
	}
	if again, _ := db.Approval(ctx, "a4"); again.DecidedVia == nil || *again.DecidedVia != *via2 {
		t.Errorf("read back via %+v, want %+v", again.DecidedVia, via2)
	}

	grants := []gate.Grant{
		{SessionID: "s1", ToolName: "shell", ApprovalID: "a1", GrantedBy: "alice", GrantedVia: via1, CreatedAt: t0},
		{SessionID: "s1", ToolName: "write_file", ApprovalID: "a2", GrantedBy: "owner", CreatedAt: t0.Add(time.Second)},
	}
	for _, g := range grants {
		if err := db.CreateGrant(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	list, err := db.Grants(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "grants", list, grants)
	g, err := db.Grant(ctx, "s1", "shell")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "grant", g, grants[0])
	if err := db.DeleteGrant(ctx, "s1", "shell"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Grant(ctx, "s1", "shell"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("grant after delete: %v, want not found", err)
	}
	assertErr(t, db.DeleteGrant(ctx, "s1", "shell"), apperr.NotFound, "There is no session grant for shell.")
	if list, _ := db.Grants(ctx, "s1"); len(list) != 1 || list[0].ToolName != "write_file" {
		t.Errorf("grants after delete: %+v", list)
	}
}
