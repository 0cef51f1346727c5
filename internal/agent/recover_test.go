package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/store/sqlite"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// restart simulates a new process over the same database: a second store handle and runner,
// while the first runner is abandoned as a killed process would be (its goroutines never get to
// write again because nothing wakes them before the test ends).
func (h *harness) restart(t *testing.T, script string, tools ...*tool.Tool) (*agent.Runner, *sqlite.DB, *agent.Subscription) {
	t.Helper()
	return h.restartWith(t, nil, script, tools...)
}

// restartWith is restart with a runner whose configuration set changes first (nil: none).
func (h *harness) restartWith(t *testing.T, set func(*agent.Config), script string, tools ...*tool.Tool) (*agent.Runner, *sqlite.DB, *agent.Subscription) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, h.db.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ms := testkit.NewScripts()
	ms.Add("test", testkit.Script(t, script))
	reg := tool.NewRegistry()
	for _, tl := range tools {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	broker := agent.NewBroker()
	sub := broker.Subscribe(h.sess.ID)
	cfg := agent.Config{Store: db, Models: ms, Tools: reg, Broker: broker, ApprovalTimeout: time.Minute}
	if set != nil {
		set(&cfg)
	}
	r := agent.New(cfg)
	t.Cleanup(func() { r.Shutdown("test cleanup"); r.Wait() })
	if err := r.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	return r, db, sub
}

func awaitOn(t *testing.T, sub *agent.Subscription, typ agent.EventType) agent.Event {
	t.Helper()
	return testkit.Await(t, sub, typ, 10*time.Second, nil)
}

