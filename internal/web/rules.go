package web

import (
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/share"
	"countersign/web/templates"
)

// Rules (SPEC §14, §12): GET /api/rules lists every rule, the policy file's marked readOnly;
// POST /api/rules makes one (owner only); DELETE /api/rules/{id} deletes one for the next call.
// Reviewer links never reach these routes (they are /api, owner only); a reviewer with
// canRemember makes rules only through a "remember" decision on a prompt.

// setMode is the session page's Mode combobox (owner only): it switches the mode for the next
// call and answers with the combobox (htmx), or redirects to the session page (303, a plain form
// post without JavaScript); an unknown mode is refused in a role="alert" (400).
func (s *Server) setMode(w http.ResponseWriter, r *http.Request) error {
	if err := parseForm(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	err := s.cfg.Gate.SetMode(r.Context(), id, gate.Mode(r.PostForm.Get("mode")))
	if apperr.CodeOf(err) == apperr.Invalid {
		if sess, err := s.cfg.Store.Session(r.Context(), id); err == nil {
			s.render(w, r, http.StatusBadRequest, templates.ModeForm(string(sess.Mode), "/sessions/"+id+"/mode",
				"Mode must be default, plan or accept-edits."))
			return nil
		}
	}
	if err != nil {
		return err
	}
	if r.Header.Get("HX-Request") != "true" {
		// A plain form post (no JavaScript): back to the session page, which shows the mode.
		http.Redirect(w, r, "/sessions/"+id, http.StatusSeeOther)
		return nil
	}
	sess, err := s.cfg.Store.Session(r.Context(), id)
	if err != nil {
		return err
	}
	s.render(w, r, http.StatusOK, templates.ModeForm(string(sess.Mode), "/sessions/"+id+"/mode", ""))
	return nil
}

// apiRule is a rule as the API shows it: every gate.Rule field, its text form and whether it is
// read-only (the policy file's).
type apiRule struct {
	gate.Rule
	Text     string `json:"text"`
	ReadOnly bool   `json:"readOnly"`
}

func ruleJSON(r gate.Rule) apiRule { return apiRule{Rule: r, Text: r.Text(), ReadOnly: r.ReadOnly()} }

// apiRules → {rules: [...], error?}: every rule, the policy file's first; error says which rules
// the compiler refused (they are skipped).
func (s *Server) apiRules(w http.ResponseWriter, r *http.Request) error {
	rules := s.cfg.Gate.Rules()
	out := make([]apiRule, 0, len(rules))
	for _, rl := range rules {
		out = append(out, ruleJSON(rl))
	}
	body := map[string]any{"rules": out}
	if err := s.cfg.Gate.RulesError(); err != nil {
		body["error"] = err.Error()
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// ruleInput is POST /api/rules' body: a rule's text ("run_command(git diff:*)") or its tool and
// specifier, an effect, a scope with its session or workspace, and optionally a `when`, an
// expiry and a note.
type ruleInput struct {
	Text      string         `json:"text"`
	Effect    gate.Effect    `json:"effect"`
	Tool      string         `json:"tool"`
	Specifier string         `json:"specifier"`
	When      string         `json:"when"`
	Scope     gate.RuleScope `json:"scope"`
	SessionID string         `json:"sessionId"`
	Workspace string         `json:"workspace"`
	ExpiresAt *time.Time     `json:"expiresAt"`
	Note      string         `json:"note"`
	// Approvers and Reviewers (ask rules only, SPEC §15): how many distinct people must
	// approve, and the only names who may decide ("owner" for the owner). The text form may
	// carry them instead ("deploy approvers=2 reviewers=alice,bob"), not both.
	Approvers int      `json:"approvers"`
	Reviewers []string `json:"reviewers"`
}

// The bounds of a rule made through the API, in bytes.
const (
	maxRuleText = 4 << 10
	maxRuleNote = 1 << 10
)

// apiCreateRule makes a rule: → 201 the rule. 400 with the parser's or the compiler's message
// for a rule that does not read or compile, an unknown effect or scope, text and tool both, a
// session rule without a session or a workspace that is not an absolute path; 404 for a session
// rule of an unknown session. It applies to the next call and releases pending calls it allows.
func (s *Server) apiCreateRule(w http.ResponseWriter, r *http.Request) error {
	var in ruleInput
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	if len(in.Text)+len(in.Tool)+len(in.Specifier)+len(in.When) > maxRuleText || len(in.Note) > maxRuleNote {
		return apperr.Errorf(apperr.Invalid, "The rule is too long (text at most %d bytes, note %d).", maxRuleText, maxRuleNote)
	}
	rl := gate.Rule{Effect: in.Effect, Tool: in.Tool, Specifier: in.Specifier, When: in.When, Scope: in.Scope,
		SessionID: in.SessionID, Source: gate.SourceAPI, CreatedBy: gate.ByOwner, ExpiresAt: in.ExpiresAt, Note: in.Note,
		Approvers: in.Approvers, Reviewers: in.Reviewers}
	switch {
	case in.Text != "" && (in.Tool != "" || in.Specifier != ""):
		return apperr.Errorf(apperr.Invalid, "Send a rule's text or its tool and specifier, not both.")
	case in.Text != "":
		var err error
		if rl.Tool, rl.Specifier, err = s.parseRuleText(in.Text, &rl); err != nil {
			return err
		}
	case in.Tool == "":
		return apperr.Errorf(apperr.Invalid, "A rule needs a text (\"run_command(git diff:*)\") or a tool.")
	}
	if in.Scope == gate.ScopeWorkspace {
		if !filepath.IsAbs(in.Workspace) {
			return apperr.Errorf(apperr.Invalid, "A workspace rule needs the workspace folder's absolute path.")
		}
		rl.Workspace = filepath.Clean(in.Workspace)
	} else if strings.TrimSpace(in.Workspace) != "" {
		return apperr.Errorf(apperr.Invalid, "Only a workspace rule names a workspace.")
	}
	if err := normalizeReviewers(&rl); err != nil {
		return err
	}
	rl, err := s.cfg.Gate.AddRule(r.Context(), rl)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, ruleJSON(rl))
	return nil
}

// apiDeleteRule deletes a rule: 204; 404 unknown; 403 for a policy-file rule (read-only: change
// the file).
func (s *Server) apiDeleteRule(w http.ResponseWriter, r *http.Request) error {
	if err := s.cfg.Gate.DeleteRule(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// parseRuleText reads a rule's text form, with its people when it names them (SPEC §15:
// "run_command(git push:*) approvers=2 reviewers=alice,bob", gate.SplitQuorum), into the tool
// pattern and specifier it returns and rl's Approvers and Reviewers. Errors: apperr.Invalid
// for text that does not read, or people given both in the text and beside it.
func (s *Server) parseRuleText(text string, rl *gate.Rule) (toolPattern, specifier string, err error) {
	pattern, approvers, reviewers, err := gate.SplitQuorum(text)
	if err != nil {
		return "", "", apperr.Errorf(apperr.Invalid, "Rule %q: %s", text, err.Error())
	}
	if (approvers != 0 && rl.Approvers != 0) || (len(reviewers) > 0 && len(rl.Reviewers) > 0) {
		return "", "", apperr.Errorf(apperr.Invalid, "Give approvers and reviewers in the rule's text or beside it, not both.")
	}
	if approvers != 0 {
		rl.Approvers = approvers
	}
	if len(reviewers) > 0 {
		rl.Reviewers = reviewers
	}
	return s.cfg.Gate.ParseRule(pattern)
}

// normalizeReviewers puts a rule's reviewer names in the form share links record them
// (share.NormalizeName; "owner" is the owner), so a rule's "alice" and a link made for
// "alice" compare equal. Errors: apperr.Invalid naming the refused name.
func normalizeReviewers(rl *gate.Rule) error {
	for i, n := range rl.Reviewers {
		n = strings.TrimSpace(n)
		if n != gate.ByOwner {
			var err error
			if n, err = share.NormalizeName(n); err != nil {
				return apperr.Errorf(apperr.Invalid, "Reviewer %q: %s", rl.Reviewers[i], apperr.MessageOf(err))
			}
		}
		rl.Reviewers[i] = n
	}
	return nil
}
