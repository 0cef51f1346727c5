package web_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A store that hangs on a queued record (a database unreachable, a lock held: the write neither
// returns nor fails) fails calls closed as one that refuses it does: once the write has taken
// longer than the log's stall bound, the next call a rule allows is stored before it runs, so it
// does not run while the store hangs; it runs once the store takes writes again.
func TestGatewayFailsCallsClosedWhileTheStoreHangsOnAQueuedRecord(t *testing.T) {
	gs, hs := newHeldGateway(t, "allow up__read")
	cs := gs.client(t, "hang-test", nil)
	t.Cleanup(hs.let) // before the client and the servers close (cleanups run last first)
	read := func(name string) <-chan callAnswer {
		return callAsync(cs, &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": name}})
	}
	if res := wait(t, read("one")); res.IsError {
		t.Fatalf("first call: %q", textOf(res))
	}
	gs.runner.FlushAgentRecords()
	hs.held.Store(true)
	if res := wait(t, read("two")); res.IsError {
		t.Fatalf("second call: %q", textOf(res))
	}
	select {
	case <-hs.entering: // its record's write hangs
	case <-time.After(15 * time.Second):
		t.Fatal("the second call's record was never written")
	}
	time.Sleep(1500 * time.Millisecond) // longer than any write of a store that takes writes
	reads := gs.up.reads.Load()
	got := read("three")
	select {
	case a := <-got:
		t.Fatalf("a call answered while the store hangs on a record: %v %+v", a.err, a.res)
	case <-time.After(500 * time.Millisecond):
	}
	if n := gs.up.reads.Load() - reads; n != 0 {
		t.Fatalf("the upstream ran %d calls while the store hangs", n)
	}
	hs.let()
	if res := wait(t, got); res.IsError {
		t.Fatalf("third call once the store takes writes: %q", textOf(res))
	}
	gs.runner.FlushAgentRecords()
	sess, err := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if err != nil {
		t.Fatal(err)
	}
	if calls, _ := gs.db.OutsideCalls(context.Background(), sess.ID); len(calls) != 3 {
		t.Errorf("%d outside calls stored, want 3", len(calls))
	}
}

// A graceful shutdown's last wait (agent.Runner.Wait, after the HTTP server stopped) returns only
// once the records queued after their answers are written: none is lost to the store closing.
func TestRunnerWaitWritesTheQueuedRecordsFirst(t *testing.T) {
	gs, hs := newHeldGateway(t, "allow up__read")
	cs := gs.client(t, "shutdown-test", nil)
	t.Cleanup(hs.let)
	hs.held.Store(true)
	if res := wait(t, callAsync(cs, &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "last"}})); res.IsError {
		t.Fatalf("call: %q", textOf(res))
	}
	<-hs.entering
	waited := make(chan struct{})
	go func() { gs.runner.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while a queued record was still being written")
	case <-time.After(300 * time.Millisecond):
	}
	hs.let()
	select {
	case <-waited:
	case <-time.After(15 * time.Second):
		t.Fatal("Wait did not return once the record was written")
	}
	sess, err := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if err != nil {
		t.Fatal(err)
	}
	calls, _ := gs.db.OutsideCalls(context.Background(), sess.ID)
	if len(calls) != 1 || calls[0].Outcome == nil {
		t.Fatalf("after Wait: %d outside calls (want 1 with its outcome)", len(calls))
	}
}

// A write that waits for its session's queued records (here a deletion, which stores them first)
// stops waiting when its request ends while the store hangs, and leaves nothing half done: the
// session can be deleted once the store takes writes again.
func TestAWriteWaitingBehindAHeldRecordStopsWhenItsRequestEnds(t *testing.T) {
	gs, hs := newHeldGateway(t, "allow up__read")
	cs := gs.client(t, "gives-up", nil)
	t.Cleanup(hs.let)
	if res := wait(t, callAsync(cs, &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "first"}})); res.IsError {
		t.Fatalf("call: %q", textOf(res))
	}
	gs.runner.FlushAgentRecords()
	sess, err := gs.db.AgentSession(context.Background(), gs.connID, gs.sid(cs))
	if err != nil {
		t.Fatal(err)
	}
	hs.held.Store(true)
	if res := wait(t, callAsync(cs, &sdk.CallToolParams{Name: "up__read", Arguments: map[string]any{"name": "held"}})); res.IsError {
		t.Fatalf("call: %q", textOf(res))
	}
	<-hs.entering
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	deleted := make(chan error, 1)
	go func() { deleted <- gs.runner.DeleteSession(ctx, sess.ID) }()
	select {
	case err := <-deleted:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("DeleteSession while its record is held: %v, want the request's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DeleteSession still waits for the held record after its request ended")
	}
	hs.let()
	if err := gs.runner.DeleteSession(context.Background(), sess.ID); err != nil {
		t.Fatalf("DeleteSession once the store takes writes: %v", err)
	}
}
