package hookclient

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/hooks"
)

const token = "cs_agent_T0KEN-must-never-be-printed"

// fakeServer answers /hooks/{kind} as Countersign's handler is to: hooks.Parse, a verdict from
// decide, hooks.Encode, the answer's headers, status 200 and its JSON. It records what it got.
type fakeServer struct {
	*httptest.Server
	decide func(hooks.Event) hooks.Verdict
	calls  atomic.Int64
	last   atomic.Pointer[http.Request]
	body   atomic.Pointer[[]byte]
}

func newFakeServer(t *testing.T, decide func(hooks.Event) hooks.Verdict) *fakeServer {
	t.Helper()
	s := &fakeServer{decide: decide}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		s.last.Store(r)
		s.body.Store(&body)
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "missing or revoked token", http.StatusUnauthorized)
			return
		}
		kind := strings.TrimPrefix(r.URL.Path, "/hooks/")
		ev, err := hooks.Parse(hooks.Kind(kind), body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a, err := hooks.Encode(ev.Kind, ev.Name, s.decide(ev))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for k, v := range a.Headers() {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(a.JSON)
	}))
	t.Cleanup(s.Close)
	return s
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, args []string, stdin []byte, env map[string]string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(args, bytes.NewReader(stdin), &out, &errb, func(k string) string { return env[k] })
	r := result{code, out.String(), errb.String()}
	if strings.Contains(r.stdout+r.stderr, token) {
		t.Errorf("the token was printed: stdout %q stderr %q", r.stdout, r.stderr)
	}
	return r
}

func recorded(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../hooks/testdata/codex/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func envFor(url string) map[string]string {
	return map[string]string{TokenEnv: token, URLEnv: url}
}

// TestTheServersAnswerIsPrintedWithItsExitStatus: a recorded Codex event goes to /hooks/codex as
// sent, with the token and the hook's timeout; an allow, an edit and no verdict print the answer
// and exit 0; a deny prints it, says the reason on stderr and exits 2 (Codex's block).
func TestTheServersAnswerIsPrintedWithItsExitStatus(t *testing.T) {
	pre, pr := recorded(t, "command-PreToolUse.stdin.json"), recorded(t, "command-PermissionRequest.stdin.json")
	for _, tc := range []struct {
		name       string
		event      []byte
		verdict    hooks.Verdict
		code       int
		stdout     string
		stderr     string
		failClosed bool
	}{
		{"allow", pr, hooks.Verdict{Decision: hooks.Allow}, 0, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}` + "\n", "", false},
		{"allow, failing closed", pr, hooks.Verdict{Decision: hooks.Allow}, 0, `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}` + "\n", "", true},
		{"edit", pre, hooks.Verdict{Decision: hooks.Allow, UpdatedInput: json.RawMessage(`{"command":"touch /home/dev/ext/proof-edited"}`)}, 0,
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{"command":"touch /home/dev/ext/proof-edited"}}}` + "\n", "", false},
		{"deny at PreToolUse", pre, hooks.Verdict{Decision: hooks.Deny, Reason: "no touching\nat all: 100% sure"}, 2,
			`{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no touching\nat all: 100% sure"}}` + "\n", "no touching\nat all: 100% sure\n", false},
		{"deny at PermissionRequest", pr, hooks.Verdict{Decision: hooks.Deny, Reason: "nope"}, 2,
			`{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"nope"}}}` + "\n", "nope\n", false},
		{"no verdict", pr, hooks.Verdict{}, 0, "", "", false},
		{"no verdict, failing closed", pr, hooks.Verdict{}, 0, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeServer(t, func(hooks.Event) hooks.Verdict { return tc.verdict })
			args := []string{"--agent", "codex", "--timeout", "30"}
			if tc.failClosed {
				args = append(args, "--fail-closed")
			}
			r := run(t, args, tc.event, envFor(s.URL))
			if r.code != tc.code || r.stdout != tc.stdout || r.stderr != tc.stderr {
				t.Errorf("got  exit %d stdout %q stderr %q\nwant exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
			}
			req := s.last.Load()
			if req == nil {
				t.Fatal("the server was not asked")
			}
			if req.Method != http.MethodPost || req.URL.Path != "/hooks/codex" || req.Header.Get("Content-Type") != "application/json" || req.Header.Get(HeaderTimeout) != "30" {
				t.Errorf("request %s %s, Content-Type %q, %s %q", req.Method, req.URL.Path, req.Header.Get("Content-Type"), HeaderTimeout, req.Header.Get(HeaderTimeout))
			}
			if !bytes.Equal(*s.body.Load(), tc.event) {
				t.Errorf("the event was not posted as read")
			}
		})
	}
}

