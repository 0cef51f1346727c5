package web

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/web/templates"
)

func (s *Server) sessionsPage(w http.ResponseWriter, r *http.Request) error {
	return s.renderSessions(w, r, http.StatusOK, templates.NewSessionForm{Workspace: s.cfg.Workspace, Model: defaultModel(s.cfg.Models.Names()),
		Instructions: s.cfg.Runner.DefaultInstructions()}, "")
}

// defaultModel is the New-session form's model (issue 34): the first real provider's model when
// one is configured, else faux:demo, the demo.
func defaultModel(names []string) string {
	for _, n := range names {
		if !strings.HasPrefix(n, "faux:") {
			return n
		}
	}
	return "faux:demo"
}

// searchSessions lists the sessions, newest first, whose title contains q (case-insensitive;
// every session when q is blank).
func (s *Server) searchSessions(ctx context.Context, q string) ([]agent.Session, error) {
	sessions, err := s.cfg.Store.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	q = strings.ToLower(strings.TrimSpace(q))
	if q == "" {
		return sessions, nil
	}
	out := sessions[:0]
	for _, x := range sessions {
		if strings.Contains(strings.ToLower(x.Title), q) {
			out = append(out, x)
		}
	}
	return out, nil
}

// renderSessions renders the session list, searched by the query's q (SessionsView.Query), with
// the New-session form holding form and formErr.
func (s *Server) renderSessions(w http.ResponseWriter, r *http.Request, st int, form templates.NewSessionForm, formErr string) error {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	sessions, err := s.searchSessions(r.Context(), q)
	if err != nil {
		return err
	}
	v := templates.SessionsView{Models: s.cfg.Models.Names(), Form: form, Error: formErr, Query: q}
	// Sessions waiting for a person come first (issue 16), each group newest first as stored.
	slices.SortStableFunc(sessions, func(a, b agent.Session) int {
		return cmp.Compare(waitingRank(a), waitingRank(b))
	})
	for _, x := range sessions {
		v.Sessions = append(v.Sessions, templates.SessionRow{ID: x.ID, Title: x.Title, Model: x.Model,
			Workspace: x.Workspace, State: string(x.State), Pending: x.PendingApprovals, CreatedAt: x.CreatedAt})
	}
	s.render(w, r, st, templates.Layout(s.ownerPage(r.Context(), "Sessions", false), templates.SessionsPage(v)))
	return nil
}

// waitingRank sorts a session waiting for approval before the others.
func waitingRank(s agent.Session) int {
	if s.State == agent.Waiting {
		return 0
	}
	return 1
}

// createSession handles the New-session form: 303 to the new session, or the form again with
// the reason (400) and what was typed.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	if err := parseForm(r); err != nil {
		return err
	}
	form := templates.NewSessionForm{Title: r.PostForm.Get("title"), Model: r.PostForm.Get("model"), Workspace: r.PostForm.Get("workspace"),
		Instructions: formText(r.PostForm.Get("instructions"))}
	ns := agent.NewSession{Title: form.Title, Model: form.Model, Workspace: form.Workspace}
	if r.PostForm.Has("instructions") {
		// Sent, even empty (the person cleared the box: no system prompt); a form without
		// the field gets the default.
		ns.Instructions = &form.Instructions
	} else {
		form.Instructions = s.cfg.Runner.DefaultInstructions()
	}
	sess, err := s.cfg.Runner.CreateSessionWith(r.Context(), ns)
	if apperr.CodeOf(err) == apperr.Invalid {
		return s.renderSessions(w, r, http.StatusBadRequest, form, apperr.MessageOf(err))
	}
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/sessions/"+sess.ID, http.StatusSeeOther)
	return nil
}

// formText is a textarea's value as typed: browsers send its line breaks as CRLF.
func formText(v string) string { return strings.ReplaceAll(v, "\r\n", "\n") }

