package web

import (
	"net/http"

	"countersign/internal/aap"
	"countersign/internal/apperr"
	"countersign/internal/render"
	"countersign/web/static"
)

// access is who may call a route (SPEC §7, §12). The route table names one per route, and
// Handler applies the wrapper that belongs to it, so a reader sees every route and who may
// call it in one place.
type access string

const (
	// public routes are open to everyone: health, login, static files.
	public access = "public"
	// owner routes are the owner's pages and forms: 401 with no detail to anyone without the
	// owner's login cookie or bearer token (Server.owner).
	owner access = "owner"
	// ownerAPI routes are the JSON API of SPEC §12: the owner only, like owner, with errors as
	// JSON (Server.api).
	ownerAPI access = "owner-api"
	// linkViewer routes (/r/{token}…) are open to any live share link, viewer or approver: the
	// handler resolves the link (Server.link) and answers 404 with no detail for an unknown,
	// revoked or expired one, and 401 before the reviewer gave a name where it needs one.
	linkViewer access = "link-viewer"
	// linkApprover routes (/r/{token}…) need a live approver link whose reviewer gave a name:
	// the handler checks it (Server.approver): 404 for any other link, viewers included, 401
	// before the name; 403 for a right (edit, approve for session) the link lacks.
	linkApprover access = "link-approver"
	// decisionLink routes (/d/{token}…, SPEC §15) are open to whoever holds a live decision
	// link's token, with no login and no cookie: the handler resolves it (Server.decisionLink)
	// and answers 404 with no detail for any token that names no link. A link that can no longer
	// decide (used, its approval resolved, other arguments) shows why and refuses to decide (409).
	decisionLink access = "decision-link"
	// agentToken routes (/hooks/{kind} and /mcp, SPEC §18 Doors 1 and 2) are for outside agents: the handler
	// admits a request by a connection's bearer token (Config.AgentAuth), never the owner's
	// cookie, and answers 401 with a reason otherwise. They are exempt from the cross-origin
	// protection on purpose (Handler): agents are not browsers.
	agentToken access = "agent-token"
	// aapInstance routes (/aap/v1/requests…, SPEC §18 Door 3) are for AAP instances: the handler
	// admits a request by an api connection's token, the instance credential (Server.aapInstance),
	// never the owner's cookie, and answers every error as the protocol's ErrorResponse (401
	// authentication otherwise). Exempt from the cross-origin protection, as agentToken.
	aapInstance access = "aap-instance"
	// aapProvisioner routes (/aap/v1/instances…, SPEC §18 Door 3) are for the AAP provisioner:
	// the owner's bearer token only (Server.aapProvisioner; no cookie, no instance credential),
	// errors as the protocol's ErrorResponse. Exempt from the cross-origin protection.
	aapProvisioner access = "aap-provisioner"
)

// route is one row of the route table: a Go 1.22 ServeMux pattern ("METHOD /path/{wildcard}",
// or a catch-all prefix with no method), who may call it, and its handler. A public route may
// give a plain http.Handler (raw) instead of h; it is registered as it is.
type route struct {
	pattern string
	access  access
	h       handlerFunc
	raw     http.Handler
}

