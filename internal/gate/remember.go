package gate

import (
	"context"
	"encoding/json"
	"path"
	"strings"
	"time"

	"countersign/internal/apperr"
)

// What a Service remembers and applies to the calls still waiting (SPEC §14): the sessions'
// modes, the rules people make (from a prompt's "Always allow…" and "Approve for session", the
// Rules page, the API) and their grants, and the release of the pending approvals that a new
// rule or mode now allows. Nothing is ever denied retroactively: a pending approval is only ever
// released (approved), never denied, by a change.

// SetMode switches a session's mode (SPEC §14) for its next call; the owner only (the web layer
// offers it on owner routes). The session's viewers are told; pending approvals the new mode
// allows (accept-edits: file writes) are released; none is denied (plan mode applies to calls
// made from now on). Errors: apperr.Invalid for an unknown mode (naming the three),
// apperr.NotFound for an unknown session.
func (s *Service) SetMode(ctx context.Context, sessionID string, mode Mode) (err error) {
	defer apperr.Wrap(&err, "SetMode(%s)", sessionID)
	switch mode {
	case ModeDefault, ModePlan, ModeAcceptEdits:
	default:
		return apperr.Errorf(apperr.Invalid, "mode must be default, plan or accept-edits, not %q", mode)
	}
	if err := s.sessions.SetMode(ctx, sessionID, mode); err != nil {
		return err
	}
	s.sessions.Changed(ctx, sessionID)
	pending, err := s.store.Approvals(ctx, sessionID, Pending)
	if err != nil {
		return err
	}
	s.Release(ctx, pending)
	return nil
}

// mode is a session's mode as of now: its own, else the default.
func (s *Service) mode(sess SessionInfo) Mode {
	if sess.Mode != "" {
		return sess.Mode
	}
	return s.defaultMode
}

// Release decides again, by the current rules and modes, each of pending that is still pending
// and approves those now allowed, as automatic decisions naming the rule or mode. Nothing is
// ever denied retroactively: a pending approval is only ever released, never denied, by a
// change. Handlers are not run again (they let these calls through already); a call the rules
// would now deny or that still asks stays pending for a person. The pipeline calls it once
// more after storing an approval, for a rule made while it was being stored.
func (s *Service) Release(ctx context.Context, pending []Approval) {
	sessions := map[string]SessionInfo{}
	// Hits are counted below, only for the releases that win (ask and a rule change may race
	// to release the same call).
	check := Checker{Rules: EvalOnly{s.rules}}
	for _, p := range pending {
		if p.Status != Pending {
			continue
		}
		t, ok := s.lookup(ctx, p)
		if !ok {
			continue
		}
		sess, ok := sessions[p.SessionID]
		if !ok {
			var err error
			if sess, err = s.sessions.Session(ctx, p.SessionID); err != nil {
				continue
			}
			sessions[p.SessionID] = sess
		}
		parent := ""
		if p.ParentToolCallID != "" {
			parent = p.RequestedBy
		}
		uncovered := ""
		if p.DecisionSource == FromAction {
			// An action no rule may cover (CheckCall.Uncovered): asked again, it asks again.
			uncovered = p.AskReason
		}
		var cwd string
		cwdUnknown := false
		if p.RequestedBy == RequestedByAgent && sess.Agent != APIAgent && sess.Agent != GatewayAgent {
			// A hook agent's call is judged from the cwd its event reported (RuleCall.Cwd).
			cwd, cwdUnknown = s.askedFrom(ctx, p.ID)
		}
		d := check.Check(ctx, CheckCall{SessionID: p.SessionID, ToolCallID: p.ToolCallID,
			ParentToolCallID: p.ParentToolCallID, Parent: parent, Tool: t, Arguments: p.Arguments,
			Workspace: sess.Workspace, Mode: s.mode(sess), Uncovered: uncovered, Outside: p.RequestedBy == RequestedByAgent,
			Cwd: cwd, CwdUnknown: cwdUnknown, Agent: sess.Agent, Connection: sess.Connection})
		if d.Outcome != Allowed || d.Source == FromAnnotations {
			continue // still asks (or would be denied: never retroactively)
		}
		if d.Rule != nil && d.Rule.FromApproval == p.ID {
			// The rule was saved by the person deciding this very approval ("Approve for session",
			// "Always allow…"): their decision is about to land and must win. Releasing it here
			// (ask's second look racing Decide) made their Decide fail with "already resolved";
			// CI saw it once under -race.
			continue
		}
		rec := d.Record(p)
		res := Resolution{Status: Approved, Automatic: true, DecidedBy: rec.DecidedBy, Reason: rec.Reason,
			Scope: rec.Scope, DerivedFrom: rec.DerivedFrom, Source: d.Source, RuleID: rec.RuleID, RuleText: rec.RuleText,
			RuleSource: rec.RuleSource}
		_, err := s.gate.Decide(ctx, p.ID, res)
		switch {
		case err == nil && d.Rule != nil:
			d.CountHits(s.rules)
		case err != nil && apperr.CodeOf(err) != apperr.Conflict:
			s.log.Error("release pending approval", "approval", p.ID, "err", err)
		}
	}
}

