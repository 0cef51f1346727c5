package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/tool"
)

// Outside calls (SPEC §18): the third source of calls. An outside agent (Claude Code, Codex…)
// asks, through its hooks, whether a tool call of its own may run; Countersign does not run it,
// it answers. The call passes the same pipeline as the loop's calls — rules (on the agent's tool
// names: Bash(git diff:*), Edit(docs/**)…), the session's mode, the agent's read-only tools
// allowed by default, then a pending Approval (the same rows: the inbox, webhooks, decision
// links, several approvers, share links and the audit serve it) — held until a person decides or
// the agent's deadline. Service.DecideOutside is the entry point; Service.Decide decides the
// approval as it decides any other.

// RequestedByAgent is Approval.RequestedBy for an outside agent's call (SPEC §18).
const RequestedByAgent = "agent"

// OutsideCall is what the gate keeps of an outside call beside its Approval: the key that pairs
// the agent's events about it (a PreToolUse and its PermissionRequest, hooks.MatchKey), the
// event that asked first, whether the agent honours an edited input there, when the agent
// stopped waiting (the deadline passed with no decision: a later decision is too late), and
// the outcome the agent reported (PostToolUse's tool_response).
type OutsideCall struct {
	ApprovalID string
	SessionID  string
	ToolUseID  string // "" for a call first seen on a PermissionRequest
	MatchKey   string
	// EditedKey is, once a person approved the call with an edited input, that input's match
	// key: the agent's later events about the call carry the edited input (Codex's
	// PermissionRequest after a PreToolUse's updatedInput); "" otherwise.
	EditedKey string
	Event     string // "PreToolUse" | "PermissionRequest"
	Editable  bool
	// StoppedWaitingAt is when the agent stopped waiting for a person (nil: it waits, or a
	// decision came in time).
	StoppedWaitingAt *time.Time
	Outcome          json.RawMessage // the agent's report of what happened; nil before it
	OutcomeAt        *time.Time
	CreatedAt        time.Time
	// Deadline is when the agent stops waiting for a decision (OutsideRequest.Deadline of the
	// event that created the call, or of the last that asked again about it while pending); nil
	// for a call stored without one.
	Deadline *time.Time
	// ClaimedAt is when the call's decision was taken to run or refuse it (Door 2,
	// store.ClaimOutsideCall): a decision is used once; nil before.
	ClaimedAt *time.Time
	// Cwd is the agent's working directory as the event that created the call reported it
	// (OutsideRequest.Cwd): where its command runs and its relative paths open; "" when none.
	Cwd string
}

// TooLate reports whether a, this call's approval, was decided by a person after the agent
// stopped waiting: the decision is stored and shown, never sent ("too late — not applied").
func (c OutsideCall) TooLate(a Approval) bool {
	return c.StoppedWaitingAt != nil && a.Status != Pending && !a.Automatic && a.DecidedAt != nil &&
		a.DecidedAt.After(*c.StoppedWaitingAt)
}

// OutsideStore keeps outside calls beside their approvals (internal/store).
type OutsideStore interface {
	CreateOutsideCall(ctx context.Context, c OutsideCall) error
	// CreateDecidedOutsideCall stores an automatic approval and its outside call in one
	// transaction, not synced (a call a rule decided: no fsync on the answer's path, issue 35).
	CreateDecidedOutsideCall(ctx context.Context, a Approval, c OutsideCall) error
	// OutsideCall is approval approvalID's outside call; apperr.NotFound.
	OutsideCall(ctx context.Context, approvalID string) (OutsideCall, error)
	// OutsideCallByKey is the session's latest call with the match key; apperr.NotFound.
	OutsideCallByKey(ctx context.Context, sessionID, key string) (OutsideCall, error)
	// OutsideCallByToolUse is the session's latest call with the tool_use_id; apperr.NotFound.
	OutsideCallByToolUse(ctx context.Context, sessionID, toolUseID string) (OutsideCall, error)
	// MarkStoppedWaiting sets (nil: clears) when the agent stopped waiting.
	MarkStoppedWaiting(ctx context.Context, approvalID string, at *time.Time) error
	// WaitAgain clears the mark that the agent stopped waiting and sets OutsideCall.Deadline.
	WaitAgain(ctx context.Context, approvalID string, deadline time.Time) error
	// SetOutsideEditedKey records OutsideCall.EditedKey.
	SetOutsideEditedKey(ctx context.Context, approvalID, key string) error
}

