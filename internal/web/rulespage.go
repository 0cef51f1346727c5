package web

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/web/templates"
)

// The Rules page (SPEC §14, §6 "rules page"): /rules lists every rule, owner only; POST /rules
// adds one and POST /rules/{id}/delete deletes one, both plain forms that answer with a
// redirect to /rules (so they work without JavaScript), protected against cross-site requests
// like every form (http.CrossOriginProtection in Handler).

// rulesPage renders the Rules page with an empty add form. Its scope starts at the narrowest
// it can (issue 34): the session it was opened from (?session=<id>), else the server's
// workspace, else the newest session's; never every session.
func (s *Server) rulesPage(w http.ResponseWriter, r *http.Request) error {
	form := templates.RuleForm{Effect: "allow"}
	if id := r.URL.Query().Get("session"); id != "" {
		if _, err := s.cfg.Store.Session(r.Context(), id); err == nil {
			form.Scope = "session:" + id
		}
	}
	return s.renderRules(w, r, http.StatusOK, form, "")
}

// defaultRuleScope is the add form's scope when none is chosen yet: the first workspace choice
// (the server's workspace comes first), else the first session's, never "server".
func defaultRuleScope(opts []templates.Option) string {
	for _, prefix := range []string{"workspace:", "session:"} {
		for _, o := range opts {
			if strings.HasPrefix(o.Value, prefix) {
				return o.Value
			}
		}
	}
	return ""
}

// renderRules renders the Rules page with the add form holding form and, when set, its refusal.
func (s *Server) renderRules(w http.ResponseWriter, r *http.Request, st int, form templates.RuleForm, formErr string) error {
	sessions, err := s.cfg.Store.Sessions(r.Context())
	if err != nil {
		return err
	}
	v := templates.RulesView{Form: form, Error: formErr, Scopes: ruleScopes(sessions, s.cfg.Workspace)}
	if v.Form.Scope == "" {
		v.Form.Scope = defaultRuleScope(v.Scopes)
	}
	if v.Form.Confirm != nil {
		v.Form.Confirm.Titles = titlesOf(sessions)
	}
	if err := s.cfg.Gate.RulesError(); err != nil {
		v.CompileError = err.Error()
	}
	titles := map[string]string{}
	for _, sess := range sessions {
		titles[sess.ID] = sess.Title
	}
	for _, rl := range s.cfg.Gate.Rules() {
		v.Rows = append(v.Rows, ruleRow(rl, titles))
	}
	s.render(w, r, st, templates.Layout(s.ownerPage(r.Context(), "Rules", false), templates.RulesPage(v)))
	return nil
}

// ruleRow is a rule as the Rules page shows it.
func ruleRow(rl gate.Rule, titles map[string]string) templates.RuleRow {
	row := templates.RuleRow{ID: rl.ID, Text: rl.Text(), Effect: string(rl.Effect), Note: rl.Note, Scope: string(rl.Scope),
		Source: string(rl.Source), CreatedBy: rl.CreatedBy, Hits: rl.Hits, LastUsedAt: rl.LastUsedAt, ExpiresAt: rl.ExpiresAt,
		ReadOnly: rl.ReadOnly(), AllowsEverything: rl.Effect == gate.Allow && rl.Tool == "*" && rl.Specifier == "" && rl.When == ""}
	if !rl.CreatedAt.IsZero() {
		t := rl.CreatedAt
		row.CreatedAt = &t
	}
	switch rl.Scope {
	case gate.ScopeSession:
		row.ScopeDetail, row.ScopeURL = titles[rl.SessionID], "/sessions/"+url.PathEscape(rl.SessionID)
		if row.ScopeDetail == "" {
			row.ScopeDetail = "session " + rl.SessionID
		}
	case gate.ScopeWorkspace:
		row.ScopeDetail = rl.Workspace
	}
	if rl.CreatedVia != nil {
		row.LinkID, row.LinkLabel = rl.CreatedVia.LinkID, rl.CreatedVia.Label
	}
	if !row.ReadOnly {
		row.DeleteURL = "/rules/" + url.PathEscape(rl.ID) + "/delete"
	}
	return row
}

