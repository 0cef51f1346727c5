package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/share"
	"countersign/internal/tool"
)

// Fuzz targets for what strangers send the web edge (issue 15, acceptance 5): JSON API bodies,
// decision forms (the owner's and an approver link's), the share and reviewer-name forms, and
// raw WebSocket frames. `make test` runs their seed corpora (testdata/fuzz/<name>); `make fuzz`
// runs them under the fuzzer. Each fuzzing process builds one server and reuses it: an input
// must leave it as usable as it found it.

// fuzzEnv is one server with a session, an approver link without rights and one with canEdit,
// each with a reviewer who gave their name.
type fuzzEnv struct {
	ts        *testServer
	sessionID string
	plain     fuzzLink // approver, no rights
	editor    fuzzLink // approver, canEdit
	viewer    fuzzLink // viewer, no name given yet (the name form's target)
	n         atomic.Int64
}

type fuzzLink struct {
	path   string // /r/<token>
	client *http.Client
}

func newFuzzEnv(tb testing.TB) *fuzzEnv {
	tb.Helper()
	ts := newTestServer(tb, map[string]string{"one": oneCall})
	env := &fuzzEnv{ts: ts}
	var sess agent.Session
	if st, _ := ts.do(tb, "POST", "/api/sessions", "application/json", `{"title":"fuzz","model":"faux:one"}`, nil); st != 201 {
		tb.Fatalf("create session = %d", st)
	}
	if _, body := ts.do(tb, "GET", "/api/sessions", "", "", nil); true {
		var list struct{ Sessions []agent.Session }
		if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Sessions) != 1 {
			tb.Fatalf("sessions: %v %s", err, body)
		}
		sess = list.Sessions[0]
	}
	env.sessionID = sess.ID
	env.plain = env.link(tb, `{"role":"approver","label":"plain"}`, "Pat")
	env.editor = env.link(tb, `{"role":"approver","label":"editor","canEdit":true}`, "Eve")
	env.viewer = env.link(tb, `{"role":"viewer","label":"viewer"}`, "")
	return env
}

// link creates a share link from an API body and, when name is set, gives the reviewer's name.
func (e *fuzzEnv) link(tb testing.TB, body, name string) fuzzLink {
	tb.Helper()
	st, out := e.ts.do(tb, "POST", "/api/sessions/"+e.sessionID+"/shares", "application/json", body, nil)
	if st != 201 {
		tb.Fatalf("create link %s = %d %s", body, st, out)
	}
	var l struct{ URL string }
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		tb.Fatal(err)
	}
	u, _ := url.Parse(l.URL)
	jar, _ := cookiejar.New(nil)
	fl := fuzzLink{path: u.Path, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
	if name != "" {
		if st, out := e.ts.do(tb, "POST", fl.path+"/name", "application/x-www-form-urlencoded", url.Values{"name": {name}}.Encode(), fl.client); st != http.StatusSeeOther {
			tb.Fatalf("give name = %d %s", st, out)
		}
	}
	return fl
}

// do sends a request (with the owner's bearer token when client is nil) and returns the status
// and body.
func (ts *testServer) do(tb testing.TB, method, path, contentType, body string, client *http.Client) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if client == nil {
		client = http.DefaultClient
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(out)
}

// pendingShell stores a fresh pending approval of the shell tool in the env's session, as the
// gate would have, and returns it.
func (e *fuzzEnv) pendingShell(tb testing.TB) gate.Approval {
	tb.Helper()
	n := e.n.Add(1)
	a := gate.Approval{ID: gate.NewID(), SessionID: e.sessionID, MessageID: "fuzz", ToolCallID: fmt.Sprintf("f%d", n),
		ToolName: "shell", Arguments: json.RawMessage(`{"command":"ls"}`), Annotations: tool.Annotations{},
		RequestedBy: "model", Status: gate.Pending, CreatedAt: time.Now().UTC()}
	if err := e.ts.db.CreateApproval(context.Background(), a); err != nil {
		tb.Fatal(err)
	}
	return a
}