// routes is Countersign's route table, the only place routes are registered (Handler). mux is
// the mux they go into: the catch-alls ask it which methods a path has (noRoute).
//
// Link routes check the link in the handler, not in a wrapper, because the handler needs the
// link it resolved (its session, role and rights); the access class says which check it makes,
// and TestEveryRouteRefusesWhoItMust holds each route to it.
func (s *Server) routes(mux *http.ServeMux) []route {
	chroma := []byte(render.ChromaCSS())
	return []route{
		// Open to everyone.
		{"GET /healthz", public, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("ok"))
		})},
		{"GET /login", public, s.login, nil},
		{"GET /logged-out", public, s.loggedOut, nil},
		{"GET /readyz", public, nil, http.HandlerFunc(s.readyz)},
		{"GET /static/", public, nil, http.StripPrefix("/static/", http.FileServerFS(static.FS))},
		{"GET /favicon.ico", public, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/static/favicon.svg", http.StatusMovedPermanently)
		})},
		{"GET /static/chroma.css", public, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/css; charset=utf-8")
			w.Header().Set("Cache-Control", "public, max-age=3600")
			_, _ = w.Write(chroma)
		})},

		// The owner's pages and forms.
		{"POST /logout", owner, s.logout, nil},
		{"GET /{$}", owner, s.sessionsPage, nil},
		{"POST /sessions", owner, s.createSession, nil},
		{"GET /sessions/{id}", owner, s.sessionPage, nil},
		{"POST /sessions/{id}/title", owner, s.renameSession, nil},
		{"POST /sessions/{id}/instructions", owner, s.setInstructions, nil},
		{"POST /sessions/{id}/delete", owner, s.deleteSession, nil},
		{"POST /sessions/{id}/messages", owner, s.sendMessage, nil},
		{"POST /sessions/{id}/stop", owner, s.stop, nil},
		{"POST /sessions/{id}/approvals/{aid}/decision", owner, s.decide, nil},
		{"POST /sessions/{id}/approvals/{aid}/preview", owner, s.preview, nil},
		{"POST /sessions/{id}/tools", owner, s.setTools, nil},
		{"POST /sessions/{id}/mode", owner, s.setMode, nil},
		{"GET /sessions/{id}/audit", owner, s.auditPage, nil},
		{"GET /sessions/{id}/export.md", owner, s.exportMarkdown, nil},
		{"GET /sessions/{id}/output/{mid}/{cid}", owner, s.outputDownload, nil},
		{"GET /sessions/{id}/live", owner, s.live, nil},
		{"POST /sessions/{id}/shares", owner, s.createShare, nil},
		{"POST /sessions/{id}/shares/{sid}/revoke", owner, s.revokeShare, nil},
		{"POST /sessions/{id}/grants/{tool}/revoke", owner, s.revokeGrant, nil},
		{"GET /rules", owner, s.rulesPage, nil},
		{"POST /rules", owner, s.addRule, nil},
		{"POST /rules/{id}/delete", owner, s.deleteRule, nil},
		{"GET /agents", owner, s.agentsPage, nil},
		{"POST /agents", owner, s.addConnection, nil},
		{"POST /agents/{id}/revoke", owner, s.revokeConnectionForm, nil},
		{"GET /inbox", owner, s.inboxPage, nil},
		{"GET /inbox/more", owner, s.inboxMore, nil},
		{"GET /inbox/live", owner, s.inboxLive, nil},
		{"GET /inbox/badge", owner, s.inboxBadge, nil},
		// Everything else: 401 without the owner's cookie, 405 or 404 with it.
		{"/", owner, noRoute(mux, func(w http.ResponseWriter, r *http.Request) error {
			return apperr.Errorf(apperr.NotFound, "Page not found")
		}), nil},

		// Share links (SPEC §7): reviewers reach these and nothing else.
		{"GET /r/{token}", linkViewer, s.reviewerPage, nil},
		{"POST /r/{token}/name", linkViewer, s.reviewerName, nil},
		{"GET /r/{token}/live", linkViewer, s.reviewerLive, nil},
		{"GET /r/{token}/inbox", linkViewer, s.reviewerInbox, nil},
		{"GET /r/{token}/inbox/more", linkViewer, s.reviewerInboxMore, nil},
		{"GET /r/{token}/inbox/live", linkViewer, s.reviewerInboxLive, nil},
		{"POST /r/{token}/approvals/{aid}/decision", linkApprover, s.reviewerDecide, nil},
		{"POST /r/{token}/approvals/{aid}/preview", linkApprover, s.reviewerPreview, nil},

		// Decision links (SPEC §15): a webhook recipient decides one approval, once.
		{"GET /d/{token}", decisionLink, s.decisionPage, nil},
		{"POST /d/{token}", decisionLink, s.decisionLinkDecide, nil},
		// Anything else under a link's prefix (`/d/<token>/`, a mistyped path) names no link:
		// 404 with no detail, as an unknown token, never the owner's 401.
		{"/d/", decisionLink, noRoute(mux, s.noLink), nil},
		{"/r/", linkViewer, noRoute(mux, s.noLink), nil},

		// Door 1 (SPEC §18): outside agents' hooks, by a connection's bearer token.
		{"POST /hooks/{kind}", agentToken, s.hook, nil},
		// Door 2 (SPEC §18): the MCP gateway (Streamable HTTP), by a connection's bearer token.
		{"POST /mcp", agentToken, s.mcpEndpoint, nil},
		{"GET /mcp", agentToken, s.mcpEndpoint, nil},
		{"DELETE /mcp", agentToken, s.mcpEndpoint, nil},
		// …and `countersign mcp-proxy`'s questions about a wrapped stdio server's calls.
		{"POST /mcp/decide", agentToken, s.mcpDecide, nil},
		{"POST /mcp/outcome", agentToken, s.mcpOutcome, nil},

		// Door 3 (SPEC §18): the Agent Approval Protocol v1, by an api connection's token.
		{"POST /aap/v1/requests", aapInstance, s.aapCreate, nil},
		{"GET /aap/v1/requests/{id}", aapInstance, s.aapGet, nil},
		{"DELETE /aap/v1/requests/{id}", aapInstance, s.aapCancel, nil},
		{"POST /aap/v1/instances", aapProvisioner, s.aapProvision, nil},
		{"GET /aap/v1/instances/{id}", aapProvisioner, s.aapGetInstance, nil},
		{"PATCH /aap/v1/instances/{id}", aapProvisioner, s.aapUpdateInstance, nil},
		{"DELETE /aap/v1/instances/{id}", aapProvisioner, s.aapDeleteInstance, nil},
		{"/aap/", aapInstance, func(w http.ResponseWriter, r *http.Request) error {
			if _, err := s.aapInstance(r); err != nil {
				return err
			}
			return noRoute(mux, func(w http.ResponseWriter, r *http.Request) error {
				return aap.Errorf(http.StatusNotFound, "not_found", "No such route: %s %s", r.Method, r.URL.Path)
			})(w, r)
		}, nil},

		// The JSON API (SPEC §12).
		{"POST /api/sessions", ownerAPI, s.apiCreateSession, nil},
		{"GET /api/sessions", ownerAPI, s.apiSessions, nil},
		{"GET /api/sessions/{id}", ownerAPI, s.apiSession, nil},
		{"PATCH /api/sessions/{id}", ownerAPI, s.apiRenameSession, nil},
		{"DELETE /api/sessions/{id}", ownerAPI, s.apiDeleteSession, nil},
		{"POST /api/sessions/{id}/messages", ownerAPI, s.apiSend, nil},
		{"POST /api/sessions/{id}/stop", ownerAPI, s.apiStop, nil},
		{"GET /api/sessions/{id}/tools", ownerAPI, s.apiTools, nil},
		{"PUT /api/sessions/{id}/tools", ownerAPI, s.apiSetTools, nil},
		{"GET /api/sessions/{id}/approvals", ownerAPI, s.apiApprovals, nil},
		{"GET /api/sessions/{id}/export", ownerAPI, s.apiExport, nil},
		{"GET /metrics", ownerAPI, s.metrics, nil},
		{"POST /api/approvals/{id}/decision", ownerAPI, s.apiDecide, nil},
		{"GET /api/sessions/{id}/events", ownerAPI, s.apiEvents, nil},
		{"POST /api/sessions/{id}/shares", ownerAPI, s.apiCreateShare, nil},
		{"DELETE /api/shares/{id}", ownerAPI, s.apiRevokeShare, nil},
		{"GET /api/sessions/{id}/grants", ownerAPI, s.apiGrants, nil},
		{"DELETE /api/sessions/{id}/grants/{tool}", ownerAPI, s.apiRevokeGrant, nil},
		{"GET /api/rules", ownerAPI, s.apiRules, nil},
		{"POST /api/rules", ownerAPI, s.apiCreateRule, nil},
		{"DELETE /api/rules/{id}", ownerAPI, s.apiDeleteRule, nil},
		{"GET /api/connections", ownerAPI, s.apiConnections, nil},
		{"POST /api/connections", ownerAPI, s.apiCreateConnection, nil},
		{"DELETE /api/connections/{id}", ownerAPI, s.apiRevokeConnection, nil},
		{"/api/", ownerAPI, noRoute(mux, func(w http.ResponseWriter, r *http.Request) error {
			return apperr.Errorf(apperr.NotFound, "No such API route: %s %s", r.Method, r.URL.Path)
		}), nil},
	}
}

// wrap is rt's handler with the access wrapper its class names.
func (s *Server) wrap(rt route) http.Handler {
	switch {
	case rt.raw != nil && rt.access == public:
		return rt.raw
	case rt.raw != nil:
		panic("web: route " + rt.pattern + ": a plain handler is for public routes only")
	}
	switch rt.access {
	case owner:
		return s.owner(rt.h)
	case ownerAPI:
		return s.api(rt.h)
	case agentToken:
		return s.agentHook(rt.h)
	case aapInstance, aapProvisioner:
		return s.aapAPI(rt.h)
	case public, linkViewer, linkApprover, decisionLink:
		// The link classes check the link in the handler (see routes).
		return s.handle(rt.h)
	}
	panic("web: route " + rt.pattern + ": unknown access class " + string(rt.access))
}