// ruleScopes are the add form's scope choices: "server" (every session), "workspace:<folder>"
// for the server's workspace and each session's, "session:<id>" for each session (newest
// first, as the store lists them).
func ruleScopes(sessions []agent.Session, serverWorkspace string) []templates.Option {
	var opts []templates.Option
	var folders []string
	if serverWorkspace != "" {
		folders = append(folders, serverWorkspace)
	}
	for _, sess := range sessions {
		if !slices.Contains(folders, sess.Workspace) {
			folders = append(folders, sess.Workspace)
		}
	}
	for _, f := range folders {
		opts = append(opts, templates.Option{Value: "workspace:" + f, Label: "workspace " + f})
	}
	for _, sess := range sessions {
		opts = append(opts, templates.Option{Value: "session:" + sess.ID, Label: "session " + sess.Title})
	}
	// The widest last: a rule for every session is chosen on purpose (issue 34).
	return append(opts, templates.Option{Value: "server", Label: "server (every session)"})
}

// titlesOf maps each session's id to its title.
func titlesOf(sessions []agent.Session) map[string]string {
	out := make(map[string]string, len(sessions))
	for _, sess := range sessions {
		out[sess.ID] = sess.Title
	}
	return out
}

// addRule makes a rule from the Rules page's form: fields rule (its text), effect (allow, ask,
// deny), scope ("server", "workspace:<folder>", "session:<id>"), when (a CEL condition), note,
// approvers and reviewers. A rule the parser or compiler refuses, or a bad effect or scope,
// shows the page again (400) with the message in a role="alert" and the typed text kept; an
// unknown session is refused the same way. An allow of a whole tool or of every tool (no
// specifier, no when) is first shown back with a confirmation naming the pending calls it
// would release (200); its "Save anyway" (field confirm, confirmKey) saves it. Success
// redirects to /rules (303).
func (s *Server) addRule(w http.ResponseWriter, r *http.Request) error {
	if err := parseForm(r); err != nil {
		return err
	}
	form := templates.RuleForm{Text: r.PostForm.Get("rule"), Effect: r.PostForm.Get("effect"),
		Scope: r.PostForm.Get("scope"), Note: r.PostForm.Get("note"), When: r.PostForm.Get("when"),
		Approvers: r.PostForm.Get("approvers"), Reviewers: r.PostForm.Get("reviewers")}
	rl, err := s.buildRule(form)
	// "Save anyway" confirms the rule and scope it was shown for, not whatever the form holds
	// when it is pressed.
	confirmed := err == nil && r.PostForm.Get("confirm") == confirmKey(rl, form.Scope)
	if err == nil && wholeToolAllow(rl) && !confirmed {
		err = s.cfg.Gate.CheckRule(rl) // a rule that would be refused is refused first
	}
	if err == nil && wholeToolAllow(rl) && !confirmed {
		// An allow of every call of a tool, or of every tool, asks first and names what it
		// would release now (issue 34): the pending calls it reaches, by session.
		c, err := s.releasedBy(r.Context(), rl)
		if err != nil {
			return err
		}
		c.Key = confirmKey(rl, form.Scope)
		form.Confirm = &c
		return s.renderRules(w, r, http.StatusOK, form, "")
	}
	if err == nil {
		_, err = s.cfg.Gate.AddRule(r.Context(), rl)
	}
	if err != nil {
		if c := apperr.CodeOf(err); c == apperr.Invalid || c == apperr.NotFound {
			return s.renderRules(w, r, http.StatusBadRequest, form, apperr.MessageOf(err))
		}
		return err
	}
	http.Redirect(w, r, "/rules", http.StatusSeeOther)
	return nil
}

// wholeToolAllow reports whether rl allows every call of a tool, or of every tool: no
// specifier and no `when` narrow it.
func wholeToolAllow(rl gate.Rule) bool {
	return rl.Effect == gate.Allow && rl.Specifier == "" && strings.TrimSpace(rl.When) == ""
}

// confirmKey names what a "Save anyway" confirms: the rule's text and the scope chosen.
func confirmKey(rl gate.Rule, scope string) string { return rl.Text() + " @ " + scope }

