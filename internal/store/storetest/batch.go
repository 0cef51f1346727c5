package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

func testCreateApprovalsIsAllOrNothing(t *testing.T, h Harness) {
	db := h.open(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	mustCreateSession(t, db, agent.Session{ID: "s2", Title: "two", Model: "faux:demo", Workspace: "/w"})
	all := approvals()
	if err := db.CreateApprovals(ctx, all[:3]); err != nil {
		t.Fatal(err)
	}
	// A batch with an id that exists fails whole, with CreateApproval's code, and stores nothing.
	err := db.CreateApprovals(ctx, []gate.Approval{all[3], all[0]})
	assertErr(t, err, apperr.Conflict, "approval a1 already exists")
	if _, err := db.Approval(ctx, all[3].ID); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("a4 of the failed batch was stored: %v", err)
	}
	if err := db.CreateApprovals(ctx, nil); err != nil {
		t.Fatalf("an empty batch: %v", err)
	}
	for _, want := range all[:3] {
		got, err := db.Approval(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Approval(%s) = %+v, want %+v", want.ID, got, want)
		}
	}
}

// testGroupedRecordsMergeAcrossBatches (issue 19): a grouped record whose id is stored already is
// merged into its row — counts add, last_at moves to the later time, created_at, decided_at and
// every other column stay the first record's — in a batch, twice in one batch, or alone; an
// ordinary record with an id that exists is still a conflict, and a failed batch merges nothing.
func testGroupedRecordsMergeAcrossBatches(t *testing.T, h Harness) {
	db := h.open(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	t1 := time.Date(2026, 12, 1, 10, 0, 0, 1, time.UTC)
	at := func(d time.Duration) *time.Time { x := t1.Add(d); return &x }
	rec := func(id, call string, created time.Time) gate.Approval {
		return gate.Approval{ID: id, SessionID: "s1", MessageID: "m1", ToolCallID: call, ParentToolCallID: "p",
			ToolName: "leaf", Arguments: json.RawMessage(`{"i":1}`), RequestedBy: "parent", Status: gate.Approved,
			Automatic: true, DecidedBy: gate.ByPolicy, DecisionSource: gate.FromAnnotations, Mode: gate.ModeDefault,
			CreatedAt: created, DecidedAt: &created}
	}
	group := func(call string, created time.Time, count int, last *time.Time) gate.Approval {
		a := rec("Ggroup", call, created)
		a.Count, a.LastAt = count, last
		return a
	}
	check := func(step string, count int, last *time.Time) {
		t.Helper()
		got, err := db.Approval(ctx, "Ggroup")
		if err != nil {
			t.Fatal(err)
		}
		want := group("p/1", t1, count, last)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the group's row\n got %+v\nwant %+v", step, got, want)
		}
	}

	// The first batch: the group's first 2 calls, with an ordinary record.
	if err := db.CreateApprovals(ctx, []gate.Approval{rec("o1", "p/9", t1), group("p/1", t1, 2, at(time.Second))}); err != nil {
		t.Fatal(err)
	}
	check("first batch", 2, at(time.Second))
	// A later batch of the same group: its first call is later (p/5), the stored row keeps p/1's.
	if err := db.CreateApprovals(ctx, []gate.Approval{group("p/5", t1.Add(2*time.Second), 3, at(4*time.Second)), rec("o2", "p/10", t1)}); err != nil {
		t.Fatal(err)
	}
	check("second batch", 5, at(4*time.Second))
	// Twice in one batch, one of them older than the stored last_at: counts add, last_at stays
	// the latest.
	if err := db.CreateApprovals(ctx, []gate.Approval{group("p/6", t1, 1, at(3*time.Second)), group("p/7", t1, 1, at(5*time.Second))}); err != nil {
		t.Fatal(err)
	}
	check("twice in a batch", 7, at(5*time.Second))
	// Alone, through CreateApproval (the audit writer's retry of a failed batch).
	if err := db.CreateApproval(ctx, group("p/8", t1, 1, at(6*time.Second))); err != nil {
		t.Fatal(err)
	}
	check("alone", 8, at(6*time.Second))

	// An ordinary duplicate is a conflict, alone or in a batch, and the failed batch's group
	// record is not merged.
	assertErr(t, db.CreateApproval(ctx, rec("o1", "p/11", t1)), apperr.Conflict, "approval o1 already exists")
	err := db.CreateApprovals(ctx, []gate.Approval{group("p/12", t1, 10, at(9*time.Second)), rec("o3", "p/13", t1), rec("o1", "p/14", t1)})
	assertErr(t, err, apperr.Conflict, "approval o1 already exists")
	check("after a failed batch", 8, at(6*time.Second))
	if _, err := db.Approval(ctx, "o3"); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("o3 of the failed batch was stored: %v", err)
	}

	// The session lists three rows that stand for ten calls.
	as, err := db.Approvals(ctx, "s1", "")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, a := range as {
		calls += a.Calls()
	}
	if len(as) != 3 || calls != 10 {
		t.Fatalf("%d rows standing for %d calls, want 3 rows for 10 calls: %+v", len(as), calls, as)
	}
}

