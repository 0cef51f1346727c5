package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/store/sqlite"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// harness is a testkit.Env whose one session's model replays one script, with test tools.
type harness struct {
	t      *testing.T
	env    *testkit.Env
	db     *sqlite.DB
	runner *agent.Runner
	broker *agent.Broker
	sess   agent.Session
	events *agent.Subscription
}

func newHarness(t *testing.T, script string, handlers gate.Handlers, tools ...*tool.Tool) *harness {
	t.Helper()
	return newHarnessWith(t, script, agent.Config{CallHandlers: handlers}, tools...)
}

// newHarnessWith is newHarness with more of the runner's configuration (handlers, timeout).
func newHarnessWith(t *testing.T, script string, cfg agent.Config, tools ...*tool.Tool) *harness {
	t.Helper()
	return newHarnessOver(t, script, cfg, nil, tools...)
}

// newHarnessOver is newHarnessWith with the runner's store wrapped by wrap (nil: the store).
func newHarnessOver(t *testing.T, script string, cfg agent.Config, wrap func(*sqlite.DB) agent.Store, tools ...*tool.Tool) *harness {
	t.Helper()
	sc := testkit.Script(t, script)
	return newHarnessModels(t, func(ms *testkit.Scripts) { ms.Add("test", sc) }, "faux:test", cfg, wrap, tools...)
}

// newHarnessModels is newHarnessOver with the models added by offer, its session on the model
// named model. cfg's Store, Models, Tools and Broker are the Env's; an ApprovalTimeout of 0 is a
// minute.
func newHarnessModels(t *testing.T, offer func(*testkit.Scripts), model string, cfg agent.Config, wrap func(*sqlite.DB) agent.Store, tools ...*tool.Tool) *harness {
	t.Helper()
	env := testkit.New(t, testkit.Options{Tools: tools, Store: wrap, Agent: func(c *agent.Config) {
		kit := *c
		*c = cfg
		c.Store, c.Models, c.Tools, c.Broker = kit.Store, kit.Models, kit.Tools, kit.Broker
		if c.ApprovalTimeout == 0 {
			c.ApprovalTimeout = kit.ApprovalTimeout
		}
	}})
	offer(env.Scripts)
	sess := env.Session("test", model)
	return &harness{t: t, env: env, db: env.DB, runner: env.Runner, broker: env.Broker, sess: sess, events: env.Broker.Subscribe(sess.ID)}
}

// await returns the next event of type typ, failing the test after 10 s.
func (h *harness) await(typ agent.EventType) agent.Event {
	h.t.Helper()
	return testkit.Await(h.t, h.events, typ, 10*time.Second, nil)
}

func (h *harness) entries() []agent.Entry {
	h.t.Helper()
	return h.env.Entries(h.sess.ID)
}

func (h *harness) toolResults() []agent.Message {
	h.t.Helper()
	return h.env.ToolResults(h.sess.ID)
}

var objectSchema = json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"additionalProperties":false}`)

func readOnlyTool(name string, runs *atomic.Int32) *tool.Tool {
	return &tool.Tool{Name: name, InputSchema: objectSchema,
		Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(ctx context.Context, args json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			runs.Add(1)
			return tool.Result{Content: []tool.Content{tool.Text("read " + string(args))}}, nil
		}}
}

func riskyTool(name string, runs *atomic.Int32) *tool.Tool {
	return &tool.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`),
		Execute: func(ctx context.Context, args json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			runs.Add(1)
			return tool.Result{Content: []tool.Content{tool.Text("ran " + string(args))}}, nil
		}}
}

const approveScript = `{"steps": [
  {"content": [{"type": "text", "text": "Reading."},
               {"type": "toolCall", "id": "c1", "name": "peek", "arguments": {"path": "README.md"}}], "stopReason": "toolUse"},
  {"content": [{"type": "toolCall", "id": "c2", "name": "shell", "arguments": {"command": "touch x"}}], "stopReason": "toolUse"},
  {"content": [{"type": "text", "text": "Done: {{lastResult.text}}"}], "stopReason": "stop"}
]}`

