// Package web is Countersign's HTTP edge: the route table, owner authentication, the pages
// rendered with templ, and the WebSocket that pushes live fragments rendered by the same
// components.
package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"

	"countersign/internal/aap"
	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/connections"
	"countersign/internal/gate"
	"countersign/internal/notify"
	"countersign/internal/share"
	"countersign/internal/tool"
	"countersign/web/templates"
)

// Reader is what the web layer reads from the store.
type Reader interface {
	Session(ctx context.Context, id string) (agent.Session, error)
	Sessions(ctx context.Context) ([]agent.Session, error)
	Entries(ctx context.Context, sessionID string) ([]agent.Entry, error)
	Approval(ctx context.Context, id string) (gate.Approval, error)
	Approvals(ctx context.Context, sessionID string, status gate.Status) ([]gate.Approval, error)
	// Inbox lists a page of the pending approvals of every session or one, oldest first, with
	// their sessions' titles; PendingCount counts them (sessionID "": every session; SPEC §15).
	Inbox(ctx context.Context, q agent.InboxQuery) ([]agent.InboxItem, error)
	PendingCount(ctx context.Context, sessionID string) (int, error)
	// PendingCountFor counts those a person may decide (agent.InboxQuery.For).
	PendingCountFor(ctx context.Context, sessionID, person string) (int, error)
}

// Config wires a Server.
type Config struct {
	// Peers tells the other replicas sharing the database (SPEC §16) to close the live sockets
	// a revoked share link or an ended login has open there, and hears theirs (relay.Relay);
	// nil: this server is the only one (a SQLite file).
	Peers  Peers
	Runner *agent.Runner
	// Gate decides approvals and keeps the rules, modes and grants (SPEC §14, §15); nil means
	// the Runner's.
	Gate       *gate.Service
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
	// Connections makes, lists, revokes and authenticates the connections of the agents people
	// already run (SPEC §18: /agents, /api/connections); nil: those routes answer 404.
	Connections *connections.Service
	// FailedTokens, when set, counts failed token attempts in the database the replicas share
	// (SPEC §16); nil: in this server's memory.
	FailedTokens FailedTokens
	// PublicURL is the server's address as agents and people reach it (-public-url), for the
	// connection snippets and share links; "" means the address the owner's browser used.
	PublicURL string
	// Sources lists the tool sources besides the built-ins (MCP servers) with their state, for
	// the Tools panel; nil when there are none.
	Sources func() []ToolSource
	Logger  *slog.Logger
	// OwnerSessions keeps the owner's browser logins; nil keeps them in memory (they end with
	// the process).
	OwnerSessions OwnerSessions
	// SessionTTL is how long a browser login lasts (the cookie's Max-Age and the server-side
	// expiry); zero means DefaultSessionTTL.
	SessionTTL time.Duration
	// Now is the clock for login expiry; nil means time.Now.
	Now func() time.Time
	// InboxPageSize is how many approvals a page of the inbox shows; zero means
	// templates.InboxPageSize.
	InboxPageSize int
	// Notify serves decision links (/d/<token>) and the audit page's webhook deliveries (SPEC
	// §15); nil: no links, no deliveries listed.
	Notify NotifyStore
	// Receivers are the webhook receivers (-notify-webhook), to name them on the audit page.
	Receivers []notify.Receiver
	// TrustedProxies are the proxies whose X-Forwarded-For / -Proto are believed (SPEC §16).
	TrustedProxies Proxies
	// AccessLog, when set, gets one line per request (accessLog: tokens redacted).
	AccessLog *slog.Logger
	// Metrics serves GET /metrics to the owner (the Prometheus handler, SPEC §16); nil: 404.
	Metrics http.Handler
	// AgentAuth checks an outside agent's bearer token on `POST /hooks/{kind}` (SPEC §18); nil:
	// Connections' Authenticate, or, without Connections, every hook is refused (401).
	AgentAuth AgentAuthenticator
	// AAP serves Door 3, the Agent Approval Protocol's requests under /aap (SPEC §18); nil:
	// those routes answer 404.
	AAP *aap.Service
	// AAPInstances serves the protocol's instance provisioning under /aap/v1/instances (the
	// owner's token is the provisioner token); nil: those routes answer 404.
	AAPInstances *aap.Provisioner
	// Agents keeps agent sessions and their outside calls; nil: Store, when it does.
	Agents AgentStore
	// Ready reports whether the store answers with its migrations applied (GET /readyz); nil:
	// always ready.
	Ready func(context.Context) error
	// GatewayTools are the tools /mcp offers (SPEC §18 Door 2): the upstream MCP servers'
	// tools as the registry holds them (schemas compiled); nil: none. Server.GatewayToolsChanged
	// reads them again.
	GatewayTools func() []*tool.Tool
	// GatewayProgressEvery is how often a held /mcp call sends notifications/progress; zero: 15 s.
	GatewayProgressEvery time.Duration
}