// releasedBy is what saving rl would let run now: the pending approvals of the sessions it
// reaches whose tool its pattern names (deny and ask rules may still hold some: "up to").
func (s *Server) releasedBy(ctx context.Context, rl gate.Rule) (templates.RuleConfirm, error) {
	c := templates.RuleConfirm{Rule: rl.Text(), Scope: string(rl.Scope)}
	items, err := s.cfg.Store.Inbox(ctx, agent.InboxQuery{})
	if err != nil {
		return c, err
	}
	seen := map[string]bool{}
	for _, it := range items {
		a := it.Approval
		if ok, _ := path.Match(rl.Tool, a.ToolName); !ok {
			continue
		}
		switch rl.Scope {
		case gate.ScopeSession:
			if a.SessionID != rl.SessionID {
				continue
			}
		case gate.ScopeWorkspace:
			if filepath.Clean(it.Workspace) != filepath.Clean(rl.Workspace) {
				continue
			}
		}
		c.Pending++
		if !seen[a.SessionID] {
			seen[a.SessionID] = true
			c.SessionIDs = append(c.SessionIDs, a.SessionID)
		}
	}
	return c, nil
}

// buildRule reads the add form into a rule (SourceAPI would say the JSON API: a rule made on
// the Rules page is the owner's, source api like every rule the owner makes outside a prompt),
// its `when` as typed; the gate's compiler checks it when it is saved. Errors: apperr.Invalid.
func (s *Server) buildRule(f templates.RuleForm) (gate.Rule, error) {
	text := strings.TrimSpace(f.Text)
	if text == "" {
		return gate.Rule{}, apperr.Errorf(apperr.Invalid, "A rule needs a text, such as run_command(git diff:*).")
	}
	if len(text) > maxRuleText || len(f.Note) > maxRuleNote {
		return gate.Rule{}, apperr.Errorf(apperr.Invalid, "The rule is too long (text at most %d bytes, note %d).", maxRuleText, maxRuleNote)
	}
	rl := gate.Rule{Effect: gate.Effect(f.Effect), Source: gate.SourceAPI, CreatedBy: gate.ByOwner, Note: strings.TrimSpace(f.Note),
		When: strings.TrimSpace(f.When)}
	switch rl.Effect {
	case gate.Allow, gate.Ask, gate.Deny:
	default:
		return gate.Rule{}, apperr.Errorf(apperr.Invalid, "Effect must be allow, ask or deny, not %q.", f.Effect)
	}
	kind, arg, _ := strings.Cut(f.Scope, ":")
	switch {
	case f.Scope == "server":
		rl.Scope = gate.ScopeServer
	case kind == "workspace" && filepath.IsAbs(arg):
		rl.Scope, rl.Workspace = gate.ScopeWorkspace, filepath.Clean(arg)
	case kind == "session" && arg != "":
		rl.Scope, rl.SessionID = gate.ScopeSession, arg
	default:
		return gate.Rule{}, apperr.Errorf(apperr.Invalid, "Scope must be server, workspace:<folder> or session:<id>, not %q.", f.Scope)
	}
	// Several approvers (SPEC §15): the form's fields, or the text form's.
	if a := strings.TrimSpace(f.Approvers); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil {
			return gate.Rule{}, apperr.Errorf(apperr.Invalid, "Approvers must be a number such as 2, not %q.", a)
		}
		rl.Approvers = n
	}
	for _, n := range strings.Split(f.Reviewers, ",") {
		if n = strings.TrimSpace(n); n != "" {
			rl.Reviewers = append(rl.Reviewers, n)
		}
	}
	var err error
	if rl.Tool, rl.Specifier, err = s.parseRuleText(text, &rl); err != nil {
		return gate.Rule{}, apperr.Errorf(apperr.Invalid, "Rule %q: %s", text, apperr.MessageOf(err))
	}
	if err := normalizeReviewers(&rl); err != nil {
		return gate.Rule{}, err
	}
	return rl, nil
}

// deleteRule is a row's Delete: the rule stops applying to the next call; the page is shown
// again (303 to /rules). 404 for an unknown rule, 403 for a policy-file rule.
func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request) error {
	if err := s.cfg.Gate.DeleteRule(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	http.Redirect(w, r, "/rules", http.StatusSeeOther)
	return nil
}
