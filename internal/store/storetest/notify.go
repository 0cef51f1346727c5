package storetest

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/notify"
	"countersign/internal/store"
)

func testWithoutReceiversNothingIsQueued(t *testing.T, h Harness) {
	ctx := context.Background()
	db, _, wakes := notifyStore(t, h)
	if err := db.CreateApproval(ctx, pendingApproval("A1")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ResolveApproval(ctx, "A1", gate.Resolution{Status: gate.Approved, DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	if ds, _ := db.Deliveries(ctx, "s1"); len(ds) != 0 || wakes.Load() != 0 {
		t.Errorf("deliveries %+v, wakes %d; want none", ds, wakes.Load())
	}
}

func testADecisionLinkIsUsedOnceEvenWhenRacing(t *testing.T, h Harness) {
	ctx := context.Background()
	db, key, _ := notifyStore(t, h, alice)
	if err := db.CreateApproval(ctx, pendingApproval("A1")); err != nil {
		t.Fatal(err)
	}
	ds, _ := db.Deliveries(ctx, "s1")
	l, err := db.DecisionLink(ctx, key.LinkHash(ds[0].LinkID))
	if err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch err := db.UseDecisionLink(ctx, l.ID, time.Time{}); apperr.CodeOf(err) {
			case "":
				wins.Add(1)
			case apperr.Conflict:
				if apperr.MessageOf(err) != "This link was already used." {
					t.Errorf("message %q", apperr.MessageOf(err))
				}
			default:
				t.Errorf("UseDecisionLink = %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Errorf("%d uses won, want exactly one", wins.Load())
	}
	if l, _ := db.DecisionLink(ctx, key.LinkHash(ds[0].LinkID)); l.UsedAt == nil {
		t.Error("used_at not stored")
	}
	for name, hash := range map[string]string{"unknown hash": notify.HashToken("guess"), "the raw link id": l.ID, "empty": ""} {
		if _, err := db.DecisionLink(ctx, hash); apperr.CodeOf(err) != apperr.NotFound || apperr.MessageOf(err) != "Not found" {
			t.Errorf("%s: DecisionLink = %v, want a bare not found", name, err)
		}
	}
	if err := db.UseDecisionLink(ctx, "dl-nope", time.Time{}); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("UseDecisionLink(unknown) = %v", err)
	}
}

// notifyStore is a fresh store with session s1 and the given webhook receivers, counting the
// worker's wake-ups.
func notifyStore(t *testing.T, h Harness, receivers ...notify.Receiver) (store.Backend, notify.Key, *atomic.Int32) {
	t.Helper()
	db := h.open(t)
	key, err := notify.NewKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	var wakes atomic.Int32
	db.SetNotify(receivers, key.LinkHash, func() { wakes.Add(1) })
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	return db, key, &wakes
}

var (
	alice = notify.Receiver{ID: "wh-a", Name: "alice", URL: "http://a.example/h", Format: notify.FormatJSON}
	bob   = notify.Receiver{ID: "wh-b", Name: "bob", URL: "http://b.example/h", Format: notify.FormatJSON}
)

func pendingApproval(id string) gate.Approval {
	return gate.Approval{ID: id, SessionID: "s1", MessageID: "m1", ToolCallID: "c-" + id, ToolName: "run_command",
		Arguments: json.RawMessage(`{"command":"ls"}`), RequestedBy: "model", Status: gate.Pending}
}

// testPendingApprovalsQueueEventsAndLinks: with receivers, a pending approval is stored with one
// approval.requested delivery and one decision link per receiver, and its decision queues one
// resolution event per receiver; a refused approval queues nothing.
func testPendingApprovalsQueueEventsAndLinks(t *testing.T, h Harness) {
	ctx := context.Background()
	db, key, wakes := notifyStore(t, h, alice, bob)
	if err := db.CreateApproval(ctx, pendingApproval("A1")); err != nil {
		t.Fatal(err)
	}
	ds, err := db.Deliveries(ctx, "s1")
	if err != nil || len(ds) != 2 {
		t.Fatalf("deliveries %+v, %v; want one per receiver", ds, err)
	}
	for i, r := range []notify.Receiver{alice, bob} {
		d := ds[i]
		if d.ID != "A1/"+r.ID+"/approval.requested" || d.Event != notify.Requested || d.ReceiverID != r.ID || d.NextAt == nil || d.LinkID == "" ||
			d.Approval.ID != "A1" || d.SessionTitle != "one" {
			t.Errorf("delivery %d: %+v", i, d)
		}
		l, err := db.DecisionLink(ctx, key.LinkHash(d.LinkID))
		if err != nil || l.ApprovalID != "A1" || l.Recipient != r.Name || l.UsedAt != nil {
			t.Errorf("link of %s: %+v, %v", r.Name, l, err)
		}
	}
	if wakes.Load() != 1 {
		t.Errorf("woke the worker %d times, want once", wakes.Load())
	}
	if err := db.CreateApproval(ctx, pendingApproval("A1")); apperr.CodeOf(err) != apperr.Conflict {
		t.Fatalf("second CreateApproval = %v, want conflict", err)
	}
	bad := pendingApproval("A2")
	bad.SessionID = "nope"
	if err := db.CreateApproval(ctx, bad); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("CreateApproval(unknown session) = %v", err)
	}
	if ds, _ := db.Deliveries(ctx, "s1"); len(ds) != 2 {
		t.Errorf("after refused approvals: %d deliveries, want 2", len(ds))
	}
	if _, err := db.ResolveApproval(ctx, "A1", gate.Resolution{Status: gate.Denied, DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	ds, _ = db.Deliveries(ctx, "s1")
	if len(ds) != 4 || ds[2].Event != notify.Resolved || ds[3].Event != notify.Resolved || ds[2].LinkID != "" || wakes.Load() != 2 {
		t.Errorf("after the decision: %+v (wakes %d)", ds, wakes.Load())
	}
}

// testTheOutboxIsWorkedThrough: the delivery worker's view of the outbox: the next row due, the
// rows due at a time (earliest first, at most a limit), attempts recorded (a retry keeps the row
// due later, a success or a give-up ends it) and listed for the audit; an unknown row is not
// found.
func testTheOutboxIsWorkedThrough(t *testing.T, h Harness) {
	ctx := context.Background()
	db, _, _ := notifyStore(t, h, alice, bob)
	if _, ok, err := db.NextDeliveryAt(ctx); ok || err != nil {
		t.Fatalf("NextDeliveryAt on an empty outbox: %v, %v; want none", ok, err)
	}
	if err := db.CreateApproval(ctx, pendingApproval("A1")); err != nil {
		t.Fatal(err)
	}
	next, ok, err := db.NextDeliveryAt(ctx)
	if err != nil || !ok {
		t.Fatalf("NextDeliveryAt = %v, %v, %v", next, ok, err)
	}
	if due, err := db.DueDeliveries(ctx, next.Add(-time.Nanosecond), 10); err != nil || len(due) != 0 {
		t.Fatalf("due before the time: %d, %v", len(due), err)
	}
	due, err := db.DueDeliveries(ctx, next, 1)
	if err != nil || len(due) != 1 || due[0].ReceiverID != alice.ID || due[0].Approval.ID != "A1" {
		t.Fatalf("DueDeliveries(limit 1) = %+v, %v; want alice's", due, err)
	}
	retry := next.Add(time.Minute)
	if err := db.RecordAttempt(ctx, due[0].ID, notify.Attempt{N: 1, At: next, Status: 500, Duration: time.Millisecond}, &retry); err != nil {
		t.Fatal(err)
	}
	due, _ = db.DueDeliveries(ctx, next, 10)
	if len(due) != 1 || due[0].ReceiverID != bob.ID {
		t.Fatalf("due after alice's failed attempt: %+v, want bob's only", due)
	}
	if err := db.RecordAttempt(ctx, due[0].ID, notify.Attempt{N: 1, At: next, Status: 204}, nil); err != nil {
		t.Fatal(err)
	}
	if at, ok, _ := db.NextDeliveryAt(ctx); !ok || !at.Equal(retry) {
		t.Fatalf("NextDeliveryAt = %v, %v; want alice's retry at %v", at, ok, retry)
	}
	aliceID := "A1/" + alice.ID + "/approval.requested"
	if err := db.RecordAttempt(ctx, aliceID, notify.Attempt{N: 2, At: retry, Error: "connection refused"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := db.NextDeliveryAt(ctx); ok {
		t.Fatal("a row is still due after both ended")
	}
	ds, err := db.Deliveries(ctx, "s1")
	if err != nil || len(ds) != 2 {
		t.Fatalf("Deliveries = %+v, %v", ds, err)
	}
	a, b := ds[0], ds[1]
	if !a.Failed || a.DeliveredAt != nil || a.Tries != 2 || len(a.Attempts) != 2 || a.Attempts[0].Status != 500 ||
		a.Attempts[0].Duration != time.Millisecond || a.Attempts[1].Error != "connection refused" || !a.Attempts[1].At.Equal(retry) {
		t.Errorf("alice's delivery: %+v", a)
	}
	if b.Failed || b.DeliveredAt == nil || !b.DeliveredAt.Equal(next) || b.Tries != 1 || len(b.Attempts) != 1 || b.NextAt != nil {
		t.Errorf("bob's delivery: %+v", b)
	}
	if err := db.RecordAttempt(ctx, "nope", notify.Attempt{N: 1, At: next}, nil); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("RecordAttempt(unknown) = %v, want not found", err)
	}
}