// DefaultSessionTTL is how long an owner's browser login lasts by default: 30 days.
const DefaultSessionTTL = 30 * 24 * time.Hour

// OwnerSessions keeps the owner's browser logins (issue 15 item 11). A login is named by a
// random id that only its cookie holds; these methods see its hex SHA-256, idHash.
type OwnerSessions interface {
	// CreateOwnerSession stores a login valid until expiresAt.
	CreateOwnerSession(ctx context.Context, idHash string, createdAt, expiresAt time.Time) error
	// OwnerSessionExpiry returns when a login expires; apperr.NotFound when there is none.
	OwnerSessionExpiry(ctx context.Context, idHash string) (time.Time, error)
	// DeleteOwnerSession ends a login (logout).
	DeleteOwnerSession(ctx context.Context, idHash string) error
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
	agents    AgentStore // Door 1's store (Config.Agents); nil: no agent sessions
	cfg       Config
	log       *slog.Logger
	renderers map[string]Renderer
	// sockets ends open live sockets when their share link is revoked or their login ends.
	sockets socketEnds
	// liveSockets counts open live sockets against their caps; failures limits failed token
	// attempts per client (limits.go).
	liveSockets socketCounts
	failures    tokenFailures
	receivers   map[string]notify.Receiver // Config.Receivers by id
	gateway     *gateway                   // /mcp (Door 2)
}

// New returns a Server.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Renderers == nil {
		cfg.Renderers = BuiltinRenderers()
	}
	if cfg.Gate == nil && cfg.Runner != nil {
		cfg.Gate = cfg.Runner.Gate()
	}
	if cfg.OwnerSessions == nil {
		cfg.OwnerSessions = &memOwnerSessions{m: map[string]time.Time{}}
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.InboxPageSize <= 0 {
		cfg.InboxPageSize = templates.InboxPageSize
	}
	if cfg.Peers == nil {
		cfg.Peers = noPeers{}
	}
	s := &Server{cfg: cfg, log: cfg.Logger, renderers: cfg.Renderers, failures: tokenFailures{now: cfg.Now, shared: cfg.FailedTokens, log: cfg.Logger},
		receivers: map[string]notify.Receiver{}}
	if s.cfg.AgentAuth == nil && cfg.Connections != nil {
		s.cfg.AgentAuth = func(ctx context.Context, token, kind string) (string, error) {
			c, err := cfg.Connections.Authenticate(ctx, token, connections.Kind(kind))
			return c.ID, err
		}
	}
	s.agents = cfg.Agents
	if s.agents == nil {
		s.agents, _ = cfg.Store.(AgentStore)
	}
	for _, r := range cfg.Receivers {
		s.receivers[r.ID] = r
	}
	s.failures.client = s.clientIP
	s.gateway = newGateway(s)
	if cfg.Runner != nil {
		cfg.Runner.OnSessionDeleted(s.gateway.forgetSessionID)
	}
	// A link revoked or a login ended on another replica closes its sockets here too.
	cfg.Peers.Subscribe(closeSocketsTopic, s.closeSocketsFromPeer)
	if cfg.Connections != nil {
		// A revocation here (the Agents page, the API, an AAP instance's deletion) is told to
		// the other replicas, and theirs forget here what was cached of the token.
		cfg.Connections.OnRevoke(func(id string) { cfg.Peers.Send(revokedConnectionTopic, id) })
		cfg.Peers.Subscribe(revokedConnectionTopic, cfg.Connections.Forget)
	}
	return s
}

