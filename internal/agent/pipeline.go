package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// invocation is one call passing through the call pipeline of SPEC §3, from the model or nested.
// There is one pipeline: prepare (steps 1–4 up to the prompt), then complete (wait for the
// decision, execute, tool_result handlers, validation). Only storing differs (model calls only).
type invocation struct {
	call        tool.Call
	messageID   string // the assistant message whose call this is, or descends from
	requestedBy string // gate.RequestedByModel, or the parent tool's name
	tool        *tool.Tool

	early       *tool.Result      // set when the call stopped before executing
	needsPerson bool              // decide found a person must decide: ask opens the approval
	approval    *gate.Approval    // the approval ask stores, as decide built it
	status      tool.NestedStatus // for the parent's nestedCalls record
	ticket      *gate.Ticket
	parked      bool            // left waiting on its pending approval by a graceful shutdown: no result
	args        json.RawMessage // the arguments the call runs with
	start       time.Time

	// decision is the call's approval as decided, as the store keeps it: a rule's automatic
	// record, or the prompt's resolution. nil when the gate was not consulted. Its events
	// (tool_execution_start, tool_execution_end) carry it, so a live page shows the decision
	// line a reloaded one shows, also for a call no prompt announced.
	decision *gate.Approval

	children atomic.Int64 // nested call counter, for ids <id>/<n>
	nested   nestedLog
	// execCtx is the context the call executes under; nested calls are cancelled with it.
	execCtx context.Context
	// finished is set once execute has returned: later nested calls are refused.
	finished atomic.Bool

	// inside marks an action of a running call that the gate authorizes (toolContext.Authorize):
	// it is decided and shown like a nested call, but nothing executes: the parent does the
	// action itself once it is approved.
	inside bool
	// uncovered is CheckCall.Uncovered for such an action: why no rule may allow it.
	uncovered string
	// argumentsError is Block.ArgumentsError of a model-issued call: the arguments the model
	// streamed could not be read, so the call stops with an error result (SPEC §9).
	argumentsError string

	// parent is a nested call's parent (nil for a model-issued call).
	parent *invocation
	// tc is the call's tool.Context, kept here so that executing it allocates none.
	tc toolContext
	// What a nested call's events and records point to, kept in the invocation so that a call
	// allocates nothing more for them (issue 35); each is set once, before it is published.
	// record is the call's approval as decide built it: the automatic record of a rule's
	// decision (decision points to it, its DecidedAt to decidedAt), or the pending approval
	// ask opens (approval points to it). result and kept are a nested call's result and its
	// entry in the parent's nestedCalls record, as its tool_execution_end carries them.
	record    gate.Approval
	decidedAt time.Time
	result    tool.Result
	kept      tool.NestedCall
	// groups are the audit groups of this call's nested calls (auditGroups).
	groups auditGroups
	// ctx is a nested call's context when its tool passed in its own (callContext).
	ctx callContext
	// live is where a nested call's LiveCall is kept (liveSlot).
	live LiveCall
}

// liveSlot is where the live state keeps the call's LiveCall: in a nested call's invocation,
// which its events point into already (record, result, kept) — nil for a model-issued call,
// whose invocation the live state should not keep for the whole run.
func (inv *invocation) liveSlot() *LiveCall {
	if inv.parent == nil {
		return nil
	}
	return &inv.live
}

// prepare runs steps 1–4 of the pipeline: find the tool (by exposure), validate its arguments
// (inputSchema, then the tool's InputCheck), run the tool_call handlers, apply the approval
// policy and, when a person must decide, store and show the approval. A call that stops here
// gets inv.early.
func (rn *run) prepare(ctx context.Context, inv *invocation, nested bool) {
	if rn.decide(ctx, inv, nested, nil) {
		rn.ask(ctx, inv)
	}
}