// setInstructions handles the session page's instructions editor (field instructions): the
// instructions are replaced and the page gets them back, with the editor (SPEC §17). Once the
// session has a message they are fixed: 409, and the editor gives way to the stored
// instructions with the reason. Too long: 400 with the reason, what was typed kept in the box.
func (s *Server) setInstructions(w http.ResponseWriter, r *http.Request) error {
	if err := parseForm(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	text := formText(r.PostForm.Get("instructions"))
	sess, err := s.cfg.Runner.SetInstructions(r.Context(), id, text)
	switch apperr.CodeOf(err) {
	case "":
		v := instructionsView(sess, ownerViewer(id), true)
		v.Saved = true
		s.render(w, r, http.StatusOK, templates.InstructionsBody(v))
		return nil
	case apperr.Invalid:
		cur, serr := s.cfg.Store.Session(r.Context(), id)
		if serr != nil {
			return serr
		}
		v := instructionsView(cur, ownerViewer(id), true)
		v.Text, v.Error = text, apperr.MessageOf(err)
		s.render(w, r, http.StatusBadRequest, templates.InstructionsBody(v))
		return nil
	case apperr.Conflict:
		cur, serr := s.cfg.Store.Session(r.Context(), id)
		if serr != nil {
			return serr
		}
		v := instructionsView(cur, ownerViewer(id), false)
		v.Error = apperr.MessageOf(err)
		s.render(w, r, http.StatusConflict, templates.InstructionsBody(v))
		return nil
	}
	return err
}

// renameSession handles the session page's Rename form (field title): 303 back to the session,
// or for htmx the session's heading with the new title (also pushed live to its other pages).
// A refused title (empty, too long) is 400 with the reason, and the form keeps what was typed.
func (s *Server) renameSession(w http.ResponseWriter, r *http.Request) error {
	if err := parseForm(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	sess, err := s.cfg.Runner.RenameSession(r.Context(), id, r.PostForm.Get("title"))
	if err != nil {
		return err
	}
	if r.Header.Get("HX-Request") == "true" {
		s.render(w, r, http.StatusOK, templates.SessionHeading(templates.SessionView{ID: sess.ID, Title: sess.Title,
			CanSend: true, RenameURL: "/sessions/" + sess.ID + "/title", DeleteURL: "/sessions/" + sess.ID + "/delete"}))
		return nil
	}
	http.Redirect(w, r, "/sessions/"+id, http.StatusSeeOther)
	return nil
}

// deleteSession handles the session page's confirmed Delete: the session goes with its
// transcript, approvals, grants, share links and audit, and the owner lands on the session list
// (htmx: HX-Redirect). While a run is busy it is refused (409: Stop first).
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) error {
	if err := s.cfg.Runner.DeleteSession(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	if r.Header.Get("HX-Request") == "true" {
		w.Header().Set("HX-Redirect", "/")
		w.WriteHeader(http.StatusOK)
		return nil
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
	return nil
}

func (s *Server) sessionPage(w http.ResponseWriter, r *http.Request) error {
	v, err := s.sessionView(r.Context(), r, r.PathValue("id"), ownerViewer(r.PathValue("id")))
	if err != nil {
		return err
	}
	s.render(w, r, http.StatusOK, templates.Layout(s.ownerPage(r.Context(), v.Title, true), templates.SessionPage(v)))
	return nil
}

// sendMessage starts a run (202), or refuses with the reason (409 while busy, 400 empty); the
// page keeps the text in the box unless the answer is 2xx.
func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request) error {
	if err := parseForm(r); err != nil {
		return err
	}
	if err := s.cfg.Runner.Send(r.Context(), r.PathValue("id"), r.PostForm.Get("text")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) error {
	if err := s.cfg.Runner.Stop(r.Context(), r.PathValue("id"), gate.ByOwner); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// decide applies the owner's decision from an approval form: fields decision, reason and,
// after Edit, arguments (JSON). It answers with the approval's new slot (also pushed live).
func (s *Server) decide(w http.ResponseWriter, r *http.Request) error {
	return s.decideAs(w, r, r.PathValue("id"), gate.Owner())
}

// wonApproval is the approval as it ended, for a decision refused with err (apperr.Conflict):
// the one the gate's answer carries when another decision won, else as stored now.
func (s *Server) wonApproval(ctx context.Context, err error, id string) (gate.Approval, error) {
	if re, ok := errors.AsType[*gate.ResolvedError](err); ok {
		return re.Approval, nil
	}
	return s.cfg.Store.Approval(ctx, id)
}

// decideAs applies a decision form for session sessionID on behalf of by (the owner, or an
// approver through a share link, within its rights: the gate answers apperr.Forbidden for the
// rest).
func (s *Server) decideAs(w http.ResponseWriter, r *http.Request, sessionID string, by gate.Decider) error {
	if err := parseForm(r); err != nil {
		return err
	}
	d := gate.Answer{Decision: r.PostForm.Get("decision"), Reason: r.PostForm.Get("reason"), By: by}
	if d.Decision == "remember" { // "Always allow…" (SPEC §14): the rules' texts (one box each) and scope
		texts := r.PostForm["rule"]
		d.Rule = &gate.RememberRule{Scope: gate.RuleScope(r.PostForm.Get("scope"))}
		if len(texts) > 0 {
			d.Rule.Text, d.Rule.Texts = texts[0], texts[1:]
		}
	}
	// Edited arguments matter only to an approval: a denial never depends on them, so their JSON
	// is not checked then. They still go to the gate, which refuses arguments of any kind
	// from a decider without the right to edit (403).
	if args := strings.TrimSpace(r.PostForm.Get("arguments")); args != "" {
		if d.Decision != "deny" && !json.Valid([]byte(args)) {
			return apperr.Errorf(apperr.Invalid, "Arguments are not valid JSON.")
		}
		d.Arguments = json.RawMessage(args)
	}
	a, err := s.cfg.Gate.Decide(r.Context(), sessionID, r.PathValue("aid"), d)
	notice := ""
	if apperr.CodeOf(err) == apperr.Conflict {
		// Another decision won (on another page, or while this one's live updates were cut):
		// the form gives way to the final state, saying this decision was not applied, how the
		// approval ended and who decided it. The JSON API answers 409.
		won, rerr := s.wonApproval(r.Context(), err, r.PathValue("aid"))
		if rerr != nil || won.SessionID != sessionID {
			return err
		}
		a, err, notice = won, nil, "Your decision was not applied: already "+won.Outcome()
	}
	if err != nil {
		return err
	}
	card := templates.CardView{DOMID: cardID(a.MessageID, a.ToolCallID), ToolCallID: a.ToolCallID}
	av := approvalView(a, "")
	card.Approval = &av
	if a.Status == gate.Pending {
		// A vote on a call that needs several approvers, counted (or counted before: one
		// person counts once), more needed (SPEC §15): the prompt stays as it is for the
		// others; its votes line says where it stands, and the voter's form gives way to their
		// vote (no buttons left to press; issue 34). That line is inside the slot, so the final
		// outcome takes it away.
		if av.MyVote = myVote(a, by.Name); av.MyVote == "" {
			av.MyVote = "Your approval is counted once: " + a.VotesText() + "."
		}
		var buf bytes.Buffer
		if err := fragments(templates.ApprovalVotes(av, true), templates.MyVoteOOB(av)).Render(r.Context(), &buf); err != nil {
			return err
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("HX-Reswap", "none")
		_, err = w.Write(buf.Bytes())
		return err
	}
	// The notice goes beside the slot, not in it, and by id: the live update of the slot, which
	// may arrive before this answer (the form is gone then) or after it, never takes it away.
	var buf bytes.Buffer
	if err := fragments(templates.ApprovalSlot(card), templates.DecisionNotice(card.DOMID, notice)).Render(r.Context(), &buf); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, err = w.Write(buf.Bytes())
	return err
}

// setTools applies the Tools panel: the checked boxes become the session's active set
// (SetActiveTools). It answers with the panel, naming what was ignored.
func (s *Server) setTools(w http.ResponseWriter, r *http.Request) error {
	if err := parseForm(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	_, ignored, err := s.cfg.Runner.SetActiveTools(r.Context(), id, r.PostForm["active"])
	if err != nil {
		return err
	}
	sess, err := s.cfg.Store.Session(r.Context(), id)
	if err != nil {
		return err
	}
	s.render(w, r, http.StatusOK, templates.ToolsPanel(s.toolsView(sess, ignored)))
	return nil
}

// parseForm reads a form body: apperr.TooLarge over the body limit, apperr.Invalid otherwise.
func parseForm(r *http.Request) error {
	if err := r.ParseForm(); err != nil {
		if err := tooLarge(err); apperr.CodeOf(err) == apperr.TooLarge {
			return err
		}
		return apperr.Errorf(apperr.Invalid, "The form could not be read: %v", err)
	}
	return nil
}