// EvalOnly hides a Rulebook's hit counter from a Checker: a look that must not count a hit.
type EvalOnly struct{ E RuleEvaluator }

// Evaluate is E's.
func (e EvalOnly) Evaluate(c RuleCall) RuleDecision { return e.E.Evaluate(c) }

// releaseReached releases the pending approvals of every session rule rl reaches (its session;
// for workspace and server rules, every session with one pending).
func (s *Service) releaseReached(ctx context.Context, rl Rule) error {
	var pending []Approval
	var err error
	if rl.Scope == ScopeSession {
		pending, err = s.store.Approvals(ctx, rl.SessionID, Pending)
	} else {
		pending, err = s.store.PendingApprovals(ctx)
	}
	if err != nil {
		return err
	}
	s.Release(ctx, pending)
	return nil
}

// Rules lists every rule (SPEC §14 Rules page, GET /api/rules): the policy file's first
// (read-only), then the stored ones, oldest first, with hits and last use counted so far.
func (s *Service) Rules() []Rule { return s.rules.Rules() }

// RulesError is what the rules compiler refused of the current rules (they are skipped), or nil.
func (s *Service) RulesError() error { return s.rules.Err() }

// ParseRule reads a rule's text form into its tool pattern and specifier (ServiceConfig.Parse; a
// bare tool name or glob without one). Errors: apperr.Invalid with the parser's message.
func (s *Service) ParseRule(text string) (toolPattern, specifier string, err error) {
	if s.parse != nil {
		toolPattern, specifier, err = s.parse(text)
	} else {
		toolPattern = strings.TrimSpace(text)
		if toolPattern == "" || strings.ContainsAny(toolPattern, " ()\t\n") {
			err = apperr.Errorf(apperr.Invalid, "%q is not a tool name; this server reads rules without specifiers only", text)
		}
	}
	if err != nil && apperr.CodeOf(err) != apperr.Invalid {
		err = apperr.Errorf(apperr.Invalid, "%s", err.Error())
	}
	return toolPattern, specifier, err
}

// CheckRule reports whether AddRule would take rl, without saving it: its scope, effect,
// people and the compiler (Rulebook.Check). Errors: apperr.Invalid with the message.
func (s *Service) CheckRule(rl Rule) error { return s.rules.Check(rl) }

// AddRule saves a rule people made (Source prompt or api) after the compiler took it, applies it
// to the next call, and releases the pending approvals it now allows in the sessions it
// reaches. A session rule's session must exist; a workspace rule's folder is the given one.
// Errors: apperr.Invalid (with the compiler's message), apperr.NotFound for an unknown session.
func (s *Service) AddRule(ctx context.Context, rl Rule) (_ Rule, err error) {
	defer apperr.Wrap(&err, "AddRule")
	if rl, err = s.addRule(ctx, rl); err != nil {
		return Rule{}, err
	}
	return rl, s.releaseReached(ctx, rl)
}

// addRule is AddRule without the release.
func (s *Service) addRule(ctx context.Context, rl Rule) (_ Rule, err error) {
	if rl.Scope == ScopeSession && rl.SessionID != "" {
		if _, err := s.sessions.Session(ctx, rl.SessionID); err != nil {
			return Rule{}, err
		}
	} else if rl.SessionID != "" {
		return Rule{}, apperr.Errorf(apperr.Invalid, "Only a session rule names a session.")
	}
	rl, err = s.rules.Add(ctx, rl)
	if err != nil {
		return Rule{}, err
	}
	s.rulesChanged()
	if rl.Scope == ScopeSession {
		s.sessions.Changed(ctx, rl.SessionID)
	}
	return rl, nil
}

