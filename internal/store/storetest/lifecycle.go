package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/share"
)

// testReopen simulates a restart: everything committed before Close is there after the store is
// opened again, a parked approval can still be decided, and the next entry follows on.
func testReopen(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.Open(t, clock())
	s := session("s1", t0)
	s.State, s.ActiveTools = agent.Running, []string{"run_command"}
	as := approvals()
	var entries []agent.Entry
	func() {
		defer db.Close()
		mustCreateSession(t, db, s)
		mustCreateSession(t, db, session("s2", t0))
		mustCreateApprovals(t, db, as...)
		for _, m := range transcript() {
			e, err := db.AppendEntry(ctx, "s1", m)
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, e)
		}
	}()

	db = h.Reopen(t, db, clock())
	t.Cleanup(func() { db.Close() })
	got, err := db.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	// Stored running with a pending approval: it reads back as waiting, with the count.
	want := s
	want.State, want.PendingApprovals = agent.Waiting, 1
	assertEqual(t, "Session", got, want)
	running, err := db.SessionsInState(ctx, agent.Running)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "SessionsInState(running)", running, []agent.Session{want})
	gotEntries, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Entries", gotEntries, entries)
	pending, err := db.PendingApprovals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "PendingApprovals", pending, []gate.Approval{as[3], as[0]})
	all, err := db.Approvals(ctx, "s1", "")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Approvals", all, []gate.Approval{as[0], as[1], as[2], as[4]})

	if _, err := db.ResolveApproval(ctx, "a1", gate.Resolution{Status: gate.Approved, DecidedBy: "ana", At: t0}); err != nil {
		t.Fatal(err)
	}
	e, err := db.AppendEntry(ctx, "s1", transcript()[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(entries) + 1); e.Seq != want {
		t.Fatalf("Seq after restart = %d, want %d", e.Seq, want)
	}
}

// testApprovalTextsRoundTrip: random valid UTF-8 texts without NUL (control characters, quote and
// backslash, DEL, C1 controls, U+2028, noncharacters, U+10FFFF) and JSON arguments written by
// hand (spacing, key order, escapes) come back byte for byte, stored one at a time or in a batch,
// and a batch is listed in its order.
func testApprovalTextsRoundTrip(t *testing.T, h Harness) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	runes := []rune{1, 2, 0x1f, 0x20, '"', '\\', '/', 0x7f, 0x80, 0x9f, 0xa0, 0x2028, 0xd7ff, 0xe000, 0xfeff, 0xfffe, 0xffff, 0x10000, 0x10ffff, 'u', 'é', '{'}
	text := func() string {
		var b []rune
		for range r.IntN(12) {
			if r.IntN(3) == 0 {
				b = append(b, rune(1+r.IntN(0x7e)))
			} else {
				b = append(b, runes[r.IntN(len(runes))])
			}
		}
		return string(b)
	}
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	hand := []json.RawMessage{[]byte(`{ "cmd" : "echo \"a\\b\"\n", "n": 1.50 }`), []byte(`{"b":1,"a":2,"a":3}`),
		[]byte("[\"\\u0000\", \"\\ud83d\\ude42\", 1e400]"), []byte(` {} `)}
	for round, batch := range []bool{false, true, false, true} {
		var as []gate.Approval
		for i := range 30 {
			args, err := json.Marshal(text())
			if err != nil {
				t.Fatal(err)
			}
			if i < len(hand) {
				args = hand[i]
			}
			decided := t0.Add(time.Duration(i) * time.Nanosecond)
			as = append(as, gate.Approval{ID: fmt.Sprintf("%d-%02d-%s", round, i, text()), SessionID: "s1", MessageID: text(),
				ToolCallID: text(), ParentToolCallID: text(), ToolName: text(), ToolTitle: text(), RequestedBy: text(),
				Status: gate.Approved, Automatic: r.IntN(2) == 0, DecidedBy: text(), Reason: text(), Scope: gate.Once,
				DerivedFrom: text(), AskReason: text(), Arguments: args, EditedArguments: args, CreatedAt: t0.Add(time.Duration(round) * time.Hour),
				DecidedAt: &decided, DecisionSource: gate.DecisionSource(text()), RuleID: text(), RuleText: text()})
		}
		if batch {
			if err := db.CreateApprovals(ctx, as); err != nil {
				t.Fatal(err)
			}
		} else {
			mustCreateApprovals(t, db, as...)
		}
		for _, want := range as {
			got, err := db.Approval(ctx, want.ID)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, fmt.Sprintf("round %d: %q", round, want.ID), got, want)
		}
		all, err := db.Approvals(ctx, "s1", gate.Approved)
		if err != nil {
			t.Fatal(err)
		}
		all = all[len(all)-len(as):]
		for i := range all {
			if all[i].ID != as[i].ID {
				t.Fatalf("round %d: approval %d is %q, want the order they were stored in (%q)", round, i, all[i].ID, as[i].ID)
			}
		}
	}
}

