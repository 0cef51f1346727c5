package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"countersign/internal/gate"
	"countersign/internal/store/sqlite"
	"countersign/internal/tool"
)

// TestAServiceDecidesOutsideCalls: gate.Service.DecideOutside with no Runner (an outside agent's
// call, SPEC §18) — the agent's read-only tools by the annotation default, the session's mode, a
// rule, a person — each recorded on the same approvals with its source; at the deadline no
// verdict and the call marked "the agent stopped waiting"; a later decision is too late.
func TestAServiceDecidesOutsideCalls(t *testing.T) {
	ctx := context.Background()
	req := func(tool, input, key string, deadline time.Duration) gate.OutsideRequest {
		return gate.OutsideRequest{SessionID: "s1", Event: "PreToolUse", ToolName: tool, Input: json.RawMessage(input),
			ToolUseID: "toolu_" + key, MatchKey: "sha256:" + key, Deadline: time.Now().Add(deadline), Editable: true}
	}
	k := newServiceKit(t)

	v, err := k.svc.DecideOutside(ctx, req("Read", `{"file_path":"/w/a.go"}`, "read", time.Second))
	if err != nil || v.Outcome != gate.Allowed || v.Approval.DecisionSource != gate.FromAnnotations || !v.Approval.Automatic {
		t.Fatalf("Read: %+v, %v; want allowed by the annotation default", v, err)
	}
	if _, err := k.svc.AddRule(ctx, gate.Rule{Effect: gate.Deny, Tool: "mcp__github__delete_repo", Scope: gate.ScopeServer, Source: gate.SourceAPI}); err != nil {
		t.Fatal(err)
	}
	v, err = k.svc.DecideOutside(ctx, req("mcp__github__delete_repo", `{"repo":"x"}`, "del", time.Second))
	if err != nil || v.Outcome != gate.Blocked || v.Approval.DecisionSource != gate.FromRule || v.Reason == "" {
		t.Fatalf("a denied MCP tool: %+v, %v; want blocked by the rule with its reason", v, err)
	}

	// A person decides a held call; the call's record names them.
	done := make(chan gate.OutsideVerdict, 1)
	go func() {
		v, _ := k.svc.DecideOutside(ctx, req("Bash", `{"command":"make"}`, "make", 5*time.Second))
		done <- v
	}()
	a := pendingOf(t, k)
	if a.RequestedBy != gate.RequestedByAgent || a.ToolName != "Bash" {
		t.Fatalf("the held call's approval: %+v", a)
	}
	if _, err := k.svc.Decide(ctx, "s1", a.ID, gate.Answer{Decision: "deny", Reason: "no", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	if v := <-done; v.Outcome != gate.Blocked || v.Reason != "Denied by owner: no" || v.Approval.DecisionSource != gate.FromPerson {
		t.Fatalf("denied by a person: %+v", v)
	}

	// Nobody decides: no verdict at the deadline; a later decision is stored, too late.
	v, err = k.svc.DecideOutside(ctx, req("Bash", `{"command":"make install"}`, "install", 100*time.Millisecond))
	if err != nil || v.Outcome != gate.Asked || v.Approval.Status != gate.Pending {
		t.Fatalf("at the deadline: %+v, %v; want no verdict, still pending", v, err)
	}
	oc, err := k.db.OutsideCall(ctx, v.Approval.ID)
	if err != nil || oc.StoppedWaitingAt == nil {
		t.Fatalf("the call is not marked stopped waiting: %+v %v", oc, err)
	}
	late, err := k.svc.Decide(ctx, "s1", v.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()})
	if err != nil || late.Status != gate.Approved || !oc.TooLate(late) {
		t.Fatalf("the late decision: %+v, %v; want stored and too late", late, err)
	}

	// Plan mode denies what is not read-only, saying so.
	if err := k.svc.SetMode(ctx, "s1", gate.ModePlan); err != nil {
		t.Fatal(err)
	}
	v, err = k.svc.DecideOutside(ctx, req("Write", `{"file_path":"/w/a.go","content":"x"}`, "write", time.Second))
	if err != nil || v.Outcome != gate.Blocked || v.Reason != gate.PlanReason || v.Approval.DecisionSource != gate.FromMode {
		t.Fatalf("plan mode: %+v, %v", v, err)
	}
}

// TestAnotherCallWithTheSameInputIsDecidedOnItsOwn: while a call is held for a person, the agent
// makes the same call again in the same turn (the same match key, another tool_use_id): it gets
// an approval and a verdict of its own, not the held call's (which would leave it unaudited and
// decided by a person who saw only the first).
func TestAnotherCallWithTheSameInputIsDecidedOnItsOwn(t *testing.T) {
	ctx := context.Background()
	req := func(toolUse string, deadline time.Duration) gate.OutsideRequest {
		return gate.OutsideRequest{SessionID: "s1", Event: "PreToolUse", ToolName: "Bash", Input: json.RawMessage(`{"command":"make"}`),
			ToolUseID: toolUse, MatchKey: "sha256:make", Deadline: time.Now().Add(deadline), Editable: true}
	}
	k := newServiceKit(t)
	first := make(chan gate.OutsideVerdict, 1)
	go func() {
		v, _ := k.svc.DecideOutside(ctx, req("toolu_1", 5*time.Second))
		first <- v
	}()
	a := pendingOf(t, k)
	v, err := k.svc.DecideOutside(ctx, req("toolu_2", 200*time.Millisecond))
	if err != nil || v.Outcome != gate.Asked || v.Approval.ID == "" || v.Approval.ID == a.ID || v.Approval.ToolCallID != "toolu_2" {
		t.Fatalf("the second call: %+v, %v; want no verdict at its deadline on an approval of its own", v, err)
	}
	if _, err := k.svc.Decide(ctx, "s1", a.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	if v := <-first; v.Outcome != gate.Allowed || v.Approval.ID != a.ID {
		t.Fatalf("the first call: %+v; want allowed by the person", v)
	}
	if second, err := k.db.Approval(ctx, v.Approval.ID); err != nil || second.Status != gate.Pending {
		t.Fatalf("the second call's approval: %+v, %v; want still pending", second, err)
	}
}

// pendingOf waits for session s1's one pending approval.
func pendingOf(t *testing.T, k *serviceKit) gate.Approval {
	t.Helper()
	for range 200 {
		if as, _ := k.db.Approvals(context.Background(), "s1", gate.Pending); len(as) == 1 {
			return as[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no pending approval")
	return gate.Approval{}
}

// slowOutside is the SQLite store with CreateOutsideCall held until release is closed: the moment
// after a held call's approval is stored and before its outside_calls row is.
type slowOutside struct {
	*sqlite.DB
	stored, release chan struct{}
}

func (s slowOutside) CreateOutsideCall(ctx context.Context, c gate.OutsideCall) error {
	close(s.stored)
	<-s.release
	return s.DB.CreateOutsideCall(ctx, c)
}

// TestAnEditInTheMomentBeforeTheOutsideCallIsStoredIsApplied: a person (or an API client) who
// approves a held call with an edit right after its approval appears, before its outside_calls
// row is stored, is not refused an edit the agent applies (it was: "does not apply an edited
// input", read from the row not yet there), and the agent gets the edited input.
func TestAnEditInTheMomentBeforeTheOutsideCallIsStoredIsApplied(t *testing.T) {
	ctx := context.Background()
	k := newServiceKit(t)
	slow := slowOutside{DB: k.db, stored: make(chan struct{}), release: make(chan struct{})}
	g := gate.New(slow, time.Hour, nil)
	svc := gate.NewService(gate.ServiceConfig{Gate: g, Store: slow, Sessions: k, Tools: tool.NewRegistry()})
	done := make(chan gate.OutsideVerdict, 1)
	go func() {
		v, _ := svc.DecideOutside(ctx, gate.OutsideRequest{SessionID: "s1", Event: "PreToolUse", ToolName: "Bash",
			Input: json.RawMessage(`{"command":"make"}`), ToolUseID: "toolu_e", MatchKey: "sha256:e",
			Deadline: time.Now().Add(time.Minute), Editable: true})
		done <- v
	}()
	<-slow.stored
	a := pendingOf(t, k)
	decided, err := svc.Decide(ctx, "s1", a.ID, gate.Answer{Decision: "approve", Arguments: json.RawMessage(`{"command":"make test"}`), By: gate.Owner()})
	close(slow.release)
	if err != nil {
		t.Fatalf("an edit before the outside call's row is stored: %v, want it applied", err)
	}
	if v := <-done; v.Outcome != gate.Allowed || !sameJSONText(v.Approval.EditedArguments, `{"command":"make test"}`) {
		t.Fatalf("the agent got %+v (decided %+v), want the edited input allowed", v, decided)
	}
}

func sameJSONText(raw json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}

// TestTheHeldCallIsKnownInTheMomentBeforeItsRowIsStored: a page drawn right after a held call's
// approval appears, before its outside_calls row is stored, learns the call — its agent's
// deadline, whether it takes an edit — from HeldOutsideCall (a clean-clone CI run drew "times out
// in 1:00", the gate's timeout, instead of "the agent stops waiting in 0:55"); once stored, the
// store has it and HeldOutsideCall says nothing.
func TestTheHeldCallIsKnownInTheMomentBeforeItsRowIsStored(t *testing.T) {
	ctx := context.Background()
	k := newServiceKit(t)
	slow := slowOutside{DB: k.db, stored: make(chan struct{}), release: make(chan struct{})}
	g := gate.New(slow, time.Hour, nil)
	svc := gate.NewService(gate.ServiceConfig{Gate: g, Store: slow, Sessions: k, Tools: tool.NewRegistry()})
	deadline := time.Now().Add(55 * time.Second).UTC()
	done := make(chan gate.OutsideVerdict, 1)
	go func() {
		v, _ := svc.DecideOutside(ctx, gate.OutsideRequest{SessionID: "s1", Event: "PreToolUse", ToolName: "Bash",
			Input: json.RawMessage(`{"command":"make"}`), ToolUseID: "toolu_d", MatchKey: "sha256:d",
			Deadline: deadline, Editable: true})
		done <- v
	}()
	<-slow.stored
	a := pendingOf(t, k)
	c, ok := svc.HeldOutsideCall(a.ID)
	if !ok || c.Deadline == nil || !c.Deadline.Equal(deadline) || !c.Editable || c.ApprovalID != a.ID {
		t.Errorf("HeldOutsideCall in that moment: %+v, %v; want the call with its deadline %v", c, ok, deadline)
	}
	close(slow.release)
	for range 200 {
		if _, err := k.db.OutsideCall(ctx, a.ID); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok := svc.HeldOutsideCall(a.ID); ok {
		t.Error("HeldOutsideCall still answers once the row is stored")
	}
	if _, err := svc.Decide(ctx, "s1", a.ID, gate.Answer{Decision: "deny", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	<-done
}
