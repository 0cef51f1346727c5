// Package web is Countersign's HTTP edge: the route table, owner authentication, the pages
// rendered with templ, and the WebSocket that pushes live fragments rendered by the same
// components.
package web

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/a-h/templ"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/render"
	"countersign/internal/share"
	"countersign/web/static"
	"countersign/web/templates"
)

// Reader is what the web layer reads from the store.
type Reader interface {
	Session(ctx context.Context, id string) (agent.Session, error)
	Sessions(ctx context.Context) ([]agent.Session, error)
	Entries(ctx context.Context, sessionID string) ([]agent.Entry, error)
	Approval(ctx context.Context, id string) (gate.Approval, error)
	Approvals(ctx context.Context, sessionID string, status gate.Status) ([]gate.Approval, error)
}

// Config wires a Server.
type Config struct {
	Runner     *agent.Runner
	Store      Reader
	Broker     *agent.Broker
	Models     agent.Models
	OwnerToken string
	// Workspace pre-fills the New-session form (the server's -workspace).
	Workspace string
	// Renderers draw tools' calls and results; nil means BuiltinRenderers.
	Renderers map[string]Renderer
	// Shares makes and resolves share links; nil disables sharing.
	Shares *share.Service
	// Sources lists the tool sources besides the built-ins (MCP servers) with their state, for
	// the Tools panel; nil when there are none.
	Sources func() []ToolSource
	Logger  *slog.Logger
}

// ToolSource is a source of tools besides the built-ins, such as an MCP server (SPEC §13).
type ToolSource struct {
	Name, Kind string
	Trusted    bool
	// State is starting, up or down; Error says why it is down.
	State, Error string
	Tools        []string
	Warnings     []string
}

// Server serves Countersign's pages, fragments and WebSockets.
type Server struct {
	cfg Config
	log *slog.Logger
	// ownerCookie is the value of the owner's cookie: an HMAC of the token, so the cookie never
	// holds the token itself.
	ownerCookie string
	renderers   map[string]Renderer
	sockets     reviewerSockets
}

// New returns a Server.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	mac := hmac.New(sha256.New, []byte(cfg.OwnerToken))
	mac.Write([]byte("countersign owner cookie v1"))
	if cfg.Renderers == nil {
		cfg.Renderers = BuiltinRenderers()
	}
	return &Server{cfg: cfg, log: cfg.Logger, ownerCookie: hex.EncodeToString(mac.Sum(nil)), renderers: cfg.Renderers}
}

const ownerCookieName = "countersign_owner"

// maxFormBytes bounds every POST body (SPEC §9: oversized bodies are refused with 413).
const maxFormBytes = 1 << 20

// Handler returns the route table, wrapped in security headers and cross-origin protection.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// Open to everyone.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("GET /login", s.handle(s.login))
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static.FS)))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/static/favicon.svg", http.StatusMovedPermanently)
	})
	chroma := []byte(render.ChromaCSS())
	mux.HandleFunc("GET /static/chroma.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write(chroma)
	})

	// The owner's routes.
	mux.Handle("POST /logout", s.owner(s.logout))
	mux.Handle("GET /{$}", s.owner(s.sessionsPage))
	mux.Handle("POST /sessions", s.owner(s.createSession))
	mux.Handle("GET /sessions/{id}", s.owner(s.sessionPage))
	mux.Handle("POST /sessions/{id}/messages", s.owner(s.sendMessage))
	mux.Handle("POST /sessions/{id}/stop", s.owner(s.stop))
	mux.Handle("POST /sessions/{id}/approvals/{aid}/decision", s.owner(s.decide))
	mux.Handle("POST /sessions/{id}/tools", s.owner(s.setTools))
	mux.Handle("GET /sessions/{id}/audit", s.owner(s.auditPage))
	mux.Handle("GET /sessions/{id}/live", s.owner(s.live))
	s.apiRoutes(mux)
	s.shareRoutes(mux)
	s.grantRoutes(mux)
	// Everything else: 401 without the owner's cookie, 405 or 404 with it.
	mux.Handle("/", s.owner(noRoute(mux, func(w http.ResponseWriter, r *http.Request) error {
		return apperr.Errorf(apperr.NotFound, "Page not found")
	})))

	csrf := http.NewCrossOriginProtection()
	return securityHeaders(csrf.Handler(mux))
}