// decide runs steps 1–4 up to the prompt and reports whether a person must decide the call
// (then ask stores and shows the approval). The automatic record of a decision a rule made goes
// to records when it is not nil (a model-issued batch: the records are committed with the
// assistant message, before any of its calls runs); else a nested call's goes to the background
// audit writer and a model-issued call's is stored at once.
func (rn *run) decide(ctx context.Context, inv *invocation, nested bool, records *[]gate.Approval) (needsPerson bool) {
	r := rn.r
	inv.start = time.Now()
	inv.args = inv.call.Arguments
	if len(inv.args) == 0 {
		inv.args = json.RawMessage("{}")
		inv.call.Arguments = inv.args
	}
	t, ok := r.cfg.Tools.Lookup(inv.call.Name)
	active := ok && rn.isActive(t.Name)
	if !ok || (!nested && !tool.CallableByModel(t, active)) || (nested && !tool.CallableNested(t, active)) {
		inv.stop(tool.NotFound(inv.call.Name), tool.NestedError)
		return false
	}
	inv.tool = t
	if inv.argumentsError != "" {
		// The model gets the reason and may send the call again; the run goes on (SPEC §9).
		inv.stop(tool.ErrorResult("Invalid arguments for tool %q: %s\nSend the call again with its arguments as one JSON object.",
			t.Name, inv.argumentsError), tool.NestedError)
		return false
	}
	vs := t.ValidateInput(inv.args)
	if len(vs) == 0 {
		vs = t.CheckInput(inv.args, rn.session.Workspace)
	}
	if len(vs) > 0 {
		inv.stop(tool.InvalidArguments(t.Name, vs, inv.args), tool.NestedError)
		return false
	}
	approval := gate.Approval{
		SessionID: rn.session.ID, MessageID: inv.messageID, ToolCallID: inv.call.ID,
		ParentToolCallID: inv.call.ParentToolCallID, ToolName: t.Name, ToolTitle: t.Title,
		Arguments: inv.args, Annotations: t.Annotations, RequestedBy: inv.requestedBy,
	}
	parent := ""
	if nested {
		parent = inv.requestedBy
	}
	// Steps 3–4 (SPEC §3, §14): the gate decides, in one place, for model-issued and nested calls.
	d := r.checker.Check(ctx, gate.CheckCall{SessionID: rn.session.ID, ToolCallID: inv.call.ID,
		ParentToolCallID: inv.call.ParentToolCallID, Parent: parent, Tool: t, Arguments: inv.args,
		Workspace: rn.session.Workspace, Mode: r.sessions.mode(rn.session), Uncovered: inv.uncovered})
	if inv.inside && d.Outcome == gate.Asked {
		// An action inside a running call is approved or denied as it is (gate.Service.Decide): no
		// edit, grant or rule from its prompt, and no later rule releases it.
		d.Source = gate.FromAction
	}
	approval = d.Record(approval)
	switch d.Outcome {
	case gate.Blocked:
		inv.decision = rn.recordRule(ctx, inv, approval, nested, records)
		status := tool.NestedBlocked
		if d.Source != gate.FromHandler {
			status = tool.NestedDenied
		}
		inv.stop(tool.ErrorResult("%s", d.Reason), status)
		return false
	case gate.Allowed:
		// A nested call's record goes to the background audit writer, committed before its
		// model-issued ancestor's result (auditLog), also when a rule allowed it: a tool may
		// make thousands of calls a person's rule lets through, which the audit groups.
		inv.decision = rn.recordRule(ctx, inv, approval, nested, records)
		return false
	}
	// Stamped now, in the model's order with the batch's automatic records (Gate.Automatic),
	// though ask stores it only after the message.
	approval.CreatedAt = time.Now().UTC()
	approval.Preview = gate.Preview(ctx, t, inv.args, rn.session.Workspace)
	inv.record = approval
	inv.approval = &inv.record
	return true
}

// ask stores and shows the approval of a call decide found needs a person.
func (rn *run) ask(ctx context.Context, inv *invocation) {
	r, approval := rn.r, *inv.approval
	ticket, err := r.gate.Open(context.WithoutCancel(ctx), approval)
	if err != nil {
		r.log.Error("open approval", "session", rn.session.ID, "call", inv.call.ID, "err", err)
		inv.stop(tool.ErrorResult("The approval could not be stored, so the call did not run."), tool.NestedError)
		return
	}
	inv.ticket = ticket
	// A rule made (or a mode switched) while this approval was being stored would have missed
	// it: look again.
	r.gs.Release(context.WithoutCancel(ctx), []gate.Approval{ticket.Approval})
}

