package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/hooks"
	"countersign/internal/tool"
)

// Door 1 (SPEC §18): `POST /hooks/{kind}` takes an outside agent's hook event as the agent sends
// it, finds or creates its agent session, and answers in that agent's dialect: PreToolUse and
// PermissionRequest through the gate (gate.Service.DecideOutside), PostToolUse's outcome onto
// the call's card, UserPromptSubmit's prompt into the transcript, Stop and SessionEnd into the
// session's state; every other event gets no verdict.

// AgentStore is what Door 1 reads and writes of agent sessions and their outside calls
// (internal/store).
type AgentStore interface {
	AgentSession(ctx context.Context, connectionID, agentSessionID string) (agent.Session, error)
	CreateSession(ctx context.Context, s agent.Session) error
	UpdateAgentSession(ctx context.Context, id string, info agent.AgentInfo) error
	OutsideCall(ctx context.Context, approvalID string) (gate.OutsideCall, error)
	OutsideCallByToolUse(ctx context.Context, sessionID, toolUseID string) (gate.OutsideCall, error)
	// OutsideCallByKey is the session's latest call with the match key; apperr.NotFound (Door 2).
	OutsideCallByKey(ctx context.Context, sessionID, key string) (gate.OutsideCall, error)
	// ClaimOutsideCall takes a call's decision to use it, once (Door 2, store.ClaimOutsideCall).
	ClaimOutsideCall(ctx context.Context, sessionID, approvalID string, at time.Time) (bool, error)
}

// AgentAuthenticator checks an outside agent's bearer token for a hook kind (SPEC §18
// connections): it returns the connection's id, or apperr.Unauthorized for a token that is
// unknown, revoked, or another kind's. internal/connections' Service is one, through cmd/web.
type AgentAuthenticator func(ctx context.Context, token, kind string) (connectionID string, err error)

// Hook deadlines (SPEC §18 "Deadlines and outcomes"): the hook's timeout comes from the hook
// URL's ?timeout=<seconds> or the Countersign-Hook-Timeout header (countersign-hook sends it);
// Countersign answers hookMargin before it.
const (
	HeaderHookTimeout  = "Countersign-Hook-Timeout"
	defaultHookTimeout = 600 * time.Second
	maxHookTimeout     = 3600 * time.Second
	hookMargin         = 5 * time.Second
)

// hookTimeout is the request's hook timeout: ?timeout= first, then the header, else
// defaultHookTimeout; capped at maxHookTimeout. A value that is not a positive number of seconds
// is apperr.Invalid.
func hookTimeout(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("timeout")
	if v == "" {
		v = r.Header.Get(HeaderHookTimeout)
	}
	if v == "" {
		return defaultHookTimeout, nil
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || n <= 0 || n != n {
		return 0, apperr.Errorf(apperr.Invalid, "the hook timeout must be a positive number of seconds, not %q", v)
	}
	d := time.Duration(n * float64(time.Second))
	return min(d, maxHookTimeout), nil
}

// hookDeadline is when Countersign answers a hook whose timeout is d: hookMargin before it, or
// half of it for a timeout shorter than twice the margin.
func hookDeadline(now time.Time, d time.Duration) time.Time {
	margin := hookMargin
	if d < 2*hookMargin {
		margin = d / 2
	}
	return now.Add(d - margin)
}

// agentConnection is the id of the live connection of kind (a hook kind, mcp) that r's bearer
// token names (SPEC §18 connections), for the doors whose errors are Countersign's own (hooks,
// /mcp); apperr.Unauthorized otherwise, saying why and never holding the token.
func (s *Server) agentConnection(r *http.Request, kind string) (string, error) {
	token := bearer(r)
	if token == "" {
		return "", apperr.Errorf(apperr.Unauthorized, "Unauthorized: send Authorization: Bearer <the connection's token>")
	}
	if s.cfg.AgentAuth == nil || s.agents == nil {
		return "", apperr.Errorf(apperr.Unauthorized, "Unauthorized: this server has no agent connections")
	}
	connID, err := s.cfg.AgentAuth(r.Context(), token, kind)
	switch code := apperr.CodeOf(err); {
	case err == nil:
		return connID, nil
	case code == apperr.Unauthorized, code == apperr.Internal:
		return "", err // its message says why, and never holds the token
	}
	return "", apperr.Errorf(apperr.Unauthorized, "Unauthorized: the token names no live %s connection", kind)
}

// bearer is the request's bearer token ("" when there is none).
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// agentHook wraps Door 1's handler: the body is bounded by hooks.MaxBodyBytes, and errors are
// answered as JSON ({"error": {"code", "message"}}) with their status — 400, 401, 404, 413 —
// which every agent reads as "no verdict" or, with onFailure/--fail-closed, a block; never an
// allow.
func (s *Server) agentHook(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, hooks.MaxBodyBytes)
		if err := h(w, r); err != nil {
			s.writeJSONError(w, r, err)
		}
	})
}