// securityHeaders sets the headers every answer carries: a Content-Security-Policy with no
// inline script, no MIME sniffing, and no Referer (share tokens must never leak through it).
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// handlerFunc is a handler that returns its error; handle writes it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle adapts a handlerFunc: it bounds the body and writes any error as the one error answer.
func (s *Server) handle(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		}
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// owner wraps h so that only the owner reaches it (401 otherwise, with no detail).
func (s *Server) owner(h handlerFunc) http.Handler {
	return s.handle(func(w http.ResponseWriter, r *http.Request) error {
		if !s.isOwner(r) {
			return apperr.Errorf(apperr.Unauthorized, "Unauthorized")
		}
		return h(w, r)
	})
}

// noRoute answers a request that reached a catch-all pattern of mux ("/" or "/api/"):
// apperr.MethodNotAllowed with an Allow header listing the methods mux has routes for at this
// path (e.g. "GET, HEAD, POST"); when there are none, notFound answers.
//
// Why: a pattern with no method matches every method, so once a catch-all exists http.ServeMux
// never finds "no match" and never answers 405 itself. The catch-alls stay, so the owner check
// runs first (401 with no detail) and errors keep their shape; this asks mux, per method, which
// pattern it would pick, as ServeMux does for its own 405.
func noRoute(mux *http.ServeMux, notFound handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		var allow []string
		for _, m := range []string{http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions,
			http.MethodPatch, http.MethodPost, http.MethodPut} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != r.Pattern {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			return notFound(w, r)
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return apperr.Errorf(apperr.MethodNotAllowed, "Method %s is not allowed here; allowed: %s", r.Method, strings.Join(allow, ", "))
	}
}

// isOwner reports whether the request carries the owner's cookie or bearer token.
func (s *Server) isOwner(r *http.Request) bool {
	if c, err := r.Cookie(ownerCookieName); err == nil {
		if subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.ownerCookie)) == 1 {
			return true
		}
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.OwnerToken)) == 1
	}
	return false
}

// login exchanges the owner token for the owner cookie (SPEC §7, §11).
func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	tok := r.URL.Query().Get("token")
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.OwnerToken)) != 1 {
		return apperr.Errorf(apperr.Unauthorized, "Unauthorized")
	}
	http.SetCookie(w, &http.Cookie{
		Name: ownerCookieName, Value: s.ownerCookie, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, "/", http.StatusSeeOther)
	return nil
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	http.SetCookie(w, &http.Cookie{Name: ownerCookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("Logged out."))
	return nil
}

// status maps an application error code to its HTTP status (the one place it happens).
func status(code apperr.Code) int {
	switch code {
	case apperr.Invalid:
		return http.StatusBadRequest
	case apperr.Unauthorized:
		return http.StatusUnauthorized
	case apperr.Forbidden:
		return http.StatusForbidden
	case apperr.NotFound:
		return http.StatusNotFound
	case apperr.MethodNotAllowed:
		return http.StatusMethodNotAllowed
	case apperr.Conflict:
		return http.StatusConflict
	case apperr.TooLarge:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}

// writeError answers an error: a fragment for htmx requests, a page otherwise. Internal errors
// are logged and shown as "Internal error".
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	err = tooLarge(err)
	code := apperr.CodeOf(err)
	if code == apperr.Internal {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	st, msg := status(code), apperr.MessageOf(err)
	if r.Header.Get("HX-Request") == "true" {
		// The explanation goes into the submitting form's error region; nothing else changes.
		w.Header().Set("HX-Retarget", "find .form-errors")
		w.Header().Set("HX-Reswap", "innerHTML")
		s.render(w, r, st, templates.FormError(msg))
		return
	}
	s.render(w, r, st, templates.Layout(templates.Page{Title: msg}, templates.ErrorPage(st, msg)))
}

// render writes a component with a status.
func (s *Server) render(w http.ResponseWriter, r *http.Request, st int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(st)
	if err := c.Render(r.Context(), w); err != nil {
		s.log.Error("render", "path", r.URL.Path, "err", err)
	}
}

// tooLarge turns a body over its limit (http.MaxBytesReader) into apperr.TooLarge (413); other
// errors pass unchanged.
func tooLarge(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return apperr.Errorf(apperr.TooLarge, "The request is too large (at most %d bytes).", mbe.Limit)
	}
	return err
}