func TestRunApprovedEndToEnd(t *testing.T) {
	var peeks, shells atomic.Int32
	h := newHarness(t, approveScript, nil, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	ev := h.await(agent.ApprovalRequested)
	if got, want := ev.Approval.ToolName, "shell"; got != want {
		t.Fatalf("approval for %s, want %s", got, want)
	}
	if peeks.Load() != 1 {
		t.Fatalf("the read-only call ran %d times before the prompt, want 1 (no prompt for it)", peeks.Load())
	}
	if shells.Load() != 0 {
		t.Fatal("the gated call ran before its approval")
	}
	// A busy session refuses a second message.
	if err := h.runner.Send(ctx, h.sess.ID, "again"); apperr.CodeOf(err) != apperr.Conflict {
		t.Fatalf("Send while busy: %v, want conflict", err)
	}
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	end := h.await(agent.AgentEnd)
	if end.Error != "" {
		t.Fatalf("run ended with error %q", end.Error)
	}
	if shells.Load() != 1 {
		t.Fatalf("the approved call ran %d times, want 1", shells.Load())
	}
	// A late decision conflicts.
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, gate.Answer{Decision: "deny", By: gate.Owner()}); apperr.CodeOf(err) != apperr.Conflict {
		t.Fatalf("late decision: %v, want conflict", err)
	}
	var roles []string
	for _, e := range h.entries() {
		roles = append(roles, string(e.Message.Role))
	}
	if got, want := strings.Join(roles, ","), "user,assistant,toolResult,assistant,toolResult,assistant"; got != want {
		t.Fatalf("transcript roles %s, want %s", got, want)
	}
	last := h.entries()[5].Message
	if got, want := last.Text(), `Done: ran {"command": "touch x"}`; got != want {
		t.Errorf("final text %q, want %q", got, want)
	}
	// The audit holds an automatic record for the read-only call and the human decision.
	as, err := h.db.Approvals(ctx, h.sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 || !as[0].Automatic || as[0].Status != gate.Approved || as[1].Automatic || as[1].DecidedBy != "owner" {
		t.Fatalf("approvals %+v, want one automatic approval then the owner's", as)
	}
}

func TestRunDeniedWithReason(t *testing.T) {
	var peeks, shells atomic.Int32
	h := newHarness(t, approveScript, nil, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	ev := h.await(agent.ApprovalRequested)
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, gate.Answer{Decision: "deny", Reason: "not now", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	h.await(agent.AgentEnd)
	if shells.Load() != 0 {
		t.Fatal("a denied call ran")
	}
	res := h.toolResults()[1].Result
	if got, want := res.TextOf(), "Denied by owner: not now"; got != want || !res.IsError {
		t.Errorf("denied result %q (isError %v), want %q with isError", got, res.IsError, want)
	}
}

func TestDecideForeignApprovalIsNotFound(t *testing.T) {
	var peeks, shells atomic.Int32
	h := newHarness(t, approveScript, nil, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	other, err := h.runner.CreateSession(ctx, "other", "faux:test", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	ev := h.await(agent.ApprovalRequested)
	_, err = h.runner.Gate().Decide(ctx, other.ID, ev.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()})
	if apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("decision through another session: %v, want not found", err)
	}
	a, err := h.db.Approval(ctx, ev.Approval.ID)
	if err != nil || a.Status != gate.Pending {
		t.Fatalf("approval after a foreign decision: %+v, %v; want still pending", a, err)
	}
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, "no-such-id", gate.Answer{Decision: "approve", By: gate.Owner()}); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("unknown approval: %v, want not found", err)
	}
}

func TestStopCancelsPendingApproval(t *testing.T) {
	var peeks, shells atomic.Int32
	h := newHarness(t, approveScript, nil, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	ev := h.await(agent.ApprovalRequested)
	if err := h.runner.Stop(ctx, h.sess.ID, "owner"); err != nil {
		t.Fatal(err)
	}
	h.await(agent.AgentEnd)
	a, err := h.db.Approval(ctx, ev.Approval.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != gate.Cancelled || a.Reason != "Run stopped by owner" {
		t.Errorf("approval after Stop: %s %q, want cancelled %q", a.Status, a.Reason, "Run stopped by owner")
	}
	if got, want := h.toolResults()[1].Result.TextOf(), "Run stopped by owner"; got != want {
		t.Errorf("result %q, want %q", got, want)
	}
	if shells.Load() != 0 {
		t.Error("the stopped call ran")
	}
	// The session accepts messages again (the script is exhausted, which is a clear error).
	if err := h.runner.Send(ctx, h.sess.ID, "more"); err != nil {
		t.Fatalf("Send after Stop: %v", err)
	}
	h.await(agent.AgentEnd)
}

func TestBadCallsGiveErrorResultsAndTheRunContinues(t *testing.T) {
	script := `{"steps": [
	  {"content": [
	    {"type": "toolCall", "id": "a", "name": "nope", "arguments": {}},
	    {"type": "toolCall", "id": "b", "name": "peek", "arguments": {"path": 7, "extra": true}},
	    {"type": "toolCall", "id": "c", "name": "explode", "arguments": {}},
	    {"type": "toolCall", "id": "d", "name": "guarded", "arguments": {}},
	    {"type": "toolCall", "id": "e", "name": "checked", "arguments": {"path": "../x"}},
	    {"type": "toolCall", "id": "f", "name": "fragile", "arguments": {}}
	  ], "stopReason": "toolUse"},
	  {"content": [{"type": "text", "text": "ok"}], "stopReason": "stop"}
	]}`
	var peeks atomic.Int32
	explode := &tool.Tool{Name: "explode", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			panic("kaboom")
		}}
	guarded := readOnlyTool("guarded", &peeks)
	// checked and fragile need approval; their InputCheck stops them before the gate.
	var checkedWorkspace string
	checked := &tool.Tool{Name: "checked", InputSchema: objectSchema,
		InputCheck: func(_ json.RawMessage, workspace string) []tool.Violation {
			checkedWorkspace = workspace
			return []tool.Violation{{Pointer: "/path", Message: "must stay inside the workspace"}}
		},
		Execute: readOnlyTool("checked", &peeks).Execute}
	fragile := &tool.Tool{Name: "fragile", InputSchema: objectSchema,
		InputCheck: func(json.RawMessage, string) []tool.Violation { panic("oops") },
		Execute:    readOnlyTool("fragile", &peeks).Execute}
	var handled []string
	blockGuarded := func(_ context.Context, ev gate.CallEvent) (gate.Verdict, error) {
		handled = append(handled, ev.ToolCallID)
		if ev.ToolName == "guarded" {
			return gate.Verdict{Block: true, Reason: "guarded is off limits"}, nil
		}
		return gate.Verdict{}, nil
	}
	h := newHarness(t, script, gate.Handlers{blockGuarded}, readOnlyTool("peek", &peeks), explode, guarded, checked, fragile)
	if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	if end := h.await(agent.AgentEnd); end.Error != "" {
		t.Fatalf("run error %q", end.Error)
	}
	rs := h.toolResults()
	if len(rs) != 6 {
		t.Fatalf("%d tool results, want 6", len(rs))
	}
	checks := []struct {
		id       string
		contains []string
	}{
		{"a", []string{`Tool "nope" not found`}},
		{"b", []string{`Invalid arguments for tool "peek"`, "/path:", "(root):", `Received arguments: {"path": 7, "extra": true}`}},
		{"c", []string{"tool explode panicked: kaboom"}},
		{"d", []string{"guarded is off limits"}},
		{"e", []string{`Invalid arguments for tool "checked"`, "/path: must stay inside the workspace", `Received arguments: {"path": "../x"}`}},
		{"f", []string{`Invalid arguments for tool "fragile"`, "(root): the argument check of tool fragile panicked: oops"}},
	}
	for i, c := range checks {
		got := rs[i]
		if got.ToolCallID != c.id || !got.Result.IsError {
			t.Errorf("result %d: id %s isError %v, want %s with isError", i, got.ToolCallID, got.Result.IsError, c.id)
		}
		for _, s := range c.contains {
			if !strings.Contains(got.Result.TextOf(), s) {
				t.Errorf("result %s: %q does not contain %q", c.id, got.Result.TextOf(), s)
			}
		}
	}
	if peeks.Load() != 0 {
		t.Error("an invalid or blocked call ran")
	}
	if checkedWorkspace != h.sess.Workspace {
		t.Errorf("InputCheck got workspace %q, want the session's %q", checkedWorkspace, h.sess.Workspace)
	}
	// Stopped at step 2: no tool_call handler saw e or f, and no approval was stored.
	if got, want := strings.Join(handled, ","), "c,d"; got != want {
		t.Errorf("tool_call handler saw %s, want %s", got, want)
	}
	as, err := h.db.Approvals(context.Background(), h.sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.ToolName == "checked" || a.ToolName == "fragile" {
			t.Errorf("approval %s for %s %s, want none", a.Status, a.ToolName, a.ToolCallID)
		}
	}
	if got := h.entries()[len(h.entries())-1].Message.Text(); got != "ok" {
		t.Errorf("final text %q, want ok: the run must continue after bad calls", got)
	}
}

// TestAutomaticRecordsAreCommittedWithTheAssistantMessage: the decisions rules make for a
// model-issued batch (policy allowed, handler blocked) are committed with the assistant message,
// so when a call runs its message and its audit record are both in the store; calls that need a
// person are asked only after message_end, and the handler saw the calls in the model's order.
func TestAutomaticRecordsAreCommittedWithTheAssistantMessage(t *testing.T) {
	const script = `{"steps": [
  {"content": [{"type": "toolCall", "id": "c1", "name": "probe", "arguments": {}},
               {"type": "toolCall", "id": "c2", "name": "blocked", "arguments": {}},
               {"type": "toolCall", "id": "c3", "name": "shell", "arguments": {"command": "ls"}}], "stopReason": "toolUse"},
  {"content": [{"type": "text", "text": "done"}], "stopReason": "stop"}
]}`
	var seen []string
	handlers := gate.Handlers{func(_ context.Context, ev gate.CallEvent) (gate.Verdict, error) {
		seen = append(seen, ev.ToolCallID)
		if ev.ToolName == "blocked" {
			return gate.Verdict{Block: true, Reason: "not this one"}, nil
		}
		return gate.Verdict{}, nil
	}}
	var h *harness
	var probeSaw []gate.Approval
	var probeEntries int
	probe := &tool.Tool{Name: "probe", InputSchema: objectSchema, Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			var err error
			if probeSaw, err = h.db.Approvals(ctx, h.sess.ID, ""); err != nil {
				return tool.Result{}, err
			}
			es, err := h.db.Entries(ctx, h.sess.ID)
			probeEntries = len(es)
			return tool.Result{Content: []tool.Content{tool.Text("ok")}}, err
		}}
	var runs atomic.Int32
	counted := &countingStore{}
	h = newHarnessOver(t, script, agent.Config{CallHandlers: handlers}, func(db *sqlite.DB) agent.Store {
		counted.DB = db
		return counted
	}, probe, readOnlyTool("blocked", &runs), riskyTool("shell", &runs))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	var order []agent.EventType
	var prompt agent.Event
	for prompt.Type == "" {
		select {
		case ev := <-h.events.C:
			if ev.Type == agent.MessageEnd || ev.Type == agent.ApprovalRequested {
				order = append(order, ev.Type)
			}
			if ev.Type == agent.ApprovalRequested {
				prompt = *ev
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no approval_requested within 10s")
		}
	}
	if got := fmt.Sprint(order); got != "[message_end message_end approval_requested]" {
		t.Errorf("events %s, want the user's and the assistant's message_end before the prompt", got)
	}
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, prompt.Approval.ID, gate.Answer{Decision: "deny", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	h.await(agent.AgentEnd)
	if got := strings.Join(seen, ","); got != "c1,c2,c3" {
		t.Errorf("the handler saw %s, want c1,c2,c3 (model order)", got)
	}
	if probeEntries != 2 {
		t.Errorf("when probe ran the transcript had %d entries, want 2 (user, assistant)", probeEntries)
	}
	// When probe ran: its own record and the handler's block were stored (with the message),
	// and the prompt for shell (asked before the calls run).
	byCall := map[string]gate.Approval{}
	for _, a := range probeSaw {
		byCall[a.ToolCallID] = a
	}
	if a, ok := byCall["c1"]; !ok || !a.Automatic || a.Status != gate.Approved || a.DecidedBy != "policy" {
		t.Errorf("probe's own record when it ran: %+v (found %v), want automatic, approved by policy", a, ok)
	}
	if a, ok := byCall["c2"]; !ok || !a.Automatic || a.Status != gate.Denied || a.Reason != "not this one" {
		t.Errorf("the blocked call's record when probe ran: %+v (found %v), want automatic, denied", a, ok)
	}
	if runs.Load() != 0 {
		t.Errorf("a blocked or denied call ran %d times", runs.Load())
	}
	// One commit for the message and both records, none of its own for either record.
	if got := counted.recordsWithEntries.Load(); got != 2 {
		t.Errorf("%d records were stored with an entry, want 2", got)
	}
	if got := counted.approvalsAlone.Load(); got != 1 {
		t.Errorf("%d approvals were stored on their own, want 1 (shell's prompt)", got)
	}
}

// countingStore counts how approvals reach the store: with a transcript entry, or alone.
type countingStore struct {
	*sqlite.DB
	recordsWithEntries, approvalsAlone atomic.Int32
}

func (c *countingStore) AppendEntry(ctx context.Context, sessionID string, m agent.Message, records ...gate.Approval) (agent.Entry, error) {
	c.recordsWithEntries.Add(int32(len(records)))
	return c.DB.AppendEntry(ctx, sessionID, m, records...)
}

func (c *countingStore) CreateApproval(ctx context.Context, a gate.Approval) error {
	c.approvalsAlone.Add(1)
	return c.DB.CreateApproval(ctx, a)
}

// TestAnEditTheToolWouldRefuseIsRefusedInTheForm: edited arguments pass the tool's InputCheck
// as the model's do (SPEC §3: invalid edits are refused in the form); the approval stays pending
// and a valid edit still runs.
func TestAnEditTheToolWouldRefuseIsRefusedInTheForm(t *testing.T) {
	const script = `{"steps": [
	  {"content": [{"type": "toolCall", "id": "c1", "name": "put", "arguments": {"path": "in.txt"}}], "stopReason": "toolUse"},
	  {"content": [{"type": "text", "text": "ok"}], "stopReason": "stop"}
	]}`
	var got atomic.Value
	put := &tool.Tool{Name: "put", InputSchema: objectSchema,
		InputCheck: func(args json.RawMessage, _ string) []tool.Violation {
			if strings.Contains(string(args), "..") {
				return []tool.Violation{{Pointer: "/path", Message: "must stay inside the workspace"}}
			}
			return nil
		},
		Execute: func(_ context.Context, args json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			got.Store(string(args))
			return tool.Result{Content: []tool.Content{tool.Text("done")}}, nil
		}}
	h := newHarness(t, script, nil, put)
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	ev := h.await(agent.ApprovalRequested)
	_, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner(),
		Arguments: json.RawMessage(`{"path": "../out.txt"}`)})
	if apperr.CodeOf(err) != apperr.Invalid || !strings.Contains(apperr.MessageOf(err), "/path: must stay inside the workspace") {
		t.Fatalf("an edit outside the workspace: %v, want invalid naming /path", err)
	}
	if a, err := h.db.Approval(ctx, ev.Approval.ID); err != nil || a.Status != gate.Pending {
		t.Fatalf("after the refused edit the approval is %+v, %v; want still pending", a.Status, err)
	}
	if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner(),
		Arguments: json.RawMessage(`{"path": "other.txt"}`)}); err != nil {
		t.Fatal(err)
	}
	if end := h.await(agent.AgentEnd); end.Error != "" {
		t.Fatalf("run error %q", end.Error)
	}
	if s, _ := got.Load().(string); s != `{"path":"other.txt"}` {
		t.Fatalf("the call ran with %q, want the valid edit", s)
	}
}