func TestRestartKeepsAParkedApprovalAndResumesTheRun(t *testing.T) {
	var peeks, shells atomic.Int32
	h := newHarness(t, approveScript, nil, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := h.await(agent.ApprovalRequested).Approval

	// The process dies; a new one starts over the same database.
	resumeApproved(t, h, asked, &peeks, &shells)
}

// resumeApproved starts a new process over h's database (approveScript, its peek and shell
// tools), checks that asked is still pending and its run parked, approves it, and checks that the
// shell call runs once, in the new process only, and the run reaches its final answer.
func resumeApproved(t *testing.T, h *harness, asked *gate.Approval, peeks, shells *atomic.Int32) {
	t.Helper()
	ctx := context.Background()
	var shells2 atomic.Int32
	r2, db2, sub := h.restart(t, approveScript, readOnlyTool("peek", peeks), riskyTool("shell", &shells2))
	a, err := db2.Approval(ctx, asked.ID)
	if err != nil || a.Status != gate.Pending {
		t.Fatalf("after restart the approval is %s (%v), want still pending", a.Status, err)
	}
	if !r2.Busy(h.sess.ID) {
		t.Fatal("the parked run is not in progress after restart")
	}
	if _, err := r2.Gate().Decide(ctx, h.sess.ID, asked.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	if end := awaitOn(t, sub, agent.AgentEnd); end.Error != "" {
		t.Fatalf("resumed run ended with %q", end.Error)
	}
	if shells2.Load() != 1 || shells.Load() != 0 {
		t.Fatalf("the approved call ran %d times after restart (%d before), want once after", shells2.Load(), shells.Load())
	}
	es, _ := db2.Entries(ctx, h.sess.ID)
	if got := es[len(es)-1].Message.Text(); got != `Done: ran {"command": "touch x"}` {
		t.Errorf("the run did not continue to its final answer: last entry %q", got)
	}
}

func TestRestartInterruptsAnExecutingCallAndNeverRerunsIt(t *testing.T) {
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	blocking := &tool.Tool{Name: "shell", InputSchema: json.RawMessage(`{"type":"object"}`),
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			runs.Add(1)
			started <- struct{}{}
			<-ctx.Done()
			return tool.Result{}, ctx.Err()
		}}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"c","name":"shell","arguments":{}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"},
	  {"content":[{"type":"text","text":"later"}],"stopReason":"stop"}]}`
	h := newHarness(t, script, nil, blocking)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := h.await(agent.ApprovalRequested).Approval
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, asked.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	<-started

	var runs2 atomic.Int32
	again := *blocking
	again.Execute = func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
		runs2.Add(1)
		return tool.Result{}, nil
	}
	r2, db2, sub := h.restart(t, script, &again)
	if r2.Busy(h.sess.ID) {
		t.Fatal("nothing is parked, yet the session is busy after restart")
	}
	es, _ := db2.Entries(ctx, h.sess.ID)
	last := es[len(es)-1].Message
	if last.Role != agent.ToolResult || last.Result.TextOf() != agent.InterruptedText || !last.Result.IsError {
		t.Fatalf("last entry %+v, want the error result %q", last, agent.InterruptedText)
	}
	s, _ := db2.Session(ctx, h.sess.ID)
	if s.State != agent.Idle {
		t.Errorf("session state %s, want idle", s.State)
	}
	// The session accepts new messages; the interrupted call is never re-run.
	if err := r2.Send(ctx, h.sess.ID, "next"); err != nil {
		t.Fatal(err)
	}
	awaitOn(t, sub, agent.AgentEnd)
	if runs.Load() != 1 || runs2.Load() != 0 {
		t.Errorf("the call ran %d times before and %d after the restart, want 1 and 0", runs.Load(), runs2.Load())
	}
}

// TestRestartKillsWhatAnInterruptedCallLeftRunningBeforeItRecordsIt (issue 28): recovery asks
// for the processes of the executing call to be killed (Config.KillOrphans), with the session's
// and the call's ids, once, and before the call's result says "interrupted"; a kill that fails
// is logged, and the call is recorded all the same.
func TestRestartKillsWhatAnInterruptedCallLeftRunningBeforeItRecordsIt(t *testing.T) {
	started := make(chan struct{}, 1)
	blocking := &tool.Tool{Name: "shell", InputSchema: json.RawMessage(`{"type":"object"}`),
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			started <- struct{}{}
			<-ctx.Done()
			return tool.Result{}, ctx.Err()
		}}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"c","name":"shell","arguments":{}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	h := newHarness(t, script, nil, blocking)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := h.await(agent.ApprovalRequested).Approval
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, asked.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	<-started

	var kills []string
	_, db2, _ := h.restartWith(t, func(cfg *agent.Config) {
		cfg.KillOrphans = func(ctx context.Context, sessionID, toolCallID string) error {
			kills = append(kills, sessionID+" "+toolCallID)
			es, err := h.db.Entries(ctx, sessionID)
			if err != nil {
				t.Error(err)
			}
			if last := es[len(es)-1].Message; last.Role == agent.ToolResult {
				t.Errorf("when the call's processes are killed, its result is stored already: %+v", last.Result)
			}
			return errors.New("processes [4242] were still there 5s after SIGKILL")
		}
	}, script, blocking)
	if want := []string{h.sess.ID + " c"}; !slices.Equal(kills, want) {
		t.Errorf("KillOrphans was called for %q, want %q", kills, want)
	}
	es, _ := db2.Entries(ctx, h.sess.ID)
	if last := es[len(es)-1].Message; last.Role != agent.ToolResult || last.Result.TextOf() != agent.InterruptedText {
		t.Fatalf("last entry %+v, want the error result %q although the kill failed", last, agent.InterruptedText)
	}
}

func TestRestartWhileTheModelStreamsEndsTheRunAsInterrupted(t *testing.T) {
	script := `{"steps":[{"content":[{"type":"text","text":"a long answer"}],"stopReason":"stop","delayMs":60000},
	  {"content":[{"type":"text","text":"next"}],"stopReason":"stop"}]}`
	h := newHarness(t, script, nil)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	h.await(agent.MessageStart)
	// The next message replays the step that was cut (it is not counted), here without its wait.
	r2, db2, sub := h.restart(t, strings.Replace(script, `,"delayMs":60000`, "", 1))
	es, _ := db2.Entries(ctx, h.sess.ID)
	if len(es) != 2 {
		t.Fatalf("%d entries, want the user message and the interruption", len(es))
	}
	m := es[1].Message
	if m.Role != agent.Assistant || m.StopReason != agent.Aborted || m.ErrorMessage != agent.RestartedText || len(m.Content) != 0 {
		t.Errorf("after restart: %+v, want an aborted assistant message saying the server restarted", m)
	}
	if r2.Busy(h.sess.ID) {
		t.Error("the session is busy after restart")
	}
	if err := r2.Send(ctx, h.sess.ID, "again"); err != nil {
		t.Fatal(err)
	}
	awaitOn(t, sub, agent.AgentEnd)
}

func TestRestartKeepsWhatRanBeneathAnInterruptedCall(t *testing.T) {
	started := make(chan struct{}, 1)
	obj := json.RawMessage(`{"type":"object"}`)
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	parent := &tool.Tool{Name: "parent", InputSchema: obj, Annotations: ro,
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			for n := range 3 {
				tc.ExecuteTool(ctx, "child", map[string]any{"n": n})
			}
			started <- struct{}{}
			<-ctx.Done()
			return tool.Result{}, ctx.Err()
		}}
	child := &tool.Tool{Name: "child", InputSchema: obj, Annotations: ro,
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{Content: []tool.Content{tool.Text("child ran")}}, nil
		}}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"p","name":"parent"}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	h := newHarness(t, script, nil, parent, child)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	<-started
	// The nested calls' audit record may be written in the background: wait until it counts
	// all three (the policy allowed them: one grouped row, issue 19).
	deadline := time.Now().Add(5 * time.Second)
	for {
		as, _ := h.db.Approvals(ctx, h.sess.ID, "")
		calls := 0
		for _, a := range as {
			calls += a.Calls()
		}
		if calls >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, db2, _ := h.restart(t, script, parent, child)
	es, _ := db2.Entries(ctx, h.sess.ID)
	res := es[len(es)-1].Message.Result
	if res == nil || res.TextOf() != agent.InterruptedText {
		t.Fatalf("last entry %+v, want the interrupted result", es[len(es)-1].Message)
	}
	// The three calls the audit groups are one entry, the first, naming the row that counts them.
	as, _ := db2.Approvals(ctx, h.sess.ID, "")
	var own, group gate.Approval
	for _, a := range as {
		switch a.ToolCallID {
		case "p":
			own = a
		case "p/1":
			group = a
		}
	}
	if group.Count != 3 || group.ToolName != "child" {
		t.Fatalf("the nested calls' audit row %+v, want one counting 3 calls of child", group)
	}
	if res.NestedCalls == nil || len(res.NestedCalls.Calls) != 1 || res.NestedCalls.Calls[0].ID != "p/1" ||
		res.NestedCalls.Calls[0].ApprovalID != group.ID || res.NestedCalls.Complete {
		t.Errorf("nestedCalls %+v, want p/1 rebuilt from the audit, naming its row %s, marked incomplete", res.NestedCalls, group.ID)
	}
	// The page says when it started (its approval: the policy's record) and how long it ran
	// until the restart (issue 16, item 5); the model still reads InterruptedText.
	in := res.Interrupted
	if in == nil || in.StartedAt == nil || own.DecidedAt == nil || !in.StartedAt.Equal(*own.DecidedAt) || in.At.Before(*in.StartedAt) {
		t.Fatalf("Interrupted %+v, want it started at its approval's decision %v, before the restart", in, own.DecidedAt)
	}
	if want := in.At.Sub(*in.StartedAt).Milliseconds(); res.DurationMs != want {
		t.Errorf("durationMs %d, want %d (from its start to the restart)", res.DurationMs, want)
	}
}

// TestAGracefulShutdownLeavesAParkedApprovalForTheNextProcess: Shutdown (SIGTERM, Ctrl-C) parks
// what a killed process would have left parked (SPEC §8): the approval stays pending, no result
// is stored for its call, the session stays running, and the next process resumes the run when
// someone decides.
func TestAGracefulShutdownLeavesAParkedApprovalForTheNextProcess(t *testing.T) {
	var peeks, shells atomic.Int32
	h := newHarness(t, approveScript, nil, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := h.await(agent.ApprovalRequested).Approval
	h.runner.Shutdown("server shutdown")
	h.runner.Wait()

	if a, err := h.db.Approval(ctx, asked.ID); err != nil || a.Status != gate.Pending {
		t.Fatalf("after a graceful shutdown the approval is %s (%v), want still pending", a.Status, err)
	}
	for _, e := range h.entries() {
		if e.Message.Role == agent.ToolResult && e.Message.ToolCallID == asked.ToolCallID {
			t.Fatalf("a result was stored for the parked call: %q", e.Message.Result.TextOf())
		}
	}
	if s, _ := h.db.Session(ctx, h.sess.ID); s.State != agent.Waiting || s.PendingApprovals != 1 {
		t.Fatalf("session state %s with %d pending, want waiting on one (parked for the next process)", s.State, s.PendingApprovals)
	}
	resumeApproved(t, h, asked, &peeks, &shells)
}

// TestAGracefulShutdownCancelsANestedPrompt: a nested call cannot outlive its parent, which a
// shutdown stops: its approval is cancelled, the parent's result says the run was stopped, and
// nothing is left parked.
func TestAGracefulShutdownCancelsANestedPrompt(t *testing.T) {
	var shells atomic.Int32
	parent := &tool.Tool{Name: "parent", InputSchema: objectSchema, Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			out := tc.ExecuteTool(ctx, "shell", map[string]any{"command": "ls"})
			return out.Result, nil
		}}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"p","name":"parent","arguments":{}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	h := newHarness(t, script, nil, parent, riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	asked := h.await(agent.ApprovalRequested).Approval
	if asked.ParentToolCallID != "p" {
		t.Fatalf("the prompt is for %s under %q, want the nested call under p", asked.ToolCallID, asked.ParentToolCallID)
	}
	h.runner.Shutdown("server shutdown")
	h.runner.Wait()
	a, err := h.db.Approval(ctx, asked.ID)
	if err != nil || a.Status != gate.Cancelled || a.Reason != "Run stopped by server shutdown" {
		t.Fatalf("the nested approval is %s %q (%v), want cancelled: Run stopped by server shutdown", a.Status, a.Reason, err)
	}
	var parentResult string
	for _, e := range h.entries() {
		if e.Message.Role == agent.ToolResult && e.Message.ToolCallID == "p" {
			parentResult = e.Message.Result.TextOf()
		}
	}
	if !strings.Contains(parentResult, "Run stopped by server shutdown") {
		t.Fatalf("the parent's result %q, want it stopped by the shutdown", parentResult)
	}
	if s, _ := h.db.Session(ctx, h.sess.ID); s.State != agent.Idle {
		t.Fatalf("session state %s, want idle (nothing parked)", s.State)
	}
	if shells.Load() != 0 {
		t.Fatal("the nested call ran")
	}
}

// A faux script's step count survives a restart (issue 16 item 9): the step the model was
// streaming when the process died is streamed again on the next message, because the aborted
// placeholder the restart leaves is not a step.
func TestAFauxScriptReplaysTheStepARestartCut(t *testing.T) {
	slow := `{"steps":[{"content":[{"type":"text","text":"first answer"}],"stopReason":"stop","delayMs":60000},
	  {"content":[{"type":"text","text":"second answer"}],"stopReason":"stop"}]}`
	h := newHarness(t, slow, nil)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	h.await(agent.MessageStart)
	// The same script, without the wait, in the new process.
	r2, db2, sub := h.restart(t, strings.Replace(slow, `,"delayMs":60000`, "", 1))
	if err := r2.Send(ctx, h.sess.ID, "again"); err != nil {
		t.Fatal(err)
	}
	awaitOn(t, sub, agent.AgentEnd)
	es, err := db2.Entries(ctx, h.sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, string(e.Message.Role)+":"+string(e.Message.StopReason)+":"+e.Message.Text())
	}
	want := []string{"user::go", "assistant:aborted:", "user::again", "assistant:stop:first answer"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("transcript %q, want %q", got, want)
	}
}
