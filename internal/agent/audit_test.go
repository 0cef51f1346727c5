package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/gate"
)

// auditStore records what the audit log writes, merging a grouped record into the row with its
// id as the store does (counts add, the later LastAt wins); batches containing a record whose
// reason is "poison" fail as a whole, and that record fails alone too.
type auditStore struct {
	Store // only the two methods below are used
	mu    sync.Mutex
	rows  []gate.Approval
	byID  map[string]int
	// batches counts CreateApprovals calls.
	batches int
}

func (s *auditStore) CreateApprovals(_ context.Context, as []gate.Approval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	for _, a := range as {
		if a.Reason == "poison" {
			return errors.New("refused")
		}
	}
	for _, a := range as {
		if err := s.put(a); err != nil {
			return err
		}
	}
	return nil
}

func (s *auditStore) CreateApproval(_ context.Context, a gate.Approval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.Reason == "poison" {
		return errors.New("refused")
	}
	return s.put(a)
}

// put stores a; s.mu is held.
func (s *auditStore) put(a gate.Approval) error {
	if s.byID == nil {
		s.byID = map[string]int{}
	}
	i, ok := s.byID[a.ID]
	switch {
	case ok && !a.Grouped():
		return fmt.Errorf("approval %s already exists", a.ID)
	case ok:
		r := &s.rows[i]
		r.Count += a.Count
		if a.LastAt.After(*r.LastAt) {
			r.LastAt = a.LastAt
		}
		return nil
	}
	if a.LastAt != nil {
		last := *a.LastAt // the log may not touch a record once written, but the row is ours
		a.LastAt = &last
	}
	s.byID[a.ID] = len(s.rows)
	s.rows = append(s.rows, a)
	return nil
}

// snapshot is the rows written so far.
func (s *auditStore) snapshot() []gate.Approval {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]gate.Approval(nil), s.rows...)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// nestedAllowed is the record of a nested call of parent p1 in message m1 that the annotation
// default allowed.
func nestedAllowed(tool, call string) gate.Approval {
	return gate.Approval{SessionID: "s", MessageID: "m1", ToolCallID: call, ParentToolCallID: "p1", ToolName: tool,
		RequestedBy: "parent", Status: gate.Approved, DecidedBy: gate.ByPolicy, DecisionSource: gate.FromAnnotations,
		Mode: gate.ModeDefault}
}

func TestAuditLogWritesEveryRecordInOrderBeforeFlushReturns(t *testing.T) {
	st := &auditStore{}
	l := newAuditLog(st, quietLog())
	const n = 3*auditBatchMax + 7
	for i := range n {
		reason := ""
		if i == 5 {
			reason = "poison"
		}
		l.add(gate.Approval{SessionID: "s", ToolCallID: string(rune('a' + i%26)), Status: gate.Approved, Reason: reason})
	}
	l.flush()
	st.mu.Lock()
	defer st.mu.Unlock()
	// The poisoned record is the only one lost: its batch was retried record by record.
	if got, want := len(st.rows), n-1; got != want {
		t.Fatalf("%d records written, want %d", got, want)
	}
	if st.batches < 4 {
		t.Errorf("%d batches for %d records, want at least 4 (at most %d per batch)", st.batches, n, auditBatchMax)
	}
	ids := map[string]bool{}
	for i, a := range st.rows {
		if !a.Automatic || a.DecidedAt == nil || a.CreatedAt.IsZero() || len(a.ID) != 26 || ids[a.ID] {
			t.Fatalf("record %d = %+v: want automatic, stamped, with a fresh 26-character id", i, a)
		}
		ids[a.ID] = true
	}
	if !sort.SliceIsSorted(st.rows, func(i, j int) bool { return st.rows[i].CreatedAt.Before(st.rows[j].CreatedAt) }) {
		t.Error("records were not written in the order they were queued")
	}
}

func TestRecordIDsSortByTime(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 1, 2, 3, 4, time.UTC)
	prev := ""
	for i := range 1000 {
		id := recordID(t0.Add(time.Duration(i*i) * time.Nanosecond))
		if len(id) != 26 {
			t.Fatalf("id %q has %d characters, want 26", id, len(id))
		}
		if id <= prev {
			t.Fatalf("id %q does not sort after %q", id, prev)
		}
		prev = id
	}
}

