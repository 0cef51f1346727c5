package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/connections"
	"countersign/web/templates"
)

// Connections (SPEC §18): the owner connects the agents people already run on the Agents page
// (/agents) or through the API (/api/connections). A connection's token exists outside the
// agent's machine once: in the answer that made it (the page after Connect, the 201 of POST
// /api/connections), sent with Cache-Control: no-store. Nothing else — the list, a reload, a
// log line, an error — holds it; the store keeps its hash.

// noConnections answers the routes when the server has no connections service.
func noConnections() error {
	return apperr.Errorf(apperr.NotFound, "Connections are not configured on this server.")
}

// baseURL is Countersign's address as the owner's agents reach it, for the snippets: the
// server's -public-url when set, else the address the owner's browser used (its scheme as TLS,
// or a trusted proxy, says).
func (s *Server) baseURL(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return s.cfg.PublicURL
	}
	scheme := "http"
	if s.secure(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// apiConnectionCreated is POST /api/connections' answer: the connection, its token (this once)
// and the snippet to paste.
type apiConnectionCreated struct {
	Connection connections.Connection `json:"connection"`
	Token      string                 `json:"token"`
	Snippet    connections.Snippet    `json:"snippet"`
}

// apiConnections lists the connections, newest first, revoked ones included: {"connections": […]}.
func (s *Server) apiConnections(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Connections == nil {
		return noConnections()
	}
	list, err := s.cfg.Connections.List(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []connections.Connection{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"connections": list})
	return nil
}

// apiCreateConnection makes a connection: {"label", "kind"} → 201 apiConnectionCreated. 400 for
// a missing or bad label, an unknown kind, unknown fields or a body that is not JSON.
func (s *Server) apiCreateConnection(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Label string `json:"label"`
		Kind  string `json:"kind"`
	}
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	if s.cfg.Connections == nil {
		return noConnections()
	}
	c, token, snip, err := s.createConnection(r, in.Label, in.Kind)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, apiConnectionCreated{Connection: c, Token: token, Snippet: snip})
	return nil
}

// apiRevokeConnection revokes connection {id}: its next request is 401. 200 {"connection": …}
// (revoking again answers the first revocation); 404 for an unknown id.
func (s *Server) apiRevokeConnection(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Connections == nil {
		return noConnections()
	}
	c, err := s.revokeConnection(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"connection": c})
	return nil
}

// createConnection makes a connection and its snippet. The snippet is made first from a
// stand-in, so that a base URL the snippets cannot hold is refused before anything is stored.
func (s *Server) createConnection(r *http.Request, label, kind string) (connections.Connection, string, connections.Snippet, error) {
	base := s.baseURL(r)
	k, err := connections.CheckKind(kind)
	if err != nil {
		return connections.Connection{}, "", connections.Snippet{}, err
	}
	if _, err := connections.MakeSnippet(connections.Connection{Kind: k}, connections.PlaceholderToken, base); err != nil {
		return connections.Connection{}, "", connections.Snippet{}, err
	}
	c, token, err := s.cfg.Connections.Create(r.Context(), label, k)
	if err != nil {
		return connections.Connection{}, "", connections.Snippet{}, err
	}
	snip, err := connections.MakeSnippet(c, token, base)
	if err != nil {
		return connections.Connection{}, "", connections.Snippet{}, err
	}
	s.log.Info("connection created", "connection", c.ID, "kind", c.Kind)
	return c, token, snip, nil
}

// agentsPage is the Agents page: the Connect form and the connections.
func (s *Server) agentsPage(w http.ResponseWriter, r *http.Request) error {
	return s.renderAgents(w, r, http.StatusOK, templates.AgentForm{Kind: string(connections.ClaudeCode)}, "", nil)
}