// DeleteRule deletes a rule for the next call (calls already decided stay decided). Errors:
// apperr.NotFound, apperr.Forbidden for a policy-file rule.
func (s *Service) DeleteRule(ctx context.Context, id string) (err error) {
	defer apperr.Wrap(&err, "DeleteRule(%s)", id)
	rl, err := s.rules.Delete(ctx, id)
	if err != nil {
		return err
	}
	s.rulesChanged()
	if rl.Scope == ScopeSession {
		s.sessions.Changed(ctx, rl.SessionID)
	}
	return nil
}

// SuggestRules are the rules "Always allow…" proposes for approval a (SPEC §14): the narrowest
// rules that together cover the call (ServiceConfig.Suggest: one, or several for a command line
// one rule cannot cover; without it the tool as a whole).
func (s *Service) SuggestRules(a Approval) []Rule {
	c := RuleCall{Tool: a.ToolName, Arguments: a.Arguments, Annotations: a.Annotations, SessionID: a.SessionID,
		Outside: a.RequestedBy == RequestedByAgent}
	if s.suggest != nil {
		if rs := s.suggest(c); len(rs) > 0 {
			return rs
		}
	}
	return []Rule{{Effect: Allow, Tool: a.ToolName}}
}

// rememberRules builds and checks the rules a "remember" answer on a saves (RememberRule's
// texts; effect allow; scope session or workspace; made by the decider, through their link).
// Errors: apperr.Invalid (naming the text when there are several), apperr.Forbidden.
func (s *Service) rememberRules(ctx context.Context, a Approval, ans Answer) ([]Rule, error) {
	if ans.Rule == nil || len(ans.Rule.texts()) == 0 {
		return nil, apperr.Errorf(apperr.Invalid, "A remember decision needs a rule: {\"rule\": {\"text\": \"tool(specifier)\", \"scope\": \"session\"}}.")
	}
	texts := ans.Rule.texts()
	if len(texts) > maxRememberRules {
		return nil, apperr.Errorf(apperr.Invalid, "A remember decision saves at most %d rules, not %d.", maxRememberRules, len(texts))
	}
	sess, err := s.sessions.Session(ctx, a.SessionID)
	if err != nil {
		return nil, err
	}
	out := make([]Rule, 0, len(texts))
	for _, text := range texts {
		rl, err := s.rememberRule(a, sess, ans, text)
		if err != nil {
			if len(texts) > 1 {
				return nil, apperr.Errorf(apperr.CodeOf(err), "%s: %s", text, apperr.MessageOf(err))
			}
			return nil, err
		}
		out = append(out, rl)
	}
	return out, nil
}

// rememberRule builds and checks one rule text of a "remember" answer on a, of session sess.
func (s *Service) rememberRule(a Approval, sess SessionInfo, ans Answer, text string) (Rule, error) {
	toolPattern, spec, err := s.ParseRule(text)
	if err != nil {
		return Rule{}, err
	}
	rl := Rule{Effect: Allow, Tool: toolPattern, Specifier: spec, Scope: ans.Rule.Scope, Source: SourcePrompt,
		CreatedBy: ans.By.Name, CreatedVia: ans.By.Via}
	switch rl.Scope {
	case ScopeSession:
		rl.SessionID = a.SessionID
	case ScopeWorkspace:
		// A share link reaches one session: its reviewer cannot loosen the owner's other
		// sessions on the same folder.
		if ans.By.Via != nil {
			return Rule{}, apperr.Errorf(apperr.Forbidden, "A share link remembers rules for its own session only: choose the scope session.")
		}
		rl.Workspace = sess.Workspace
	default:
		return Rule{}, apperr.Errorf(apperr.Invalid, "A remembered rule's scope is session or workspace, not %q.", ans.Rule.Scope)
	}
	if err := s.rules.Check(rl); err != nil {
		return Rule{}, err
	}
	// Saving approves this call (SPEC §14), so the rule must at least name its tool: a rule for
	// another tool would approve a call it says nothing about. Its specifier may be narrower
	// than this call (the first command of "a && b"): the person approves this one call and the
	// rule covers what it says.
	// A share link decides the calls in front of it: what it remembers names this call's tool
	// exactly, never a glob such as "*" that would let every call of the session through.
	if ans.By.Via != nil && rl.Tool != a.ToolName {
		return Rule{}, apperr.Errorf(apperr.Forbidden, "A share link remembers rules for this call's tool only (%s), not %s.", a.ToolName, rl.Tool)
	}
	if ok, _ := path.Match(rl.Tool, a.ToolName); !ok {
		return Rule{}, apperr.Errorf(apperr.Invalid, "The rule %s does not name %s, so saving it cannot approve this call.", rl.Text(), a.ToolName)
	}
	return rl, nil
}