// TestWhenCountersignCannotAnswer: an unreachable server, a 401 (a revoked token), a 500, a
// timeout, a redirect, an answer that is not JSON or has a bad exit header: without --fail-closed
// no verdict (nothing on stdout, exit 0, the reason on stderr); with it a block (exit 2). Never
// an allow on stdout, never the token in the output.
func TestWhenCountersignCannotAnswer(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	var redirectedTo atomic.Pointer[string]
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		redirectedTo.Store(&a)
		w.Write([]byte(`{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}`))
	}))
	defer elsewhere.Close()
	handler := func(f http.HandlerFunc) string {
		s := httptest.NewServer(f)
		t.Cleanup(s.Close)
		return s.URL
	}
	allowJSON := `{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}`
	for _, tc := range []struct {
		name string
		url  string
		msg  string
	}{
		{"unreachable", down.URL, "connection refused"},
		{"401, echoing the token", handler(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "revoked token "+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), http.StatusUnauthorized)
		}), "401 Unauthorized: revoked token [token]"},
		{"401 with an allow in the body", handler(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(allowJSON))
		}), "401 Unauthorized"},
		{"500", handler(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "Internal error", 500) }), "500 Internal Server Error: Internal error"},
		{"timeout", handler(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(2500 * time.Millisecond):
			}
			w.Write([]byte(allowJSON))
		}), "Client.Timeout exceeded"},
		{"redirect", handler(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+"/hooks/codex", http.StatusTemporaryRedirect)
		}), "307 Temporary Redirect"},
		{"not JSON", handler(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>allow</html>")) }), "the answer is not JSON"},
		{"bad exit header", handler(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(HeaderExit, "0; allow")
			w.Write([]byte(allowJSON))
		}), `Countersign-Hook-Exit is "0; allow"`},
	} {
		for _, failClosed := range []bool{false, true} {
			name := tc.name
			args := []string{"--agent", "codex", "--url", tc.url, "--timeout", "2"}
			want := 0
			if failClosed {
				name += ", failing closed"
				args = append(args, "--fail-closed")
				want = 2
			}
			t.Run(name, func(t *testing.T) {
				r := run(t, args, recorded(t, "command-PermissionRequest.stdin.json"), map[string]string{TokenEnv: token})
				if r.code != want || r.stdout != "" {
					t.Errorf("exit %d stdout %q, want exit %d and nothing on stdout", r.code, r.stdout, want)
				}
				if !strings.Contains(r.stderr, tc.msg) {
					t.Errorf("stderr %q, want it to contain %q", r.stderr, tc.msg)
				}
				verdict := "no verdict"
				if failClosed {
					verdict = "blocked"
				}
				if !strings.Contains(r.stderr, verdict) {
					t.Errorf("stderr %q does not say %q", r.stderr, verdict)
				}
			})
		}
	}
	if a := redirectedTo.Load(); a != nil {
		t.Errorf("the redirect was followed (Authorization %q)", *a)
	}
}