// TestTheAuditListsABatchInTheModelsOrder: a batch's automatic records are committed with its
// message and its prompts stored after it, yet the audit (approvals in createdAt order) lists
// them in the model's order.
func TestTheAuditListsABatchInTheModelsOrder(t *testing.T) {
	const script = `{"steps": [
	  {"content": [
	    {"type": "toolCall", "id": "c1", "name": "shell", "arguments": {"command": "ls"}},
	    {"type": "toolCall", "id": "c2", "name": "peek", "arguments": {}},
	    {"type": "toolCall", "id": "c3", "name": "shell", "arguments": {"command": "pwd"}},
	    {"type": "toolCall", "id": "c4", "name": "peek", "arguments": {}}
	  ], "stopReason": "toolUse"},
	  {"content": [{"type": "text", "text": "ok"}], "stopReason": "stop"}
	]}`
	var peeks, shells atomic.Int32
	h := newHarness(t, script, nil, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ev := h.await(agent.ApprovalRequested)
		if _, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
			t.Fatal(err)
		}
	}
	h.await(agent.AgentEnd)
	as, err := h.db.Approvals(ctx, h.sess.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, a := range as {
		order = append(order, a.ToolCallID)
	}
	if got, want := strings.Join(order, ","), "c1,c2,c3,c4"; got != want {
		t.Fatalf("the audit lists %s, want the model's order %s", got, want)
	}
}

