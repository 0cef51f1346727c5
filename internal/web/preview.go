package web

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/a-h/templ"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/web/templates"
)

// The live preview of an edit (issue 16, item 8): while a decider edits a pending call's
// arguments, the prompt shows the call as it would run with them, rendered by the same tool
// renderer as the prompt itself (write_file's diff against the file, run_command's exact
// command), with what Approve would refuse. Nothing is decided or stored.

// preview is the owner's preview of an edit: form field arguments (JSON).
func (s *Server) preview(w http.ResponseWriter, r *http.Request) error {
	return s.previewAs(w, r, r.PathValue("id"), gate.Owner())
}

// reviewerPreview is an approver's preview, for a link with the right to edit (403 otherwise).
func (s *Server) reviewerPreview(w http.ResponseWriter, r *http.Request) error {
	sessionID, by, err := s.approver(r)
	if err != nil {
		return err
	}
	return s.previewAs(w, r, sessionID, by)
}

// previewAs answers the approval's call view for the edited arguments, checked as an approval
// by `by` would check them (gate.Service.CheckEdit): 200 with the view and, when Approve would
// refuse them, why; 404, 409 (already decided) and 403 (no right to edit) as a decision gets.
func (s *Server) previewAs(w http.ResponseWriter, r *http.Request, sessionID string, by gate.Decider) error {
	if err := parseForm(r); err != nil {
		return err
	}
	args := json.RawMessage(strings.TrimSpace(r.PostForm.Get("arguments")))
	a, err := s.cfg.Gate.CheckEdit(r.Context(), sessionID, r.PathValue("aid"), by, args)
	problem := ""
	if apperr.CodeOf(err) == apperr.Invalid {
		problem = apperr.MessageOf(err)
	} else if err != nil {
		return err
	}
	sess, err := s.cfg.Store.Session(r.Context(), sessionID)
	if err != nil {
		return err
	}
	var view templ.Component
	if json.Valid(args) {
		b := s.newBuilder(sessionID, sess.Workspace, viewer{})
		view = b.callView(a.ToolName, CallInfo{Arguments: args, Preview: a.Preview})
	}
	s.render(w, r, http.StatusOK, templates.EditPreview(view, problem))
	return nil
}
