package storetest

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

// testLinkRightsDecidedViaAndGrantsRoundTrip: migration 0006's columns keep a link's rights, the
// link a decision was made through (by a single insert, a batch insert and a resolution) and the
// link a grant was made through; a grant can be listed and deleted.
func testLinkRightsDecidedViaAndGrantsRoundTrip(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
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

// testRulesAreStoredCountedAndDeleted: a rule round-trips field for field; hits add up and the
// last use only moves forward; refused rules say why; deleting a session deletes its rules.
func testRulesAreStoredCountedAndDeleted(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
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

// testApprovalsKeepWhatDecidedThem: the audit fields of SPEC §14 (decision source, rule id, text
// and source, mode) round-trip through the one-row insert, the batched JSON insert and a
// resolution.
func testApprovalsKeepWhatDecidedThem(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
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