// recordRule records a decision the gate made without a person (gate.Checker.Check) for inv and
// returns it as recorded (nil when it could not be). A nested call's goes to the background
// audit writer (see auditLog for why, what durability it has, and how allowed calls are
// grouped: the record returned then has the group's id), kept in inv.record; a model-issued
// call's is stored before the call goes on: with its assistant message when records is not
// nil, else at once.
func (rn *run) recordRule(ctx context.Context, inv *invocation, a gate.Approval, nested bool, records *[]gate.Approval) *gate.Approval {
	switch {
	case nested:
		inv.record = a
		var groups *auditGroups
		if inv.parent != nil {
			groups = &inv.parent.groups
		}
		rn.r.audit.addTo(&inv.record, &inv.decidedAt, groups, rn.lease)
		return &inv.record
	case records != nil:
		return rn.defer1(a, records)
	default:
		return rn.record(ctx, a)
	}
}

// defer1 stamps a as an automatic decision made now and adds it to records, to be stored with
// the assistant message; it returns the record (nil when a has no final status).
func (rn *run) defer1(a gate.Approval, records *[]gate.Approval) *gate.Approval {
	a, err := rn.r.gate.Automatic(a)
	if err != nil {
		rn.r.log.Error("record automatic decision", "session", a.SessionID, "call", a.ToolCallID, "err", err)
		return nil
	}
	*records = append(*records, a)
	return &a
}

// record stores an automatic decision for the audit and returns it as stored; failing to store
// it is logged, not fatal (nil then: there is no decision to show).
func (rn *run) record(ctx context.Context, a gate.Approval) *gate.Approval {
	a, err := rn.r.gate.Record(context.WithoutCancel(ctx), a)
	if err != nil {
		rn.r.log.Error("record automatic decision", "session", a.SessionID, "call", a.ToolCallID, "err", err)
		return nil
	}
	return &a
}

func (inv *invocation) stop(res tool.Result, status tool.NestedStatus) {
	inv.early, inv.status = &res, status
}

// complete waits for the call's approval, if any, then executes it (steps 4–6) and returns the
// final result with its duration.
func (rn *run) complete(ctx context.Context, inv *invocation) tool.Result {
	res := rn.decideAndExecute(ctx, inv)
	if res.Interrupted == nil { // a call a restart interrupted: it ran in the earlier process
		res.DurationMs = time.Since(inv.start).Milliseconds()
	}
	if o := rn.r.cfg.Observer; o != nil && !inv.parked {
		observe(o, inv, res)
	}
	return res
}

// observe tells o how inv ended (Observer.ToolCall) and, when a person decided it, how long the
// decision took and how soon the call started after it (Observer.Decided).
func observe(o Observer, inv *invocation, res tool.Result) {
	outcome := string(inv.status) // the metrics' outcomes: the status, or what ended the call
	switch {
	case res.Interrupted != nil:
		outcome = "interrupted"
	case inv.decision != nil && inv.decision.Status == gate.TimedOut:
		outcome = "timed_out"
	case inv.decision != nil && inv.decision.Status == gate.Cancelled, inv.status == tool.NestedUnfinished:
		outcome = "cancelled"
	case outcome == "" && res.IsError:
		outcome = "error"
	case outcome == "":
		outcome = "ok"
	}
	o.ToolCall(inv.call.Name, outcome)
	if a := inv.decision; a != nil && !a.Automatic && a.DecidedAt != nil &&
		(a.Status == gate.Approved || a.Status == gate.Denied) {
		var start time.Duration
		if a.Status == gate.Approved && !inv.start.IsZero() {
			start = max(inv.start.Sub(*a.DecidedAt), 0)
		}
		o.Decided(max(a.DecidedAt.Sub(a.CreatedAt), 0), start)
	}
}

