package storetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/notify"
	"countersign/internal/share"
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
	db, links, _ := notifyStore(t, h, alice)
	if err := db.CreateApproval(ctx, pendingApproval("A1")); err != nil {
		t.Fatal(err)
	}
	ds, _ := db.Deliveries(ctx, "s1")
	l, err := db.DecisionLink(ctx, linkHash(t, links, ds[0]))
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
	if l, _ := db.DecisionLink(ctx, linkHash(t, links, ds[0])); l.UsedAt == nil {
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
func notifyStore(t *testing.T, h Harness, receivers ...notify.Receiver) (store.Backend, notify.LinkTokens, *atomic.Int32) {
	t.Helper()
	db := h.open(t)
	links, err := notify.NewLinkTokens([]byte("a test server key of 32 bytes!!!"))
	if err != nil {
		t.Fatal(err)
	}
	var wakes atomic.Int32
	db.SetNotify(receivers, links, func() { wakes.Add(1) })
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	return db, links, &wakes
}

// linkHash is the stored hash of the token of d's decision link, opened from the row.
func linkHash(t *testing.T, links notify.LinkTokens, d notify.Delivery) string {
	t.Helper()
	token, err := links.TokenOf(d)
	if err != nil {
		t.Fatalf("delivery %s: %v", d.ID, err)
	}
	return notify.HashToken(token)
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
	db, links, wakes := notifyStore(t, h, alice, bob)
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
		l, err := db.DecisionLink(ctx, linkHash(t, links, d))
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
	if _, ok, err := db.NextDeliveryAt(ctx, "w1", t0); ok || err != nil {
		t.Fatalf("NextDeliveryAt on an empty outbox: %v, %v; want none", ok, err)
	}
	if err := db.CreateApproval(ctx, pendingApproval("A1")); err != nil {
		t.Fatal(err)
	}
	next, ok, err := db.NextDeliveryAt(ctx, "w1", t0)
	if err != nil || !ok {
		t.Fatalf("NextDeliveryAt = %v, %v, %v", next, ok, err)
	}
	if due, err := db.ClaimDeliveries(ctx, claim("w1", next.Add(-time.Nanosecond)), 10); err != nil || len(due) != 0 {
		t.Fatalf("due before the time: %d, %v", len(due), err)
	}
	due, err := db.ClaimDeliveries(ctx, claim("w1", next), 1)
	if err != nil || len(due) != 1 || due[0].ReceiverID != alice.ID || due[0].Approval.ID != "A1" {
		t.Fatalf("ClaimDeliveries(limit 1) = %+v, %v; want alice's", due, err)
	}
	retry := next.Add(time.Minute)
	if err := db.RecordAttempt(ctx, due[0].ID, notify.Attempt{N: 1, At: next, Status: 500, Duration: time.Millisecond}, &retry); err != nil {
		t.Fatal(err)
	}
	due, _ = db.ClaimDeliveries(ctx, claim("w1", next), 10)
	if len(due) != 1 || due[0].ReceiverID != bob.ID {
		t.Fatalf("due after alice's failed attempt: %+v, want bob's only", due)
	}
	if err := db.RecordAttempt(ctx, due[0].ID, notify.Attempt{N: 1, At: next, Status: 204}, nil); err != nil {
		t.Fatal(err)
	}
	if at, ok, _ := db.NextDeliveryAt(ctx, "w1", t0); !ok || !at.Equal(retry) {
		t.Fatalf("NextDeliveryAt = %v, %v; want alice's retry at %v", at, ok, retry)
	}
	aliceID := "A1/" + alice.ID + "/approval.requested"
	if err := db.RecordAttempt(ctx, aliceID, notify.Attempt{N: 2, At: retry, Error: "connection refused"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := db.NextDeliveryAt(ctx, "w1", t0); ok {
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

// claimFor is how long the suite's claims last.
const claimFor = time.Minute

// claim is worker by's claim at now, for claimFor.
func claim(by string, now time.Time) notify.Claim {
	return notify.Claim{By: by, Now: now, Until: now.Add(claimFor)}
}

// outboxOf is a store with receivers alice and bob and n pending approvals A1…An: 2n rows,
// each receiver's due in the order A1…An, all due at the returned time.
func outboxOf(t *testing.T, h Harness, n int) (store.Backend, time.Time) {
	t.Helper()
	ctx := context.Background()
	db, _, _ := notifyStore(t, h, alice, bob)
	for i := 1; i <= n; i++ {
		if err := db.CreateApproval(ctx, pendingApproval(fmt.Sprintf("A%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	return db, t0.Add(time.Hour)
}

// testOutboxRowsAreClaimedByOneWorkerAtATime: workers claiming at once (replicas sharing one
// outbox, SPEC §16) never get the same row; a receiver's rows all go to one worker, in the
// order they fell due, even when that worker's limit left some unclaimed; a worker can renew
// only its own claim, and no other worker claims while it is live.
func testOutboxRowsAreClaimedByOneWorkerAtATime(t *testing.T, h Harness) {
	ctx := context.Background()
	db, now := outboxOf(t, h, 4)

	const workers = 8
	got := make([][]notify.Delivery, workers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ds, err := db.ClaimDeliveries(ctx, claim(fmt.Sprintf("w%d", i), now), 100)
			if err != nil {
				t.Errorf("worker %d: ClaimDeliveries = %v", i, err)
			}
			got[i] = ds
		}()
	}
	close(start)
	wg.Wait()
	owner := map[string]string{}    // row → worker
	receiver := map[string]string{} // receiver → worker
	for i, ds := range got {
		w := fmt.Sprintf("w%d", i)
		last := map[string]int{}
		for _, d := range ds {
			if o, ok := owner[d.ID]; ok {
				t.Errorf("row %s claimed by %s and %s", d.ID, o, w)
			}
			owner[d.ID] = w
			if o, ok := receiver[d.ReceiverID]; ok && o != w {
				t.Errorf("receiver %s's rows claimed by %s and %s", d.ReceiverID, o, w)
			}
			receiver[d.ReceiverID] = w
			var k int
			fmt.Sscanf(d.Approval.ID, "A%d", &k)
			if k <= last[d.ReceiverID] {
				t.Errorf("%s got %s after A%d: want the order they fell due", w, d.ID, last[d.ReceiverID])
			}
			last[d.ReceiverID] = k
		}
	}
	if len(owner) != 8 {
		t.Fatalf("%d rows claimed in all, want every one of 8: %v", len(owner), owner)
	}

	// While the claims are live nobody else gets a row, and NextDeliveryAt says when they end.
	if ds, err := db.ClaimDeliveries(ctx, claim("late", now.Add(time.Second)), 100); err != nil || len(ds) != 0 {
		t.Errorf("a claim during live claims = %d rows, %v; want none", len(ds), err)
	}
	if at, ok, err := db.NextDeliveryAt(ctx, "late", now.Add(time.Second)); err != nil || !ok || !at.Equal(now.Add(claimFor)) {
		t.Errorf("NextDeliveryAt(late) = %v, %v, %v; want the claims' end %v", at, ok, err, now.Add(claimFor))
	}
	row := "A1/" + alice.ID + "/approval.requested"
	mine := owner[row]
	if ok, err := db.RenewClaim(ctx, row, claim("late", now.Add(time.Second))); err != nil || ok {
		t.Errorf("RenewClaim by another worker = %v, %v; want false", ok, err)
	}
	if ok, err := db.RenewClaim(ctx, row, claim(mine, now.Add(time.Second))); err != nil || !ok {
		t.Errorf("RenewClaim by its owner = %v, %v; want true", ok, err)
	}

	// A worker whose limit left some of a receiver's rows unclaimed keeps the receiver: another
	// gets none of its rows, only the other receiver's.
	if err := db.ReleaseClaims(ctx, owner[row]); err != nil {
		t.Fatal(err)
	}
	if b := owner["A1/"+bob.ID+"/approval.requested"]; b != mine {
		if err := db.ReleaseClaims(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	first, err := db.ClaimDeliveries(ctx, claim("x", now), 1)
	if err != nil || len(first) != 1 || first[0].ID != row {
		t.Fatalf("ClaimDeliveries(x, limit 1) = %+v, %v; want %s", first, err, row)
	}
	rest, err := db.ClaimDeliveries(ctx, claim("y", now), 100)
	if err != nil || len(rest) != 4 {
		t.Fatalf("ClaimDeliveries(y) = %d rows, %v; want bob's 4", len(rest), err)
	}
	for _, d := range rest {
		if d.ReceiverID != bob.ID {
			t.Errorf("y got %s while x holds alice's first row", d.ID)
		}
	}
	if ok, _ := db.RenewClaim(ctx, "A2/"+alice.ID+"/approval.requested", claim("y", now)); ok {
		t.Error("y renewed a claim it never had")
	}
	// For a third worker nothing is claimable before the claims end, not even alice's unclaimed
	// rows (x holds her receiver): a worker waiting for NextDeliveryAt does not spin meanwhile.
	if at, ok, err := db.NextDeliveryAt(ctx, "z", now); err != nil || !ok || !at.Equal(now.Add(claimFor)) {
		t.Errorf("NextDeliveryAt(z) = %v, %v, %v; want the claims' end %v", at, ok, err, now.Add(claimFor))
	}
}

// testAnExpiredClaimIsClaimableAgain: the rows of a worker that died mid-attempt (its claim not
// renewed, nothing recorded) go to another worker once the claim has ended, and the dead
// worker can no longer renew them; recording an attempt ends its claim; a released claim is
// claimable at once.
func testAnExpiredClaimIsClaimableAgain(t *testing.T, h Harness) {
	ctx := context.Background()
	db, now := outboxOf(t, h, 2)
	dead, err := db.ClaimDeliveries(ctx, claim("dead", now), 100)
	if err != nil || len(dead) != 4 {
		t.Fatalf("ClaimDeliveries(dead) = %d rows, %v; want 4", len(dead), err)
	}
	end := now.Add(claimFor)
	if ds, _ := db.ClaimDeliveries(ctx, claim("heir", end.Add(-time.Nanosecond)), 100); len(ds) != 0 {
		t.Fatalf("a nanosecond before the claim ends, heir got %d rows", len(ds))
	}
	heir, err := db.ClaimDeliveries(ctx, claim("heir", end), 100)
	if err != nil || len(heir) != 4 {
		t.Fatalf("ClaimDeliveries(heir) once the claim ended = %d rows, %v; want all 4", len(heir), err)
	}
	for _, d := range heir {
		if ok, err := db.RenewClaim(ctx, d.ID, claim("dead", end)); err != nil || ok {
			t.Errorf("the dead worker renewed %s: %v, %v", d.ID, ok, err)
		}
	}
	// A recorded attempt ends the claim: the row, due again at once, is anyone's.
	if err := db.RecordAttempt(ctx, heir[0].ID, notify.Attempt{N: 1, At: end, Status: 503}, &end); err != nil {
		t.Fatal(err)
	}
	if err := db.ReleaseClaims(ctx, "heir"); err != nil {
		t.Fatal(err)
	}
	third, err := db.ClaimDeliveries(ctx, claim("third", end), 100)
	if err != nil || len(third) != 4 || third[3].ID != heir[0].ID || third[3].Tries != 1 {
		t.Fatalf("ClaimDeliveries(third) after a record and a release = %d rows, %v; want all 4, the retried %s last with 1 try", len(third), err, heir[0].ID)
	}
	if ok, _ := db.RenewClaim(ctx, heir[1].ID, claim("heir", end)); ok {
		t.Error("heir renewed a claim it released")
	}
}

// testARemovedReceiversLinksDie: ForgetReceivers deletes the unused decision links of receivers
// not kept (their tokens find nothing), gives up their pending events with one attempt saying
// why and no sealed token left, and touches the kept receivers' links and events not at all;
// with nothing kept, every receiver's go.
func testARemovedReceiversLinksDie(t *testing.T, h Harness) {
	ctx := context.Background()
	db, links, _ := notifyStore(t, h, alice, bob)
	if err := db.CreateApproval(ctx, pendingApproval("A1")); err != nil {
		t.Fatal(err)
	}
	ds, _ := db.Deliveries(ctx, "s1")
	if len(ds) != 2 {
		t.Fatalf("deliveries %+v", ds)
	}
	aliceHash, bobHash := linkHash(t, links, ds[0]), linkHash(t, links, ds[1])
	n, err := db.ForgetReceivers(ctx, []string{alice.ID}, t0)
	if err != nil || n != 1 {
		t.Fatalf("ForgetReceivers(keep alice) = %d, %v; want bob's one link", n, err)
	}
	if _, err := db.DecisionLink(ctx, bobHash); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("bob's link after he was removed: %v, want not found", err)
	}
	if l, err := db.DecisionLink(ctx, aliceHash); err != nil || l.UsedAt != nil {
		t.Errorf("alice's link: %+v, %v; want it kept, unused", l, err)
	}
	ds, _ = db.Deliveries(ctx, "s1")
	for _, d := range ds {
		switch d.ReceiverID {
		case bob.ID:
			if d.NextAt != nil || !d.Failed || d.SealedToken != "" || len(d.Attempts) != 1 ||
				d.Attempts[0].Error != "receiver wh-b is no longer configured (-notify-webhook)" {
				t.Errorf("bob's event: %+v; want given up, sealed token gone", d)
			}
		case alice.ID:
			if d.NextAt == nil || d.Failed || d.SealedToken == "" || len(d.Attempts) != 0 {
				t.Errorf("alice's event: %+v; want it pending, untouched", d)
			}
		}
	}
	if n, err := db.ForgetReceivers(ctx, nil, t0); err != nil || n != 1 {
		t.Fatalf("ForgetReceivers(none) = %d, %v; want alice's link", n, err)
	}
	if _, err := db.DecisionLink(ctx, aliceHash); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("alice's link with no receivers: %v, want not found", err)
	}
}

// testACallIsAnnouncedOnlyToItsReviewers: a pending approval whose rule names reviewers gets a
// decision link and an approval.requested row only for the receivers whose recipient is one of
// them, matched as people ("аlice" with a Cyrillic а is alice); its resolution goes to them only.
func testACallIsAnnouncedOnlyToItsReviewers(t *testing.T, h Harness) {
	ctx := context.Background()
	lookAlike := notify.Receiver{ID: "wh-c", Name: "\u0430lice", URL: "http://c.example/h", Format: notify.FormatJSON}
	db, _, wakes := notifyStore(t, h, lookAlike, bob)
	a := pendingApproval("A1")
	a.Reviewers = []string{"alice"}
	if err := db.CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	a = pendingApproval("A2")
	a.Reviewers = []string{"carol"}
	if err := db.CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ResolveApproval(ctx, "A1", gate.Resolution{Status: gate.Approved, DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	ds, _ := db.Deliveries(ctx, "s1")
	var got []string
	for _, d := range ds {
		got = append(got, d.ID)
	}
	want := []string{"A1/wh-c/approval.requested", "A1/wh-c/approval.resolved"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deliveries %v, want %v", got, want)
	}
	if wakes.Load() != 2 {
		t.Errorf("woke the worker %d times, want 2 (A2 wrote nothing)", wakes.Load())
	}
}

// testALinksTokenIsNotDerivedFromTheWebhookSecret (issue 33): with the webhook secret every
// receiver holds and the stored rows, neither the derivation older versions used (HMAC of the
// link id under the secret) nor opening the row's sealed token with the secret gives a token
// that finds the link; the token the row was made with does.
func testALinksTokenIsNotDerivedFromTheWebhookSecret(t *testing.T, h Harness) {
	ctx := context.Background()
	db, links, _ := notifyStore(t, h, alice)
	if err := db.CreateApproval(ctx, pendingApproval("A1")); err != nil {
		t.Fatal(err)
	}
	ds, _ := db.Deliveries(ctx, "s1")
	if len(ds) != 1 || ds[0].SealedToken == "" {
		t.Fatalf("deliveries %+v", ds)
	}
	d := ds[0]
	secret, _ := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") // whsec_MfKQ…: a receiver's secret
	if _, err := db.DecisionLink(ctx, notify.HashToken(share.DeriveToken(secret, "countersign decision link v1", d.LinkID))); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("the token derived from the webhook secret finds a link: %v", err)
	}
	for _, k := range [][]byte{secret, []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")} {
		if lt, err := notify.NewLinkTokens(k); err == nil {
			if _, err := lt.TokenOf(d); err == nil {
				t.Errorf("the webhook secret opens the row's sealed token")
			}
		}
	}
	if _, err := db.DecisionLink(ctx, linkHash(t, links, d)); err != nil {
		t.Errorf("the link's own token: %v", err)
	}
}