// hook is `POST /hooks/{kind}` (SPEC §18 Door 1).
func (s *Server) hook(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	kind := hooks.Kind(r.PathValue("kind"))
	// An unknown kind is 404 whoever asks: hooks.Parse says so before reading anything.
	if _, err := hooks.Parse(kind, nil); apperr.CodeOf(err) == apperr.NotFound {
		return err
	}
	connID, err := s.agentConnection(r, string(kind))
	if err != nil {
		return err
	}
	timeout, err := hookTimeout(r)
	if err != nil {
		return err
	}
	deadline := hookDeadline(time.Now(), timeout)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return apperr.Errorf(apperr.TooLarge, "the hook body is over the limit of %d bytes", hooks.MaxBodyBytes)
		}
		return apperr.Errorf(apperr.Invalid, "the hook body could not be read: %v", err)
	}
	ev, err := hooks.Parse(kind, body)
	if err != nil {
		return err
	}
	sess, err := s.agentSessionFor(ctx, connID, ev)
	if err != nil {
		return err
	}
	v, err := s.hookVerdict(ctx, sess, ev, deadline)
	if err != nil {
		return err
	}
	ans, err := hooks.Encode(kind, ev.Name, v)
	if err != nil {
		return err
	}
	for k, val := range ans.Headers() {
		w.Header().Set(k, val)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(ans.JSON)
	return nil
}

// agentSessionFor finds connection connID's agent session for ev's session_id, or creates it
// (SPEC §18: one per connection and agent session id; its workspace is the agent's cwd), and
// stores what ev reports of the agent when it changed: permission mode, transcript path, model,
// turn, state.
func (s *Server) agentSessionFor(ctx context.Context, connID string, ev hooks.Event) (agent.Session, error) {
	sess, err := s.agents.AgentSession(ctx, connID, ev.SessionID)
	if apperr.CodeOf(err) == apperr.NotFound {
		info := agentInfo(agent.AgentInfo{Kind: string(ev.Kind), ConnectionID: connID, SessionID: ev.SessionID}, ev)
		title := kindTitle(ev.Kind)
		if ev.Cwd != "" {
			title += " · " + filepath.Base(ev.Cwd)
		}
		model := info.Model
		if model == "" {
			model = string(ev.Kind)
		}
		ns := agent.Session{ID: gate.NewID(), Title: title, Model: model, Workspace: ev.Cwd, State: agent.Idle,
			Mode: s.cfg.Gate.DefaultMode(), Agent: &info}
		err = s.agents.CreateSession(ctx, ns)
		if apperr.CodeOf(err) == apperr.Conflict {
			// Another hook of the same agent session created it first.
			return s.agents.AgentSession(ctx, connID, ev.SessionID)
		}
		if err != nil {
			return agent.Session{}, err
		}
		sess, err = s.agents.AgentSession(ctx, connID, ev.SessionID)
		if err == nil {
			s.cfg.Runner.AgentSessionChanged(ctx, sess.ID)
		}
		return sess, err
	}
	if err != nil {
		return agent.Session{}, err
	}
	if next := agentInfo(*sess.Agent, ev); next != *sess.Agent {
		if err := s.agents.UpdateAgentSession(ctx, sess.ID, next); err != nil {
			return agent.Session{}, err
		}
		sess.Agent = &next
		s.cfg.Runner.AgentSessionChanged(ctx, sess.ID)
	}
	return sess, nil
}

