package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/store/fixture"
)

func previewed() []gate.Approval { return fixture.Previewed() }

func testApprovals(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0))
	as := approvals()
	mustCreateApprovals(t, db, as...)

	for _, want := range as {
		t.Run("round trip "+want.ID, func(t *testing.T) {
			got, err := db.Approval(ctx, want.ID)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, want.ID, got, want)
		})
	}
	t.Run("annotations keep nil apart from false", func(t *testing.T) {
		got, err := db.Approval(ctx, "a5")
		if err != nil {
			t.Fatal(err)
		}
		if got.Annotations.ReadOnlyHint != nil || got.Annotations.DestructiveHint == nil || *got.Annotations.DestructiveHint {
			t.Fatalf("annotations = %s, want only destructiveHint false", dump(got.Annotations))
		}
	})

	lists := []struct {
		name      string
		sessionID string
		status    gate.Status
		want      []gate.Approval
	}{
		{"every status", "s1", "", []gate.Approval{as[0], as[1], as[2], as[4]}},
		{"pending", "s1", gate.Pending, []gate.Approval{as[0]}},
		{"approved", "s1", gate.Approved, []gate.Approval{as[1], as[2]}},
		{"other session", "s2", "", []gate.Approval{as[3]}},
		{"none", "s2", gate.Denied, nil},
		{"unknown session", "nope", "", nil},
	}
	for _, tt := range lists {
		t.Run("list "+tt.name, func(t *testing.T) {
			got, err := db.Approvals(ctx, tt.sessionID, tt.status)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, "Approvals", got, tt.want)
		})
	}
	t.Run("pending across sessions", func(t *testing.T) {
		got, err := db.PendingApprovals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "PendingApprovals", got, []gate.Approval{as[3], as[0]})
	})

	bad := as[0]
	bad.ID = "bad"
	bad.Status = "maybe"
	badJSON := as[0]
	badJSON.ID, badJSON.Arguments = "badjson", json.RawMessage(`{"command":`)
	orphan := as[0]
	orphan.ID, orphan.SessionID = "orphan", "nope"
	errTests := []struct {
		name string
		err  func() error
		code apperr.Code
		msg  string
	}{
		{"unknown approval", func() error { _, err := db.Approval(ctx, "nope"); return err },
			apperr.NotFound, "approval nope not found"},
		{"duplicate id", func() error { return db.CreateApproval(ctx, as[0]) },
			apperr.Conflict, "approval a1 already exists"},
		{"unknown session", func() error { return db.CreateApproval(ctx, orphan) },
			apperr.NotFound, "session nope not found"},
		{"unknown status", func() error { return db.CreateApproval(ctx, bad) },
			apperr.Invalid, `approval bad cannot be stored: invalid JSON arguments, status "maybe" or scope ""`},
		{"invalid JSON", func() error { return db.CreateApproval(ctx, badJSON) },
			apperr.Invalid, `approval badjson cannot be stored: invalid JSON arguments, status "pending" or scope ""`},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			assertErr(t, tt.err(), tt.code, tt.msg)
		})
	}
	t.Run("a batch keeps the deadline", func(t *testing.T) {
		// CreateApprovals (SQLite: one JSON parameter) as CreateApproval: the absolute deadline a
		// takeover re-arms with (SPEC §16, issue 33).
		want := as[0]
		want.ID = want.ID + "-batch"
		if err := db.CreateApprovals(ctx, []gate.Approval{want}); err != nil {
			t.Fatal(err)
		}
		got, err := db.Approval(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want.ExpiresAt == nil || got.ExpiresAt == nil || !got.ExpiresAt.Equal(*want.ExpiresAt) {
			t.Errorf("ExpiresAt = %v, want %v", got.ExpiresAt, want.ExpiresAt)
		}
	})
}