const ownerCookieName = "countersign_owner"

// maxFormBytes bounds every POST body (SPEC §9: oversized bodies are refused with 413).
const maxFormBytes = 1 << 20

// Handler returns the route table (routes), wrapped in security headers, the limit on failed token
// attempts (/login, /r/<token>…) and cross-origin protection.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routes(mux) {
		mux.Handle(rt.pattern, s.wrap(rt))
	}

	csrf := http.NewCrossOriginProtection()
	for _, rt := range s.routes(mux) {
		if rt.access == agentToken || rt.access == aapInstance || rt.access == aapProvisioner {
			// Deliberately outside the browser's cross-origin protection: an agent is not a
			// browser and sends no Origin; its bearer token, never a cookie, is what admits it.
			csrf.AddInsecureBypassPattern(rt.pattern)
		}
	}
	h := securityHeaders(s.failures.wrap(csrf.Handler(mux), s.trusted))
	if s.cfg.AccessLog != nil {
		h = accessLog(s.cfg.AccessLog, s.cfg.TrustedProxies, h)
	}
	return h
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
		if !s.authOwner(r) {
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

// isOwner reports whether the request carries a live owner login's cookie or the owner's bearer
// token.
func (s *Server) isOwner(r *http.Request) bool {
	return s.ownerLogin(r) || s.ownerBearer(r)
}

// ownerLogin reports whether r carries a live owner login cookie (not expired, not logged out).
func (s *Server) ownerLogin(r *http.Request) bool {
	c, err := r.Cookie(ownerCookieName)
	if err != nil || c.Value == "" {
		return false
	}
	exp, err := s.cfg.OwnerSessions.OwnerSessionExpiry(r.Context(), ownerSessionHash(c.Value))
	if err != nil && apperr.CodeOf(err) != apperr.NotFound {
		s.log.Error("owner session lookup", "err", err)
	}
	return err == nil && s.cfg.Now().Before(exp)
}

// ownerBearer reports whether r carries "Authorization: Bearer <owner token>".
func (s *Server) ownerBearer(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.OwnerToken)) == 1
}

// authOwner is isOwner for a route that answers 401 to anyone else: a wrong bearer token is a
// guess of the owner token and counts against the client's allowance (tokenFailures). A missing
// or stale login cookie does not: its id is 260 random bits, and a stale one is a person whose
// login ended, not a guess.
func (s *Server) authOwner(r *http.Request) bool {
	if s.isOwner(r) {
		return true
	}
	if r.Header.Get("Authorization") != "" {
		s.failures.fail(r)
	}
	return false
}

// trusted reports whether r carries a credential that proves its client got in before: the
// owner's login cookie, or on a share link's routes (/r/<token>…) that link's reviewer cookie,
// signed for the name they gave. A client whose failed attempts are spent is let through with it
// (tokenFailures). The bearer token is not such a credential: it is the secret being guessed.
func (s *Server) trusted(r *http.Request) bool {
	if s.ownerLogin(r) {
		return true
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/r/")
	if !ok || s.cfg.Shares == nil {
		return false
	}
	token, _, _ := strings.Cut(rest, "/")
	l, err := s.cfg.Shares.Resolve(r.Context(), token)
	return err == nil && s.reviewerOf(r, l).decider.Name != ""
}

// ownerSessionHash is what is stored of a login's id: hex SHA-256.
func ownerSessionHash(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

// login exchanges the owner token for a login (SPEC §7, §11): a random id in an HttpOnly,
// SameSite=Strict cookie that lasts SessionTTL, its hash stored server-side, so the login can
// expire and be ended by logout, and the cookie never holds the token.
func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	tok := r.URL.Query().Get("token")
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.OwnerToken)) != 1 {
		s.failures.fail(r)
		return apperr.Errorf(apperr.Unauthorized, "Unauthorized")
	}
	id := rand.Text() + rand.Text() // 260 random bits
	now := s.cfg.Now()
	if err := s.cfg.OwnerSessions.CreateOwnerSession(r.Context(), ownerSessionHash(id), now, now.Add(s.cfg.SessionTTL)); err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: ownerCookieName, Value: id, Path: "/", MaxAge: int(s.cfg.SessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secure(r),
	})
	http.Redirect(w, r, "/", http.StatusSeeOther)
	return nil
}

