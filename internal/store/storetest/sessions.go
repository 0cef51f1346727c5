package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

func testSessions(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	sessions := []agent.Session{
		{ID: "s1", Title: "First", Model: "faux:demo", Workspace: "/tmp/w1", State: agent.Idle,
			CreatedAt: t0, Mode: gate.ModeDefault},
		{ID: "s2", Title: "Empty tool set", Model: "openai:gpt-4o", Workspace: "/tmp/w2", State: agent.Running,
			CreatedAt: t0.Add(time.Millisecond), ActiveTools: []string{}, Mode: gate.ModePlan},
		{ID: "s3", Title: "Some tools", Model: "faux:demo", Workspace: "/tmp/w3", State: agent.Idle,
			CreatedAt: t0.Add(time.Nanosecond), ActiveTools: []string{"write_file", "read_file"}, Mode: gate.ModeAcceptEdits},
	}
	for _, s := range sessions {
		mustCreateSession(t, db, s)
	}

	t.Run("round trip", func(t *testing.T) {
		for _, want := range sessions {
			got, err := db.Session(ctx, want.ID)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, want.ID, got, want)
		}
	})
	t.Run("newest first", func(t *testing.T) {
		got, err := db.Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "Sessions", got, []agent.Session{sessions[1], sessions[2], sessions[0]})
	})
	t.Run("in state", func(t *testing.T) {
		got, err := db.SessionsInState(ctx, agent.Running)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "SessionsInState", got, []agent.Session{sessions[1]})
	})
	t.Run("set state and tools", func(t *testing.T) {
		if err := db.SetSessionState(ctx, "s1", agent.Running); err != nil {
			t.Fatal(err)
		}
		if err := db.SetActiveTools(ctx, "s1", []string{"run_command"}); err != nil {
			t.Fatal(err)
		}
		if err := db.SetActiveTools(ctx, "s3", nil); err != nil {
			t.Fatal(err)
		}
		got, err := db.Session(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		want := sessions[0]
		want.State, want.ActiveTools = agent.Running, []string{"run_command"}
		assertEqual(t, "s1", got, want)
		got, err = db.Session(ctx, "s3")
		if err != nil {
			t.Fatal(err)
		}
		want = sessions[2]
		want.ActiveTools = nil
		assertEqual(t, "s3", got, want)
	})
	t.Run("zero CreatedAt and State are filled", func(t *testing.T) {
		mustCreateSession(t, db, agent.Session{ID: "s4", Title: "t", Model: "m", Workspace: "w"})
		got, err := db.Session(ctx, "s4")
		if err != nil {
			t.Fatal(err)
		}
		if got.CreatedAt.IsZero() || got.State != agent.Idle {
			t.Fatalf("got CreatedAt %v, State %q; want the clock's time and idle", got.CreatedAt, got.State)
		}
	})

	errTests := []struct {
		name string
		err  func() error
		code apperr.Code
		msg  string
	}{
		{"unknown session", func() error { _, err := db.Session(ctx, "nope"); return err },
			apperr.NotFound, "session nope not found"},
		{"duplicate id", func() error { return db.CreateSession(ctx, session("s1", t0)) },
			apperr.Conflict, "session s1 already exists"},
		{"empty id", func() error { return db.CreateSession(ctx, session("", t0)) },
			apperr.Invalid, "a session needs an id"},
		{"state of unknown session", func() error { return db.SetSessionState(ctx, "nope", agent.Idle) },
			apperr.NotFound, "session nope not found"},
		{"tools of unknown session", func() error { return db.SetActiveTools(ctx, "nope", nil) },
			apperr.NotFound, "session nope not found"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			assertErr(t, tt.err(), tt.code, tt.msg)
		})
	}
}

