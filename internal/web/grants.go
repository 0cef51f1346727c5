package web

import (
	"context"
	"net/http"
	"net/url"

	"countersign/internal/gate"
	"countersign/web/templates"
)

// Session grants ("Approve for session", SPEC §3): the owner sees them on the session page, with
// who granted them, and revokes them there or through the API; the next call of a revoked tool
// asks again.

// grantsView is the owner's grants panel for a session.
func (s *Server) grantsView(ctx context.Context, sessionID string) (templates.GrantsView, error) {
	grants, err := s.cfg.Gate.Grants(ctx, sessionID)
	if err != nil {
		return templates.GrantsView{}, err
	}
	var v templates.GrantsView
	for _, g := range grants {
		row := templates.GrantRow{ToolName: g.ToolName, GrantedBy: g.GrantedBy, CreatedAt: g.CreatedAt,
			RevokeURL: "/sessions/" + url.PathEscape(sessionID) + "/grants/" + url.PathEscape(g.ToolName) + "/revoke"}
		if g.GrantedVia != nil {
			row.LinkID, row.LinkLabel = g.GrantedVia.LinkID, g.GrantedVia.Label
		}
		v.Grants = append(v.Grants, row)
	}
	return v, nil
}

// revokeGrant is the grants panel's Revoke: it answers with the panel as it is now.
func (s *Server) revokeGrant(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := s.cfg.Gate.RevokeGrant(r.Context(), id, r.PathValue("tool")); err != nil {
		return err
	}
	v, err := s.grantsView(r.Context(), id)
	if err != nil {
		return err
	}
	s.render(w, r, http.StatusOK, templates.GrantsPanel(v))
	return nil
}

// apiGrants lists a session's grants: → {grants: [{sessionId, toolName, approvalId, grantedBy,
// grantedVia?, createdAt}]}; 404 for an unknown session.
func (s *Server) apiGrants(w http.ResponseWriter, r *http.Request) error {
	grants, err := s.cfg.Gate.Grants(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if grants == nil {
		grants = []gate.Grant{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"grants": grants})
	return nil
}

// apiRevokeGrant deletes a session's grant for a tool: 204; 404 for an unknown session or no
// such grant.
func (s *Server) apiRevokeGrant(w http.ResponseWriter, r *http.Request) error {
	if err := s.cfg.Gate.RevokeGrant(r.Context(), r.PathValue("id"), r.PathValue("tool")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