// TestAuditLogGroupsAllowedNestedCalls (issue 19): 1,000 allowed nested calls of one parent and
// tool are one audit row that counts 1,000, with the first call's times and the last one's as
// LastAt, however the writer cut them into batches; every call's record carries that row's id.
func TestAuditLogGroupsAllowedNestedCalls(t *testing.T) {
	st := &auditStore{}
	l := newAuditLog(st, quietLog())
	const n = 1000
	var first, last gate.Approval
	for i := range n {
		got := l.add(nestedAllowed("leaf", fmt.Sprintf("p1/%d", i+1)))
		if i == 0 {
			first = got
		}
		last = got
		if got.ID != first.ID || got.Count != 0 || got.ToolCallID != fmt.Sprintf("p1/%d", i+1) || !got.Automatic || got.DecidedAt == nil {
			t.Fatalf("call %d's record %+v: want the group's id %s, its own call and times, count 0", i+1, got, first.ID)
		}
	}
	l.flush()
	rows := st.snapshot()
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1: %+v", len(rows), rows)
	}
	g := rows[0]
	if g.ID != first.ID || len(g.ID) != 26 || g.ID[0] != 'G' {
		t.Errorf("row id %q, want the group's 26-character id %q", g.ID, first.ID)
	}
	if g.Count != n || g.ToolCallID != "p1/1" || !g.CreatedAt.Equal(first.CreatedAt) || !g.DecidedAt.Equal(*first.DecidedAt) ||
		g.LastAt == nil || !g.LastAt.Equal(*last.DecidedAt) || g.LastAt.Before(g.CreatedAt) {
		t.Errorf("row %+v (last at %v): want count %d, call p1/1, created and decided %v, last at %v", g, g.LastAt, n, first.CreatedAt, *last.DecidedAt)
	}
}

// TestAuditLogGroupsByParentToolAndDecision: a group is one parent call (in one message), one
// tool, decided one way; blocked and denied calls keep a row each.
func TestAuditLogGroupsByParentToolAndDecision(t *testing.T) {
	byRule := func(a gate.Approval) gate.Approval {
		a.DecidedBy, a.DecisionSource, a.RuleID, a.RuleText, a.RuleSource = gate.ByRule, gate.FromRule, "r1", "leaf", gate.SourceAPI
		return a
	}
	blocked := func(a gate.Approval) gate.Approval {
		a.Status, a.DecidedBy, a.DecisionSource, a.Reason = gate.Denied, gate.ByHandler, gate.FromHandler, "blocked"
		return a
	}
	denied := func(a gate.Approval) gate.Approval {
		a = byRule(a)
		a.Status, a.Reason = gate.Denied, "rule leaf denies leaf"
		return a
	}
	inMessage := func(m string) func(gate.Approval) gate.Approval {
		return func(a gate.Approval) gate.Approval { a.MessageID = m; return a }
	}
	same := func(a gate.Approval) gate.Approval { return a }
	for _, tc := range []struct {
		name string
		// calls are made alternately, a of each, 3 times over: 6 calls.
		a, b gate.Approval
		rows map[string]int // "tool decidedBy message status" → calls the row counts (1 for an ordinary row)
	}{
		{"one tool", nestedAllowed("leaf", "x"), same(nestedAllowed("leaf", "y")),
			map[string]int{"leaf policy m1 approved": 6}},
		{"two tools", nestedAllowed("leaf", "x"), nestedAllowed("twig", "y"),
			map[string]int{"leaf policy m1 approved": 3, "twig policy m1 approved": 3}},
		{"a rule and the annotation default", nestedAllowed("leaf", "x"), byRule(nestedAllowed("leaf", "y")),
			map[string]int{"leaf policy m1 approved": 3, "leaf rule m1 approved": 3}},
		{"the same parent call id in two messages", nestedAllowed("leaf", "x"), inMessage("m2")(nestedAllowed("leaf", "y")),
			map[string]int{"leaf policy m1 approved": 3, "leaf policy m2 approved": 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &auditStore{}
			l := newAuditLog(st, quietLog())
			for range 3 {
				l.add(tc.a)
				l.add(tc.b)
			}
			l.flush()
			got := map[string]int{}
			for _, r := range st.snapshot() {
				got[fmt.Sprintf("%s %s %s %s", r.ToolName, r.DecidedBy, r.MessageID, r.Status)] = r.Count
			}
			if !reflect.DeepEqual(got, tc.rows) {
				t.Errorf("rows %v, want %v", got, tc.rows)
			}
		})
	}
	t.Run("blocked and denied calls keep a row each", func(t *testing.T) {
		st := &auditStore{}
		l := newAuditLog(st, quietLog())
		ids := map[string]bool{}
		for i := range 3 {
			for _, a := range []gate.Approval{blocked(nestedAllowed("leaf", fmt.Sprintf("b%d", i))), denied(nestedAllowed("leaf", fmt.Sprintf("d%d", i)))} {
				ids[l.add(a).ID] = true
			}
		}
		l.flush()
		rows := st.snapshot()
		if len(rows) != 6 || len(ids) != 6 {
			t.Fatalf("%d rows with %d ids, want 6 of each", len(rows), len(ids))
		}
		for _, r := range rows {
			if r.Grouped() || r.LastAt != nil || r.Status != gate.Denied {
				t.Errorf("row %+v: want an ordinary denied row", r)
			}
		}
	})
}