// addConnection is the Agents page's Connect form (fields label, kind). Made: the page again
// with the token and the snippet, this once (200, no-store; a reload of /agents no longer shows
// them). Refused: the page again (400) with the reason in a role="alert" and what was typed.
func (s *Server) addConnection(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Connections == nil {
		return noConnections()
	}
	if err := parseForm(r); err != nil {
		return err
	}
	form := templates.AgentForm{Label: r.PostForm.Get("label"), Kind: r.PostForm.Get("kind")}
	c, token, snip, err := s.createConnection(r, form.Label, form.Kind)
	if err != nil {
		if apperr.CodeOf(err) == apperr.Invalid {
			return s.renderAgents(w, r, http.StatusBadRequest, form, apperr.MessageOf(err), nil)
		}
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	created := &templates.NewConnection{ID: c.ID, Label: c.Label, KindTitle: c.Kind.Title(), Token: token,
		Last4: connections.Last4(token), Where: snip.Where, Format: snip.Format, Text: snip.Text, Export: snip.Export,
		Unreachable: snip.Unreachable, Verified: snip.Verified, Notes: snip.Notes}
	return s.renderAgents(w, r, http.StatusOK, templates.AgentForm{Kind: form.Kind}, "", created)
}

// revokeConnectionForm is a row's Revoke: 303 back to /agents; 404 for an unknown id.
func (s *Server) revokeConnectionForm(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Connections == nil {
		return noConnections()
	}
	if _, err := s.revokeConnection(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	http.Redirect(w, r, "/agents", http.StatusSeeOther)
	return nil
}

// renderAgents renders the Agents page: the form holding form (and formErr, when refused), the
// connections, and created when one was just made.
func (s *Server) renderAgents(w http.ResponseWriter, r *http.Request, st int, form templates.AgentForm, formErr string, created *templates.NewConnection) error {
	if s.cfg.Connections == nil {
		return noConnections()
	}
	list, err := s.cfg.Connections.List(r.Context())
	if err != nil {
		return err
	}
	v := templates.AgentsView{Form: form, Error: formErr, New: created, BaseURL: s.baseURL(r)}
	for _, k := range connections.Kinds() {
		v.Kinds = append(v.Kinds, templates.Option{Value: string(k), Label: k.Title() + " (" + string(k) + ")"})
	}
	now := s.cfg.Now()
	for _, c := range list {
		row := templates.ConnectionRow{ID: c.ID, Label: c.Label, Kind: string(c.Kind), KindTitle: c.Kind.Title(),
			CreatedAt: c.CreatedAt, LastUsedAt: c.LastUsedAt, RevokedAt: c.RevokedAt, Just: created != nil && created.ID == c.ID}
		if c.LastUsedAt != nil {
			row.LastUsed = ago(now, *c.LastUsedAt)
		}
		if c.RevokedAt == nil {
			row.RevokeURL = "/agents/" + url.PathEscape(c.ID) + "/revoke"
		}
		v.Rows = append(v.Rows, row)
	}
	s.render(w, r, st, templates.Layout(s.ownerPage(r.Context(), "Agents", false), templates.AgentsPage(v)))
	return nil
}

// ago is how long before now t was, for people: "just now", "5 min ago", "3 h ago", "2 days ago",
// and the date beyond a month.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d/time.Hour))
	case d < 31*24*time.Hour:
		return fmt.Sprintf("%d days ago", int(d/(24*time.Hour)))
	}
	return "on " + t.UTC().Format("2006-01-02")
}

// revokeConnection revokes connection id; the service tells the other replicas to forget what
// they cached of its token (New wires connections.Service.OnRevoke to the Peers,
// revokedConnectionTopic): its next request is 401 on every replica.
func (s *Server) revokeConnection(ctx context.Context, id string) (connections.Connection, error) {
	c, err := s.cfg.Connections.Revoke(ctx, id)
	if err != nil {
		return c, err
	}
	s.log.Info("connection revoked", "connection", c.ID, "kind", c.Kind)
	if c.Kind == connections.API && s.cfg.AAPInstances != nil {
		// Its credential can read no answer now: its pending requests are cancelled, as an
		// instance's deletion cancels them (AAP v1 §5).
		if err := s.cfg.AAPInstances.CancelPending(ctx, c.ID, "the connection was revoked"); err != nil {
			return c, err
		}
	}
	return c, nil
}
