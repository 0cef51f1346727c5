package web

import (
	"context"
	"net/http"
	"net/url"
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

// rulesPage renders the Rules page with an empty add form.
func (s *Server) rulesPage(w http.ResponseWriter, r *http.Request) error {
	return s.renderRules(w, r, http.StatusOK, templates.RuleForm{Effect: "allow", Scope: "server"}, "")
}

// renderRules renders the Rules page with the add form holding form and, when set, its refusal.
func (s *Server) renderRules(w http.ResponseWriter, r *http.Request, st int, form templates.RuleForm, formErr string) error {
	sessions, err := s.cfg.Store.Sessions(r.Context())
	if err != nil {
		return err
	}
	v := templates.RulesView{Form: form, Error: formErr, Scopes: ruleScopes(sessions, s.cfg.Workspace)}
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
	opts := []templates.Option{{Value: "server", Label: "server (every session)"}}
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
	return opts
}

// addRule makes a rule from the Rules page's form: fields rule (its text), effect (allow, ask,
// deny), scope ("server", "workspace:<folder>", "session:<id>") and note. A rule the parser or
// compiler refuses, or a bad effect or scope, shows the page again (400) with the message in a
// role="alert" and the typed text kept; an unknown session is refused the same way. Success
// redirects to /rules (303).
func (s *Server) addRule(w http.ResponseWriter, r *http.Request) error {
	if err := parseForm(r); err != nil {
		return err
	}
	form := templates.RuleForm{Text: r.PostForm.Get("rule"), Effect: r.PostForm.Get("effect"),
		Scope: r.PostForm.Get("scope"), Note: r.PostForm.Get("note"),
		Approvers: r.PostForm.Get("approvers"), Reviewers: r.PostForm.Get("reviewers")}
	if _, err := s.makeRule(r.Context(), form); err != nil {
		if c := apperr.CodeOf(err); c == apperr.Invalid || c == apperr.NotFound {
			return s.renderRules(w, r, http.StatusBadRequest, form, apperr.MessageOf(err))
		}
		return err
	}
	http.Redirect(w, r, "/rules", http.StatusSeeOther)
	return nil
}

// makeRule checks the add form and saves its rule through the runner (SourceAPI would say the
// JSON API: a rule made on the Rules page is the owner's, source api like every rule the owner
// makes outside a prompt). Errors: apperr.Invalid, apperr.NotFound.
func (s *Server) makeRule(ctx context.Context, f templates.RuleForm) (gate.Rule, error) {
	text := strings.TrimSpace(f.Text)
	if text == "" {
		return gate.Rule{}, apperr.Errorf(apperr.Invalid, "A rule needs a text, such as run_command(git diff:*).")
	}
	if len(text) > maxRuleText || len(f.Note) > maxRuleNote {
		return gate.Rule{}, apperr.Errorf(apperr.Invalid, "The rule is too long (text at most %d bytes, note %d).", maxRuleText, maxRuleNote)
	}
	rl := gate.Rule{Effect: gate.Effect(f.Effect), Source: gate.SourceAPI, CreatedBy: gate.ByOwner, Note: strings.TrimSpace(f.Note)}
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
	return s.cfg.Gate.AddRule(ctx, rl)
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