// sessionRules are the rules "Approve for session" on a makes (SPEC §3, §14), made from the
// prompt by the decider, scoped to a's session. For a tool whose arguments carry the risk
// (argumentsCarryRisk: run_command, write_file, an MCP tool that dispatches by a name or
// command argument) they are the narrowed rules "Always allow…" suggests for the call
// (SuggestRules), never every call of the tool: approving `touch a.txt` for the session lets
// `touch b.txt` through, not `curl …`. For any other tool it is one allow rule for the tool
// (a grant), as it is when the Service has no RuleSuggester (ServiceConfig.Suggest; cmd/web
// always wires rules.Suggest): it cannot narrow a rule. Rules the session has already, and
// suggested rules the compiler refuses (they would decide nothing), are left out. covered is
// false when no rule, new or kept, stands for the call (every suggestion was refused, or the
// tool's name is itself a pattern): the decision then approves this call only.
func (s *Service) sessionRules(a Approval, by Decider) (rules []Rule, covered bool) {
	specifiers, wholeTool := s.sessionPlan(a)
	base := Rule{Effect: Allow, Tool: a.ToolName, Scope: ScopeSession, SessionID: a.SessionID,
		Source: SourcePrompt, CreatedBy: by.Name, CreatedVia: by.Via, FromApproval: a.ID}
	if wholeTool {
		for _, g := range s.grants(a.SessionID) {
			if g.ToolName == a.ToolName {
				return nil, true
			}
		}
		return []Rule{base}, true
	}
	existing := map[string]bool{}
	for _, rl := range s.rules.Rules() {
		if rl.Scope == ScopeSession && rl.SessionID == a.SessionID && rl.Effect == Allow && rl.When == "" && rl.ExpiresAt == nil {
			existing[rl.Tool+"\x00"+rl.Specifier] = true
		}
	}
	var out []Rule
	for _, spec := range specifiers {
		rl := base
		rl.Specifier = spec
		if existing[rl.Tool+"\x00"+rl.Specifier] {
			covered = true
			continue
		}
		if s.rules.Check(rl) != nil {
			continue
		}
		existing[rl.Tool+"\x00"+rl.Specifier] = true
		out = append(out, rl)
	}
	return out, covered || len(out) > 0
}