// outsideReadOnly are the agents' own tools that only read (SPEC §18: "the agent's own
// read-only tools (Read, Grep, Glob, LS, WebSearch, and their kin) run"): Claude Code's names,
// which Codex's hooks use too.
var outsideReadOnly = map[string]bool{
	"Read": true, "Grep": true, "Glob": true, "LS": true, "WebSearch": true,
	"NotebookRead": true, "TodoRead": true, "TodoWrite": true, "BashOutput": true,
	"ListMcpResourcesTool": true, "ReadMcpResourceTool": true,
}

// OutsideTool is the tool the gate judges a call of name by an outside agent of kind agent
// (SessionInfo.Agent) as: a hook agent's own read-only tools are readOnlyHint (allowed by
// default, and in plan mode); every other tool — and every tool of an approval-API agent
// (APIAgent), whose tools are the developer's own, whatever their names — has no annotation
// (it asks, SPEC §3's default). Its inputSchema is any JSON object: the agent checks its own
// input; an edit must stay one object.
func OutsideTool(agent, name string) *tool.Tool {
	t := outsideTool(agent, name)
	// Registered in a registry of its own: that compiles its inputSchema, which an edit is
	// validated against (Service.validateEdit).
	_ = tool.NewRegistry().Register(t)
	return t
}

