package web

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"time"

	"countersign/internal/apperr"
)

// Operations (SPEC §16): who the client is behind a proxy, the access log, readiness.

// Proxies are the networks whose X-Forwarded-For and X-Forwarded-Proto are believed
// (-trusted-proxies). Empty: none, the connection's address is the client's.
type Proxies []netip.Prefix

// ParseProxies reads -trusted-proxies: comma-separated CIDRs or single addresses
// ("10.0.0.0/8,127.0.0.1"). Errors: apperr.Invalid naming the entry that is neither.
func ParseProxies(s string) (Proxies, error) {
	var ps Proxies
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			ps = append(ps, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, apperr.Errorf(apperr.Invalid, "-trusted-proxies: %q is neither a CIDR (10.0.0.0/8) nor an IP address", f)
		}
		ps = append(ps, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return ps, nil
}

func (ps Proxies) trusts(ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// client is the request's client address and whether it came over TLS. The connection's
// address, unless it is a trusted proxy: then X-Forwarded-For is read from the right, skipping
// trusted proxies, and the first address that is not one is the client (the left part of the
// header is whatever the client wrote, never believed); X-Forwarded-Proto "https" from a trusted
// proxy counts as TLS (cookies are then Secure).
func (ps Proxies) client(r *http.Request) (ip string, tls bool) {
	ip = r.RemoteAddr
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		ip = host
	}
	tls = r.TLS != nil
	if len(ps) == 0 || !ps.trusts(ip) {
		return ip, tls
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p != "" {
		tls = strings.EqualFold(strings.TrimSpace(strings.Split(p, ",")[0]), "https")
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		h := strings.TrimSpace(hops[i])
		if h == "" {
			continue
		}
		if _, err := netip.ParseAddr(h); err != nil {
			break // garbage: keep the last address we could believe
		}
		ip = h
		if !ps.trusts(h) {
			break
		}
	}
	return ip, tls
}

// redactedPath is r's path and query as the access log writes them: the secret part of a share
// link (/r/<token>…) and of a decision link (/d/<token>…) replaced — found on the cleaned,
// decoded path (tokenPath), so "//r/<token>", "/./r/<token>" and "/%72/<token>" are hidden too —
// and any query parameter named token (GET /login?token=…) too.
func redactedPath(u *url.URL) string {
	p := u.EscapedPath()
	if prefix, tail, ok := tokenPath(u); ok {
		p = prefix + "[redacted]" + tail
	}
	if u.RawQuery == "" {
		return p
	}
	q := u.Query()
	for k := range q {
		if strings.EqualFold(k, "token") {
			q[k] = []string{"[redacted]"}
		}
	}
	return p + "?" + q.Encode()
}

// tokenPath finds a share or decision link's token in u's path as the router sees it: the
// decoded path (u.Path: "/%72/x" is "/r/x"), cleaned ("//r/x" and "/./r/x" are "/r/x", as
// ServeMux redirects them or routes them). ok when it is /r/<token>… or /d/<token>…; prefix is
// "/r/" or "/d/", and tail is what follows the token ("/live", or ""), escaped again. Every log
// that names a request's path (redactedPath, loggable) asks it, so none shows a token.
func tokenPath(u *url.URL) (prefix, tail string, ok bool) {
	clean := path.Clean("/" + u.Path)
	for _, prefix := range []string{"/r/", "/d/"} {
		if rest, found := strings.CutPrefix(clean, prefix); found {
			if _, after, slash := strings.Cut(rest, "/"); slash {
				tail = (&url.URL{Path: "/" + after}).EscapedPath()
			}
			return prefix, tail, true
		}
	}
	return "", "", false
}

// statusWriter records the status and size of an answer for the access log; Unwrap lets
// http.ResponseController (and the WebSocket upgrade) reach the connection.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// accessLog logs one line per request after it is answered: method, path (redactedPath),
// status, bytes, duration in milliseconds, client (Proxies.client). Tokens never reach it: not
// the path's, not the query's, and no header is logged.
func accessLog(log *slog.Logger, proxies Proxies, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			ip, _ := proxies.client(r)
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			log.LogAttrs(r.Context(), slog.LevelInfo, "http",
				slog.String("method", r.Method), slog.String("path", redactedPath(r.URL)),
				slog.Int("status", status), slog.Int64("bytes", sw.bytes),
				slog.Float64("ms", float64(time.Since(start).Microseconds())/1000),
				slog.String("client", ip))
		}()
		next.ServeHTTP(sw, r)
	})
}

// readyz answers GET /readyz (SPEC §16): 200 "ready" when the store answers and its migrations
// are applied (Config.Ready), 503 "not ready: <reason>" otherwise, the reason being the
// apperr message of Ready's error ("the database does not answer", "3 of 5 migrations
// applied") or "the store does not answer"; the error itself, which may name the database's
// host, goes to the log only. Public: it says nothing else. Ready bounds its own wait (the
// stores' ReadyTimeout); 5 s here bounds a Ready that does not.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			s.log.Warn("not ready", "err", err)
			reason := "the store does not answer"
			if m := apperr.MessageOf(err); m != "Internal error" {
				reason = m
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: "+reason)
			return
		}
	}
	fmt.Fprintln(w, "ready")
}

// LiveSockets counts the open live WebSockets, pages' and the JSON API's (the live_sockets
// metric).
func (s *Server) LiveSockets() int { return s.liveSockets.total() }

// metrics answers GET /metrics for the owner (Config.Metrics: the Prometheus handler); 404 when
// the server has none.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Metrics == nil {
		return apperr.Errorf(apperr.NotFound, "No metrics on this server.")
	}
	s.cfg.Metrics.ServeHTTP(w, r)
	return nil
}