func (rn *run) decideAndExecute(ctx context.Context, inv *invocation) tool.Result {
	if inv.early != nil {
		return *inv.early
	}
	if inv.ticket != nil {
		a := inv.ticket.Wait(ctx)
		if a.Status == gate.Pending {
			// A graceful shutdown (gate.ErrParked). A model-issued call stays parked for the
			// next process: no result is stored for it. A nested call cannot outlive its
			// parent, which is stopped: its approval is cancelled.
			if inv.call.ParentToolCallID == "" {
				inv.parked = true
				return tool.Result{}
			}
			a = inv.ticket.Cancel(context.Cause(ctx).Error())
		}
		inv.decision = &a
		switch a.Status {
		case gate.Approved:
			inv.args = a.EffectiveArguments()
			if err := rn.r.replica.markStarted(ctx, inv, a); err != nil {
				inv.status = tool.NestedError
				return tool.ErrorResult("The call did not run: its start could not be recorded (%v)", err)
			}
		case gate.Denied:
			inv.status = tool.NestedDenied
			if a.Reason != "" {
				return tool.ErrorResult("Denied by %s: %s", a.DecidedBy, a.Reason)
			}
			return tool.ErrorResult("Denied by %s", a.DecidedBy)
		case gate.TimedOut:
			inv.status = tool.NestedDenied
			return tool.ErrorResult("Approval timed out: %s; the call did not run", a.Reason)
		default:
			inv.status = tool.NestedUnfinished
			return tool.ErrorResult("%s", a.Reason)
		}
	}
	if ctx.Err() != nil {
		inv.status = tool.NestedUnfinished
		return cancelledResult(ctx)
	}
	return rn.execute(ctx, inv)
}

// execute runs the tool (step 5) with panics recovered, then the tool_result handlers and the
// result rules of SPEC §1 (step 6).
func (rn *run) execute(ctx context.Context, inv *invocation) tool.Result {
	r, t := rn.r, inv.tool
	if inv.call.ParentToolCallID == "" && !inv.inside {
		// A draining server (Runner.Drain) starts no model-issued call; one begun goes on
		// (its nested calls too) and is waited for.
		if !r.beginExecuting() {
			<-ctx.Done()
			inv.status = tool.NestedUnfinished
			return cancelledResult(ctx)
		}
		defer r.endExecuting()
	}
	// durationMs is the tool's own time: the wait for a person's decision does not count.
	inv.start = time.Now()
	rn.publishCall(Event{Type: ToolExecutionStart, SessionID: rn.session.ID, MessageID: inv.messageID,
		ToolCallID: inv.call.ID, ParentToolCallID: inv.call.ParentToolCallID, ToolName: t.Name, Arguments: inv.args,
		Approval: inv.decision}, inv.liveSlot())
	inv.execCtx = ctx
	if inv.inside {
		// An action of the running parent, now approved: the parent takes it (Authorize). Its
		// arguments only describe what the parent is about to do: an edit of them would approve
		// an action the parent does not take, so an edited approval refuses it.
		inv.finished.Store(true)
		if !bytes.Equal(inv.args, inv.call.Arguments) {
			inv.status = tool.NestedError
			return tool.ErrorResult("The approval edited the description of an action inside %s %s; an action cannot be edited, so it was not taken", inv.requestedBy, inv.call.ParentToolCallID)
		}
		inv.status = tool.NestedOK
		return tool.Result{Content: []tool.Content{tool.Text("Approved: " + inv.requestedBy + " " + inv.call.ParentToolCallID + " goes on with it.")}}
	}
	inv.tc = toolContext{rn: rn, inv: inv}
	res, err := safeExecute(ctx, t, inv.args, inv.tc.update, &inv.tc)
	inv.finished.Store(true)
	inv.tc.flush()
	if ctx.Err() != nil && (err != nil || res.IsError) {
		// Stopped: the call was cancelled, whatever the tool made of its cancellation.
		res, err = tool.ErrorResult("%s", context.Cause(ctx).Error()), nil
	}
	call := inv.call
	call.Arguments = inv.args
	for _, h := range r.cfg.ResultHandlers {
		if err == nil {
			res = h(ctx, call, res)
		}
	}
	res = t.Finalize(res, err)
	res.NestedCalls = inv.nested.record()
	switch {
	case ctx.Err() != nil && res.IsError:
		inv.status = tool.NestedUnfinished
		res.Stopped = stoppedBy(ctx)
	case res.IsError:
		inv.status = tool.NestedError
	default:
		inv.status = tool.NestedOK
	}
	return res
}

// safeExecute calls the tool's execute, turning a panic into an error (SPEC §1 rule 2).
func safeExecute(ctx context.Context, t *tool.Tool, args json.RawMessage, onUpdate func(tool.Update), tc tool.Context) (res tool.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tool %s panicked: %v", t.Name, p)
		}
	}()
	return t.Execute(ctx, args, onUpdate, tc)
}

