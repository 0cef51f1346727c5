package agent_test

import (
	"context"
	"sync"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/apperr"
)

// A message and a delete that race: either the run starts first and the delete is refused
// (409: Stop first), or the delete wins and the message finds no session; never a run in a
// deleted session, never an entry left behind (issue 16 item 7). Run with -race.
func TestSendAndDeleteRaceToOneOutcome(t *testing.T) {
	h := newHarness(t, `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop","delayMs":50}]}`, nil)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		sess, err := h.runner.CreateSession(ctx, "race", "faux:test", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var sendErr, delErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); sendErr = h.runner.Send(ctx, sess.ID, "go") }()
		go func() { defer wg.Done(); delErr = h.runner.DeleteSession(ctx, sess.ID) }()
		wg.Wait()
		switch {
		case delErr == nil:
			if apperr.CodeOf(sendErr) != apperr.NotFound {
				t.Fatalf("round %d: deleted, yet the message got %v", i, sendErr)
			}
			if h.runner.Busy(sess.ID) {
				t.Fatalf("round %d: a run in a deleted session", i)
			}
			if es, _ := h.db.Entries(ctx, sess.ID); len(es) != 0 {
				t.Fatalf("round %d: %d entries left in a deleted session", i, len(es))
			}
		case apperr.CodeOf(delErr) == apperr.Conflict:
			if sendErr != nil {
				t.Fatalf("round %d: the delete was refused as busy, yet the message got %v", i, sendErr)
			}
			if err := h.runner.Stop(ctx, sess.ID, "test"); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("round %d: delete %v, send %v", i, delErr, sendErr)
		}
	}
	// A session without a run deletes; its viewers hear session_deleted.
	sub := h.broker.Subscribe(h.sess.ID)
	defer h.broker.Unsubscribe(sub)
	if err := h.runner.DeleteSession(ctx, h.sess.ID); err != nil {
		t.Fatal(err)
	}
	if ev := <-sub.C; ev.Type != agent.SessionDeleted {
		t.Errorf("first event after the delete: %s, want session_deleted", ev.Type)
	}
}
