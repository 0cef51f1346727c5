package storetest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"countersign/internal/aap"
	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// testAAPRequestsInstancesAndEvents: Door 3's rows (SPEC §18, issue 32) on every backend — a
// request round-trips with its JSON as sent; its idempotency key is one per connection; due and
// pending requests are found by their approval's state; an instance round-trips, is found by key
// and connection, and is deleted once; events are made once per terminal request of an instance
// with delivery, worked through, and ended by the deletion.
func testAAPRequestsInstancesAndEvents(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	info := agent.AgentInfo{Kind: "api", ConnectionID: "conn1", SessionID: "aap"}
	if err := db.CreateSession(ctx, agent.Session{ID: "as1", Title: "API agent", Model: "api", Agent: &info}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ap1", "ap2", "ap3"} {
		if err := db.CreateApproval(ctx, gate.Approval{ID: id, SessionID: "as1", ToolCallID: "aap-" + id, ToolName: "issue_refund",
			Arguments: json.RawMessage(`{"a":1}`), RequestedBy: gate.RequestedByAgent, Status: gate.Pending, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	reasoning := "charged twice"
	r1 := aap.Request{ID: "7ab8c8ec-7b2d-4fd6-9b52-752f9515eb71", ConnectionID: "conn1", IdempotencyKey: "k1", Digest: "d1", ApprovalID: "ap1",
		SessionID: "as1", Tool: "issue_refund", Arguments: json.RawMessage(`{"b":2,"a":1}`), Timeout: "30m", AgentReasoning: &reasoning,
		Context: json.RawMessage(`{"session_id":"x"}`), CreatedAt: t0, DeadlineAt: t0.Add(30 * time.Minute)}
	if err := db.CreateAAPRequest(ctx, r1); err != nil {
		t.Fatal(err)
	}
	got, err := db.AAPRequest(ctx, r1.ID)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "arguments as sent", string(got.Arguments), `{"b":2,"a":1}`)
	assertEqual(t, "reasoning", *got.AgentReasoning, reasoning)
	assertEqual(t, "times", got.CreatedAt.Equal(t0) && got.DeadlineAt.Equal(t0.Add(30*time.Minute)), true)
	byKey, err := db.AAPRequestByKey(ctx, "conn1", "k1")
	assertEqual(t, "by key", byKey.ID+" "+errText(err), r1.ID+" ")
	dup := r1
	dup.ID, dup.ApprovalID = "11111111-7b2d-4fd6-9b52-752f9515eb71", "ap2"
	assertEqual(t, "the same key twice", apperr.CodeOf(db.CreateAAPRequest(ctx, dup)), apperr.Conflict)
	dup.ConnectionID = "conn2" // another instance's key space
	if err := db.CreateAAPRequest(ctx, dup); err != nil {
		t.Fatal(err)
	}
	_, err = db.AAPRequest(ctx, "22222222-7b2d-4fd6-9b52-752f9515eb71")
	assertEqual(t, "unknown request", apperr.CodeOf(err), apperr.NotFound)
	due, err := db.AAPRequestsDue(ctx, t0.Add(time.Hour))
	assertEqual(t, "due", len(due), 2)
	pending, err := db.AAPPendingRequests(ctx, "conn1")
	assertEqual(t, "pending of conn1", len(pending), 1)

	// An instance with delivery since t0.
	since := t0
	in := aap.Instance{ID: "b29a43a7-1949-4b9f-9d61-b7ae66f85d31", ConnectionID: "conn1", Name: "codex-laptop", URL: "https://h.example.com/e",
		RegistrationID: "8246931c-4ce0-4c15-a94a-e9c078ad06e2", SealedSecret: "sealed-s", DeliverySince: &since, ProvisionKey: "pk1",
		ProvisionDigest: "pd1", SealedToken: "sealed-t", CreatedAt: t0}
	if err := db.CreateAAPInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "the same provision key twice", apperr.CodeOf(db.CreateAAPInstance(ctx, aap.Instance{ID: "x", ConnectionID: "c9", Name: "n",
		ProvisionKey: "pk1", ProvisionDigest: "p", SealedToken: "t", CreatedAt: t0})), apperr.Conflict)
	for _, get := range []func() (aap.Instance, error){
		func() (aap.Instance, error) { return db.AAPInstance(ctx, in.ID) },
		func() (aap.Instance, error) { return db.AAPInstanceByKey(ctx, "pk1") },
		func() (aap.Instance, error) { return db.AAPInstanceByConnection(ctx, "conn1") },
	} {
		g, err := get()
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "instance", g.URL+g.RegistrationID+g.SealedSecret+g.SealedToken+g.Name, in.URL+in.RegistrationID+"sealed-ssealed-tcodex-laptop")
		assertEqual(t, "delivery since", g.DeliverySince != nil && g.DeliverySince.Equal(t0) && g.DeletedAt == nil, true)
	}

	// Nothing to make while the request is pending; once decided, one event.
	toMake, err := db.AAPEventsToMake(ctx)
	assertEqual(t, "events of pending requests", len(toMake), 0)
	if _, err := db.ResolveApproval(ctx, "ap1", gate.Resolution{Status: gate.Approved, DecidedBy: "owner", At: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	toMake, err = db.AAPEventsToMake(ctx)
	if err != nil || len(toMake) != 1 || toMake[0].RequestID != r1.ID || toMake[0].InstanceID != in.ID || !toMake[0].CreatedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("events to make: %+v %v", toMake, err)
	}
	ev := toMake[0]
	ev.ID, ev.NextAt = "f4b96ac4-404d-4f6a-9a03-a0565edc4922", t0.Add(time.Minute)
	for range 2 { // a second maker finds it made
		if err := db.CreateAAPEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
		ev.ID = "f4b96ac4-0000-404d-4f6a-a0565edc4922"
	}
	toMake, _ = db.AAPEventsToMake(ctx)
	assertEqual(t, "events to make after making", len(toMake), 0)
	dueEv, err := db.DueAAPEvents(ctx, t0.Add(2*time.Minute), 10)
	if err != nil || len(dueEv) != 1 || dueEv[0].ID != "f4b96ac4-404d-4f6a-9a03-a0565edc4922" || dueEv[0].Attempts != 0 {
		t.Fatalf("due events: %+v %v", dueEv, err)
	}
	next := t0.Add(time.Hour)
	if err := db.RecordAAPAttempt(ctx, dueEv[0].ID, t0.Add(2*time.Minute), false, &next); err != nil {
		t.Fatal(err)
	}
	dueEv, _ = db.DueAAPEvents(ctx, t0.Add(2*time.Minute), 10)
	assertEqual(t, "not due before its next attempt", len(dueEv), 0)
	dueEv, _ = db.DueAAPEvents(ctx, next, 10)
	if len(dueEv) != 1 || dueEv[0].Attempts != 1 {
		t.Fatalf("due after a failure: %+v", dueEv)
	}
	// One sender claims the attempt; a second finds it taken.
	claimed, err := db.ClaimAAPEvent(ctx, dueEv[0].ID, next, next.Add(time.Minute))
	assertEqual(t, "the first claim", claimed, true)
	claimed, err = db.ClaimAAPEvent(ctx, dueEv[0].ID, next, next.Add(time.Minute))
	assertEqual(t, "the second claim", claimed, false)
	if err := db.RecordAAPAttempt(ctx, dueEv[0].ID, next, true, nil); err != nil {
		t.Fatal(err)
	}
	dueEv, _ = db.DueAAPEvents(ctx, next.Add(time.Hour), 10)
	assertEqual(t, "delivered", len(dueEv), 0)

	held, err := db.AAPRetainedSessions(ctx, t0)
	assertEqual(t, "sessions retention keeps", strings.Join(held, ",")+errText(err), "as1")
	if _, err := db.ResolveApproval(ctx, "ap2", gate.Resolution{Status: gate.Cancelled, DecidedBy: "system", At: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	held, err = db.AAPRetainedSessions(ctx, t0.Add(time.Hour))
	assertEqual(t, "nothing pending, decided before since", strings.Join(held, ",")+errText(err), "")

	// An update: stored with its key and response, once per key; removing delivery stops events.
	renamed := in
	renamed.Name = "renamed"
	if err := db.UpdateAAPInstance(ctx, renamed, "u1", "ud1", []byte(`{"id":"x"}`), t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	d, resp, err := db.AAPInstanceUpdate(ctx, in.ID, "u1")
	assertEqual(t, "update record", d+string(resp)+errText(err), `ud1{"id":"x"}`)
	assertEqual(t, "the same update key twice", apperr.CodeOf(db.UpdateAAPInstance(ctx, renamed, "u1", "ud1", []byte(`{}`), t0)), apperr.Conflict)
	_, _, err = db.AAPInstanceUpdate(ctx, in.ID, "u2")
	assertEqual(t, "unknown update key", apperr.CodeOf(err), apperr.NotFound)
	g0, _ := db.AAPInstance(ctx, in.ID)
	assertEqual(t, "renamed, delivery kept", g0.Name+" "+g0.URL, "renamed "+in.URL)

	// Deletion: once (the first time stays), and its events end.
	if err := db.DeleteAAPInstance(ctx, in.ID, t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteAAPInstance(ctx, in.ID, t0.Add(4*time.Hour)); err != nil {
		t.Fatal(err)
	}
	g, _ := db.AAPInstance(ctx, in.ID)
	assertEqual(t, "deleted at", g.DeletedAt != nil && g.DeletedAt.Equal(t0.Add(3*time.Hour)), true)
	assertEqual(t, "delete an unknown instance", apperr.CodeOf(db.DeleteAAPInstance(ctx, "nope", t0)), apperr.NotFound)
	assertEqual(t, "update a deleted instance", apperr.CodeOf(db.UpdateAAPInstance(ctx, renamed, "u3", "d", []byte(`{}`), t0)), apperr.NotFound)
	if _, err := db.ResolveApproval(ctx, "ap3", gate.Resolution{Status: gate.Denied, DecidedBy: "owner", At: t0.Add(5 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	toMake, _ = db.AAPEventsToMake(ctx)
	assertEqual(t, "no events for a deleted instance", len(toMake), 0)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