// settle cancels approval id if it is still pending.
func (e *fuzzEnv) settle(tb testing.TB, id string) {
	tb.Helper()
	_, err := e.ts.db.ResolveApproval(context.Background(), id, gate.Resolution{Status: gate.Cancelled,
		DecidedBy: gate.BySystem, Automatic: true, Reason: "fuzz input done", At: time.Now().UTC()})
	if err != nil && apperr.CodeOf(err) != apperr.Conflict {
		tb.Fatal(err)
	}
}

// checkAPIError checks that an API answer with status st is JSON and, for an error, names a code
// and a message.
func checkAPIError(t *testing.T, st int, body string) {
	t.Helper()
	if st >= 500 {
		t.Fatalf("status %d: %s", st, body)
	}
	if st < 400 {
		if body != "" && !json.Valid([]byte(body)) {
			t.Fatalf("status %d with a body that is not JSON: %q", st, body)
		}
		return
	}
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("status %d: the error is not {error: {code, message}}: %q", st, body)
	}
}

// FuzzAPIBody sends arbitrary bodies to the JSON API's routes that take one. Whatever the body,
// the answer is never a 5xx, errors keep their shape, and the server keeps answering.
func FuzzAPIBody(f *testing.F) {
	env := newFuzzEnv(f)
	pending := env.pendingShell(f)
	routes := []struct{ method, path string }{
		{"POST", "/api/sessions"},
		{"POST", "/api/sessions/" + env.sessionID + "/messages"},
		{"PUT", "/api/sessions/" + env.sessionID + "/tools"},
		{"POST", "/api/sessions/" + env.sessionID + "/shares"},
		{"POST", "/api/approvals/" + pending.ID + "/decision"},
		{"POST", "/api/sessions/unknown/messages"},
	}
	f.Add(uint8(0), []byte(`{"title":"t","model":"faux:one"}`))
	f.Add(uint8(0), []byte(`{"title":1}`))
	f.Add(uint8(2), []byte(`{"active":["shell","nope"]}`))
	f.Add(uint8(3), []byte(`{"role":"approver","label":"x","expiresIn":"1ns","canEdit":true}`))
	f.Add(uint8(4), []byte(`{"decision":"approve","arguments":{"command":"rm -rf /"}}`))
	f.Add(uint8(1), []byte(`{"text":""}`))
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := routes[int(route)%len(routes)]
		st, out := env.ts.do(t, r.method, r.path, "application/json", string(body), nil)
		checkAPIError(t, st, out)
		if st == http.StatusOK && strings.HasSuffix(r.path, "/decision") {
			// Whatever was decided, what was asked is unchanged.
			a, err := env.ts.db.Approval(context.Background(), pending.ID)
			if err != nil || !bytes.Equal(a.Arguments, pending.Arguments) {
				t.Fatalf("the asked arguments changed: %s (%v)", a.Arguments, err)
			}
		}
		if st, _ := env.ts.do(t, "GET", "/api/sessions/"+env.sessionID, "", "", nil); st != 200 {
			t.Fatalf("the session no longer answers: %d", st)
		}
	})
}