// testInstructionsAreStoredAndFixedByTheFirstEntry: a session's instructions round-trip, change
// while it has no entry, and once it has one a change is a conflict that changes nothing.
func testInstructionsAreStoredAndFixedByTheFirstEntry(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	s := session("s1", t0)
	s.Instructions = "Work in /work/s1.\nBe brief."
	mustCreateSession(t, db, s)
	got, err := db.Session(ctx, "s1")
	if err != nil || got.Instructions != s.Instructions {
		t.Fatalf("Session = %q, %v; want %q", got.Instructions, err, s.Instructions)
	}
	if err := db.SetSessionInstructions(ctx, "s1", "Answer like a pirate."); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.Session(ctx, "s1"); got.Instructions != "Answer like a pirate." {
		t.Fatalf("instructions %q after the change", got.Instructions)
	}
	if _, err := db.AppendEntry(ctx, "s1", agent.Message{ID: "m1", Role: agent.User, Content: []agent.Block{{Type: "text", Text: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	err = db.SetSessionInstructions(ctx, "s1", "Something else.")
	if apperr.CodeOf(err) != apperr.Conflict || apperr.MessageOf(err) != "The instructions can no longer change: the session has messages (they are fixed by the first one)." {
		t.Fatalf("after an entry: %v, want the conflict", err)
	}
	if got, _ := db.Session(ctx, "s1"); got.Instructions != "Answer like a pirate." {
		t.Errorf("a refused change left %q", got.Instructions)
	}
	if err := db.SetSessionInstructions(ctx, "nope", "x"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("unknown session: %v, want not found", err)
	}
}

// testInstructionsRaceTheFirstEntry: an instructions change and a first entry at the same time
// end in one of two ways only: the change comes first, or it is refused.
func testInstructionsRaceTheFirstEntry(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	for i := range 20 {
		id := "race" + string(rune('a'+i))
		mustCreateSession(t, db, session(id, t0))
		var wg sync.WaitGroup
		var setErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			setErr = db.SetSessionInstructions(ctx, id, "changed")
		}()
		go func() {
			defer wg.Done()
			if _, err := db.AppendEntry(ctx, id, agent.Message{ID: "m", Role: agent.User}); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		got, _ := db.Session(ctx, id)
		switch {
		case setErr == nil && got.Instructions == "changed":
		case apperr.CodeOf(setErr) == apperr.Conflict && got.Instructions == "":
		default:
			t.Fatalf("set: %v, instructions %q: neither first nor refused", setErr, got.Instructions)
		}
	}
}

// testUsageIsSummedPerSession: each assistant message's usage is stored with it and added to its
// session's sums (agent.Session.Usage) in the same commit; messages without usage add nothing.
func testUsageIsSummedPerSession(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0))
	msgs := []agent.Message{
		{ID: "u", Role: agent.User},
		{ID: "a1", Role: agent.Assistant, Usage: &agent.Usage{Input: 1000, Output: 20, CacheRead: 300}},
		{ID: "a2", Role: agent.Assistant},
		{ID: "a3", Role: agent.Assistant, Usage: &agent.Usage{Input: 5, Output: 7, CacheWrite: 11}},
	}
	for _, m := range msgs {
		if _, err := db.AppendEntry(ctx, "s1", m); err != nil {
			t.Fatal(err)
		}
	}
	s, err := db.Session(ctx, "s1")
	if want := (agent.Usage{Input: 1005, Output: 27, CacheRead: 300, CacheWrite: 11}); err != nil || s.Usage != want {
		t.Errorf("s1 usage %+v, %v; want %+v", s.Usage, err, want)
	}
	if other, _ := db.Session(ctx, "s2"); !other.Usage.IsZero() {
		t.Errorf("s2 usage %+v, want none", other.Usage)
	}
	es, _ := db.Entries(ctx, "s1")
	if es[1].Message.Usage == nil || *es[1].Message.Usage != *msgs[1].Usage || es[2].Message.Usage != nil {
		t.Errorf("stored usage %+v, %+v", es[1].Message.Usage, es[2].Message.Usage)
	}
	all, _ := db.Sessions(ctx)
	for _, x := range all {
		if x.ID == "s1" && x.Usage != s.Usage {
			t.Errorf("Sessions reads usage %+v, Session %+v", x.Usage, s.Usage)
		}
	}
}

// testSessionModeIsStored: SetSessionMode switches a session's mode; an unknown mode or session
// is refused.
func testSessionModeIsStored(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	if err := db.SetSessionMode(ctx, "s1", gate.ModePlan); err != nil {
		t.Fatal(err)
	}
	if s, _ := db.Session(ctx, "s1"); s.Mode != gate.ModePlan {
		t.Errorf("mode = %q", s.Mode)
	}
	assertErr(t, db.SetSessionMode(ctx, "s1", "yolo"), apperr.Invalid, `mode must be default, plan or accept-edits, not "yolo"`)
	assertErr(t, db.SetSessionMode(ctx, "s9", gate.ModePlan), apperr.NotFound, "session s9 not found")
}

// testARunningSessionWithAPendingApprovalReadsAsWaiting: the store says when a run is parked on
// a person (issue 16, item 3): a running session reads back as waiting, with its pending count,
// while one of its approvals is pending, and as running again once it is decided; an idle
// session stays idle; waiting is never stored.
func testARunningSessionWithAPendingApprovalReadsAsWaiting(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0.Add(1)))
	if err := db.SetSessionState(ctx, "s1", agent.Running); err != nil {
		t.Fatal(err)
	}
	pending := func(id, sessionID string) gate.Approval {
		return gate.Approval{ID: id, SessionID: sessionID, MessageID: "m", ToolCallID: "c-" + id, ToolName: "run_command",
			RequestedBy: "model", Status: gate.Pending, CreatedAt: t0}
	}
	check := func(step, id string, state agent.State, n int) {
		t.Helper()
		s, err := db.Session(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.State != state || s.PendingApprovals != n {
			t.Fatalf("%s: Session(%s) state %q with %d pending, want %q with %d", step, id, s.State, s.PendingApprovals, state, n)
		}
		all, err := db.Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range all {
			if x.ID == id && (x.State != state || x.PendingApprovals != n) {
				t.Fatalf("%s: Sessions lists %s as %q with %d pending, want %q with %d", step, id, x.State, x.PendingApprovals, state, n)
			}
		}
	}
	check("running, nothing asked", "s1", agent.Running, 0)
	mustCreateApprovals(t, db, pending("a1", "s1"), pending("a2", "s1"), pending("b1", "s2"))
	check("two prompts open", "s1", agent.Waiting, 2)
	check("an idle session", "s2", agent.Idle, 1)
	if _, err := db.ResolveApproval(ctx, "a1", gate.Resolution{Status: gate.Approved, DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	check("one decided", "s1", agent.Waiting, 1)
	if _, err := db.ResolveApproval(ctx, "a2", gate.Resolution{Status: gate.Denied, DecidedBy: "owner"}); err != nil {
		t.Fatal(err)
	}
	check("both decided", "s1", agent.Running, 0)

	running, err := db.SessionsInState(ctx, agent.Running)
	if err != nil || len(running) != 1 || running[0].ID != "s1" {
		t.Fatalf("SessionsInState(running) = %v, %v; want s1", running, err)
	}
	err = db.SetSessionState(ctx, "s1", agent.Waiting)
	assertErr(t, err, apperr.Invalid, `a session's stored state is idle or running, not "waiting"`)
}