// TestBadInputIsRefusedBeforeAnyRequest: an oversized, empty event, no token or no URL never
// reaches the server; usage errors exit 1, or 2 with --fail-closed.
func TestBadInputIsRefusedBeforeAnyRequest(t *testing.T) {
	s := newFakeServer(t, func(hooks.Event) hooks.Verdict { return hooks.Verdict{Decision: hooks.Allow} })
	event := recorded(t, "command-PermissionRequest.stdin.json")
	huge := append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), MaxBodyBytes)...)
	for _, tc := range []struct {
		name  string
		args  []string
		stdin []byte
		env   map[string]string
		code  int
		msg   string
	}{
		{"oversized stdin", []string{"--agent", "codex"}, huge, envFor(s.URL), 0, "over 4194304 bytes"},
		{"oversized stdin, failing closed", []string{"--agent", "codex", "--fail-closed"}, huge, envFor(s.URL), 2, "over 4194304 bytes"},
		{"empty stdin", []string{"--agent", "codex", "--fail-closed"}, []byte(" \n"), envFor(s.URL), 2, "no event on stdin"},
		{"no token", []string{"--agent", "codex", "--fail-closed"}, event, map[string]string{URLEnv: s.URL}, 2, "COUNTERSIGN_AGENT_TOKEN is not set"},
		{"no token, failing open", []string{"--agent", "codex"}, event, map[string]string{URLEnv: s.URL}, 0, "COUNTERSIGN_AGENT_TOKEN is not set"},
		{"no URL", []string{"--agent", "codex", "--fail-closed"}, event, map[string]string{TokenEnv: token}, 2, "no server URL"},
		{"not an http URL", []string{"--agent", "codex", "--fail-closed", "--url", "file:///etc/passwd"}, event, map[string]string{TokenEnv: token}, 2, "no server URL"},
		{"no agent", nil, event, envFor(s.URL), 1, "--agent must be one of codex, gemini, cursor, copilot"},
		{"claude-code is an HTTP hook", []string{"--agent", "claude-code", "--fail-closed"}, event, envFor(s.URL), 2, "Claude Code uses an HTTP hook"},
		{"unknown flag", []string{"--agent", "codex", "--fail-open"}, event, envFor(s.URL), 1, "flag provided but not defined: -fail-open"},
		{"unknown flag, failing closed", []string{"--fail-closed", "--agnet", "codex"}, event, envFor(s.URL), 2, "flag provided but not defined"},
		{"extra argument", []string{"--agent", "codex", "PreToolUse"}, event, envFor(s.URL), 1, `unexpected argument "PreToolUse"`},
		{"timeout too short", []string{"--agent", "codex", "--timeout", "1"}, event, envFor(s.URL), 1, "at least 2 seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.args, tc.stdin, tc.env)
			if r.code != tc.code || r.stdout != "" || !strings.Contains(r.stderr, tc.msg) {
				t.Errorf("exit %d stdout %q stderr %q; want exit %d, no stdout, %q", r.code, r.stdout, r.stderr, tc.code, tc.msg)
			}
		})
	}
	if n := s.calls.Load(); n != 0 {
		t.Errorf("the server was asked %d times", n)
	}
}

// TestURLFromTheEnvironmentAndWithAPath: --url wins over COUNTERSIGN_URL; a base URL with a
// path (behind a proxy) keeps it.
func TestURLFromTheEnvironmentAndWithAPath(t *testing.T) {
	var path atomic.Pointer[string]
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		path.Store(&p)
	}))
	defer s.Close()
	event := recorded(t, "command-PreToolUse.stdin.json")
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--agent", "gemini"}, s.URL, "/hooks/gemini"},
		{[]string{"--agent", "cursor", "--url", s.URL + "/countersign/"}, "http://127.0.0.1:1", "/countersign/hooks/cursor"},
		{[]string{"hook", "--agent", "copilot"}, s.URL, ""}, // "hook" is cmd/countersign-hook's to drop
	} {
		path.Store(nil)
		r := run(t, tc.args, event, envFor(tc.env))
		got := ""
		if p := path.Load(); p != nil {
			got = *p
		}
		if got != tc.want {
			t.Errorf("%v: path %q, want %q (exit %d, %s)", tc.args, got, tc.want, r.code, r.stderr)
		}
	}
}

// TestAShortTokenDoesNotMangleMessages: messages are scrubbed of the token only when it is
// token-sized, so a one-letter test token leaves "codex" whole.
func TestAShortTokenDoesNotMangleMessages(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	var errb bytes.Buffer
	code := Main([]string{"--agent", "codex", "--fail-closed", "--url", down.URL}, strings.NewReader(`{}`), io.Discard, &errb,
		func(k string) string { return map[string]string{TokenEnv: "x"}[k] })
	if code != 2 || !strings.Contains(errb.String(), "/hooks/codex: ") {
		t.Errorf("exit %d stderr %q", code, errb.String())
	}
}

// TestTheProtocolAgreesWithTheServer: the constants this package copies (it must not import
// internal/hooks, to stay small) are the server's.
func TestTheProtocolAgreesWithTheServer(t *testing.T) {
	if MaxBodyBytes != hooks.MaxBodyBytes || HeaderExit != hooks.HeaderExit || HeaderStderr != hooks.HeaderStderr {
		t.Errorf("hookclient and hooks disagree")
	}
}