// testSharesAreStoredRevokedAndTouched: share links round trip by id and by token hash, are
// listed newest first, revoked once (the first time stays) and touched; unknown ids, hashes and
// sessions and duplicate ids and hashes get their codes.
func testSharesAreStoredRevokedAndTouched(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0))
	exp := t0.Add(24 * time.Hour)
	links := []share.Link{
		{ID: "l1", SessionID: "s1", Role: share.Viewer, TokenHash: "h1", CreatedAt: t0},
		{ID: "l2", SessionID: "s1", Role: share.Approver, Label: "Ops <team>", TokenHash: "h2", CreatedAt: t0.Add(time.Second), ExpiresAt: &exp, CanEdit: true, CanRemember: true},
		{ID: "l3", SessionID: "s1", Role: share.Approver, TokenHash: "h3", CreatedAt: t0.Add(time.Second)},
		{ID: "l4", SessionID: "s2", Role: share.Viewer, TokenHash: "h4", CreatedAt: t0},
	}
	for _, l := range links {
		if err := db.CreateShare(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range links {
		got, err := db.Share(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "Share "+want.ID, got, want)
		got, err = db.ShareByHash(ctx, want.TokenHash)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "ShareByHash "+want.TokenHash, got, want)
	}
	list, err := db.Shares(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Shares (newest first; equal times, last stored first)", list, []share.Link{links[2], links[1], links[0]})
	if list, err := db.Shares(ctx, "nope"); err != nil || len(list) != 0 {
		t.Fatalf("Shares(nope) = %v, %v; want none", list, err)
	}

	revoked := t0.Add(time.Hour)
	got, err := db.RevokeShare(ctx, "l2", revoked)
	if err != nil {
		t.Fatal(err)
	}
	want := links[1]
	want.RevokedAt = &revoked
	assertEqual(t, "RevokeShare", got, want)
	if got, err = db.RevokeShare(ctx, "l2", revoked.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "RevokeShare again keeps the first time", got, want)
	used := t0.Add(2 * time.Hour)
	if err := db.TouchShare(ctx, "l1", used); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.Share(ctx, "l1"); got.LastUsedAt == nil || !got.LastUsedAt.Equal(used) {
		t.Errorf("touched link's last use %v, want %v", got.LastUsedAt, used)
	}

	dupID, dupHash, orphan := links[0], links[0], links[0]
	dupHash.ID = "l9"
	dupID.TokenHash = "h9"
	orphan.ID, orphan.TokenHash, orphan.SessionID = "l8", "h8", "nope"
	for _, tt := range []struct {
		name string
		err  error
		code apperr.Code
		msg  string
	}{
		{"unknown id", func() error { _, err := db.Share(ctx, "nope"); return err }(), apperr.NotFound, "share link not found"},
		{"unknown hash", func() error { _, err := db.ShareByHash(ctx, "nope"); return err }(), apperr.NotFound, "share link not found"},
		{"revoke unknown", func() error { _, err := db.RevokeShare(ctx, "nope", revoked); return err }(), apperr.NotFound, "share link nope not found"},
		{"duplicate id", db.CreateShare(ctx, dupID), apperr.Conflict, "share link already exists"},
		{"duplicate hash", db.CreateShare(ctx, dupHash), apperr.Conflict, "share link already exists"},
		{"unknown session", db.CreateShare(ctx, orphan), apperr.NotFound, "session nope not found"},
	} {
		t.Run(tt.name, func(t *testing.T) { assertErr(t, tt.err, tt.code, tt.msg) })
	}
}

// testDeleteSessionTakesEverythingOfIt: deleting a session deletes its entries, approvals, rules
// (grants) and share links, and nothing of another session; a second delete is not found.
func testDeleteSessionTakesEverythingOfIt(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	for _, id := range []string{"s1", "s2"} {
		mustCreateSession(t, db, session(id, t0))
		if _, err := db.AppendEntry(ctx, id, transcript()[0]); err != nil {
			t.Fatal(err)
		}
		a := approvals()[0]
		a.ID, a.SessionID = "a-"+id, id
		mustCreateApprovals(t, db, a)
		if err := db.CreateGrant(ctx, gate.Grant{SessionID: id, ToolName: "shell", ApprovalID: a.ID, GrantedBy: "owner", CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		if err := db.CreateShare(ctx, share.Link{ID: "l-" + id, SessionID: id, Role: share.Viewer, TokenHash: "h-" + id, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Session(ctx, "s1"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("Session after delete: %v, want not found", err)
	}
	if es, _ := db.Entries(ctx, "s1"); len(es) != 0 {
		t.Errorf("entries after delete: %d", len(es))
	}
	if _, err := db.Approval(ctx, "a-s1"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("approval after delete: %v, want not found", err)
	}
	if _, err := db.Share(ctx, "l-s1"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("share after delete: %v, want not found", err)
	}
	rules, err := db.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 1 || rules[0].SessionID != "s2" {
		t.Errorf("rules after delete: %+v, want s2's grant only", rules)
	}
	if pending, _ := db.PendingApprovals(ctx); len(pending) != 1 || pending[0].ID != "a-s2" {
		t.Errorf("pending after delete: %+v, want a-s2 only", pending)
	}
	if es, _ := db.Entries(ctx, "s2"); len(es) != 1 {
		t.Errorf("s2 has %d entries, want 1", len(es))
	}
	if _, err := db.Share(ctx, "l-s2"); err != nil {
		t.Errorf("s2's share: %v", err)
	}
	assertErr(t, db.DeleteSession(ctx, "s1"), apperr.NotFound, "session s1 not found")
	// The id can be used again, from a fresh transcript.
	mustCreateSession(t, db, session("s1", t0))
	if e, err := db.AppendEntry(ctx, "s1", transcript()[0]); err != nil || e.Seq != 1 {
		t.Fatalf("first entry of a re-created session: %+v, %v; want seq 1", e, err)
	}
}

// testIdleSessions: a session is idle since its last entry, or its creation when it has none;
// IdleSessions lists those idle since before the time given, oldest activity first.
func testIdleSessions(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t) // the clock reads t0+1s, t0+2s, … for each entry
	mustCreateSession(t, db, session("old", t0.Add(-48*time.Hour)))
	mustCreateSession(t, db, session("fresh", t0.Add(time.Hour)))
	mustCreateSession(t, db, session("active", t0.Add(-72*time.Hour)))
	mustCreateSession(t, db, session("older", t0.Add(-50*time.Hour)))
	if _, err := db.AppendEntry(ctx, "active", transcript()[0]); err != nil { // at t0+1s
		t.Fatal(err)
	}
	got, err := db.IdleSessions(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "IdleSessions(t0)", got, []string{"older", "old"})
	got, err = db.IdleSessions(ctx, t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "IdleSessions(t0+2s)", got, []string{"older", "old", "active"})
	got, err = db.IdleSessions(ctx, t0.Add(-100*time.Hour))
	if err != nil || len(got) != 0 {
		t.Fatalf("IdleSessions(long ago) = %v, %v; want none", got, err)
	}
}

// testReady: a store that is open answers Ready with nil; a closed one with an error whose
// message, shown by GET /readyz, says the database does not answer.
func testReady(t *testing.T, h Harness) {
	if err := h.open(t).Ready(context.Background()); err != nil {
		t.Fatalf("Ready = %v, want nil", err)
	}
	db := h.Open(t, clock())
	db.Close()
	if err := db.Ready(context.Background()); err == nil || apperr.MessageOf(err) != "the database does not answer" {
		t.Errorf("Ready on a closed store = %v (message %q), want the database does not answer", err, apperr.MessageOf(err))
	}
}