// agentInfo is info with what ev reports of the agent.
func agentInfo(info agent.AgentInfo, ev hooks.Event) agent.AgentInfo {
	if ev.PermissionMode != "" {
		info.PermissionMode = ev.PermissionMode
	}
	if ev.TranscriptPath != "" {
		info.TranscriptPath = ev.TranscriptPath
	}
	if ev.Model != "" {
		info.Model = ev.Model
	}
	if turn := turnOf(ev); turn != "" {
		info.PromptID = turn
	}
	switch ev.Name {
	case hooks.UserPromptSubmit, hooks.PreToolUse, hooks.PermissionRequest:
		info.State = agent.AgentWorking
	case hooks.Stop:
		info.State = agent.AgentStopped
	case hooks.SessionEnd:
		info.State = agent.AgentEnded
	}
	return info
}

func turnOf(ev hooks.Event) string {
	if ev.Kind == hooks.Codex {
		return ev.TurnID
	}
	return ev.PromptID
}

// kindTitle is an agent kind as people name it.
func kindTitle(k hooks.Kind) string {
	switch k {
	case hooks.ClaudeCode:
		return "Claude Code"
	case hooks.Codex:
		return "Codex"
	}
	return string(k)
}

// hookVerdict handles ev in agent session sess and says what to answer.
func (s *Server) hookVerdict(ctx context.Context, sess agent.Session, ev hooks.Event, deadline time.Time) (hooks.Verdict, error) {
	switch ev.Name {
	case hooks.PreToolUse, hooks.PermissionRequest:
		key, err := hooks.MatchKey(ev)
		if err != nil {
			return hooks.Verdict{}, err
		}
		req := gate.OutsideRequest{SessionID: sess.ID, Event: string(ev.Name), ToolName: ev.ToolName, Input: ev.ToolInput,
			ToolUseID: ev.ToolUseID, MatchKey: key, Deadline: deadline, Editable: hooks.CanEdit(ev.Kind, ev.Name), Cwd: ev.Cwd}
		info := s.cfg.Runner.GateSession(sess)
		req.Session = &info
		req.Record = func(ctx context.Context, callID string, decided *gate.OutsideDecided) (string, error) {
			m, err := s.cfg.Runner.RecordAgentCall(ctx, sess, agent.Message{Role: agent.Assistant, StopReason: agent.ToolUse,
				Model: sess.Model, Content: []agent.Block{{Type: "toolCall", ID: callID, Name: ev.ToolName, Arguments: ev.ToolInput}}}, decided)
			return m.ID, err
		}
		req.EditedKey = func(edited json.RawMessage) (string, error) {
			e := ev
			e.ToolInput = edited
			return hooks.MatchKey(e)
		}
		v, err := s.cfg.Gate.DecideOutside(ctx, req)
		if err != nil {
			return hooks.Verdict{}, err
		}
		switch v.Outcome {
		case gate.Allowed:
			return hooks.Verdict{Decision: hooks.Allow, Reason: v.Reason, UpdatedInput: v.EditedInput}, nil
		case gate.Blocked:
			return hooks.Verdict{Decision: hooks.Deny, Reason: v.Reason}, nil
		}
		return hooks.Verdict{}, nil
	case hooks.PostToolUse:
		return hooks.Verdict{}, s.recordOutcome(ctx, sess, ev)
	case hooks.PermissionDenied:
		// The agent's own permission check refused the call (Claude Code's auto mode): it
		// never ran.
		return hooks.Verdict{}, s.recordNeverRan(ctx, sess, ev)
	case hooks.UserPromptSubmit:
		_, err := s.cfg.Runner.RecordAgentMessage(ctx, sess.ID, agent.Message{Role: agent.User,
			Content: []agent.Block{{Type: "text", Text: ev.Prompt}}})
		return hooks.Verdict{}, err
	}
	return hooks.Verdict{}, nil
}

// maxOutcomeText bounds the excerpt of an outcome a card shows.
const maxOutcomeText = 8 << 10

