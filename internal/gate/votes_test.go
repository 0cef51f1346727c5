package gate_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/store/fixture"
	"countersign/internal/store/sqlite"
)

// voteKit is a gate over a real store (the counting is atomic in SQL, so it is tested there),
// with every approval it showed.
type voteKit struct {
	g  *gate.Gate
	db *sqlite.DB
	mu sync.Mutex
	// shown are the approvals notify saw, in order.
	shown []gate.Approval
}

func newVoteKit(t *testing.T) *voteKit {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sess := fixture.Session("s1", time.Now()) // the store's fixture: the gate's tests need no agent types
	sess.Workspace = "/w"
	if err := db.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	k := &voteKit{db: db}
	k.g = gate.New(db, time.Hour, func(a gate.Approval) {
		k.mu.Lock()
		k.shown = append(k.shown, a)
		k.mu.Unlock()
	})
	return k
}

// open opens an approval that needs approvers and names reviewers.
func (k *voteKit) open(t *testing.T, approvers int, reviewers ...string) *gate.Ticket {
	t.Helper()
	tk, err := k.g.Open(context.Background(), gate.Approval{SessionID: "s1", ToolCallID: "c1", ToolName: "run_command",
		RequestedBy: "model", Approvers: approvers, Reviewers: reviewers})
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// named is a decider whose name is fixed: a link made for them (or the owner for "owner").
func named(name string) gate.Decider {
	if name == gate.ByOwner {
		return gate.Owner()
	}
	return gate.Decider{Name: name, Via: &gate.LinkRef{LinkID: "l-" + name, Label: name + "'s link"}}
}

func decide(k *voteKit, id string, d gate.Decider, st gate.Status, reason string) (gate.Approval, error) {
	return k.g.Decide(context.Background(), id, gate.Resolution{Status: st, DecidedBy: d.Name, DecidedVia: d.Via,
		Reason: reason, Scope: gate.Once, Source: gate.FromPerson, Decider: &d})
}

type step struct {
	by     gate.Decider
	status gate.Status
	reason string
	// want: the error code ("" none), then the approval's status and votes line after it.
	code      apperr.Code
	msg       string // a part of the error's message
	wantState gate.Status
	wantVotes string
}

func TestSeveralApprovers(t *testing.T) {
	chose := gate.Decider{Name: "alice", Via: &gate.LinkRef{LinkID: "l-x"}, ChoseName: true}
	tests := []struct {
		name      string
		approvers int
		reviewers []string
		steps     []step
		// after the last step: who decided and why
		wantBy, wantReason string
	}{
		{"two approvers, two reviewers: alice then bob approve", 2, []string{"alice", "bob"}, []step{
			{by: named("alice"), status: gate.Approved, wantState: gate.Pending, wantVotes: "1 of 2 approvals — approved by alice"},
			{by: named("bob"), status: gate.Approved, wantState: gate.Approved, wantVotes: "2 of 2 approvals — approved by alice, bob"},
		}, "bob", ""},
		{"the owner not listed is refused, and nothing is counted", 2, []string{"alice", "bob"}, []step{
			{by: gate.Owner(), status: gate.Approved, code: apperr.Forbidden, msg: "owner is not a listed reviewer", wantState: gate.Pending, wantVotes: "0 of 2 approvals"},
		}, "", ""},
		{"a name chosen on an unnamed link is not a listed reviewer", 2, []string{"alice", "bob"}, []step{
			{by: chose, status: gate.Approved, code: apperr.Forbidden, msg: "a name chosen on a shared link does not count", wantState: gate.Pending, wantVotes: "0 of 2 approvals"},
		}, "", ""},
		{"a chosen name never counts toward several approvers, even with no reviewers", 2, nil, []step{
			{by: chose, status: gate.Approved, code: apperr.Forbidden, wantState: gate.Pending, wantVotes: "0 of 2 approvals"},
		}, "", ""},
		{"the owner listed counts as one person", 2, []string{"owner", "alice"}, []step{
			{by: gate.Owner(), status: gate.Approved, wantState: gate.Pending, wantVotes: "1 of 2 approvals — approved by owner"},
			{by: named("alice"), status: gate.Approved, wantState: gate.Approved},
		}, "alice", ""},
		{"the same person approving again counts once", 2, []string{"alice", "bob"}, []step{
			{by: named("alice"), status: gate.Approved, wantState: gate.Pending, wantVotes: "1 of 2 approvals — approved by alice"},
			{by: named("alice"), status: gate.Approved, wantState: gate.Pending, wantVotes: "1 of 2 approvals — approved by alice"},
		}, "", ""},
		{"look-alike names are one person: alice and аlice (Cyrillic а) do not make two approvals", 2, nil, []step{
			{by: named("alice"), status: gate.Approved, wantState: gate.Pending, wantVotes: "1 of 2 approvals — approved by alice"},
			{by: named("\u0430lice"), status: gate.Approved, wantState: gate.Pending, wantVotes: "1 of 2 approvals — approved by alice"},
			{by: named("ALICE"), status: gate.Denied, code: apperr.Conflict, msg: "one vote per person", wantState: gate.Pending},
			{by: named("bob"), status: gate.Approved, wantState: gate.Approved},
		}, "bob", ""},
		{"a listed reviewer is matched as a person: a link for аlice is reviewer alice", 0, []string{"alice"}, []step{
			{by: named("\u0430lice"), status: gate.Approved, wantState: gate.Approved},
		}, "\u0430lice", ""},
		{"a deny after one approve denies it, with the denier's reason", 2, []string{"alice", "bob"}, []step{
			{by: named("alice"), status: gate.Approved, wantState: gate.Pending},
			{by: named("bob"), status: gate.Denied, reason: "not on a Friday", wantState: gate.Denied, wantVotes: "1 of 2 approvals — approved by alice — denied by bob"},
		}, "bob", "not on a Friday"},
		{"one's own approve then deny is one vote too many", 2, []string{"alice", "bob"}, []step{
			{by: named("alice"), status: gate.Approved, wantState: gate.Pending},
			{by: named("alice"), status: gate.Denied, code: apperr.Conflict, msg: "one vote per person", wantState: gate.Pending, wantVotes: "1 of 2 approvals — approved by alice"},
		}, "", ""},
		{"three approvers need three people", 3, nil, []step{
			{by: named("alice"), status: gate.Approved, wantState: gate.Pending},
			{by: named("bob"), status: gate.Approved, wantState: gate.Pending, wantVotes: "2 of 3 approvals — approved by alice, bob"},
			{by: named("carol"), status: gate.Approved, wantState: gate.Approved, wantVotes: "3 of 3 approvals — approved by alice, bob, carol"},
		}, "carol", ""},
		{"reviewers alone: one listed person decides", 0, []string{"alice"}, []step{
			{by: named("bob"), status: gate.Approved, code: apperr.Forbidden, msg: "bob is not a listed reviewer", wantState: gate.Pending},
			{by: named("alice"), status: gate.Approved, wantState: gate.Approved},
		}, "alice", ""},
		{"a vote after the end is already resolved", 2, nil, []step{
			{by: named("alice"), status: gate.Denied, reason: "no", wantState: gate.Denied},
			{by: named("bob"), status: gate.Approved, code: apperr.Conflict, msg: "already resolved", wantState: gate.Denied},
		}, "alice", "no"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newVoteKit(t)
			tk := k.open(t, tc.approvers, tc.reviewers...)
			id := tk.Approval.ID
			for i, s := range tc.steps {
				_, err := decide(k, id, s.by, s.status, s.reason)
				if got := apperr.CodeOf(err); (err == nil) != (s.code == "") || (err != nil && got != s.code) {
					t.Fatalf("step %d: error %v (code %q), want code %q", i, err, got, s.code)
				}
				if s.msg != "" && (err == nil || !strings.Contains(apperr.MessageOf(err), s.msg)) {
					t.Fatalf("step %d: error %v, want one saying %q", i, err, s.msg)
				}
				a, err := k.db.Approval(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if a.Status != s.wantState {
					t.Fatalf("step %d: status %s, want %s", i, a.Status, s.wantState)
				}
				if s.wantVotes != "" && a.VotesText() != s.wantVotes {
					t.Fatalf("step %d: votes %q, want %q", i, a.VotesText(), s.wantVotes)
				}
			}
			a, _ := k.db.Approval(context.Background(), id)
			if a.Status != gate.Pending {
				if a.DecidedBy != tc.wantBy || a.Reason != tc.wantReason {
					t.Fatalf("decided by %q (%q), want %q (%q)", a.DecidedBy, a.Reason, tc.wantBy, tc.wantReason)
				}
				// The waiting call wakes with the decision.
				if got := tk.Wait(context.Background()); got.Status != a.Status {
					t.Fatalf("the call woke with %s, want %s", got.Status, a.Status)
				}
			}
		})
	}
}

// TestAVoteThatCountsIsShownAndTheCallKeepsWaiting: a counted vote (more needed) is shown with
// the whole approval, votes included (approval_updated), and does not wake the call; an approve
// counted before shows nothing again.
func TestAVoteThatCountsIsShownAndTheCallKeepsWaiting(t *testing.T) {
	k := newVoteKit(t)
	tk := k.open(t, 2, "alice", "bob")
	for range 2 {
		a, err := decide(k, tk.Approval.ID, named("alice"), gate.Approved, "")
		if err != nil || a.Status != gate.Pending || len(a.Votes) != 1 {
			t.Fatalf("alice's vote: %+v %v", a, err)
		}
	}
	k.mu.Lock()
	shown := k.shown
	k.mu.Unlock()
	if len(shown) != 2 || shown[1].Status != gate.Pending || len(shown[1].Votes) != 1 || shown[1].Votes[0].By != "alice" ||
		shown[1].Votes[0].Via == nil || shown[1].Votes[0].Via.LinkID != "l-alice" {
		t.Fatalf("shown %+v, want the opening, then once the approval with alice's vote", shown)
	}
	if k.g.Waiting(tk.Approval.ID) != true {
		t.Fatal("the call must keep waiting")
	}
}

// TestSeveralApproversRefuseEditsAndSessionScope: each person answers the call as asked.
func TestSeveralApproversRefuseEditsAndSessionScope(t *testing.T) {
	k := newVoteKit(t)
	tk := k.open(t, 2)
	d := named("alice")
	for name, r := range map[string]gate.Resolution{
		"approve for session": {Status: gate.Approved, Scope: gate.Session},
		"edited arguments":    {Status: gate.Approved, Scope: gate.Once, EditedArguments: []byte(`{"command":"ls"}`)},
	} {
		t.Run(name, func(t *testing.T) {
			r.DecidedBy, r.Decider, r.Source = d.Name, &d, gate.FromPerson
			if _, err := k.g.Decide(context.Background(), tk.Approval.ID, r); apperr.CodeOf(err) != apperr.Invalid {
				t.Fatalf("err %v, want invalid", err)
			}
		})
	}
}

// TestConcurrentVotesAreAllCountedAndOneResolves: N people approving at once (-race) — every
// vote is stored, exactly one decision resolves the approval, and it resolves once the Nth
// distinct person approved; a deny racing approvals either wins or comes too late, never both.
func TestConcurrentVotesAreAllCountedAndOneResolves(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(strings.Repeat("x", n), func(t *testing.T) {
			k := newVoteKit(t)
			tk := k.open(t, n)
			names := []string{"alice", "bob", "carol", "dan", "eve"}[:n]
			var wg sync.WaitGroup
			results := make([]gate.Approval, n)
			errs := make([]error, n)
			start := make(chan struct{})
			for i, name := range names {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i], errs[i] = decide(k, tk.Approval.ID, named(name), gate.Approved, "")
				}()
			}
			close(start)
			wg.Wait()
			resolved := 0
			for i := range names {
				if errs[i] != nil {
					t.Fatalf("%s: %v", names[i], errs[i])
				}
				if results[i].Status == gate.Approved {
					resolved++
				}
			}
			if resolved != 1 {
				t.Fatalf("%d decisions resolved the approval, want exactly 1", resolved)
			}
			a, _ := k.db.Approval(context.Background(), tk.Approval.ID)
			if a.Status != gate.Approved || a.Approvals() != n {
				t.Fatalf("stored %s with %d approvals, want approved with %d", a.Status, a.Approvals(), n)
			}
			if got := tk.Wait(context.Background()); got.Status != gate.Approved {
				t.Fatalf("the call woke with %s", got.Status)
			}
		})
	}
	t.Run("a deny racing the last approve", func(t *testing.T) {
		k := newVoteKit(t)
		tk := k.open(t, 2)
		if _, err := decide(k, tk.Approval.ID, named("alice"), gate.Approved, ""); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var bobErr, carolErr error
		wg.Add(2)
		go func() { defer wg.Done(); _, bobErr = decide(k, tk.Approval.ID, named("bob"), gate.Approved, "") }()
		go func() { defer wg.Done(); _, carolErr = decide(k, tk.Approval.ID, named("carol"), gate.Denied, "no") }()
		wg.Wait()
		if (bobErr == nil) == (carolErr == nil) {
			t.Fatalf("bob %v, carol %v: exactly one must win", bobErr, carolErr)
		}
		a, _ := k.db.Approval(context.Background(), tk.Approval.ID)
		if (bobErr == nil && a.Status != gate.Approved) || (carolErr == nil && a.Status != gate.Denied) {
			t.Fatalf("stored %s, bob %v, carol %v", a.Status, bobErr, carolErr)
		}
	})
}