func testResolveApproval(t *testing.T, h Harness) {
	ctx := context.Background()
	at := t0.Add(time.Minute)
	tests := []struct {
		name string
		r    gate.Resolution
		want func(a gate.Approval) gate.Approval
	}{
		{"approve once", gate.Resolution{Status: gate.Approved, DecidedBy: "ana", Scope: gate.Once, At: at},
			func(a gate.Approval) gate.Approval {
				a.Status, a.DecidedBy, a.Scope, a.DecidedAt = gate.Approved, "ana", gate.Once, &at
				return a
			}},
		{"approve edited for the session", gate.Resolution{Status: gate.Approved, DecidedBy: "ana", Scope: gate.Session,
			EditedArguments: json.RawMessage(`{"command": "rm -rf tmp/cache"}`), At: at},
			func(a gate.Approval) gate.Approval {
				a.Status, a.DecidedBy, a.Scope, a.DecidedAt = gate.Approved, "ana", gate.Session, &at
				a.EditedArguments = json.RawMessage(`{"command": "rm -rf tmp/cache"}`)
				return a
			}},
		{"deny with reason", gate.Resolution{Status: gate.Denied, DecidedBy: "bob", Reason: "too broad", At: at},
			func(a gate.Approval) gate.Approval {
				a.Status, a.DecidedBy, a.Reason, a.DecidedAt = gate.Denied, "bob", "too broad", &at
				return a
			}},
		{"time out", gate.Resolution{Status: gate.TimedOut, DecidedBy: "timeout", Automatic: true,
			Reason: "no decision within 15m0s", At: at},
			func(a gate.Approval) gate.Approval {
				a.Status, a.DecidedBy, a.Automatic, a.Reason, a.DecidedAt = gate.TimedOut, "timeout", true,
					"no decision within 15m0s", &at
				return a
			}},
		{"zero At uses the clock", gate.Resolution{Status: gate.Cancelled, DecidedBy: "system", Automatic: true,
			Reason: "Interrupted by server restart"},
			func(a gate.Approval) gate.Approval {
				decided := t0.Add(time.Second) // the clock's first reading in a fresh database
				a.Status, a.DecidedBy, a.Automatic, a.Reason, a.DecidedAt = gate.Cancelled, "system", true,
					"Interrupted by server restart", &decided
				return a
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := h.open(t)
			mustCreateSession(t, db, session("s1", t0))
			pending := approvals()[0]
			mustCreateApprovals(t, db, pending)
			want := tt.want(pending)

			got, err := db.ResolveApproval(ctx, pending.ID, tt.r)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, "ResolveApproval", got, want)
			got, err = db.Approval(ctx, pending.ID)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, "Approval after", got, want)

			// A second decision loses and changes nothing.
			_, err = db.ResolveApproval(ctx, pending.ID, gate.Resolution{Status: gate.Denied, DecidedBy: "eve", At: at})
			assertErr(t, err, apperr.Conflict, "approval already resolved")
			got, err = db.Approval(ctx, pending.ID)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, "Approval after the losing decision", got, want)
		})
	}

	errTests := []struct {
		name string
		id   string
		r    gate.Resolution
		code apperr.Code
		msg  string
	}{
		{"unknown id", "nope", gate.Resolution{Status: gate.Approved}, apperr.NotFound, "approval nope not found"},
		{"already decided", "a2", gate.Resolution{Status: gate.Approved}, apperr.Conflict, "approval already resolved"},
		{"pending is no decision", "a1", gate.Resolution{Status: gate.Pending}, apperr.Invalid,
			`a decision must resolve the approval, not set it "pending"`},
		{"unknown scope", "a1", gate.Resolution{Status: gate.Approved, Scope: "forever"}, apperr.Invalid,
			`decision cannot be stored: invalid JSON edited arguments or scope "forever"`},
	}
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateApprovals(t, db, approvals()[:2]...)
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := db.ResolveApproval(ctx, tt.id, tt.r)
			assertErr(t, err, tt.code, tt.msg)
		})
	}
	// The refused decisions left a1 pending.
	got, err := db.Approval(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "a1", got, approvals()[0])
}

// testResolveApprovalRace has two deciders race for each of many pending approvals: exactly one
// wins, the other gets apperr.Conflict, and the store holds the winner's decision.
func testResolveApprovalRace(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	for i := range 100 {
		a := approvals()[0]
		a.ID = fmt.Sprintf("race%03d", i)
		mustCreateApprovals(t, db, a)

		deciders := []gate.Resolution{
			{Status: gate.Approved, DecidedBy: "ana", Scope: gate.Once, At: t0},
			{Status: gate.Denied, DecidedBy: "bob", Reason: "no", At: t0},
		}
		results := make([]gate.Approval, len(deciders))
		errs := make([]error, len(deciders))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j, r := range deciders {
			wg.Go(func() {
				<-start
				results[j], errs[j] = db.ResolveApproval(ctx, a.ID, r)
			})
		}
		close(start)
		wg.Wait()

		var winner gate.Approval
		wins := 0
		for j, err := range errs {
			switch apperr.CodeOf(err) {
			case "":
				wins++
				winner = results[j]
			case apperr.Conflict:
			default:
				t.Fatalf("%s: decider %d: %v", a.ID, j, err)
			}
		}
		if wins != 1 {
			t.Fatalf("%s: %d decisions won, want exactly 1 (errors %v)", a.ID, wins, errs)
		}
		got, err := db.Approval(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, a.ID, got, winner)
	}
}

// testApprovalPreviewRoundTrips: the preview stored with an approval comes back as stored — one
// at a time, in a batch (the JSON-parameter insert), in the pending list and after its decision,
// which does not change it (the approval says which content it was decided against).
func testApprovalPreviewRoundTrips(t *testing.T, h Harness) {
	ctx := context.Background()
	for _, batch := range []bool{false, true} {
		db := h.open(t)
		mustCreateSession(t, db, session("s1", t0))
		want := previewed()
		if batch {
			if err := db.CreateApprovals(ctx, want); err != nil {
				t.Fatal(err)
			}
		} else {
			mustCreateApprovals(t, db, want...)
		}
		for _, w := range want {
			got, err := db.Approval(ctx, w.ID)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, "approval "+w.ID, got, w)
		}
		pending, err := db.PendingApprovals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "pending approvals", pending, want)
		decided, err := db.ResolveApproval(ctx, "p1", gate.Resolution{Status: gate.Approved, DecidedBy: "owner",
			EditedArguments: json.RawMessage(`{"path":"notes.txt","content":"edited\n"}`)})
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "the decided approval's preview", decided.Preview, want[0].Preview)
	}
}