// TestRacingDecisionsGetOneAnswer: of decisions sent at once exactly one wins, and every loser
// gets the same "already resolved" answer naming the final status, whether it lost before or
// inside the store's atomic update.
func TestRacingDecisionsGetOneAnswer(t *testing.T) {
	var peeks, shells atomic.Int32
	h := newHarness(t, approveScript, nil, readOnlyTool("peek", &peeks), riskyTool("shell", &shells))
	ctx := context.Background()
	if err := h.runner.Send(ctx, h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	ev := h.await(agent.ApprovalRequested)
	const n = 16
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		decision := "approve"
		if i%2 == 1 {
			decision = "deny"
		}
		go func() {
			<-start
			_, err := h.runner.Gate().Decide(ctx, h.sess.ID, ev.Approval.ID, gate.Answer{Decision: decision, By: gate.Owner()})
			errs <- err
		}()
	}
	close(start)
	wins, messages := 0, map[string]int{}
	for range n {
		err := <-errs
		if err == nil {
			wins++
			continue
		}
		if apperr.CodeOf(err) != apperr.Conflict {
			t.Fatalf("a losing decision: %v, want conflict", err)
		}
		messages[apperr.MessageOf(err)]++
	}
	a, err := h.db.Approval(ctx, ev.Approval.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("This approval was already resolved: %s by owner.", a.Status.Word())
	if wins != 1 || len(messages) != 1 || messages[want] != n-1 {
		t.Fatalf("%d decisions won and the others got %v, want 1 and %d × %q", wins, messages, n-1, want)
	}
	h.await(agent.AgentEnd)
}