// TestAuditLogCountsEveryCallUnderConcurrency: calls made at once from many goroutines (a tool
// may run its nested calls in parallel) are each counted once, in their group's row, and flush
// returns only when all of them are written.
func TestAuditLogCountsEveryCallUnderConcurrency(t *testing.T) {
	st := &auditStore{}
	l := newAuditLog(st, quietLog())
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				a := nestedAllowed([]string{"leaf", "twig"}[i%2], fmt.Sprintf("p1/%d-%d", w, i))
				if i%50 == 0 {
					a.Status, a.DecidedBy, a.DecisionSource = gate.Denied, gate.ByHandler, gate.FromHandler
				}
				l.add(a)
			}
		})
	}
	wg.Wait()
	l.flush()
	calls := map[string]int{}
	for _, r := range st.snapshot() {
		calls[string(r.Status)+" "+r.ToolName] += r.Calls()
	}
	denied := workers * each / 50
	want := map[string]int{"approved leaf": workers*each/2 - denied, "approved twig": workers * each / 2, "denied leaf": denied}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("calls by row %v, want %v", calls, want)
	}
	if len(l.groups) != 0 {
		t.Errorf("%d groups still open after every batch was written", len(l.groups))
	}
}

// TestAuditLogWritesNothingForARunThatLostItsLease (issue 33, SPEC §16): the records of a run
// whose session another replica took over are not written when the writer gets to them; the
// records of a run that holds its lease, and of one whose lease cannot be checked (the
// database away), are.
func TestAuditLogWritesNothingForARunThatLostItsLease(t *testing.T) {
	st := &auditStore{}
	l := newAuditLog(st, quietLog())
	var checks sync.Map
	l.hold = func(_ context.Context, sessionID, lease string) (bool, error) {
		n, _ := checks.LoadOrStore(sessionID+"/"+lease, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		switch lease {
		case "lost":
			return false, nil
		case "unknown":
			return false, errors.New("database away")
		}
		return true, nil
	}
	for i := range 300 {
		for _, lease := range []string{"held", "lost", "unknown"} {
			a := gate.Approval{SessionID: "s-" + lease, ToolCallID: fmt.Sprintf("c%d", i), Status: gate.Denied, ParentToolCallID: "p"}
			l.addFor(a, lease)
		}
	}
	l.flush()
	st.mu.Lock()
	defer st.mu.Unlock()
	by := map[string]int{}
	for _, a := range st.rows {
		by[a.SessionID]++
	}
	if by["s-held"] != 300 || by["s-unknown"] != 300 || by["s-lost"] != 0 {
		t.Fatalf("records written by session: %v; want 300 of the held run's and of the unchecked one's, none of the run that lost its lease", by)
	}
	// Once per batch that held the run's records, not once per record (how many batches the
	// writer cut depends on how fast it keeps up: every batch it wrote at most).
	n, _ := checks.Load("s-held/held")
	if c := n.(*atomic.Int32).Load(); c > int32(st.batches) || c >= 300 {
		t.Errorf("the lease was checked %d times for 300 records in %d batches: want at most once per batch", c, st.batches)
	}
}

// TestAuditLogFindsGroupsThroughTheirParent (issue 35): calls counted through their parent's
// auditGroups — across batches the writer took, with more tools than a parent keeps groups for,
// and with two parents' groups of the same key (a parent call id repeated) — are each counted
// once, in one row per key, and the record each call gets names it.
func TestAuditLogFindsGroupsThroughTheirParent(t *testing.T) {
	st := &auditStore{}
	l := newAuditLog(st, quietLog())
	var p1, p2 auditGroups // two parents' groups; p2's calls have p1's key
	tools := maxParentGroups + 3
	ids := map[string]string{} // tool → the id its calls were given
	want := map[string]int{}
	for round := range 5 {
		for i := range 40 {
			for tt := range tools {
				name := fmt.Sprintf("tool%d", tt)
				groups := &p1
				if (i+tt)%3 == 0 {
					groups = &p2
				}
				a := nestedAllowed(name, fmt.Sprintf("p1/%d-%d-%d", round, i, tt))
				var at time.Time
				l.addTo(&a, &at, groups, "")
				if a.DecidedAt != &at || at.IsZero() || !a.Automatic || a.Count != 0 {
					t.Fatalf("record %+v: want stamped in place, decided at its own time", a)
				}
				if id, ok := ids[name]; ok && a.ID != id {
					t.Fatalf("a call of %s got record %s, an earlier one %s", name, a.ID, id)
				}
				ids[name] = a.ID
				want[name]++
			}
		}
		l.flush() // the writer takes every group's record: the next round starts new ones
	}
	if len(p1.list) != maxParentGroups || len(p2.list) != maxParentGroups {
		t.Errorf("parents keep %d and %d groups, want at most %d", len(p1.list), len(p2.list), maxParentGroups)
	}
	got := map[string]int{}
	for _, r := range st.snapshot() {
		if r.ID != ids[r.ToolName] {
			t.Errorf("row %s of %s, want %s", r.ID, r.ToolName, ids[r.ToolName])
		}
		got[r.ToolName] += r.Count
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("calls by tool %v, want %v", got, want)
	}
	if len(st.snapshot()) != tools {
		t.Errorf("%d rows, want one per tool (%d)", len(st.snapshot()), tools)
	}
	if len(l.groups) != 0 {
		t.Errorf("%d groups still open after every batch was written", len(l.groups))
	}
}