// recordOutcome stores PostToolUse's tool_response on the call's outside call and as the call's
// result (SPEC §18: "ran with exit code and output excerpt, failed"). A PostToolUse for a call
// Countersign was not asked about is only answered.
func (s *Server) recordOutcome(ctx context.Context, sess agent.Session, ev hooks.Event) error {
	c, err := s.agents.OutsideCallByToolUse(ctx, sess.ID, ev.ToolUseID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	a, err := s.cfg.Store.Approval(ctx, c.ApprovalID)
	if err != nil {
		return err
	}
	res := outcomeResult(ev.ToolResponse)
	if !ranAsDecided(ev, a) {
		// Another input ran under the call's tool_use_id (another PreToolUse hook rewrote it
		// after the allow, or the agent ran something else): the card must not show the
		// decided input with this output as if it had run.
		what := ev.ToolName + " " + string(ev.ToolInput)
		if len(what) > maxOutcomeText {
			what = what[:maxOutcomeText] + "… (cut)"
		}
		res.Content = append([]tool.Content{{Type: "text", Text: "Not the call decided: the agent reports it ran " + what + "\n"}}, res.Content...)
		res.IsError = true
	}
	return firstReport(s.cfg.Runner.RecordAgentOutcome(ctx, a, res, ev.ToolResponse))
}

// ranAsDecided reports whether ev, a PostToolUse, names the call approval a decided: the same
// tool and the same input (the edit a person approved, when there is one), compared as
// hooks.CanonicalInput spells them.
func ranAsDecided(ev hooks.Event, a gate.Approval) bool {
	if ev.ToolName != a.ToolName {
		return false
	}
	ran, err := hooks.CanonicalInput(ev.Kind, ev.ToolName, ev.ToolInput)
	if err != nil {
		return false
	}
	decided, err := hooks.CanonicalInput(ev.Kind, a.ToolName, a.EffectiveArguments())
	return err == nil && string(ran) == string(decided)
}

// firstReport is err, but nil for apperr.Conflict: a call's outcome is written once (its first
// report stands, store.AppendOutsideOutcome), and an agent that reports it again (a retried
// hook) is only answered.
func firstReport(err error) error {
	if apperr.CodeOf(err) == apperr.Conflict {
		return nil
	}
	return err
}

// recordNeverRan stores, for a PermissionDenied, that the call never ran (SPEC §18 "ran …,
// failed, or never ran"), with the agent's reason.
func (s *Server) recordNeverRan(ctx context.Context, sess agent.Session, ev hooks.Event) error {
	c, err := s.agents.OutsideCallByToolUse(ctx, sess.ID, ev.ToolUseID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	reason := ev.Reason
	if reason == "" {
		reason = "no reason given"
	}
	outcome, _ := json.Marshal(map[string]any{"neverRan": true, "reason": reason})
	a, err := s.cfg.Store.Approval(ctx, c.ApprovalID)
	if err != nil {
		return err
	}
	res := tool.Result{Content: []tool.Content{{Type: "text", Text: "Never ran: the agent's own permission check denied it (" + reason + ")."}}, IsError: true}
	return firstReport(s.cfg.Runner.RecordAgentOutcome(ctx, a, res, outcome))
}

// outcomeResult is an agent's tool_response as a call's result: the output (stdout and stderr of
// a Bash call, the text of any other) cut to an excerpt; failed when the agent says it was
// interrupted or failed, or an exit code other than 0.
func outcomeResult(resp json.RawMessage) tool.Result {
	var text string
	failed := false
	var obj map[string]json.RawMessage
	var str string
	switch {
	case json.Unmarshal(resp, &str) == nil:
		text = str
	case json.Unmarshal(resp, &obj) == nil:
		get := func(k string) string {
			var v string
			_ = json.Unmarshal(obj[k], &v)
			return v
		}
		var flag bool
		if json.Unmarshal(obj["interrupted"], &flag) == nil && flag {
			failed = true
		}
		var code int
		for _, k := range []string{"exit_code", "exitCode"} {
			if json.Unmarshal(obj[k], &code) == nil && code != 0 {
				failed = true
				text = "exit code " + strconv.Itoa(code) + "\n"
			}
		}
		if _, ok := obj["stdout"]; ok {
			text += get("stdout")
			if e := get("stderr"); e != "" {
				text += "\n" + e
			}
		} else if len(resp) > 0 {
			text = string(resp)
		}
	default:
		text = string(resp)
	}
	if len(text) > maxOutcomeText {
		text = text[:maxOutcomeText] + "\n… (cut)"
	}
	if strings.TrimSpace(text) == "" {
		text = "Ran (the agent reported no output)."
		if failed {
			text = "Failed (the agent reported no output)."
		}
	}
	return tool.Result{Content: []tool.Content{{Type: "text", Text: text}}, IsError: failed}
}
