package web

import (
	"bufio"
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestClientBehindTrustedProxies: X-Forwarded-For and -Proto are believed from a trusted proxy
// only, read from the right, and what a client wrote on the left never becomes its address
// (SPEC §16 -trusted-proxies; an attacker's header must not move it out of the failed-token
// limit).
func TestClientBehindTrustedProxies(t *testing.T) {
	ps, err := ParseProxies("10.0.0.0/8, 192.168.1.7")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, remote, xff, proto string
		wantIP                   string
		wantTLS                  bool
	}{
		{name: "no proxy: the connection", remote: "203.0.113.9:4000", wantIP: "203.0.113.9"},
		{name: "an untrusted peer's header is ignored", remote: "203.0.113.9:4000", xff: "1.2.3.4", proto: "https", wantIP: "203.0.113.9"},
		{name: "a trusted proxy names the client", remote: "10.1.2.3:4000", xff: "198.51.100.5", proto: "https", wantIP: "198.51.100.5", wantTLS: true},
		{name: "a client's own header on the left is not believed", remote: "10.1.2.3:4000", xff: "1.1.1.1, 198.51.100.5", wantIP: "198.51.100.5"},
		{name: "two trusted proxies in a row", remote: "10.1.2.3:4000", xff: "198.51.100.5, 192.168.1.7", wantIP: "198.51.100.5"},
		{name: "garbage stops the walk", remote: "10.1.2.3:4000", xff: "198.51.100.5, not-an-ip", wantIP: "10.1.2.3"},
		{name: "plain http through the proxy", remote: "10.1.2.3:4000", xff: "198.51.100.5", proto: "http", wantIP: "198.51.100.5"},
		{name: "IPv6 peer", remote: "[2001:db8::1]:4000", xff: "198.51.100.5", wantIP: "2001:db8::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			if tt.xff != "" {
				r.Header.Set("X-Forwarded-For", tt.xff)
			}
			if tt.proto != "" {
				r.Header.Set("X-Forwarded-Proto", tt.proto)
			}
			ip, tls := ps.client(r)
			if ip != tt.wantIP || tls != tt.wantTLS {
				t.Errorf("client = %s, TLS %v; want %s, %v", ip, tls, tt.wantIP, tt.wantTLS)
			}
		})
	}
	if _, err := ParseProxies("10.0.0.0/8,nope"); err == nil {
		t.Error("a bad entry was accepted")
	}
}

// TestAccessLogPathsHideTokens: share and decision links' tokens and ?token= never reach the
// access log; the rest of the path stays readable.
func TestAccessLogPathsHideTokens(t *testing.T) {
	for in, want := range map[string]string{
		"/r/SECRET":                          "/r/[redacted]",
		"/r/SECRET/approvals/a1/decision":    "/r/[redacted]/approvals/a1/decision",
		"/d/SECRET":                          "/d/[redacted]",
		"/login?token=SECRET":                "/login?token=%5Bredacted%5D",
		"/login?Token=SECRET&next=%2F":       "/login?Token=%5Bredacted%5D&next=%2F",
		"/sessions/s1/audit?status=approved": "/sessions/s1/audit?status=approved",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := redactedPath(u); got != want {
			t.Errorf("%s → %s, want %s", in, got, want)
		}
	}
}

// TestCookiesAreSecureBehindATLSProxy: the owner's login cookie is Secure when a trusted proxy
// says the client came over https, and not when an untrusted peer says so.
func TestCookiesAreSecureBehindATLSProxy(t *testing.T) {
	ps, _ := ParseProxies("10.0.0.0/8")
	s := New(Config{OwnerToken: "owner-token-owner-token-owner-token-1", TrustedProxies: ps})
	for _, tt := range []struct {
		remote string
		want   bool
	}{{"10.0.0.2:1", true}, {"203.0.113.9:1", false}} {
		r := httptest.NewRequest("GET", "/login?token=owner-token-owner-token-owner-token-1", nil)
		r.RemoteAddr = tt.remote
		r.Header.Set("X-Forwarded-Proto", "https")
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		cs := w.Result().Cookies()
		if len(cs) == 0 {
			t.Fatalf("from %s: no cookie (status %d)", tt.remote, w.Code)
		}
		if cs[0].Secure != tt.want {
			t.Errorf("from %s with X-Forwarded-Proto https: Secure = %v, want %v", tt.remote, cs[0].Secure, tt.want)
		}
	}
}

// TestAccessLogHidesTokensInPathsTheRouterCleansOrDecodes (issue 33): a token reaches a link's
// handler (or its redirect) also as "//r/<token>", "/./r/<token>" and "/%72/<token>" (the last
// one works as a link); the access log and the error logs find it on the cleaned, decoded path,
// as the router does. Requests are read as the server reads them.
func TestAccessLogHidesTokensInPathsTheRouterCleansOrDecodes(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"//r/SECRET", "/r/[redacted]"},
		{"/./r/SECRET", "/r/[redacted]"},
		{"/%72/SECRET", "/r/[redacted]"},
		{"/%64/SECRET/approve", "/d/[redacted]/approve"},
		{"/x/../d/SECRET", "/d/[redacted]"},
		{"//r//SECRET", "/r/[redacted]"},
		{"/r/SECRET/a%20b", "/r/[redacted]/a%20b"},
		{"/sessions/s1", "/sessions/s1"},
	} {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + tc.target + " HTTP/1.1\r\nHost: cs.test\r\n\r\n")))
		if err != nil {
			t.Fatalf("%s: %v", tc.target, err)
		}
		var buf bytes.Buffer
		h := accessLog(slog.New(slog.NewTextHandler(&buf, nil)), Proxies{}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		h.ServeHTTP(httptest.NewRecorder(), req)
		if strings.Contains(buf.String(), "SECRET") || !strings.Contains(buf.String(), "path="+tc.want+" ") {
			t.Errorf("%s: access log %q, want path=%s", tc.target, buf.String(), tc.want)
		}
		if got, want := loggable(req.URL), strings.ReplaceAll(tc.want, "[redacted]", "<redacted>"); got != want {
			t.Errorf("%s: loggable = %s, want %s", tc.target, got, want)
		}
	}
}
