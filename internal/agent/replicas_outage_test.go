package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/store/sqlite"
	"countersign/internal/tool"
)

// awayStore fails the run's writes while its member is cut off from the database, as a store
// whose database is away does; loseAnswer makes the next AppendEntry commit and still fail (the
// connection broke after COMMIT, before its answer).
type awayStore struct {
	agent.Store
	m          *member
	loseAnswer atomic.Bool
	// awayAtIdle cuts the member off when the run sets its session idle, for awayFor.
	awayAtIdle atomic.Bool
	awayFor    time.Duration
}

func (s *awayStore) AppendEntry(ctx context.Context, id string, m agent.Message, records ...gate.Approval) (agent.Entry, error) {
	if s.m.away.Load() {
		return agent.Entry{}, errAway
	}
	e, err := s.Store.AppendEntry(ctx, id, m, records...)
	if err == nil && s.loseAnswer.Swap(false) {
		return agent.Entry{}, errors.New("unexpected EOF")
	}
	return e, err
}

func (s *awayStore) SetSessionState(ctx context.Context, id string, st agent.State) error {
	if st == agent.Idle && s.awayAtIdle.Swap(false) {
		s.m.away.Store(true)
		time.AfterFunc(s.awayFor, func() { s.m.away.Store(false) })
	}
	if s.m.away.Load() {
		return errAway
	}
	return s.Store.SetSessionState(ctx, id, st)
}

// TestARunWaitsForADatabaseThatIsAwayAndWritesOnce (issue 33, SPEC §16 "Trust between
// replicas": a replica cut off from the database is not dead): a call that returns while the
// database is away keeps its result until the database answers, then the replica renews its
// lease first and stores the result, once — also when the write's commit went through and only
// its answer was lost; the run goes on. When the database goes away as the run ends, the session
// is still set idle and the lease given back once it answers.
func TestARunWaitsForADatabaseThatIsAwayAndWritesOnce(t *testing.T) {
	var runs atomic.Int32
	release := make(chan struct{})
	shell := riskyTool("shell", &runs)
	inner := shell.Execute
	shell.Execute = func(ctx context.Context, args json.RawMessage, up func(tool.Update), tc tool.Context) (tool.Result, error) {
		<-release
		return inner(ctx, args, up, tc)
	}
	h := &hub{leases: map[string]hubLease{}, started: map[string]bool{}}
	a := &member{h: h, name: "A"}
	h.members = []*member{a}
	var store *awayStore
	x := newHarnessOver(t, oneShellScript, agent.Config{Replicas: a}, func(db *sqlite.DB) agent.Store {
		store = &awayStore{Store: db, m: a, awayFor: 300 * time.Millisecond}
		return store
	}, shell)
	a.runner, a.store = x.runner, x.db
	ctx := context.Background()
	if err := x.runner.Send(ctx, x.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := x.await(agent.ApprovalRequested)
	if _, err := x.runner.Gate().Decide(ctx, x.sess.ID, asked.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	x.await(agent.ToolExecutionStart)
	a.away.Store(true)
	store.loseAnswer.Store(true) // and the first write after it commits but loses its answer
	store.awayAtIdle.Store(true) // and the database goes away again as the run ends
	close(release)
	time.Sleep(300 * time.Millisecond) // the call has returned; its result waits
	if n := len(x.toolResults()); n != 0 {
		t.Fatalf("%d tool results stored while the database is away", n)
	}
	a.away.Store(false)
	if end := x.await(agent.AgentEnd); end.Error != "" {
		t.Fatalf("the run ended with %q", end.Error)
	}
	if n := len(x.toolResults()); n != 1 {
		t.Fatalf("%d tool results, want 1", n)
	}
	s, err := x.db.Session(ctx, x.sess.ID)
	if err != nil || s.State != agent.Idle {
		t.Fatalf("the session after the run = %v, %v; want idle", s.State, err)
	}
	h.mu.Lock()
	_, leased := h.leases[x.sess.ID]
	h.mu.Unlock()
	if leased {
		t.Fatal("the run's lease was not given back")
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
}