// decideBatch runs steps 1–4 up to the prompt for one assistant message's tool calls, in the
// model's order (SPEC §2: lookup, validation and handlers in order), before the message is
// stored. It returns the invocations and the automatic records of the decisions rules made,
// which the caller commits in the same transaction as the message: each record is stored
// before its call runs, and a turn costs one commit fewer.
func (rn *run) decideBatch(msg Message) ([]*invocation, []gate.Approval) {
	calls := msg.ToolCalls()
	invs := make([]*invocation, len(calls))
	records := make([]gate.Approval, 0, len(calls))
	for i, c := range calls {
		invs[i] = &invocation{
			call:      tool.Call{ID: c.ID, Name: c.Name, Arguments: c.Arguments},
			messageID: msg.ID, requestedBy: gate.RequestedByModel, argumentsError: c.ArgumentsError,
		}
		invs[i].needsPerson = rn.decide(rn.ctx, invs[i], false, &records)
	}
	return invs, records
}

// runBatch runs one stored assistant message's tool calls (SPEC §2), decided by decideBatch:
// every needed approval is open at once and decided in any order; calls execute concurrently
// (sequential tools one at a time); results are stored in the model's order, each committed
// before its tool_execution_end is broadcast.
func (rn *run) runBatch(store context.Context, msg Message, invs []*invocation) error {
	for _, inv := range invs {
		if inv.needsPerson {
			rn.ask(rn.ctx, inv)
		}
	}
	return rn.finishBatch(store, msg, invs)
}

// finishBatch waits for the batch's approvals, executes the calls concurrently and stores their
// results in the model's order, each committed before its tool_execution_end.
func (rn *run) finishBatch(store context.Context, msg Message, invs []*invocation) error {
	var sequential sync.Mutex
	done := make([]chan tool.Result, len(invs))
	for i, inv := range invs {
		done[i] = make(chan tool.Result, 1)
		go func() {
			if inv.tool != nil && inv.tool.Sequential && inv.early == nil {
				sequential.Lock()
				defer sequential.Unlock()
			}
			done[i] <- rn.complete(rn.ctx, inv)
		}()
	}
	var storeErr error
	parked := false
	for i, inv := range invs {
		res := <-done[i]
		// After a parked call nothing more of the batch is stored: results stay in the model's
		// order, and the next process's Recover gives the later calls theirs (as after a kill).
		parked = parked || inv.parked
		if storeErr != nil || parked {
			continue // drain the others; nothing more is stored
		}
		if inv.children.Load() > 0 {
			// The audit records of the call's nested calls are committed before its result.
			rn.r.audit.flush()
		}
		m := Message{ID: newID(), Role: ToolResult, ToolCallID: inv.call.ID, ToolName: inv.call.Name,
			Result: &res, Timestamp: time.Now().UTC()}
		if err := rn.append(store, m); err != nil {
			storeErr = err
			continue
		}
		rn.committed(m)
		rn.publish(Event{Type: ToolExecutionEnd, SessionID: rn.session.ID, MessageID: msg.ID,
			ToolCallID: inv.call.ID, ToolName: inv.call.Name, Arguments: inv.args, Result: &res, Message: &m,
			Approval: inv.decision})
	}
	if storeErr == nil && parked {
		return errParked
	}
	return storeErr
}

// errParked ends a run that a graceful shutdown left parked on pending approvals (Runner.Shutdown):
// the session stays running in the store for the next process's Recover.
var errParked = fmt.Errorf("%w by a server shutdown", gate.ErrParked)

func (rn *run) isActive(name string) bool {
	active := rn.active.Load()
	if active == nil {
		// Once per model request (streamMessage resets it), not once per call: a tool may make
		// thousands of nested calls, and the registry's default set is computed by sorting.
		m := map[string]bool{}
		for _, n := range rn.r.ActiveTools(rn.session) {
			m[n] = true
		}
		rn.active.Store(&m)
		active = &m
	}
	return (*active)[name]
}

// toolContext is the tool.Context of one running call, and its onUpdate (update).
type toolContext struct {
	rn  *run
	inv *invocation

	// updates coalesces the call's progress reports into tool_execution_update events: made on
	// the first report, since most calls make none (issue 35); flushed once execute returns,
	// when later reports are dropped.
	mu      sync.Mutex
	updates *throttle[tool.Update]
	flushed bool
}