// sessionPlan is what "Approve for session" on a would allow (sessionRules, SessionGrant): every
// call of its tool (wholeTool), or the specifiers of the narrowed rules "Always allow…"
// suggests, never an empty one (SPEC §3); neither for a tool whose name is itself a pattern (an
// outside agent names its own tools: `*`, `B?sh` would reach other tools): this call only.
func (s *Service) sessionPlan(a Approval) (specifiers []string, wholeTool bool) {
	if strings.ContainsAny(a.ToolName, `*?[\`) {
		return nil, false
	}
	if !argumentsCarryRisk(a) || s.suggest == nil {
		return nil, true
	}
	for _, sug := range s.SuggestRules(a) {
		if sug.Specifier != "" {
			specifiers = append(specifiers, sug.Specifier)
		}
	}
	return specifiers, false
}

// SessionGrant says what "Approve for session" on a, as asked, lets run without a prompt in its
// session (SPEC §3), for the prompt to show before the person chooses it: the narrowed rules'
// texts ("run_command(rm:*)"), or wholeTool when it grants every call of a's tool; neither when
// it approves this call only (a tool named with a pattern, or no rule narrow enough). What it
// saves is worked out again at the decision (sessionRules), from the edited arguments if any.
func (s *Service) SessionGrant(a Approval) (rules []string, wholeTool bool) {
	specifiers, wholeTool := s.sessionPlan(a)
	for _, spec := range specifiers {
		rules = append(rules, Rule{Effect: Allow, Tool: a.ToolName, Specifier: spec}.Pattern())
	}
	return rules, wholeTool
}

// riskyArguments are the argument names that choose what a call does or touches (SPEC §3): the
// command a tool runs, the file it writes, or the tool an MCP meta-tool dispatches to.
var riskyArguments = []string{"command", "cmd", "path", "file_path", "notebook_path", "name", "tool", "tool_name", "toolName"}

// argumentsCarryRisk reports whether a's arguments, not its tool alone, say what the call does
// (SPEC §3): a command tool, or a call with a string argument of riskyArguments (write_file's
// path, an MCP tool that dispatches by name). "Approve for session" then saves the narrowed rule.
func argumentsCarryRisk(a Approval) bool {
	switch a.ToolName {
	case "run_command", "write_file", "Bash":
		return true
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(a.Arguments, &args) != nil {
		return false
	}
	for _, k := range riskyArguments {
		var v string
		if raw, ok := args[k]; ok && json.Unmarshal(raw, &v) == nil && v != "" {
			return true
		}
	}
	return false
}

// grants are the session's grant-shaped rules as grants, oldest first.
func (s *Service) grants(sessionID string) []Grant {
	var out []Grant
	for _, rl := range s.rules.Rules() {
		if rl.GrantShaped() && rl.SessionID == sessionID {
			out = append(out, GrantOf(rl))
		}
	}
	return out
}

// Grants lists the session's grants ("Approve for session": session allow rules for a whole
// tool made from a prompt), oldest first. Errors: apperr.NotFound for an unknown session.
func (s *Service) Grants(ctx context.Context, sessionID string) (_ []Grant, err error) {
	defer apperr.Wrap(&err, "Grants(%s)", sessionID)
	if _, err := s.sessions.Session(ctx, sessionID); err != nil {
		return nil, err
	}
	return s.grants(sessionID), nil
}

// RevokeGrant deletes the session's grant rules for toolName, so the next call of that tool asks
// again (calls already let through stay decided). Only the owner may revoke: the web layer
// offers it on owner routes only. Errors: apperr.NotFound for an unknown session or no grant.
func (s *Service) RevokeGrant(ctx context.Context, sessionID, toolName string) (err error) {
	defer apperr.Wrap(&err, "RevokeGrant(%s, %s)", sessionID, toolName)
	if _, err := s.sessions.Session(ctx, sessionID); err != nil {
		return err
	}
	found := false
	for _, rl := range s.rules.Rules() {
		if rl.GrantShaped() && rl.SessionID == sessionID && rl.Tool == toolName {
			if _, err := s.rules.Delete(ctx, rl.ID); err != nil {
				return err
			}
			s.rulesChanged()
			found = true
		}
	}
	if !found {
		return apperr.Errorf(apperr.NotFound, "There is no session grant for %s.", toolName)
	}
	s.sessions.Changed(ctx, sessionID)
	return nil
}

// FlushRuleHitsEvery writes the rules' hits and last use, counted in memory on the calls' path,
// to the store every interval until ctx ends, then once more (Rulebook.Run). A failed write is
// logged; its hits stay counted for the next. cmd/web runs it for the server's life.
func (s *Service) FlushRuleHitsEvery(ctx context.Context, every time.Duration) {
	s.rules.Run(ctx, every, func(err error) { s.log.Error("flush rule hits", "err", err) })
}

// FlushRuleHits writes the hits counted in memory to the store now; a failure is logged and the
// hits stay counted for the next flush.
func (s *Service) FlushRuleHits() {
	if err := s.rules.Flush(context.Background()); err != nil {
		s.log.Error("flush rule hits", "err", err)
	}
}

// askedFrom is the cwd the event that asked about approval id's outside call reported
// (OutsideCall.Cwd, "" for none: its relative paths were judged from the workspace), from the
// store or, while its row is being stored, the held call; unknown when neither has it: its
// relative paths are then judged as a place the rules do not know (RuleCall.CwdUnknown).
func (s *Service) askedFrom(ctx context.Context, id string) (cwd string, unknown bool) {
	if os, ok := s.store.(OutsideStore); ok {
		if c, err := os.OutsideCall(ctx, id); err == nil {
			return c.Cwd, false
		}
	}
	if c, ok := s.HeldOutsideCall(id); ok {
		return c.Cwd, false
	}
	return "", true
}