// FuzzDecisionForm posts arbitrary decision bodies for a fresh pending approval: as the owner
// through the API (JSON) and the page (form), and as approvers through share links with and
// without the right to edit. A decision either applies whole or changes nothing; what was asked
// never changes; an edit is valid against the tool's inputSchema; a reviewer never exceeds the
// rights of their link.
func FuzzDecisionForm(f *testing.F) {
	env := newFuzzEnv(f)
	f.Add(uint8(0), `{"decision":"approve"}`)
	f.Add(uint8(0), `{"decision":"approve","arguments":{"command":"id"}}`)
	f.Add(uint8(1), "decision=approve_session")
	f.Add(uint8(1), "decision=deny&reason=no")
	f.Add(uint8(2), "decision=approve&arguments=%7B%22command%22%3A%22id%22%7D")
	f.Add(uint8(2), "decision=approve_session")
	f.Add(uint8(3), "decision=approve&arguments=%7B%22command%22%3A1%7D")
	f.Add(uint8(3), "decision=deny&reason=%E2%80%AEowner")
	f.Fuzz(func(t *testing.T, who uint8, body string) {
		a := env.pendingShell(t)
		// Each input stands alone: an approval it left pending is settled, or the pending ones
		// would pile up and the next "Approve for session" would release thousands.
		defer env.settle(t, a.ID)
		var (
			st   int
			out  string
			name string
		)
		switch who % 4 {
		case 0:
			st, out = env.ts.do(t, "POST", "/api/approvals/"+a.ID+"/decision", "application/json", body, nil)
			checkAPIError(t, st, out)
			name = gate.ByOwner
		case 1:
			st, out = env.ts.do(t, "POST", "/sessions/"+env.sessionID+"/approvals/"+a.ID+"/decision", "application/x-www-form-urlencoded", body, nil)
			name = gate.ByOwner
		case 2:
			st, out = env.ts.do(t, "POST", env.plain.path+"/approvals/"+a.ID+"/decision", "application/x-www-form-urlencoded", body, env.plain.client)
			name = "Pat"
		case 3:
			st, out = env.ts.do(t, "POST", env.editor.path+"/approvals/"+a.ID+"/decision", "application/x-www-form-urlencoded", body, env.editor.client)
			name = "Eve"
		}
		switch st {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		case http.StatusForbidden:
			if who%4 < 2 {
				t.Fatalf("the owner was refused: %s", out)
			}
		default:
			t.Fatalf("status %d: %s", st, out)
		}
		got, err := env.ts.db.Approval(context.Background(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Arguments, a.Arguments) {
			t.Fatalf("the asked arguments changed: %s", got.Arguments)
		}
		if st != http.StatusOK {
			if got.Status != gate.Pending {
				t.Fatalf("refused with %d but the approval is %s", st, got.Status)
			}
			return
		}
		if got.Status != gate.Approved && got.Status != gate.Denied {
			t.Fatalf("decided with 200 but the approval is %s", got.Status)
		}
		if got.DecidedBy != name {
			t.Fatalf("decided by %q, want %q", got.DecidedBy, name)
		}
		if len(got.EditedArguments) > 0 {
			if got.Status != gate.Approved || who%4 == 2 {
				t.Fatalf("an edit was kept on a %s decision by %s", got.Status, name)
			}
			var args struct {
				Command *string `json:"command"`
			}
			if err := json.Unmarshal(got.EditedArguments, &args); err != nil || args.Command == nil {
				t.Fatalf("edited arguments do not match the inputSchema: %s", got.EditedArguments)
			}
		}
		if got.Scope == gate.Session && who%4 >= 2 {
			t.Fatalf("a link without the right to remember approved for the session")
		}
	})
}

// FuzzShareForm posts arbitrary bodies to the owner's share panel form and to a reviewer's name
// form. The panel makes exactly one valid link or none, with a reason; a name is accepted only
// as share.NormalizeName would keep it, and is what the page then says.
func FuzzShareForm(f *testing.F) {
	env := newFuzzEnv(f)
	f.Add(false, "role=viewer&label=a")
	f.Add(false, "role=approver&label=b&expiresIn=24h&canEdit=on&canRemember=on")
	f.Add(false, "role=viewer&canEdit=on")
	f.Add(false, "role=approver&expiresIn=-1h")
	f.Add(true, "name=Alice")
	f.Add(true, "name=%EF%BC%AF%EF%BD%97%EF%BD%8E%EF%BD%85%EF%BD%92")
	f.Add(true, "name=own%E2%80%8Ber")
	f.Fuzz(func(t *testing.T, nameForm bool, body string) {
		if nameForm {
			jar, _ := cookiejar.New(nil)
			c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			st, out := env.ts.do(t, "POST", env.viewer.path+"/name", "application/x-www-form-urlencoded", body, c)
			form, perr := url.ParseQuery(body)
			want, nerr := share.NormalizeName(form.Get("name"))
			switch st {
			case http.StatusSeeOther:
				if perr != nil || nerr != nil {
					t.Fatalf("name form accepted %q (parse %v, name %v)", body, perr, nerr)
				}
				_, page := env.ts.do(t, "GET", env.viewer.path, "", "", c)
				if !strings.Contains(page, "Signed in as") {
					t.Fatalf("after giving a name the page does not show it signed in")
				}
				if !utf8.ValidString(want) || want == "" {
					t.Fatalf("accepted name %q", want)
				}
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
				if perr == nil && nerr == nil && st == http.StatusBadRequest {
					t.Fatalf("name %q refused although NormalizeName keeps it as %q: %.300s", form.Get("name"), want, out)
				}
			default:
				t.Fatalf("name form status %d: %.300s", st, out)
			}
			return
		}
		before, err := env.ts.db.Shares(context.Background(), env.sessionID)
		if err != nil {
			t.Fatal(err)
		}
		st, out := env.ts.do(t, "POST", "/sessions/"+env.sessionID+"/shares", "application/x-www-form-urlencoded", body, nil)
		after, err := env.ts.db.Shares(context.Background(), env.sessionID)
		if err != nil {
			t.Fatal(err)
		}
		switch st {
		case http.StatusOK:
			if len(after) != len(before)+1 {
				t.Fatalf("200 but %d links became %d", len(before), len(after))
			}
			l := after[0]
			if l.Role != share.Viewer && l.Role != share.Approver {
				t.Fatalf("a link with role %q", l.Role)
			}
			if l.Role == share.Viewer && (l.CanEdit || l.CanRemember) {
				t.Fatalf("a viewer link with rights: %+v", l)
			}
			if utf8.RuneCountInString(l.Label) > share.MaxLabel || l.Label != strings.TrimSpace(l.Label) {
				t.Fatalf("label %q kept", l.Label)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if len(after) != len(before) {
				t.Fatalf("refused (%d) but a link was made", st)
			}
		default:
			t.Fatalf("share form status %d: %.300s", st, out)
		}
	})
}

// FuzzWebSocketFrames opens the live sockets (the owner's page socket, the API's event socket and
// an approver's page socket) and writes arbitrary bytes after the handshake, then half-closes.
// The server must end the connection (it never waits forever on a peer that stopped talking)
// and keep serving.
func FuzzWebSocketFrames(f *testing.F) {
	env := newFuzzEnv(f)
	paths := []struct {
		path   string
		client *http.Client
	}{
		{"/sessions/" + env.sessionID + "/live", nil},
		{"/api/sessions/" + env.sessionID + "/events", nil},
		{env.plain.path + "/live", env.plain.client},
	}
	host := strings.TrimPrefix(env.ts.URL, "http://")
	// A masked text frame "hi", a masked close frame, a ping, an oversized length, garbage.
	f.Add(uint8(0), []byte{0x81, 0x82, 1, 2, 3, 4, 'h' ^ 1, 'i' ^ 2})
	f.Add(uint8(1), []byte{0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8})
	f.Add(uint8(2), []byte{0x89, 0x80, 0, 0, 0, 0})
	f.Add(uint8(1), []byte{0x82, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4})
	f.Add(uint8(0), []byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		p := paths[int(which)%len(paths)]
		conn, err := net.DialTimeout("tcp", host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req := "GET " + p.path + " HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
		if p.client == nil {
			req += "Authorization: Bearer " + token + "\r\n"
		} else {
			u, _ := url.Parse(env.ts.URL + p.path)
			for _, c := range p.client.Jar.Cookies(u) {
				req += "Cookie: " + c.Name + "=" + c.Value + "\r\n"
			}
		}
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		if res.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("handshake status %d", res.StatusCode)
		}
		_, _ = conn.Write(data)
		_ = conn.(*net.TCPConn).CloseWrite()
		// The server closes its side: a read ends in EOF (or a reset) well before the deadline.
		if _, err := io.Copy(io.Discard, br); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the server kept the socket open 20 s after the peer half-closed")
			}
		}
		if st, _ := env.ts.do(t, "GET", "/api/sessions/"+env.sessionID, "", "", nil); st != 200 {
			t.Fatalf("the server no longer answers: %d", st)
		}
	})
}