// testCreateApprovalsNamesTheBadRowOfAMultiRowInsert: a batch goes in one INSERT; when one of its
// rows breaks a constraint the error still names it, and nothing of the batch is stored.
func testCreateApprovalsNamesTheBadRowOfAMultiRowInsert(t *testing.T, h Harness) {
	db := h.open(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	now := time.Now().UTC()
	mk := func(id, session string) gate.Approval {
		return gate.Approval{ID: id, SessionID: session, MessageID: "m", ToolCallID: "c/" + id, ToolName: "t",
			RequestedBy: "p", Status: gate.Approved, Automatic: true, DecidedBy: "policy", CreatedAt: now, DecidedAt: &now}
	}
	if err := db.CreateApproval(ctx, mk("taken", "s1")); err != nil {
		t.Fatal(err)
	}
	var batch []gate.Approval
	for i := range 35 {
		batch = append(batch, mk(fmt.Sprintf("r%02d", i), "s1"))
	}
	for _, tc := range []struct {
		bad      gate.Approval
		code     apperr.Code
		contains string
	}{
		{mk("taken", "s1"), apperr.Conflict, "approval taken already exists"},
		{mk("orphan", "nope"), apperr.NotFound, "session nope not found"},
		{func() gate.Approval { a := mk("odd", "s1"); a.Status = "maybe"; return a }(), apperr.Invalid, `approval odd cannot be stored: invalid JSON arguments, status "maybe" or scope ""`},
	} {
		b := append([]gate.Approval(nil), batch...)
		b[20] = tc.bad
		err := db.CreateApprovals(ctx, b)
		assertErr(t, err, tc.code, tc.contains)
		got, err := db.Approvals(ctx, "s1", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("after a failed batch the session has %d approvals, want only the first one", len(got))
		}
	}
	if err := db.CreateApprovals(ctx, batch); err != nil {
		t.Fatal(err)
	}
	got, err := db.Approvals(ctx, "s1", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(batch)+1 {
		t.Fatalf("stored %d approvals, want %d", len(got), len(batch)+1)
	}
	for i, a := range got[1:] {
		if !reflect.DeepEqual(a, batch[i]) {
			t.Fatalf("approval %d = %+v, want %+v", i, a, batch[i])
		}
	}
}

// testAppendEntryWithRecordsIsAllOrNothing: an entry and the automatic records of its calls are
// committed together; a bad record stores neither and is named as CreateApproval names it.
func testAppendEntryWithRecordsIsAllOrNothing(t *testing.T, h Harness) {
	db := h.open(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	now := time.Now().UTC()
	rec := func(id string) gate.Approval {
		return gate.Approval{ID: id, SessionID: "s1", MessageID: "m1", ToolCallID: "c-" + id, ToolName: "t",
			RequestedBy: "model", Status: gate.Approved, Automatic: true, DecidedBy: "policy", CreatedAt: now, DecidedAt: &now}
	}
	msg := agent.Message{ID: "m1", Role: agent.Assistant, Content: []agent.Block{{Type: "text", Text: "hi"}}}
	if err := db.CreateApproval(ctx, rec("taken")); err != nil {
		t.Fatal(err)
	}
	_, err := db.AppendEntry(ctx, "s1", msg, rec("r1"), rec("taken"))
	assertErr(t, err, apperr.Conflict, "approval taken already exists")
	if es, _ := db.Entries(ctx, "s1"); len(es) != 0 {
		t.Fatalf("the entry of a failed append was stored: %+v", es)
	}
	if _, err := db.Approval(ctx, "r1"); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("r1 of a failed append was stored: %v", err)
	}
	e, err := db.AppendEntry(ctx, "s1", msg, rec("r1"), rec("r2"))
	if err != nil || e.Seq != 1 {
		t.Fatalf("AppendEntry = %+v, %v; want seq 1", e, err)
	}
	for _, id := range []string{"r1", "r2"} {
		if got, err := db.Approval(ctx, id); err != nil || !reflect.DeepEqual(got, rec(id)) {
			t.Errorf("Approval(%s) = %+v, %v; want %+v", id, got, err, rec(id))
		}
	}
	if _, err := db.AppendEntry(ctx, "nope", msg, rec("r3")); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("an unknown session: %v, want not found", err)
	}
}