// update is the onUpdate callback the running call is given.
func (tc *toolContext) update(u tool.Update) {
	tc.mu.Lock()
	if tc.flushed {
		tc.mu.Unlock()
		return
	}
	if tc.updates == nil {
		rn, inv := tc.rn, tc.inv
		tc.updates = newThrottle(func(u tool.Update) {
			rn.publish(Event{Type: ToolExecutionUpdate, SessionID: rn.session.ID, MessageID: inv.messageID,
				ToolCallID: inv.call.ID, ParentToolCallID: inv.call.ParentToolCallID, ToolName: inv.tool.Name, Update: &u})
		})
	}
	t := tc.updates
	tc.mu.Unlock()
	t.update(u)
}

// flush publishes the last pending progress report, if any, and drops later ones.
func (tc *toolContext) flush() {
	tc.mu.Lock()
	t := tc.updates
	tc.flushed = true
	tc.mu.Unlock()
	if t != nil {
		t.flush()
	}
}

func (tc *toolContext) ToolCallID() string { return tc.inv.call.ID }
func (tc *toolContext) SessionID() string  { return tc.rn.session.ID }
func (tc *toolContext) Workspace() string  { return tc.rn.session.Workspace }

var _ tool.NestedTools = (*toolContext)(nil)

// NestedTools lists the tools the running call may call (tool.NestedTools), sorted by name.
func (tc *toolContext) NestedTools() []string {
	var out []string
	for _, t := range tc.rn.r.cfg.Tools.All() {
		if tool.CallableNested(t, tc.rn.isActive(t.Name)) {
			out = append(out, t.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Consent says how the running call came to run: a person approved it when its decision is a
// person's approval, not an automatic record (a rule, grant, mode or annotation default), and
// Preview is what their prompt showed. A call without a decision (a restart's recovery that
// found none) counts as not approved by a person: its actions are checked.
func (tc *toolContext) Consent() tool.Consent {
	a := tc.inv.decision
	if a == nil || a.Automatic || a.Status != gate.Approved {
		return tool.Consent{}
	}
	return tool.Consent{ByPerson: true, Preview: a.Preview}
}

// Authorize decides one action of the running call (tool.Context.Authorize, SPEC §14 "Checked
// where it happens"). The rules are asked first, without a record: a program a rule covers
// starts with no entry in the card (a command may start thousands). A deny rule, or what the
// rules leave to a person, goes through the nested pipeline (decide, record, prompt), so it shows
// in the parent's card and in the audit like any nested call.
func (tc *toolContext) Authorize(ctx context.Context, name string, arguments any, uncovered string) tool.Authorization {
	parent, rn := tc.inv, tc.rn
	raw, err := marshalArguments(arguments)
	if err != nil {
		return tool.Authorization{Reason: fmt.Sprintf("the action cannot be described as a call of %s: %v", name, err)}
	}
	t, ok := rn.r.cfg.Tools.Lookup(name)
	if !ok {
		return tool.Authorization{Reason: fmt.Sprintf("no tool %s to decide the action by", name)}
	}
	// The rules' hits are counted once per action: here when the action starts on this look
	// alone, else by the nested pipeline's decision.
	check := gate.Checker{Handlers: rn.r.checker.Handlers, Rules: gate.EvalOnly{E: rn.r.rules}}
	d := check.Check(ctx, gate.CheckCall{SessionID: rn.session.ID, ToolCallID: parent.call.ID,
		ParentToolCallID: parent.call.ID, Parent: parent.call.Name, Tool: t, Arguments: raw,
		Workspace: rn.session.Workspace, Mode: rn.r.sessions.mode(rn.session)})
	denied := d.Outcome == gate.Blocked && d.Source == gate.FromRule
	switch {
	case !denied && tc.Consent().ByPerson:
		return tool.Authorization{Allowed: true}
	case !denied && uncovered == "" && d.Outcome == gate.Allowed:
		if d.Source == gate.FromRule && d.Rule != nil {
			d.CountHits(rn.r.rules)
		}
		return tool.Authorization{Allowed: true}
	}
	out, child := tc.nested(ctx, name, raw, nil, func(inv *invocation) { inv.inside, inv.uncovered = true, uncovered })
	if !out.IsError && child.status == tool.NestedOK {
		return tool.Authorization{Allowed: true, Nested: true}
	}
	text, _ := out.Result.ModelTextPrefix(1 << 10)
	return tool.Authorization{Reason: text, Nested: child.ticket != nil}
}

// ExecuteTool runs a nested call through the same pipeline as a model call (SPEC §4). The call id
// is <parent id>/<n>; it adds no transcript entry; the parent's result records it.
func (tc *toolContext) ExecuteTool(ctx context.Context, name string, arguments any) tool.Outcome {
	raw, err := marshalArguments(arguments)
	out, _ := tc.nested(ctx, name, raw, err, nil)
	return out
}

// nested runs one nested call of the running call through the pipeline; argErr is why its
// arguments are not a JSON object (nil when they are); mark, when set, marks the child
// invocation before it is decided (an Authorize action).
func (tc *toolContext) nested(ctx context.Context, name string, raw json.RawMessage, argErr error, mark func(*invocation)) (tool.Outcome, *invocation) {
	parent, rn := tc.inv, tc.rn
	if parent.finished.Load() {
		// The parent has returned and its nestedCalls record is taken: nothing may run under it.
		res := tool.ErrorResult("Tool %q cannot call %q: the call %s has already finished", parent.call.Name, name, parent.call.ID)
		return tool.Outcome{ToolCall: tool.Call{Name: name, ParentToolCallID: parent.call.ID}, Result: res, IsError: true}, &invocation{status: tool.NestedError}
	}
	id := childID(parent.call.ID, parent.children.Add(1))
	child := &invocation{
		call:      tool.Call{ID: id, ParentToolCallID: parent.call.ID, Name: name, Arguments: raw},
		messageID: parent.messageID, requestedBy: parent.call.Name, parent: parent,
	}
	// Cancelling the parent cancels its nested calls, whatever context the tool passes in; the
	// nested call's context ends when it returns, so nothing it left running outlives it. A tool
	// that passes its own context (the usual case) needs no watch on the parent's: it descends
	// from it, and the call's context is made only if something waits on it (callContext).
	if given := ctx; parent.execCtx == nil || given == parent.execCtx {
		child.ctx.Context = given
		ctx = &child.ctx
		defer child.ctx.end()
	} else {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(given)
		defer cancel(nil)
		stop := context.AfterFunc(parent.execCtx, func() { cancel(context.Cause(parent.execCtx)) })
		defer stop()
	}
	if mark != nil {
		mark(child)
	}
	switch {
	case argErr != nil:
		child.start = time.Now()
		child.stop(tool.ErrorResult("Arguments for tool %q are not a JSON object: %v", name, argErr), tool.NestedError)
	case ctx.Err() != nil:
		// Stopped: the call is not looked up, checked or recorded; it never runs.
		child.start = time.Now()
		child.stop(cancelledResult(ctx), tool.NestedUnfinished)
	default:
		rn.prepare(ctx, child, true)
	}
	child.result = rn.complete(ctx, child)
	res := &child.result
	// The parent's record keeps the call, bounded; its tool_execution_end carries the entry as
	// kept, so a live page draws the finished call from the same data a reloaded one does.
	entry := tool.NestedCall{ID: id, Name: name, Arguments: child.args, Status: child.status,
		DurationMs: res.DurationMs, Violation: res.ContractViolation != nil}
	if child.decision != nil {
		// The call's audit record: for an allowed call its group's, which names only the first.
		entry.ApprovalID = child.decision.ID
	}
	text, cut := res.ModelTextPrefix(maxNestedTextBytes)
	if res.IsError {
		entry.Error = text
	} else {
		entry.Result = text
	}
	entry.Truncated = cut
	ev := Event{Type: ToolExecutionEnd, SessionID: rn.session.ID, MessageID: child.messageID,
		ToolCallID: id, ParentToolCallID: parent.call.ID, ToolName: name, Arguments: child.args, Result: res,
		Approval: child.decision}
	var ok bool
	if child.kept, ok = parent.nested.add(entry); ok {
		ev.NestedCall = &child.kept
	}
	rn.publishCall(ev, child.liveSlot())
	call := child.call
	call.Arguments = child.args
	return tool.Outcome{ToolCall: call, Result: *res, IsError: res.IsError, DurationMs: res.DurationMs}, child
}

// childID is the id of a parent call's n-th nested call, "<parent>/<n>", made with one
// allocation (the string).
func childID(parent string, n int64) string {
	var buf [64]byte
	b := append(buf[:0], parent...)
	b = append(b, '/')
	return string(strconv.AppendInt(b, n, 10))
}

func marshalArguments(v any) (json.RawMessage, error) {
	var raw json.RawMessage
	switch a := v.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		raw = a
	case []byte:
		raw = a
	default:
		b, err := json.Marshal(a)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	// The common case, a JSON object, is checked without decoding it (json.Valid allocates
	// nothing); anything else is decoded for the error's text.
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) > 0 && t[0] == '{' && json.Valid(raw) {
		return raw, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	return raw, nil
}

// The nestedCalls bounds of SPEC §4: calls, arguments per call and in all; and the result (or
// error) text kept per call and in all.
const (
	maxNestedCalls        = 256
	maxNestedArgBytes     = 8 << 10
	maxNestedAllBytes     = 32 << 10
	maxNestedTextBytes    = 4 << 10
	maxNestedAllTextBytes = 64 << 10
)

// nestedLog collects a call's nested calls into the bounded record of SPEC §4.
type nestedLog struct {
	mu        sync.Mutex
	calls     []tool.NestedCall
	argBytes  int // arguments kept (placeholders for cut ones do not count)
	textBytes int // result and error text kept
	cut       bool
}

// add keeps c in the record, bounded, and returns the entry as kept; ok is false when the record
// already holds maxNestedCalls calls (c is left out and the record marked incomplete).
// Arguments that do not fit (8 KiB each, 32 KiB in all) are replaced by a JSON string saying so;
// result and error text is cut to 4 KiB (as the caller passes it, with c.Truncated set when it
// was longer) and to what is left of 64 KiB in all. A call with anything cut is marked
// Truncated, and the record incomplete.
func (l *nestedLog) add(c tool.NestedCall) (kept tool.NestedCall, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) >= maxNestedCalls {
		l.cut = true
		return tool.NestedCall{}, false
	}
	if len(c.Arguments) > maxNestedArgBytes || l.argBytes+len(c.Arguments) > maxNestedAllBytes {
		c.Arguments = json.RawMessage(strconv.Quote(fmt.Sprintf("(arguments cut: %d bytes)", len(c.Arguments))))
		c.Truncated = true
	} else {
		l.argBytes += len(c.Arguments)
	}
	var cutErr, cutRes bool
	c.Error, cutErr = l.keepText(c.Error)
	c.Result, cutRes = l.keepText(c.Result)
	if cutErr || cutRes {
		c.Truncated = true
	}
	if c.Truncated {
		l.cut = true
	}
	l.calls = append(l.calls, c)
	return c, true
}

// keepText returns s cut to what the per-call and total text bounds leave (at a UTF-8 boundary)
// and counts what it keeps; cut reports whether anything was left out.
func (l *nestedLog) keepText(s string) (_ string, cut bool) {
	n := min(maxNestedTextBytes, maxNestedAllTextBytes-l.textBytes)
	if len(s) > n {
		s, cut = tool.CutUTF8(s, n), true
	}
	l.textBytes += len(s)
	return s, cut
}

func (l *nestedLog) record() *tool.NestedCalls {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) == 0 && !l.cut {
		return nil
	}
	return &tool.NestedCalls{Calls: append([]tool.NestedCall(nil), l.calls...), Complete: !l.cut}
}

// cancelledResult is the error result of a call whose context ended before it ran: the cause's
// text ("Run stopped by <who>" for a Stop), Stopped when a Stop or a shutdown ended it.
func cancelledResult(ctx context.Context) tool.Result {
	res := tool.ErrorResult("%s", context.Cause(ctx).Error())
	res.Stopped = stoppedBy(ctx)
	return res
}

// stoppedBy reports whether ctx ended because its run was stopped (StoppedError: Stop, a
// graceful shutdown, a lost lease).
func stoppedBy(ctx context.Context) bool {
	var stopped *StoppedError
	return errors.As(context.Cause(ctx), &stopped)
}