// logout ends the owner's login on the server (a copy of the cookie stops working too, and the
// login's open live pages close), clears the cookie and lands on /logged-out.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	if c, err := r.Cookie(ownerCookieName); err == nil && c.Value != "" {
		hash := ownerSessionHash(c.Value)
		if err := s.cfg.OwnerSessions.DeleteOwnerSession(r.Context(), hash); err != nil {
			return err
		}
		// The login's open pages stop updating (the bearer token's sockets are not a login).
		s.closeSockets("login:" + hash)
	}
	http.SetCookie(w, &http.Cookie{Name: ownerCookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/logged-out", http.StatusSeeOther)
	return nil
}

// loggedOut is where logout lands, open to everyone: it says the browser is logged out and how
// to log in again (the login URL the server printed at start; the token is never shown here).
func (s *Server) loggedOut(w http.ResponseWriter, r *http.Request) error {
	if c, err := r.Cookie(ownerCookieName); err == nil && c.Value != "" && s.isOwner(r) {
		// Still logged in (another login, or the page was bookmarked): nothing to say here.
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return nil
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	s.render(w, r, http.StatusOK, templates.Layout(templates.Page{Title: "Logged out"},
		templates.LoggedOutPage(scheme+"://"+r.Host+"/login?token=…")))
	return nil
}

// memOwnerSessions keeps logins in memory, for a Server configured without a store for them.
type memOwnerSessions struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (m *memOwnerSessions) CreateOwnerSession(_ context.Context, idHash string, createdAt, expiresAt time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for h, exp := range m.m {
		if !createdAt.Before(exp) {
			delete(m.m, h)
		}
	}
	m.m[idHash] = expiresAt
	return nil
}

func (m *memOwnerSessions) OwnerSessionExpiry(_ context.Context, idHash string) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	exp, ok := m.m[idHash]
	if !ok {
		return time.Time{}, apperr.Errorf(apperr.NotFound, "owner session not found")
	}
	return exp, nil
}

func (m *memOwnerSessions) DeleteOwnerSession(_ context.Context, idHash string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, idHash)
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
		s.log.Error("request failed", "method", r.Method, "path", loggable(r.URL), "err", err)
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

// render writes a component with a status. The component renders into a buffer first, so a
// render error answers 500 with a short error page, never a half page with st (issue 19).
func (s *Server) render(w http.ResponseWriter, r *http.Request, st int, c templ.Component) {
	buf := renderBuffers.Get().(*bytes.Buffer)
	defer putRenderBuffer(buf)
	buf.Reset()
	if err := c.Render(r.Context(), buf); err != nil {
		s.log.Error("render", "path", loggable(r.URL), "err", err)
		buf.Reset()
		st = http.StatusInternalServerError
		msg := "The page could not be rendered; the error is in the server's log."
		if err := templates.Layout(templates.Page{Title: msg}, templates.ErrorPage(st, msg)).Render(r.Context(), buf); err != nil {
			buf.Reset()
			buf.WriteString(msg)
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(st)
	_, _ = w.Write(buf.Bytes())
}

// renderBuffers keeps render's buffers; one over renderBufferKeep bytes (a long transcript) is
// dropped rather than kept.
var renderBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const renderBufferKeep = 1 << 20

func putRenderBuffer(b *bytes.Buffer) {
	if b.Cap() <= renderBufferKeep {
		renderBuffers.Put(b)
	}
}

// loggable is a request's path, and its query if any, as a log may show them: the secret of a
// share link or a decision link (/r/<token>…, /d/<token>…, found by tokenPath on the cleaned,
// decoded path) becomes "<redacted>" and every
// token= query value (the owner token at /login) "redacted" (SPEC §16: tokens never appear in
// logs). Every log
// line that names a request's path takes it from here.
func loggable(u *url.URL) string {
	p := u.EscapedPath()
	if prefix, tail, ok := tokenPath(u); ok {
		p = prefix + "<redacted>" + tail
	}
	if u.RawQuery == "" {
		return p
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return p + "?<unparsed query>"
	}
	for k := range q {
		if strings.EqualFold(k, "token") {
			q[k] = []string{"redacted"}
		}
	}
	return p + "?" + q.Encode()
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

// clientIP is r's client address (Proxies.client: the connection's, or the one a trusted proxy
// forwarded).
func (s *Server) clientIP(r *http.Request) string {
	ip, _ := s.cfg.TrustedProxies.client(r)
	return ip
}

// secure reports whether r reached us over TLS, directly or through a trusted proxy that says
// so: cookies set in answer to it are Secure.
func (s *Server) secure(r *http.Request) bool {
	_, tls := s.cfg.TrustedProxies.client(r)
	return tls
}

// Peers is what the web layer needs of the other replicas sharing its database (SPEC §16;
// relay.Relay, which carries a topic and a key without knowing what they mean): Send tells them
// key on topic, and must not block; Subscribe has f told the key of each message they Send on
// topic (never this server's own). The web layer's topics are closeSocketsTopic and
// revokedConnectionTopic.
type Peers interface {
	Send(topic, key string)
	Subscribe(topic string, f func(key string))
}

// closeSocketsTopic is the Peers topic "close the live sockets under this key" ("link:<share
// id>", "login:<hash>"). Its name is what replicas already running send: a rolling upgrade's old
// and new servers understand each other.
const closeSocketsTopic = "close"

// revokedConnectionTopic is the Peers topic "connection <key> was revoked": the other replicas
// forget what they cached of its token (connections.Service.Forget). A forged message only makes
// a replica read a token again.
const revokedConnectionTopic = "connection-revoked"

// noPeers is the Peers of a server alone on its database: nobody to tell, nobody to hear.
type noPeers struct{}

func (noPeers) Send(string, string)                {}
func (noPeers) Subscribe(string, func(key string)) {}

// closeSockets ends this server's live sockets under key, and the other replicas' (Peers).
func (s *Server) closeSockets(key string) {
	s.CloseSockets(key)
	s.cfg.Peers.Send(closeSocketsTopic, key)
}

// closeSocketsFromPeer is another replica's "close the sockets under key" (Peers): a pointer, not
// an order (issue 33, SPEC §16 "Trust between replicas"). The sockets close only if the store
// says why — the link is revoked, expired or gone; the login is ended or expired — read off the
// relay's goroutine (which must not block), within 5 s.
func (s *Server) closeSocketsFromPeer(key string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if s.storedAsEnded(ctx, key) {
			s.CloseSockets(key)
		} else {
			s.log.Warn("another replica asked to close live sockets the store does not say ended: ignored", "key", key)
		}
	}()
}

// storedAsEnded reports whether the store says the sockets under key ended: "link:<id>" revoked,
// expired or deleted; "login:<hash>" deleted or expired. A store that does not answer: not ended.
func (s *Server) storedAsEnded(ctx context.Context, key string) bool {
	switch {
	case strings.HasPrefix(key, "link:") && s.cfg.Shares != nil:
		l, err := s.cfg.Shares.Link(ctx, strings.TrimPrefix(key, "link:"))
		return apperr.CodeOf(err) == apperr.NotFound || (err == nil && !l.Active(s.cfg.Shares.Now()))
	case strings.HasPrefix(key, "login:"):
		exp, err := s.cfg.OwnerSessions.OwnerSessionExpiry(ctx, strings.TrimPrefix(key, "login:"))
		return apperr.CodeOf(err) == apperr.NotFound || (err == nil && !s.cfg.Now().Before(exp))
	}
	return false
}

// CloseSockets ends this server's live sockets under key ("link:<share id>": the link was
// revoked; "login:<hash>": the login ended), each showing why: what another replica asks (the
// Peers topic closeSocketsTopic, once the store confirms it: closeSocketsFromPeer). Other keys
// close nothing.
func (s *Server) CloseSockets(key string) {
	switch {
	case strings.HasPrefix(key, "link:"):
		s.sockets.closeKey(key, endedLink)
	case strings.HasPrefix(key, "login:"):
		s.sockets.closeKey(key, endedLogout)
	}
}
