package agent

import (
	"context"
	"path"
	"strings"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// Rules and modes (SPEC §14) as the runner applies them: the rulebook the gate evaluates, the
// sessions' modes, "Approve for session" and "Always allow…" as rules, and the release of
// pending approvals that a new rule or mode now allows. Nothing is ever denied retroactively:
// a pending approval is only ever released (approved), never denied, by a change.

// RememberRule is the rule a "remember" decision saves (SPEC §14 "Always allow…"): Text, and
// Texts when one rule cannot cover the call ("Always allow…" on `echo hi && ls -1` suggests
// run_command(echo hi:*) and run_command(ls:*)); every text is a rule, all with Scope, saved
// together or not at all. Empty texts are skipped.
type RememberRule struct {
	Text  string         `json:"text"`            // "run_command(git diff:*)"
	Texts []string       `json:"texts,omitempty"` // more rules saved with it
	Scope gate.RuleScope `json:"scope"`           // session or workspace
}

// texts are the rule texts to save, in order, without the empty ones.
func (rr *RememberRule) texts() []string {
	var out []string
	for _, t := range append([]string{rr.Text}, rr.Texts...) {
		if strings.TrimSpace(t) != "" {
			out = append(out, t)
		}
	}
	return out
}

// maxRememberRules bounds how many rules one "remember" decision saves.
const maxRememberRules = 16

// sessionMode is the session's mode as of now (a switch applies to the next call).
func (r *Runner) sessionMode(s Session) gate.Mode {
	if m, ok := r.modes.Load(s.ID); ok {
		return m.(gate.Mode)
	}
	if s.Mode != "" {
		return s.Mode
	}
	return r.cfg.DefaultMode
}

// SetMode switches a session's mode (SPEC §14) for its next call; the owner only (the web layer
// offers it on owner routes). Pending approvals the new mode allows (accept-edits: file writes)
// are released; none is denied (plan mode applies to calls made from now on). Errors:
// apperr.Invalid for an unknown mode (naming the three), apperr.NotFound for an unknown session.
func (r *Runner) SetMode(ctx context.Context, sessionID string, mode gate.Mode) (s Session, err error) {
	defer apperr.Wrap(&err, "SetMode(%s)", sessionID)
	switch mode {
	case gate.ModeDefault, gate.ModePlan, gate.ModeAcceptEdits:
	default:
		return Session{}, apperr.Errorf(apperr.Invalid, "mode must be default, plan or accept-edits, not %q", mode)
	}
	if err := r.cfg.Store.SetSessionMode(ctx, sessionID, mode); err != nil {
		return Session{}, err
	}
	r.modes.Store(sessionID, mode)
	if s, err = r.cfg.Store.Session(ctx, sessionID); err != nil {
		return Session{}, err
	}
	r.publish(Event{Type: SessionUpdated, SessionID: sessionID, Session: &s})
	pending, err := r.cfg.Store.Approvals(ctx, sessionID, gate.Pending)
	if err != nil {
		return s, err
	}
	r.release(ctx, pending)
	return s, nil
}

// release decides again, by the current rules and modes, each of pending that is still pending
// and approves those now allowed, as automatic decisions naming the rule or mode. Handlers are
// not run again (they let these calls through already); a call the rules would now deny or
// that still asks stays pending for a person.
func (r *Runner) release(ctx context.Context, pending []gate.Approval) {
	sessions := map[string]Session{}
	// Hits are counted below, only for the releases that win (ask and a rule change may race
	// to release the same call).
	check := gate.Checker{Rules: evalOnly{r.rules}}
	for _, p := range pending {
		if p.Status != gate.Pending {
			continue
		}
		t, ok := r.cfg.Tools.Lookup(p.ToolName)
		if !ok {
			continue
		}
		s, ok := sessions[p.SessionID]
		if !ok {
			var err error
			if s, err = r.cfg.Store.Session(ctx, p.SessionID); err != nil {
				continue
			}
			sessions[p.SessionID] = s
		}
		parent := ""
		if p.ParentToolCallID != "" {
			parent = p.RequestedBy
		}
		uncovered := ""
		if p.DecisionSource == gate.FromAction {
			// An action no rule may cover (CheckCall.Uncovered): asked again, it asks again.
			uncovered = p.AskReason
		}
		d := check.Check(ctx, gate.CheckCall{SessionID: p.SessionID, ToolCallID: p.ToolCallID,
			ParentToolCallID: p.ParentToolCallID, Parent: parent, Tool: t, Arguments: p.Arguments,
			Workspace: s.Workspace, Mode: r.sessionMode(s), Uncovered: uncovered})
		if d.Outcome != gate.Allowed || d.Source == gate.FromAnnotations {
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
		res := gate.Resolution{Status: gate.Approved, Automatic: true, DecidedBy: rec.DecidedBy, Reason: rec.Reason,
			Scope: rec.Scope, DerivedFrom: rec.DerivedFrom, Source: d.Source, RuleID: rec.RuleID, RuleText: rec.RuleText,
			RuleSource: rec.RuleSource}
		_, err := r.gate.Decide(ctx, p.ID, res)
		switch {
		case err == nil && d.Rule != nil:
			r.rules.Hit(d.Rule)
		case err != nil && apperr.CodeOf(err) != apperr.Conflict:
			r.log.Error("release pending approval", "approval", p.ID, "err", err)
		}
	}
}

// evalOnly hides a Rulebook's hit counter from a Checker.
type evalOnly struct{ e gate.RuleEvaluator }

func (e evalOnly) Evaluate(c gate.RuleCall) gate.RuleDecision { return e.e.Evaluate(c) }

// releaseReached releases the pending approvals of every session rule rl reaches (its session;
// for workspace and server rules, every session with one pending).
func (r *Runner) releaseReached(ctx context.Context, rl gate.Rule) error {
	var pending []gate.Approval
	var err error
	if rl.Scope == gate.ScopeSession {
		pending, err = r.cfg.Store.Approvals(ctx, rl.SessionID, gate.Pending)
	} else {
		pending, err = r.cfg.Store.PendingApprovals(ctx)
	}
	if err != nil {
		return err
	}
	r.release(ctx, pending)
	return nil
}

// Rules lists every rule (SPEC §14 Rules page, GET /api/rules): the policy file's first
// (read-only), then the stored ones, oldest first, with hits and last use counted so far.
func (r *Runner) Rules() []gate.Rule { return r.rules.Rules() }

// RulesError is what the rules compiler refused of the current rules (they are skipped), or nil.
func (r *Runner) RulesError() error { return r.rules.Err() }

// ParseRule reads a rule's text form into its tool pattern and specifier (Config.ParseRule; a
// bare tool name or glob without one). Errors: apperr.Invalid with the parser's message.
func (r *Runner) ParseRule(text string) (toolPattern, specifier string, err error) {
	if r.cfg.ParseRule != nil {
		toolPattern, specifier, err = r.cfg.ParseRule(text)
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

// AddRule saves a rule people made (Source prompt or api) after the compiler took it, applies it
// to the next call, and releases the pending approvals it now allows in the sessions it
// reaches. A session rule's session must exist; a workspace rule's folder is the given one.
// Errors: apperr.Invalid (with the compiler's message), apperr.NotFound for an unknown session.
func (r *Runner) AddRule(ctx context.Context, rl gate.Rule) (_ gate.Rule, err error) {
	defer apperr.Wrap(&err, "AddRule")
	if rl, err = r.addRule(ctx, rl); err != nil {
		return gate.Rule{}, err
	}
	return rl, r.releaseReached(ctx, rl)
}

// addRule is AddRule without the release.
func (r *Runner) addRule(ctx context.Context, rl gate.Rule) (_ gate.Rule, err error) {
	if rl.Scope == gate.ScopeSession && rl.SessionID != "" {
		if _, err := r.cfg.Store.Session(ctx, rl.SessionID); err != nil {
			return gate.Rule{}, err
		}
	} else if rl.SessionID != "" {
		return gate.Rule{}, apperr.Errorf(apperr.Invalid, "Only a session rule names a session.")
	}
	rl, err = r.rules.Add(ctx, rl)
	if err != nil {
		return gate.Rule{}, err
	}
	r.rulesChanged()
	if rl.Scope == gate.ScopeSession {
		r.grantsChanged(ctx, rl.SessionID)
	}
	return rl, nil
}

// DeleteRule deletes a rule for the next call (calls already decided stay decided). Errors:
// apperr.NotFound, apperr.Forbidden for a policy-file rule.
func (r *Runner) DeleteRule(ctx context.Context, id string) (err error) {
	defer apperr.Wrap(&err, "DeleteRule(%s)", id)
	rl, err := r.rules.Delete(ctx, id)
	if err != nil {
		return err
	}
	r.rulesChanged()
	if rl.Scope == gate.ScopeSession {
		r.grantsChanged(ctx, rl.SessionID)
	}
	return nil
}

// SuggestRules are the rules "Always allow…" proposes for approval a (SPEC §14): the narrowest
// rules that together cover the call (Config.SuggestRule: one, or several for a command line
// one rule cannot cover; without it the tool as a whole).
func (r *Runner) SuggestRules(a gate.Approval) []gate.Rule {
	c := gate.RuleCall{Tool: a.ToolName, Arguments: a.Arguments, Annotations: a.Annotations, SessionID: a.SessionID}
	if r.cfg.SuggestRule != nil {
		if rs := r.cfg.SuggestRule(c); len(rs) > 0 {
			return rs
		}
	}
	return []gate.Rule{{Effect: gate.Allow, Tool: a.ToolName}}
}

// rememberRules builds and checks the rules a "remember" decision on a saves (RememberRule's
// texts; effect allow; scope session or workspace; made by the decider, through their link).
// Errors: apperr.Invalid (naming the text when there are several), apperr.Forbidden.
func (r *Runner) rememberRules(ctx context.Context, a gate.Approval, d Decision) ([]gate.Rule, error) {
	if d.Rule == nil || len(d.Rule.texts()) == 0 {
		return nil, apperr.Errorf(apperr.Invalid, "A remember decision needs a rule: {\"rule\": {\"text\": \"tool(specifier)\", \"scope\": \"session\"}}.")
	}
	texts := d.Rule.texts()
	if len(texts) > maxRememberRules {
		return nil, apperr.Errorf(apperr.Invalid, "A remember decision saves at most %d rules, not %d.", maxRememberRules, len(texts))
	}
	out := make([]gate.Rule, 0, len(texts))
	for _, text := range texts {
		rl, err := r.rememberRule(ctx, a, d, text)
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

// rememberRule builds and checks one rule text of a "remember" decision on a.
func (r *Runner) rememberRule(ctx context.Context, a gate.Approval, d Decision, text string) (gate.Rule, error) {
	toolPattern, spec, err := r.ParseRule(text)
	if err != nil {
		return gate.Rule{}, err
	}
	rl := gate.Rule{Effect: gate.Allow, Tool: toolPattern, Specifier: spec, Scope: d.Rule.Scope, Source: gate.SourcePrompt,
		CreatedBy: d.By.Name, CreatedVia: d.By.Via}
	s, err := r.cfg.Store.Session(ctx, a.SessionID)
	if err != nil {
		return gate.Rule{}, err
	}
	switch rl.Scope {
	case gate.ScopeSession:
		rl.SessionID = a.SessionID
	case gate.ScopeWorkspace:
		// A share link reaches one session: its reviewer cannot loosen the owner's other
		// sessions on the same folder.
		if d.By.Via != nil {
			return gate.Rule{}, apperr.Errorf(apperr.Forbidden, "A share link remembers rules for its own session only: choose the scope session.")
		}
		rl.Workspace = s.Workspace
	default:
		return gate.Rule{}, apperr.Errorf(apperr.Invalid, "A remembered rule's scope is session or workspace, not %q.", d.Rule.Scope)
	}
	if err := r.rules.Check(rl); err != nil {
		return gate.Rule{}, err
	}
	// Saving approves this call (SPEC §14), so the rule must at least name its tool: a rule for
	// another tool would approve a call it says nothing about. Its specifier may be narrower
	// than this call (the first command of "a && b"): the person approves this one call and the
	// rule covers what it says.
	// A share link decides the calls in front of it: what it remembers names this call's tool
	// exactly, never a glob such as "*" that would let every call of the session through.
	if d.By.Via != nil && rl.Tool != a.ToolName {
		return gate.Rule{}, apperr.Errorf(apperr.Forbidden, "A share link remembers rules for this call's tool only (%s), not %s.", a.ToolName, rl.Tool)
	}
	if ok, _ := path.Match(rl.Tool, a.ToolName); !ok {
		return gate.Rule{}, apperr.Errorf(apperr.Invalid, "The rule %s does not name %s, so saving it cannot approve this call.", rl.Text(), a.ToolName)
	}
	return rl, nil
}

// sessionRule is the rule "Approve for session" on a makes (SPEC §14): a session allow rule for
// its tool, made from the prompt by the decider; ok is false when the session has one already.
func (r *Runner) sessionRule(a gate.Approval, by gate.Decider) (rl gate.Rule, ok bool) {
	for _, g := range r.grants(a.SessionID) {
		if g.ToolName == a.ToolName {
			return gate.Rule{}, false
		}
	}
	return gate.Rule{Effect: gate.Allow, Tool: a.ToolName, Scope: gate.ScopeSession, SessionID: a.SessionID,
		Source: gate.SourcePrompt, CreatedBy: by.Name, CreatedVia: by.Via, FromApproval: a.ID}, true
}

// grants are the session's grant-shaped rules as grants, oldest first.
func (r *Runner) grants(sessionID string) []gate.Grant {
	var out []gate.Grant
	for _, rl := range r.rules.Rules() {
		if rl.GrantShaped() && rl.SessionID == sessionID {
			out = append(out, gate.GrantOf(rl))
		}
	}
	return out
}

// Grants lists the session's grants ("Approve for session": session allow rules for a whole
// tool made from a prompt), oldest first. Errors: apperr.NotFound for an unknown session.
func (r *Runner) Grants(ctx context.Context, sessionID string) (_ []gate.Grant, err error) {
	defer apperr.Wrap(&err, "Grants(%s)", sessionID)
	if _, err := r.cfg.Store.Session(ctx, sessionID); err != nil {
		return nil, err
	}
	return r.grants(sessionID), nil
}

// RevokeGrant deletes the session's grant rules for toolName, so the next call of that tool asks
// again (calls already let through stay decided). Only the owner may revoke: the web layer
// offers it on owner routes only. Errors: apperr.NotFound for an unknown session or no grant.
func (r *Runner) RevokeGrant(ctx context.Context, sessionID, toolName string) (err error) {
	defer apperr.Wrap(&err, "RevokeGrant(%s, %s)", sessionID, toolName)
	if _, err := r.cfg.Store.Session(ctx, sessionID); err != nil {
		return err
	}
	found := false
	for _, rl := range r.rules.Rules() {
		if rl.GrantShaped() && rl.SessionID == sessionID && rl.Tool == toolName {
			if _, err := r.rules.Delete(ctx, rl.ID); err != nil {
				return err
			}
			r.rulesChanged()
			found = true
		}
	}
	if !found {
		return apperr.Errorf(apperr.NotFound, "There is no session grant for %s.", toolName)
	}
	r.grantsChanged(ctx, sessionID)
	return nil
}

// grantsChanged tells the session's viewers that its rules changed, as a session_updated event
// (the owner's page redraws its grants panel from them on it).
func (r *Runner) grantsChanged(ctx context.Context, sessionID string) {
	s, err := r.cfg.Store.Session(ctx, sessionID)
	if err != nil {
		return
	}
	r.publish(Event{Type: SessionUpdated, SessionID: sessionID, Session: &s})
}

// FlushRuleHitsEvery writes the rules' hits and last use, counted in memory on the calls' path,
// to the store every interval until ctx ends, then once more (gate.Rulebook.Run). A failed
// write is logged; its hits stay counted for the next. cmd/web runs it for the server's life.
func (r *Runner) FlushRuleHitsEvery(ctx context.Context, every time.Duration) {
	r.rules.Run(ctx, every, func(err error) { r.log.Error("flush rule hits", "err", err) })
}

// flushRuleHits writes the hits counted in memory to the store; a failure is logged and the
// hits stay counted for the next flush.
func (r *Runner) flushRuleHits() {
	if err := r.rules.Flush(context.Background()); err != nil {
		r.log.Error("flush rule hits", "err", err)
	}
}
