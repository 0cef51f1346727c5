package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/notify"
)

// notifyDB is a store with session s1 and the given receivers, counting wake-ups.
func notifyDB(t testing.TB, receivers ...notify.Receiver) (*DB, notify.LinkTokens, *atomic.Int32) {
	t.Helper()
	db := MustOpenDB(t)
	key, err := notify.NewLinkTokens([]byte("a test server key of 32 bytes!!!"))
	if err != nil {
		t.Fatal(err)
	}
	var wakes atomic.Int32
	db.SetNotify(receivers, key, func() { wakes.Add(1) })
	if err := db.CreateSession(context.Background(), agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"}); err != nil {
		t.Fatal(err)
	}
	return db, key, &wakes
}

var alice = notify.Receiver{ID: "wh-a", Name: "alice", URL: "http://a.example/h", Format: notify.FormatJSON}
var bob = notify.Receiver{ID: "wh-b", Name: "bob", URL: "http://b.example/h", Format: notify.FormatJSON}

func pendingApproval(id string) gate.Approval {
	return gate.Approval{ID: id, SessionID: "s1", MessageID: "m1", ToolCallID: "c-" + id, ToolName: "run_command",
		Arguments: json.RawMessage(`{"command":"ls"}`), RequestedBy: "model", Status: gate.Pending}
}

func TestAPendingApprovalIsStoredWithItsEventsAndLinksOrNotAtAll(t *testing.T) {
	ctx := context.Background()
	db, key, wakes := notifyDB(t, alice, bob)
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
		tok, err := key.TokenOf(d)
		if err != nil {
			t.Fatal(err)
		}
		l, err := db.DecisionLink(ctx, notify.HashToken(tok))
		if err != nil || l.ApprovalID != "A1" || l.Recipient != r.Name || l.UsedAt != nil {
			t.Errorf("link of %s: %+v, %v", r.Name, l, err)
		}
	}
	if wakes.Load() != 1 {
		t.Errorf("woke the worker %d times, want once", wakes.Load())
	}
	// A conflicting approval (same id) stores nothing: no second set of rows.
	if err := db.CreateApproval(ctx, pendingApproval("A1")); apperr.CodeOf(err) != apperr.Conflict {
		t.Fatalf("second CreateApproval = %v, want conflict", err)
	}
	var links int
	db.read.QueryRow(`SELECT COUNT(*) FROM decision_links`).Scan(&links)
	if ds, _ := db.Deliveries(ctx, "s1"); len(ds) != 2 || links != 2 {
		t.Errorf("after a refused approval: %d deliveries, %d links; want 2 and 2", len(ds), links)
	}
	// An unknown session: nothing at all.
	bad := pendingApproval("A2")
	bad.SessionID = "nope"
	if err := db.CreateApproval(ctx, bad); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("CreateApproval(unknown session) = %v", err)
	}
	db.read.QueryRow(`SELECT COUNT(*) FROM decision_links`).Scan(&links)
	if links != 2 {
		t.Errorf("%d links after a refused approval, want 2", links)
	}
	// Resolving it queues one resolution event per receiver, in the decision's transaction.
	if _, err := db.ResolveApproval(ctx, "A1", gate.Resolution{Status: gate.Denied, DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	ds, _ = db.Deliveries(ctx, "s1")
	if len(ds) != 4 || ds[2].Event != notify.Resolved || ds[3].Event != notify.Resolved || ds[2].LinkID != "" || wakes.Load() != 2 {
		t.Errorf("after the decision: %+v (wakes %d)", ds, wakes.Load())
	}
}

func TestTheDatabaseNeverHoldsADecisionLinksToken(t *testing.T) {
	ctx := context.Background()
	db, key, _ := notifyDB(t, alice)
	if err := db.CreateApproval(ctx, pendingApproval("A1")); err != nil {
		t.Fatal(err)
	}
	ds, _ := db.Deliveries(ctx, "s1")
	tok, err := key.TokenOf(ds[0])
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, q := range []string{`SELECT COUNT(*) FROM decision_links WHERE instr(id || token_hash || approval_id || receiver_id || recipient, ?) > 0`,
		`SELECT COUNT(*) FROM notify_outbox WHERE instr(id || approval_id || receiver_id || link_id || link_token, ?) > 0`} {
		if err := db.read.QueryRow(q, tok).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s: %d rows hold the token (%v)", q, n, err)
		}
	}
}

