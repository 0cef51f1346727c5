package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// testAgentSessionsAndOutsideCalls: an agent session (SPEC §18) keeps its provenance, is found by
// its connection and agent session id (one per pair), is listed with the others; its outside
// calls are found by match key, tool_use_id and approval, marked stopped waiting (and cleared),
// given their outcome, and go with the session.
func testAgentSessionsAndOutsideCalls(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	info := agent.AgentInfo{Kind: "claude-code", ConnectionID: "conn1", SessionID: "agent-s1", PermissionMode: "default",
		TranscriptPath: "/home/dev/t.jsonl", PromptID: "p1", State: agent.AgentWorking}
	if err := db.CreateSession(ctx, agent.Session{ID: "own", Title: "own", Model: "faux:demo", Workspace: "/w"}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateSession(ctx, agent.Session{ID: "as1", Title: "Claude Code · proj", Model: "claude-code", Workspace: "/home/dev/proj", Agent: &info}); err != nil {
		t.Fatal(err)
	}
	// One per connection and agent session id.
	dup := info
	err := db.CreateSession(ctx, agent.Session{ID: "as2", Title: "t", Model: "m", Workspace: "/x", Agent: &dup})
	assertEqual(t, "a second session for the same pair", apperr.CodeOf(err), apperr.Conflict)
	// The same agent session id through another connection is another session.
	other := info
	other.ConnectionID = "conn2"
	if err := db.CreateSession(ctx, agent.Session{ID: "as3", Title: "t", Model: "m", Workspace: "/x", Agent: &other}); err != nil {
		t.Fatal(err)
	}
	err = db.CreateSession(ctx, agent.Session{ID: "as4", Title: "t", Model: "m", Workspace: "/x", Agent: &agent.AgentInfo{Kind: "codex"}})
	assertEqual(t, "an agent session without its connection", apperr.CodeOf(err), apperr.Invalid)

	s, err := db.AgentSession(ctx, "conn1", "agent-s1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "AgentSession", s.ID+" "+s.Workspace, "as1 /home/dev/proj")
	assertEqual(t, "provenance", *s.Agent, info)
	if own, _ := db.Session(ctx, "own"); own.Agent != nil {
		t.Fatalf("an own session reads as an agent session: %+v", own.Agent)
	}
	_, err = db.AgentSession(ctx, "conn1", "nope")
	assertEqual(t, "an unknown agent session", apperr.CodeOf(err), apperr.NotFound)
	all, err := db.Sessions(ctx)
	if err != nil || len(all) != 3 {
		t.Fatalf("Sessions: %d, %v; want the own and two agent sessions", len(all), err)
	}
	next := info
	next.PermissionMode, next.PromptID, next.State, next.Model = "acceptEdits", "p2", agent.AgentStopped, "gpt-5.5"
	if err := db.UpdateAgentSession(ctx, "as1", next); err != nil {
		t.Fatal(err)
	}
	s, _ = db.Session(ctx, "as1")
	assertEqual(t, "provenance after an update", *s.Agent, next)
	assertEqual(t, "UpdateAgentSession of an own session", apperr.CodeOf(db.UpdateAgentSession(ctx, "own", next)), apperr.NotFound)

	// Outside calls beside their approvals.
	a := gate.Approval{ID: "ap1", SessionID: "as1", ToolCallID: "toolu_1", ToolName: "Bash", Arguments: json.RawMessage(`{"command":"ls"}`),
		RequestedBy: gate.RequestedByAgent, Status: gate.Pending}
	if err := db.CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := gate.Approval{ID: "ap2", SessionID: "as1", ToolCallID: "hook-abc", ToolName: "Bash", Arguments: json.RawMessage(`{"command":"ls"}`),
		RequestedBy: gate.RequestedByAgent, Status: gate.Pending}
	if err := db.CreateApproval(ctx, b); err != nil {
		t.Fatal(err)
	}
	// c1 keeps when the agent stops waiting (its hook's deadline) and the cwd its event
	// reported; c2 has neither (NULL).
	deadline := t0.Add(86 * time.Second)
	c1 := gate.OutsideCall{ApprovalID: "ap1", SessionID: "as1", ToolUseID: "toolu_1", MatchKey: "sha256:k1", Event: "PreToolUse", Editable: true,
		CreatedAt: t0.Add(time.Second), Deadline: &deadline, Cwd: "/w/sub"}
	c2 := gate.OutsideCall{ApprovalID: "ap2", SessionID: "as1", MatchKey: "sha256:k2", Event: "PermissionRequest", CreatedAt: t0.Add(2 * time.Second)}
	for _, c := range []gate.OutsideCall{c1, c2} {
		if err := db.CreateOutsideCall(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	assertEqual(t, "a second outside call for one approval", apperr.CodeOf(db.CreateOutsideCall(ctx, c1)), apperr.Conflict)
	got, err := db.OutsideCallByKey(ctx, "as1", "sha256:k1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "OutsideCallByKey", got, c1)
	got, _ = db.OutsideCallByToolUse(ctx, "as1", "toolu_1")
	assertEqual(t, "OutsideCallByToolUse", got, c1)
	_, err = db.OutsideCallByToolUse(ctx, "as1", "")
	assertEqual(t, "no tool_use_id", apperr.CodeOf(err), apperr.NotFound)
	_, err = db.OutsideCallByKey(ctx, "as3", "sha256:k1")
	assertEqual(t, "another session's key", apperr.CodeOf(err), apperr.NotFound)
	got, _ = db.OutsideCall(ctx, "ap2")
	assertEqual(t, "OutsideCall", got, c2)
	if err := db.SetOutsideEditedKey(ctx, "ap2", "sha256:edited"); err != nil {
		t.Fatal(err)
	}
	got, _ = db.OutsideCallByKey(ctx, "as1", "sha256:edited")
	assertEqual(t, "OutsideCallByKey by the edited key", got.ApprovalID+" "+got.EditedKey, "ap2 sha256:edited")
	// A call's own match key goes before a later call's edited key.
	if err := db.SetOutsideEditedKey(ctx, "ap2", "sha256:k1"); err != nil {
		t.Fatal(err)
	}
	got, _ = db.OutsideCallByKey(ctx, "as1", "sha256:k1")
	assertEqual(t, "OutsideCallByKey: the match key before a later edited key", got.ApprovalID, "ap1")
	if err := db.SetOutsideEditedKey(ctx, "ap2", "sha256:edited"); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "SetOutsideEditedKey of an unknown call", apperr.CodeOf(db.SetOutsideEditedKey(ctx, "nope", "k")), apperr.NotFound)

	stopped := t0.Add(3 * time.Second)
	if err := db.MarkStoppedWaiting(ctx, "ap1", &stopped); err != nil {
		t.Fatal(err)
	}
	got, _ = db.OutsideCall(ctx, "ap1")
	if got.StoppedWaitingAt == nil || !got.StoppedWaitingAt.Equal(stopped) {
		t.Fatalf("stopped waiting at %v, want %v", got.StoppedWaitingAt, stopped)
	}
	if err := db.MarkStoppedWaiting(ctx, "ap1", nil); err != nil {
		t.Fatal(err)
	}
	got, _ = db.OutsideCall(ctx, "ap1")
	assertEqual(t, "a cleared mark", got.StoppedWaitingAt == nil, true)
	assertEqual(t, "MarkStoppedWaiting of an unknown call", apperr.CodeOf(db.MarkStoppedWaiting(ctx, "nope", &stopped)), apperr.NotFound)

	// Asked again while pending: the mark is cleared and the deadline is the new event's.
	if err := db.MarkStoppedWaiting(ctx, "ap1", &stopped); err != nil {
		t.Fatal(err)
	}
	again := t0.Add(200 * time.Second)
	if err := db.WaitAgain(ctx, "ap1", again); err != nil {
		t.Fatal(err)
	}
	got, _ = db.OutsideCall(ctx, "ap1")
	assertEqual(t, "WaitAgain clears the mark", got.StoppedWaitingAt == nil, true)
	if got.Deadline == nil || !got.Deadline.Equal(again) {
		t.Fatalf("deadline after WaitAgain %v, want %v", got.Deadline, again)
	}
	if err := db.WaitAgain(ctx, "ap2", time.Time{}); err != nil {
		t.Fatal(err)
	}
	got, _ = db.OutsideCall(ctx, "ap2")
	assertEqual(t, "WaitAgain with no deadline stores none", got.Deadline == nil, true)
	assertEqual(t, "WaitAgain of an unknown call", apperr.CodeOf(db.WaitAgain(ctx, "nope", again)), apperr.NotFound)

	// A decision is taken once (ClaimOutsideCall): of eight requests at the same instant, one.
	claimedAt := t0.Add(5 * time.Second)
	var claims atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := db.ClaimOutsideCall(ctx, "as1", "ap2", claimedAt)
			if err != nil {
				t.Error(err)
			}
			if ok {
				claims.Add(1)
			}
		}()
	}
	wg.Wait()
	assertEqual(t, "requests that took one decision at once", claims.Load(), int32(1))
	got, _ = db.OutsideCall(ctx, "ap2")
	if got.ClaimedAt == nil || !got.ClaimedAt.Equal(claimedAt) {
		t.Fatalf("claimed at %v, want %v", got.ClaimedAt, claimedAt)
	}
	for _, c := range []struct{ what, session, approval string }{
		{"a decision taken before", "as1", "ap2"}, {"another session's call", "as3", "ap1"}, {"an unknown call", "as1", "nope"},
	} {
		ok, err := db.ClaimOutsideCall(ctx, c.session, c.approval, claimedAt)
		assertEqual(t, "ClaimOutsideCall of "+c.what, fmt.Sprint(ok, err), "false <nil>")
	}

	outcome := json.RawMessage(`{"stdout":"a\nb","stderr":"","interrupted":false}`)
	if err := db.SetOutsideOutcome(ctx, "ap1", outcome, t0.Add(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	ok, err := db.ClaimOutsideCall(ctx, "as1", "ap1", claimedAt)
	assertEqual(t, "ClaimOutsideCall of a call with an outcome", fmt.Sprint(ok, err), "false <nil>")
	got, _ = db.OutsideCall(ctx, "ap1")
	var o map[string]any
	if err := json.Unmarshal(got.Outcome, &o); err != nil || o["stdout"] != "a\nb" || got.OutcomeAt == nil {
		t.Fatalf("outcome %s at %v", got.Outcome, got.OutcomeAt)
	}
	assertEqual(t, "an outcome that is not JSON", apperr.CodeOf(db.SetOutsideOutcome(ctx, "ap1", json.RawMessage(`{`), t0)), apperr.Invalid)
	list, err := db.OutsideCalls(ctx, "as1")
	if err != nil || len(list) != 2 || list[0].ApprovalID != "ap1" || list[1].ApprovalID != "ap2" {
		t.Fatalf("OutsideCalls: %+v, %v", list, err)
	}
	// They go with their session.
	if err := db.DeleteSession(ctx, "as1"); err != nil {
		t.Fatal(err)
	}
	list, _ = db.OutsideCalls(ctx, "as1")
	assertEqual(t, "outside calls after the session is deleted", len(list), 0)
}

// testDecidedOutsideCallsInOneTransaction: a call a rule decided (issue 35's hook path) is stored
// in one transaction — the call's message, its automatic approval (naming the message) and its
// outside call (AppendOutsideCall), or the approval and the outside call alone
// (CreateDecidedOutsideCall) — and all of it or none: when the outside call cannot be stored,
// neither the message nor the approval is. A pending approval is refused.
func testDecidedOutsideCallsInOneTransaction(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	info := agent.AgentInfo{Kind: "claude-code", ConnectionID: "conn1", SessionID: "agent-s1", State: agent.AgentWorking}
	if err := db.CreateSession(ctx, agent.Session{ID: "as1", Title: "Claude Code", Model: "claude-code", Workspace: "/w", Agent: &info}); err != nil {
		t.Fatal(err)
	}
	decided := func(id string) gate.Approval {
		at := t0.Add(time.Second)
		return gate.Approval{ID: id, SessionID: "as1", ToolCallID: "toolu_" + id, ToolName: "Bash", Arguments: json.RawMessage(`{"command":"git status"}`),
			RequestedBy: gate.RequestedByAgent, Status: gate.Approved, Automatic: true, DecisionSource: gate.FromRule,
			RuleText: "Bash(git status)", CreatedAt: at, DecidedAt: &at, MessageID: "m-" + id}
	}
	msg := func(id string) agent.Message {
		return agent.Message{ID: "m-" + id, Role: agent.Assistant, Content: []agent.Block{{Type: "toolCall", ID: "toolu_" + id, Name: "Bash"}}}
	}
	call := func(id string) gate.OutsideCall {
		return gate.OutsideCall{ApprovalID: id, SessionID: "as1", ToolUseID: "toolu_" + id, MatchKey: "sha256:" + id, Event: "PreToolUse"}
	}

	e, err := db.AppendOutsideCall(ctx, "as1", msg("a1"), decided("a1"), call("a1"))
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "the message's seq", e.Seq, int64(1))
	a, err := db.Approval(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "the approval", a.Status+" "+gate.Status(a.MessageID)+" "+gate.Status(a.RuleText), "approved m-a1 Bash(git status)")
	c, err := db.OutsideCall(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "the outside call's time is the approval's", c.CreatedAt.Equal(t0.Add(time.Second)), true)
	if c, err := db.OutsideCallByKey(ctx, "as1", "sha256:a1"); err != nil || c.ApprovalID != "a1" {
		t.Fatalf("OutsideCallByKey: %+v, %v", c, err)
	}

	// All or none: an outside call for an approval that is not the one stored (and exists
	// nowhere) fails, and takes the message and the approval with it.
	bad := call("a2")
	bad.ApprovalID = "nope"
	_, err = db.AppendOutsideCall(ctx, "as1", msg("a2"), decided("a2"), bad)
	assertEqual(t, "an outside call of an unknown approval", apperr.CodeOf(err), apperr.NotFound)
	_, err = db.Approval(ctx, "a2")
	assertEqual(t, "the approval of a failed AppendOutsideCall", apperr.CodeOf(err), apperr.NotFound)
	entries, err := db.Entries(ctx, "as1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "entries after a failed AppendOutsideCall", len(entries), 1)
	// The same approval twice: a conflict, nothing more stored.
	_, err = db.AppendOutsideCall(ctx, "as1", msg("a3"), decided("a1"), call("a1"))
	assertEqual(t, "an approval stored already", apperr.CodeOf(err), apperr.Conflict)
	entries, _ = db.Entries(ctx, "as1")
	assertEqual(t, "entries after a conflict", len(entries), 1)

	if err := db.CreateDecidedOutsideCall(ctx, decided("a4"), call("a4")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.OutsideCall(ctx, "a4"); err != nil {
		t.Fatal(err)
	}
	bad = call("a5")
	bad.ApprovalID = "nope"
	err = db.CreateDecidedOutsideCall(ctx, decided("a5"), bad)
	assertEqual(t, "CreateDecidedOutsideCall of an unknown approval", apperr.CodeOf(err), apperr.NotFound)
	_, err = db.Approval(ctx, "a5")
	assertEqual(t, "the approval of a failed CreateDecidedOutsideCall", apperr.CodeOf(err), apperr.NotFound)

	// The outcome the agent reported, with the call's result entry, in one transaction.
	res := agent.Message{ID: "r-a1", Role: agent.ToolResult, ToolCallID: "toolu_a1"}
	if _, err := db.AppendOutsideOutcome(ctx, "as1", res, "a1", json.RawMessage(`{"stdout":"ok"}`), t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	c, _ = db.OutsideCall(ctx, "a1")
	assertEqual(t, "the outcome", string(c.Outcome), `{"stdout":"ok"}`)
	entries, _ = db.Entries(ctx, "as1")
	assertEqual(t, "entries with the result", len(entries), 2)
	_, err = db.AppendOutsideOutcome(ctx, "as1", agent.Message{ID: "r-x", Role: agent.ToolResult}, "nope", json.RawMessage(`{}`), t0)
	assertEqual(t, "an outcome for no outside call", apperr.CodeOf(err), apperr.NotFound)
	_, err = db.AppendOutsideOutcome(ctx, "as1", agent.Message{ID: "r-y", Role: agent.ToolResult}, "a1", json.RawMessage(`{`), t0)
	assertEqual(t, "an outcome that is not JSON", apperr.CodeOf(err), apperr.Invalid)
	// Written once: a second report never replaces the first, nor adds a result.
	_, err = db.AppendOutsideOutcome(ctx, "as1", agent.Message{ID: "r-z", Role: agent.ToolResult, ToolCallID: "toolu_a1"}, "a1", json.RawMessage(`{"stdout":"forged"}`), t0)
	assertEqual(t, "a second outcome of a call", apperr.CodeOf(err), apperr.Conflict)
	c, _ = db.OutsideCall(ctx, "a1")
	assertEqual(t, "the outcome after a second report", string(c.Outcome), `{"stdout":"ok"}`)
	entries, _ = db.Entries(ctx, "as1")
	assertEqual(t, "entries after the refused outcomes", len(entries), 2)

	pending := decided("a6")
	pending.Status, pending.DecidedAt, pending.Automatic = gate.Pending, nil, false
	_, err = db.AppendOutsideCall(ctx, "as1", msg("a6"), pending, call("a6"))
	assertEqual(t, "AppendOutsideCall of a pending approval", apperr.CodeOf(err), apperr.Invalid)
	assertEqual(t, "CreateDecidedOutsideCall of a pending approval", apperr.CodeOf(db.CreateDecidedOutsideCall(ctx, pending, call("a6"))), apperr.Invalid)
}
