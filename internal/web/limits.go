package web

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits against abuse (issue 15 item 7): the HTTP server's timeouts, a cap on open live
// sockets, and a rate limit on failed token attempts.

// Timeouts are the HTTP server's time limits. WebSockets are not bound by Read and Write: net/http
// clears a connection's deadlines when it is hijacked, and a socket bounds each of its own writes
// (writeTimeout, batchConn).
type Timeouts struct {
	// ReadHeader bounds reading a request's headers (slow-loris clients).
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included (bodies are at most maxFormBytes).
	Read time.Duration
	// Write bounds a response, from the end of the request's headers to its last byte.
	Write time.Duration
	// Idle bounds how long a keep-alive connection waits for its next request.
	Idle time.Duration
}

// DefaultTimeouts are the server's: generous for pages and the API, short enough that a client
// cannot hold a connection by being slow.
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: time.Minute, Idle: 2 * time.Minute}

// Apply sets t on hs.
func (t Timeouts) Apply(hs *http.Server) {
	hs.ReadHeaderTimeout, hs.ReadTimeout, hs.WriteTimeout, hs.IdleTimeout = t.ReadHeader, t.Read, t.Write, t.Idle
}

// The caps on open live sockets (the session pages' and the API's event sockets). Past a cap a
// new socket is accepted, then closed with StatusPolicyViolation (1008) and a reason, so the
// client is told why rather than seeing a failed handshake.
const (
	maxOwnerSockets = 64 // every socket the owner opens, pages and API together
	maxLinkSockets  = 16 // the sockets of one share link, whoever opened them
)

// socketLimit names the count a socket belongs to, its cap, and the close reason past it.
type socketLimit struct {
	key    string
	max    int
	reason string
}

// ownerSockets is the owner's socket count.
var ownerSockets = socketLimit{key: "owner", max: maxOwnerSockets, reason: "too many open live connections for the owner"}

// linkSockets is the socket count of share link id.
func linkSockets(id string) socketLimit {
	return socketLimit{key: "link " + id, max: maxLinkSockets, reason: "too many open live connections for this link"}
}

// socketCounts counts open sockets per socketLimit key.
type socketCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// total counts the open sockets under every key.
func (c *socketCounts) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.n {
		n += k
	}
	return n
}

// acquire counts one more socket under l unless l's cap is reached; release uncounts it.
func (c *socketCounts) acquire(l socketLimit) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[l.key] >= l.max {
		return nil, false
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[l.key]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n[l.key]--; c.n[l.key] <= 0 {
			delete(c.n, l.key)
		}
	}, true
}

// The rate limit on failed token attempts, per client address: a burst of failedTokenBurst,
// then one more every failedTokenEvery (10 a minute).
const (
	failedTokenBurst = 10
	failedTokenEvery = 6 * time.Second
	// failedTokenClients bounds the addresses remembered; past it, those whose allowance has
	// refilled are forgotten (they would start full anyway).
	failedTokenClients = 10000
)

// tokenFailures rate-limits guessing the secrets Countersign takes from strangers: the owner
// token (GET /login?token=, or "Authorization: Bearer" on any route) and share-link tokens
// (/r/<token>…). Failures are counted where a token is checked (fail): a wrong owner token, an
// unknown, revoked or expired link. So a person who mistyped a few times still gets in with the
// right token, and a 404 for something else under a valid link (an unknown approval) is no
// guess. Once a client address has spent its allowance, a request that presents a token gets 429
// with Retry-After until it refills, right token or not (answering a right guess would defeat
// the limit) — unless it also carries a credential that proves it got in before (trusted: the
// owner's login cookie, a reviewer's signed name cookie for that link). An attacker sharing an
// address with the owner or the reviewers (a NAT, a proxy) so delays new logins from it, not the
// people already in.
type tokenFailures struct {
	// shared, when set, counts the failures in the database every replica shares (SPEC §16:
	// three replicas give a client one allowance, not three), by its clock; else they are
	// counted here, in memory (one server per SQLite file). A shared count that cannot be read
	// or written lets the request through, logged: the database that holds the tokens is down.
	shared FailedTokens
	log    *slog.Logger

	now func() time.Time
	// client is a request's client address (Server.clientIP: behind a trusted proxy, the one
	// it forwarded); nil: the connection's (clientAddr).
	client func(*http.Request) string

	mu      sync.Mutex
	clients map[string]*rate.Limiter
}

// FailedTokens counts failed token attempts by client address in the database the replicas
// share, by its clock (store.SQL.FailToken, TokenWait): an allowance of burst failures refilled
// one per every; TokenWait is how long client must wait before its next attempt, 0 while it has
// one left.
type FailedTokens interface {
	FailToken(ctx context.Context, client string, every time.Duration, burst int) error
	TokenWait(ctx context.Context, client string, every time.Duration, burst int) (time.Duration, error)
}

// presentsToken reports whether a request offers a token that tokenFailures limits.
func presentsToken(r *http.Request) bool {
	return r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/r/") || strings.HasPrefix(r.URL.Path, "/d/") ||
		r.Header.Get("Authorization") != ""
}

// wrap answers 429 to a request that presents a token from a client whose allowance is spent,
// unless trusted(r) (asked only then) says it carries a credential that proves it got in before.
func (f *tokenFailures) wrap(next http.Handler, trusted func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !presentsToken(r) {
			next.ServeHTTP(w, r)
			return
		}
		if wait := f.wait(r.Context(), f.clientOf(r)); wait > 0 && !trusted(r) {
			secs := int(math.Ceil(wait.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, "Too many failed attempts from your address. Try again in %d seconds.\n", secs)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// wait is how long client must wait before its next attempt: 0 while it has failures left.
func (f *tokenFailures) wait(ctx context.Context, client string) time.Duration {
	if f.shared != nil {
		wait, err := f.shared.TokenWait(ctx, client, failedTokenEvery, failedTokenBurst)
		if err != nil {
			f.log.Error("failed-token limit: cannot read the shared count", "err", err)
		}
		return wait
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.clients[client]
	if l == nil {
		return 0
	}
	tokens := l.TokensAt(f.now())
	if tokens >= 1 {
		return 0
	}
	return time.Duration((1 - tokens) * float64(failedTokenEvery))
}

// fail counts a failed token attempt of r's client.
func (f *tokenFailures) fail(r *http.Request) {
	client := f.clientOf(r)
	if f.shared != nil {
		if err := f.shared.FailToken(context.WithoutCancel(r.Context()), client, failedTokenEvery, failedTokenBurst); err != nil {
			f.log.Error("failed-token limit: cannot count a failure", "err", err)
		}
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.clients == nil {
		f.clients = map[string]*rate.Limiter{}
	}
	l := f.clients[client]
	if l == nil {
		if len(f.clients) >= failedTokenClients {
			for c, cl := range f.clients {
				if cl.TokensAt(now) >= failedTokenBurst {
					delete(f.clients, c)
				}
			}
		}
		l = rate.NewLimiter(rate.Every(failedTokenEvery), failedTokenBurst)
		f.clients[client] = l
	}
	l.AllowN(now, 1)
}

func (f *tokenFailures) clientOf(r *http.Request) string {
	if f.client != nil {
		return f.client(r)
	}
	return clientAddr(r)
}

// clientAddr is the client's IP address (the connection's; X-Forwarded-For is not believed).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