// BenchmarkPendingApproval is a person's approval round trip as the store sees it: the pending
// approval written, then its decision (durable). With receivers, the approval's write also holds
// one decision link and one outbox row per receiver, and the decision one outbox row per
// receiver (SPEC §15); ns/op is one round trip.
func BenchmarkPendingApproval(b *testing.B) {
	for _, n := range []int{0, 1, 3} {
		b.Run(fmt.Sprintf("receivers=%d", n), func(b *testing.B) {
			rs := []notify.Receiver{alice, bob, {ID: "wh-c", Name: "carol"}}[:n]
			db, _, _ := notifyDB(b, rs...)
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				a := pendingApproval(fmt.Sprintf("A%d", i))
				if err := db.CreateApproval(ctx, a); err != nil {
					b.Fatal(err)
				}
				if _, err := db.ResolveApproval(ctx, a.ID, gate.Resolution{Status: gate.Approved, DecidedBy: "owner"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreatePendingApproval is the pending approval's write alone (not durable: see
// CreateApproval), the write the gate waits for before the prompt shows; with receivers it also
// holds their decision links and outbox rows.
func BenchmarkCreatePendingApproval(b *testing.B) {
	for _, n := range []int{0, 1, 3} {
		b.Run(fmt.Sprintf("receivers=%d", n), func(b *testing.B) {
			rs := []notify.Receiver{alice, bob, {ID: "wh-c", Name: "carol"}}[:n]
			db, _, _ := notifyDB(b, rs...)
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				if err := db.CreateApproval(ctx, pendingApproval(fmt.Sprintf("A%d", i))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTheRandomLinksMigrationDeletesTheUnusedLinksOfOlderVersions (issue 33): links made by a
// version whose tokens were derived from the webhook secret stop working: the migration deletes
// the unused ones (their tokens find nothing), keeps the used ones for the record, and the
// pending request rows carry no sealed token (they are sent without a decision link).
func TestTheRandomLinksMigrationDeletesTheUnusedLinksOfOlderVersions(t *testing.T) {
	ctx := context.Background()
	db, links, _ := notifyDB(t, alice, bob)
	if err := db.CreateApproval(ctx, pendingApproval("A1")); err != nil {
		t.Fatal(err)
	}
	ds, _ := db.Deliveries(ctx, "s1")
	hash := map[string]string{}
	for _, d := range ds {
		tok, err := links.TokenOf(d)
		if err != nil {
			t.Fatal(err)
		}
		hash[d.ReceiverID] = notify.HashToken(tok)
	}
	used, err := db.DecisionLink(ctx, hash[bob.ID])
	if err != nil {
		t.Fatal(err)
	}
	if err := db.UseDecisionLink(ctx, used.ID, time.Time{}); err != nil {
		t.Fatal(err)
	}
	// The database as the older version left it: no sealed tokens, 0025 not applied.
	for _, q := range []string{`ALTER TABLE notify_outbox DROP COLUMN link_token`,
		`DELETE FROM migrations WHERE name = '0025_random_decision_links.sql'`} {
		if _, err := db.write.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DecisionLink(ctx, hash[alice.ID]); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("alice's unused link after the migration: %v, want not found", err)
	}
	if l, err := db.DecisionLink(ctx, hash[bob.ID]); err != nil || l.UsedAt == nil {
		t.Errorf("bob's used link after the migration: %+v, %v; want it kept", l, err)
	}
	ds, _ = db.Deliveries(ctx, "s1")
	for _, d := range ds {
		if d.SealedToken != "" || d.NextAt == nil {
			t.Errorf("delivery %s after the migration: sealed %q, next %v; want pending without a token", d.ID, d.SealedToken, d.NextAt)
		}
	}
}
