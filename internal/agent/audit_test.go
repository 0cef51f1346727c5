package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"countersign/internal/gate"
)

// auditStore records what the audit log writes; batches containing a record whose reason is
// "poison" fail as a whole, and that record fails alone too.
type auditStore struct {
	Store // only the two methods below are used
	mu    sync.Mutex
	rows  []gate.Approval
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
	s.rows = append(s.rows, as...)
	return nil
}

func (s *auditStore) CreateApproval(_ context.Context, a gate.Approval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.Reason == "poison" {
		return errors.New("refused")
	}
	s.rows = append(s.rows, a)
	return nil
}

func TestAuditLogWritesEveryRecordInOrderBeforeFlushReturns(t *testing.T) {
	st := &auditStore{}
	l := newAuditLog(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