// outsideTool is OutsideTool without its schema compiled: what the gate's check reads (its
// annotations), on every outside call's path.
func outsideTool(agent, name string) *tool.Tool {
	t := &tool.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`),
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{}, apperr.Errorf(apperr.Invalid, "%s is an outside agent's tool: Countersign does not run it", name)
		}}
	if agent != APIAgent && outsideReadOnly[name] {
		yes := true
		t.Annotations.ReadOnlyHint = &yes
	}
	return t
}

// APIAgent is the agent kind (SessionInfo.Agent, connections.API) of the agent sessions of Door
// 3, the approval API (SPEC §18): a request's tool is the developer's own, so no tool name is
// read-only by default there ("Read" may do anything).
const APIAgent = "api"

// GatewayAgent is the agent kind (SessionInfo.Agent, connections.MCP) of the agent sessions of
// Door 2, the MCP gateway (SPEC §18): their calls are of the registry's tools (the upstream MCP
// servers' "<server>__<tool>"), not of an agent's own.
const GatewayAgent = "mcp"

// ErrClientCancelled, as the cause of an outside call's context, says the client cancelled the
// call (MCP notifications/cancelled): with OutsideRequest.CancelOnHangUp its approval is
// cancelled, not parked.
var ErrClientCancelled = errors.New("the client cancelled the call")

// lookup is the tool approval a was asked for: an outside agent's (OutsideTool), the registry's
// for a gateway session's call (GatewayAgent), else the registry's.
func (s *Service) lookup(ctx context.Context, a Approval) (*tool.Tool, bool) {
	if a.RequestedBy == RequestedByAgent {
		sess, err := s.sessions.Session(ctx, a.SessionID)
		if err == nil && sess.Agent == GatewayAgent {
			return s.tools.Lookup(a.ToolName)
		}
		if err != nil {
			sess.Agent = APIAgent // unknown: no read-only default
		}
		return OutsideTool(sess.Agent, a.ToolName), true
	}
	return s.tools.Lookup(a.ToolName)
}

// OutsideRequest is one outside agent's question about one tool call (a PreToolUse or a
// PermissionRequest hook event).
type OutsideRequest struct {
	SessionID string          // the agent session
	Event     string          // "PreToolUse" | "PermissionRequest"
	ToolName  string          // the agent's tool: "Bash", "Edit", "mcp__github__create_issue"…
	Input     json.RawMessage // tool_input, a JSON object
	ToolUseID string          // "" on a PermissionRequest
	// Cwd is the agent's working directory as this event reports it (hook events' `cwd`; ""
	// when not reported): the rules judge a relative file path from there (RuleCall.Cwd).
	Cwd string
	// Session, when set, is the session as the caller has just read it (its workspace, mode,
	// agent and connection): the gate does not read it again. nil: the gate reads it.
	Session *SessionInfo
	// MatchKey pairs this event with the other event about the same call (hooks.MatchKey):
	// the person is asked once per call.
	MatchKey string
	// Looked says the caller has just read OutsideCallByKey(SessionID, MatchKey) (Door 2's
	// generation lookup): Prev is the call it found, nil for none, and the gate does not read
	// it again (one read off a rule-decided call's path, issue 35).
	Looked bool
	Prev   *OutsideCall
	// Deadline is when the agent stops waiting (its hook's timeout minus a margin): the answer
	// is then no verdict.
	Deadline time.Time
	// Editable says whether the agent honours an edited input on this event (hooks.CanEdit).
	Editable bool
	// Record, when set, is called once for a call the gate has not seen before: it records the
	// call, under callID (Approval.ToolCallID: the tool_use_id, or one made from the match
	// key), where the session shows it and returns the id of the message that holds it
	// (Approval.MessageID). For a call a rule, the mode or a default decided, decided is its
	// approval and outside call, which Record stores in the same transaction as the message
	// (setting decided.Approval.MessageID), not synced: one commit on the answer's path (issue
	// 35). For a call that asks, decided is nil and Record runs before the approval is stored.
	Record func(ctx context.Context, callID string, decided *OutsideDecided) (messageID string, err error)
	// Later says Record does not store a call a rule, the mode or a default decided before it
	// returns: it queues the record, to be stored after the answer and shown once stored
	// (agent.Runner.QueueAgentCall), so the gate does not show it either (Door 2: issue 35's "no
	// commit on the answer's path of a call a rule allowed", as nested calls' audit). A call that
	// asks a person is stored before it is shown, whatever Later says.
	Later bool
	// EditedKey, when set, is the match key of an edited input of this call (hooks.MatchKey of
	// the event with that input): a person's approval with an edit is found by it too.
	EditedKey func(edited json.RawMessage) (string, error)
	// Tool, when set, is the tool the call is of, as Countersign knows it (Door 2: the upstream
	// MCP server's, with its schemas, annotations and AlwaysAsk for an untrusted server, SPEC
	// §13); nil: OutsideTool(the session's agent kind, ToolName), an agent's own tool.
	Tool *tool.Tool
	// CancelOnHangUp, when set, cancels the call's approval when ctx ends before the deadline
	// (the client cancelled the call: MCP notifications/cancelled); unset, the approval is
	// parked as at the deadline (a hook request that hung up).
	CancelOnHangUp bool
	// CallsAgain says the agent is told, at the deadline, to make the same call again once it
	// is approved (Door 2: "call again once it is approved"): the deadline does not mark the
	// call "the agent stopped waiting", and a decision made after it answers the repeated call
	// instead of being too late.
	CallsAgain bool
}

// prevByKey is the session's latest call with the request's match key: the caller's read
// (OutsideRequest.Looked), else the store's; apperr.NotFound for none.
func (s *Service) prevByKey(ctx context.Context, os OutsideStore, req OutsideRequest) (OutsideCall, error) {
	if !req.Looked {
		return os.OutsideCallByKey(ctx, req.SessionID, req.MatchKey)
	}
	if req.Prev == nil {
		return OutsideCall{}, apperr.Errorf(apperr.NotFound, "outside call not found")
	}
	return *req.Prev, nil
}

// OutsideDecided is an outside call a rule, the mode or a default decided, as the gate hands it
// to OutsideRequest.Record to store with the call's message: its automatic approval (stamped
// by Gate.Automatic; MessageID to be set) and its outside call.
type OutsideDecided struct {
	Approval Approval
	Call     OutsideCall
}

// OutsideVerdict is the gate's answer to an OutsideRequest: Allowed (EditedInput, when set,
// replaces the input), Blocked with Reason, or Asked, which means no verdict: nobody decided
// before the deadline and the agent goes its own way. Approval is the call's approval as it
// stands (its DecisionSource says what decided: rule, mode, annotation default or person).
type OutsideVerdict struct {
	Outcome     Outcome
	Reason      string
	EditedInput json.RawMessage
	Approval    Approval
}

// outsideWaits are the outside calls a hook request waits on in this process, by session and
// match key: a second event about the same call joins the wait instead of asking again.
type outsideWaits struct {
	mu sync.Mutex
	m  map[string]*outsideWait
}

type outsideWait struct {
	done      chan struct{}
	v         OutsideVerdict
	toolUseID string // the holding event's ("" for a PermissionRequest)
}

// DecideOutside decides an outside agent's call (SPEC §18), in the order of SPEC §14 (rules on the
// agent's tool names, the session's mode, the agent's read-only tools allowed by default), and
// when it asks, holds it on a pending Approval until a person decides (Service.Decide, the
// inbox, a decision link, several approvers…) or req.Deadline, whichever is first. At the
// deadline the approval stays pending, marked "the agent stopped waiting", and the verdict is
// Asked (no verdict); a person's decision after that is stored and shown as too late.
//
// The person is asked once per call: an event whose match key names a call already decided gets
// that decision at once; one whose call is still held in this process joins that wait; one
// whose call is pending but no longer held (its first event's deadline passed) waits on the same
// approval again. Errors: the store's; apperr.NotFound for an unknown session.
func (s *Service) DecideOutside(ctx context.Context, req OutsideRequest) (v OutsideVerdict, err error) {
	defer apperr.Wrap(&err, "DecideOutside(%s, %s)", req.SessionID, req.ToolName)
	os, ok := s.store.(OutsideStore)
	if !ok {
		return OutsideVerdict{}, apperr.Errorf(apperr.Internal, "the store keeps no outside calls")
	}
	waitKey := req.SessionID + "\x00" + req.MatchKey
	// One wait per call in this process: an event about a call another event holds joins it;
	// otherwise this one holds it (registered before anything is read or stored, so two events
	// of one call arriving together never ask twice). An event with another tool_use_id than
	// the holder's is another call with the same input in the same turn (as below, where the
	// store finds it): it is decided and recorded on its own, never given the held call's
	// verdict, and holds no wait of its own (the key stays the first call's).
	s.outside.mu.Lock()
	held, joins := s.outside.m[waitKey]
	if joins && held.toolUseID != "" && req.ToolUseID != "" && held.toolUseID != req.ToolUseID {
		joins = false
	}
	if joins {
		w := held
		s.outside.mu.Unlock()
		timer := time.NewTimer(time.Until(req.Deadline))
		defer timer.Stop()
		select {
		case <-w.done:
			return s.forEvent(w.v, req), nil
		case <-timer.C:
		case <-ctx.Done():
		}
		return OutsideVerdict{Outcome: Asked}, nil
	}
	w := &outsideWait{done: make(chan struct{}), toolUseID: req.ToolUseID}
	if s.outside.m == nil {
		s.outside.m = map[string]*outsideWait{}
	}
	if held == nil {
		s.outside.m[waitKey] = w
	}
	s.outside.mu.Unlock()
	ended := false
	defer func() {
		if !ended { // an error: the events that joined get no verdict
			s.endWait(waitKey, w, OutsideVerdict{Outcome: Asked})
		}
	}()
	end := func(v OutsideVerdict) (OutsideVerdict, error) {
		ended = true
		s.endWait(waitKey, w, v)
		return s.forEvent(v, req), nil
	}

	// Asked before: the same call (the same key, or the same tool_use_id asked again).
	prev, err := s.prevByKey(ctx, os, req)
	byToolUse := false
	if apperr.CodeOf(err) == apperr.NotFound {
		// Claude Code's `--resume` of a deferred call asks PreToolUse again with the same
		// tool_use_id but no prompt_id (another key).
		prev, err = os.OutsideCallByToolUse(ctx, req.SessionID, req.ToolUseID)
		byToolUse = true
	}
	var a Approval
	if err == nil && !byToolUse && req.ToolUseID != "" && prev.ToolUseID != "" && prev.ToolUseID != req.ToolUseID {
		// The same input in the same turn, but another tool_use_id: the agent makes the same
		// call again, which is asked again (the key pairs a call's PermissionRequest, which has
		// no tool_use_id, with its PreToolUse). Its approval is not read.
		err = apperr.Errorf(apperr.NotFound, "another call")
	}
	if err == nil {
		if a, err = s.store.Approval(ctx, prev.ApprovalID); err != nil {
			return OutsideVerdict{}, err
		}
		if byToolUse && (a.ToolName != req.ToolName || !sameJSON(a.Arguments, req.Input)) {
			// The same tool_use_id with another tool or input is another call: never the
			// decision of the first.
			err = apperr.Errorf(apperr.NotFound, "another call")
		}
	}
	switch {
	case err == nil:
		if a.Status != Pending {
			if prev.TooLate(a) && !req.CallsAgain {
				// The decision came after the agent stopped waiting on this call: it was never
				// sent, and is not sent now either.
				return end(OutsideVerdict{Outcome: Asked, Approval: a})
			}
			v := verdictOf(a)
			if prev.MatchKey != req.MatchKey && prev.EditedKey == req.MatchKey {
				// The agent asks about the input the person's edit approved: approved as it is.
				v.EditedInput = nil
			}
			return end(v)
		}
		// The agent asks again about a pending call no wait holds here (Claude Code's
		// PermissionRequest after a PreToolUse that got no verdict): it waits anew, until this
		// event's deadline (the page counts down to it).
		if err := os.WaitAgain(ctx, a.ID, req.Deadline); err != nil {
			return OutsideVerdict{}, err
		}
		s.sessions.Changed(ctx, a.SessionID)
		ended = true
		return s.waitOutside(ctx, os, waitKey, w, s.gate.Attach(a), req)
	case apperr.CodeOf(err) != apperr.NotFound:
		return OutsideVerdict{}, err
	}

	callID := req.ToolUseID
	if callID == "" {
		callID = "hook-" + strings.TrimPrefix(req.MatchKey, "sha256:")
		if len(callID) > 29 {
			callID = callID[:29]
		}
	}
	j, err := s.judgeOutside(ctx, req, callID)
	if err != nil {
		return OutsideVerdict{}, err
	}
	if j.d.Outcome != Asked {
		a, err := s.recordDecided(ctx, os, req, j)
		if err != nil {
			return OutsideVerdict{}, err
		}
		return end(verdictOf(a))
	}
	rec, oc := j.d.Record(j.base), j.oc
	if req.Record != nil {
		if rec.MessageID, err = req.Record(ctx, callID, nil); err != nil {
			return OutsideVerdict{}, err
		}
	}
	// The outside call is known here before the approval is visible: a person (or an API
	// client) deciding in the moment before its outside_calls row is stored must not be refused
	// an edit the agent would apply (outsideEditable reads this first), and a page drawn then
	// counts down to the agent's deadline (HeldOutsideCall).
	id := NewID()
	oc.ApprovalID = id
	s.held.Store(id, oc)
	tk, err := s.gate.OpenID(ctx, id, rec)
	if err != nil {
		s.held.Delete(id)
		return OutsideVerdict{}, err
	}
	oc.CreatedAt = tk.Approval.CreatedAt
	err = os.CreateOutsideCall(ctx, oc)
	s.held.Delete(id)
	if err != nil {
		tk.Cancel("the outside call could not be recorded")
		return OutsideVerdict{}, err
	}
	// A rule made while the approval was being stored may allow it already.
	s.Release(ctx, []Approval{tk.Approval})
	ended = true
	return s.waitOutside(ctx, os, waitKey, w, tk, req)
}

// judgedCall is a new outside call as the gate judged it (judgeOutside): the decision, the
// approval as it is recorded before the decision (base), and its outside call's row
// (ApprovalID and CreatedAt still to be set).
type judgedCall struct {
	callID string
	d      Decision
	base   Approval
	oc     OutsideCall
}

// judgeOutside decides a new outside call under callID in the order of SPEC §14 — rules on its
// tool name, the session's mode, the tool's annotation defaults (an agent's read-only tools run)
// — for DecideOutside and OpenOutside alike. Errors: apperr.NotFound for an unknown session.
func (s *Service) judgeOutside(ctx context.Context, req OutsideRequest, callID string) (judgedCall, error) {
	var sess SessionInfo
	if req.Session != nil && req.Session.ID == req.SessionID {
		sess = *req.Session
	} else {
		var err error
		if sess, err = s.sessions.Session(ctx, req.SessionID); err != nil {
			return judgedCall{}, err
		}
	}
	t := req.Tool
	if t == nil {
		t = outsideTool(sess.Agent, req.ToolName)
	}
	d := Checker{Rules: s.rules}.Check(ctx, CheckCall{SessionID: req.SessionID, ToolCallID: callID, Tool: t,
		Arguments: req.Input, Workspace: sess.Workspace, Mode: s.mode(sess), Outside: true, Cwd: req.Cwd, Agent: sess.Agent, Connection: sess.Connection})
	j := judgedCall{callID: callID, d: d,
		base: Approval{SessionID: req.SessionID, ToolCallID: callID, ToolName: req.ToolName, Arguments: req.Input,
			Annotations: t.Annotations, RequestedBy: RequestedByAgent},
		oc: OutsideCall{SessionID: req.SessionID, ToolUseID: req.ToolUseID, MatchKey: req.MatchKey, Event: req.Event, Editable: req.Editable, Cwd: req.Cwd}}
	if !req.Deadline.IsZero() {
		dl := req.Deadline.UTC()
		j.oc.Deadline = &dl
	}
	return j, nil
}

// recordDecided stores j, a call decided with no person, and shows it: the call's message (through
// req.Record), its automatic approval and its outside call in one commit, not synced (issue 35:
// no fsync on the answer's path of a call a rule allowed; Countersign runs nothing on it, and a
// power loss keeps or drops the three together); with req.Later, Record queues them to be
// stored after the answer and shown then. It returns the approval as stored (or queued).
func (s *Service) recordDecided(ctx context.Context, os OutsideStore, req OutsideRequest, j judgedCall) (Approval, error) {
	a, err := s.gate.Automatic(j.d.Record(j.base))
	if err != nil {
		return Approval{}, err
	}
	oc := j.oc
	oc.ApprovalID, oc.CreatedAt = a.ID, a.CreatedAt
	if req.Record != nil {
		if a.MessageID, err = req.Record(ctx, j.callID, &OutsideDecided{Approval: a, Call: oc}); err != nil {
			return Approval{}, err
		}
		if req.Later {
			return a, nil // shown by Record's queue once stored
		}
	} else if err := os.CreateDecidedOutsideCall(ctx, a, oc); err != nil {
		return Approval{}, err
	}
	s.gate.notify(a)
	return a, nil
}

// waitOutside holds the call until its approval is decided or the deadline (or the agent's
// request ends), then ends the wait for the events that joined it.
func (s *Service) waitOutside(ctx context.Context, os OutsideStore, waitKey string, w *outsideWait, tk *Ticket, req OutsideRequest) (OutsideVerdict, error) {
	// The deadline, or the agent hanging up, parks the approval: it stays pending for a person,
	// marked "the agent stopped waiting".
	wctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	timer := time.AfterFunc(time.Until(req.Deadline), func() { cancel(ErrParked) })
	defer timer.Stop()
	stop := context.AfterFunc(ctx, func() {
		if req.CancelOnHangUp && time.Now().Before(req.Deadline) {
			cancel(ErrClientCancelled)
			return
		}
		cancel(ErrParked)
	})
	defer stop()
	a := tk.Wait(wctx)
	if a.Status == Pending {
		now := time.Now().UTC()
		bg := context.WithoutCancel(ctx)
		// A call the agent will ask again (CallsAgain) finds the decision then: nobody
		// stopped waiting for it.
		if !req.CallsAgain {
			if err := os.MarkStoppedWaiting(bg, a.ID, &now); err != nil {
				s.log.Error("mark an outside call stopped waiting", "approval", a.ID, "err", err)
			}
		}
		v := OutsideVerdict{Outcome: Asked, Approval: a}
		s.endWait(waitKey, w, v)
		s.sessions.Changed(bg, a.SessionID)
		s.gate.notify(a)
		return v, nil
	}
	v := verdictOf(a)
	if v.Outcome == Allowed && len(v.EditedInput) > 0 && req.EditedKey != nil {
		bg := context.WithoutCancel(ctx)
		if key, err := req.EditedKey(v.EditedInput); err == nil {
			if err := os.SetOutsideEditedKey(bg, a.ID, key); err != nil {
				s.log.Error("record an outside call's edited key", "approval", a.ID, "err", err)
			}
		}
	}
	s.endWait(waitKey, w, v)
	return s.forEvent(v, req), nil
}

func (s *Service) endWait(key string, w *outsideWait, v OutsideVerdict) {
	s.outside.mu.Lock()
	if s.outside.m[key] == w {
		delete(s.outside.m, key)
	}
	s.outside.mu.Unlock()
	w.v = v
	close(w.done)
}

// forEvent is v as the event asking may take it: an edit the agent would ignore on this event is
// not sent (Service.Decide refuses such an edit on the call's first event; a later event of
// the same call that cannot carry it gets no verdict rather than an allow of the original).
func (s *Service) forEvent(v OutsideVerdict, req OutsideRequest) OutsideVerdict {
	if v.Outcome == Allowed && len(v.EditedInput) > 0 && !req.Editable {
		return OutsideVerdict{Outcome: Asked, Approval: v.Approval,
			Reason: "the call was approved with an edited input, which the agent does not honour on " + req.Event}
	}
	return v
}

// verdictOf is a resolved approval's verdict: approved → Allowed (with the edit); denied → Blocked
// with its reason ("Denied by <who>: <reason>" for a person, SPEC §3); timed out or cancelled →
// Blocked, saying so.
func verdictOf(a Approval) OutsideVerdict {
	switch a.Status {
	case Approved:
		return OutsideVerdict{Outcome: Allowed, Reason: a.Reason, EditedInput: a.EditedArguments, Approval: a}
	case Pending:
		return OutsideVerdict{Outcome: Asked, Approval: a}
	case Denied:
		reason := a.Reason
		if !a.Automatic {
			reason = "Denied by " + a.DecidedBy
			if a.Reason != "" {
				reason += ": " + a.Reason
			}
		}
		return OutsideVerdict{Outcome: Blocked, Reason: reason, Approval: a}
	}
	return OutsideVerdict{Outcome: Blocked, Reason: "The approval " + a.Outcome(), Approval: a}
}

// RecoverOutside applies SPEC §18 at start: an outside call still pending has lost its hook
// request with the process that held it, so each is marked "the agent stopped waiting" (and
// stays pending: a decision now is recorded as too late). Only outside calls: the Runner
// recovers the loop's own (agent.Runner.Recover leaves agent sessions alone).
func (s *Service) RecoverOutside(ctx context.Context) (err error) {
	defer apperr.Wrap(&err, "RecoverOutside")
	os, ok := s.store.(OutsideStore)
	if !ok {
		return nil
	}
	pending, err := s.store.PendingApprovals(ctx)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	for _, a := range pending {
		if a.RequestedBy != RequestedByAgent {
			continue
		}
		if c, err := os.OutsideCall(ctx, a.ID); err == nil && c.Event == EventAAP {
			continue // an AAP request lost no connection: its instance reads it again (OpenOutside)
		}
		if err := os.MarkStoppedWaiting(ctx, a.ID, &now); err != nil && apperr.CodeOf(err) != apperr.NotFound {
			return err
		}
	}
	return nil
}

// HeldOutsideCall is approval id's outside call while its row is being stored, after the
// approval became visible (a page drawn in that moment learns the agent's deadline from it); false
// otherwise (read the store).
func (s *Service) HeldOutsideCall(id string) (OutsideCall, bool) {
	v, ok := s.held.Load(id)
	if !ok {
		return OutsideCall{}, false
	}
	return v.(OutsideCall), true
}

// outsideEditable reports whether approval a, an outside call's, may be approved with an edited
// input: the agent honours an edit on the event that asked (hooks.CanEdit). False for an
// unknown call.
func (s *Service) outsideEditable(ctx context.Context, a Approval) bool {
	if c, ok := s.HeldOutsideCall(a.ID); ok {
		return c.Editable // its outside_calls row is being stored
	}
	os, ok := s.store.(OutsideStore)
	if !ok {
		return false
	}
	c, err := os.OutsideCall(ctx, a.ID)
	return err == nil && c.Editable
}

// sameJSON reports whether a and b are the same JSON value (objects compared by member, not by
// spelling); false when either is not JSON.
func sameJSON(a, b json.RawMessage) bool {
	// Numbers as written (json.Number): two integers a float64 cannot tell apart are two inputs,
	// never one call's decision given to the other.
	decode := func(raw json.RawMessage, v *any) error {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(v); err != nil {
			return err
		}
		if dec.More() {
			return errors.New("more than one JSON value")
		}
		return nil
	}
	var x, y any
	if decode(a, &x) != nil || decode(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
