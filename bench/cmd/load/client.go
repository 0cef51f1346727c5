package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/testkit"
	"countersign/internal/web"
)

// benchToken is the owner token of the in-process servers.
const benchToken = "bench-owner-token-0123456789abcdefghij"

// serve starts the real HTTP server (pages, JSON API, event WebSockets) for e on a free loopback
// port and returns an API client for it and a stop function.
func serve(e *testkit.Bench) (*api, func(), error) {
	shards, stop, err := serveShards(e, 1)
	if err != nil {
		return nil, nil, err
	}
	return shards[0], stop, nil
}

// socketsPerShard is how many live sockets the load program opens on one web.Server: under the
// owner's cap of 64 open sockets per server (maxOwnerSockets in internal/web/limits.go, issue 15),
// with room for a socket that follows a run.
const socketsPerShard = 60

// serveShards starts enough web.Servers over e's one Runner, Store and Broker for sockets live
// sockets (socketsPerShard each), every one on its own loopback port, and returns an API client
// for each (same owner token) and one stop function for all.
//
// Why: a server closes the owner's 65th open socket (issue 15's cap, not configurable), and the
// fan-out cases hold 1,000. A socket's work is the same whichever Server holds it (each
// subscribes to the one Broker, reads the one Store and renders alike); only the cap's counter
// and the listener are per Server.
func serveShards(e *testkit.Bench, sockets int) ([]*api, func(), error) {
	return serveShardsOn(e, e.DB, sockets)
}

// serveShardsOn is serveShards with the servers reading store (e's store, wrapped).
func serveShardsOn(e *testkit.Bench, store web.Reader, sockets int) ([]*api, func(), error) {
	n := max(1, (sockets+socketsPerShard-1)/socketsPerShard)
	var servers []*http.Server
	stop := func() {
		for _, hs := range servers {
			hs.Close()
		}
	}
	shards := make([]*api, n)
	for i := range shards {
		srv := web.New(web.Config{Runner: e.Runner, Store: store, Broker: e.Broker, Models: e.Models,
			OwnerToken: benchToken, Workspace: e.Dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, err
		}
		hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, hs)
		go hs.Serve(ln)
		shards[i] = newAPI("http://"+ln.Addr().String(), benchToken)
	}
	return shards, stop, nil
}

// countingReader is a web.Reader that counts the reads the servers make through it.
type countingReader struct {
	web.Reader
	reads atomic.Int64
}

func (r *countingReader) Session(ctx context.Context, id string) (agent.Session, error) {
	r.reads.Add(1)
	return r.Reader.Session(ctx, id)
}

func (r *countingReader) Sessions(ctx context.Context) ([]agent.Session, error) {
	r.reads.Add(1)
	return r.Reader.Sessions(ctx)
}

func (r *countingReader) Entries(ctx context.Context, sessionID string) ([]agent.Entry, error) {
	r.reads.Add(1)
	return r.Reader.Entries(ctx, sessionID)
}

func (r *countingReader) Approval(ctx context.Context, id string) (gate.Approval, error) {
	r.reads.Add(1)
	return r.Reader.Approval(ctx, id)
}

func (r *countingReader) Approvals(ctx context.Context, sessionID string, status gate.Status) ([]gate.Approval, error) {
	r.reads.Add(1)
	return r.Reader.Approvals(ctx, sessionID, status)
}

// api is a JSON API client (SPEC §12) with the owner's bearer token.
type api struct {
	base, token string
	http        *http.Client
}

func newAPI(base, token string) *api {
	tr := &http.Transport{MaxIdleConns: 1000, MaxIdleConnsPerHost: 1000, IdleConnTimeout: time.Minute}
	return &api{base: base, token: token, http: &http.Client{Transport: tr, Timeout: time.Minute}}
}

// do sends a JSON request and decodes a JSON answer into out (when not nil); a status other than
// want is an error carrying the answer's text.
func (a *api) do(ctx context.Context, method, path string, body, out any, want int) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// login exchanges the owner token for a browser login (GET /login?token=…, SPEC §11) and
// returns the Cookie header that carries it.
func (a *api) login(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", a.base+"/login?token="+url.QueryEscape(a.token), nil)
	if err != nil {
		return "", err
	}
	// The answer is a redirect to /, which is not followed: the cookie is on the redirect.
	resp, err := a.http.Transport.RoundTrip(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "countersign_owner" && c.Value != "" {
			return c.Name + "=" + c.Value, nil
		}
	}
	return "", fmt.Errorf("GET /login: %s, no login cookie", resp.Status)
}

// createSession creates a session with model (e.g. "faux:direct-200") and returns its id.
func (a *api) createSession(ctx context.Context, title, model string) (string, error) {
	var s struct{ ID string }
	err := a.do(ctx, "POST", "/api/sessions", map[string]string{"title": title, "model": model}, &s, http.StatusCreated)
	return s.ID, err
}

// send posts a user message, which starts a run.
func (a *api) send(ctx context.Context, sessionID, text string) error {
	return a.do(ctx, "POST", "/api/sessions/"+sessionID+"/messages", map[string]string{"text": text}, nil, http.StatusAccepted)
}

// approve approves an approval.
func (a *api) approve(ctx context.Context, approvalID string) error {
	return a.do(ctx, "POST", "/api/approvals/"+approvalID+"/decision", map[string]string{"decision": "approve"}, nil, http.StatusOK)
}

// endResult is what readToEnd reports: the events read up to agent_end, or the error.
type endResult struct {
	n   int
	err error
}

// readToEnd connects to a session's events and reads them in the background until agent_end;
// the channel gets the count (or the error) once. closeEvents closes the socket.
func (a *api) readToEnd(ctx context.Context, sessionID string) (done <-chan endResult, closeEvents func(), err error) {
	c, err := a.events(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan endResult, 1)
	go func() {
		n, err := readUntilEnd(ctx, c, nil, nil)
		ch <- endResult{n, err}
	}()
	return ch, func() { c.CloseNow() }, nil
}

// events opens a session's event WebSocket and reads its first frame, the snapshot.
func (a *api) events(ctx context.Context, sessionID string) (*websocket.Conn, error) {
	h := http.Header{"Authorization": {"Bearer " + a.token}}
	u := "ws" + strings.TrimPrefix(a.base, "http") + "/api/sessions/" + sessionID + "/events"
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h, HTTPClient: a.http})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(64 << 20)
	_, b, err := c.Read(ctx)
	if err != nil {
		c.CloseNow()
		return nil, err
	}
	if !bytes.Contains(b, []byte(`"type":"snapshot"`)) {
		c.CloseNow()
		return nil, fmt.Errorf("first frame is not a snapshot: %.200s", b)
	}
	return c, nil
}

// event is the part of an API event the benchmark reads.
type event struct {
	Type       string        `json:"type"`
	MessageID  string        `json:"messageId"`
	ToolCallID string        `json:"toolCallId"`
	Error      string        `json:"error"`
	Message    *eventMessage `json:"message"`
	Approval   *struct {
		ID        string     `json:"id"`
		CreatedAt time.Time  `json:"createdAt"`
		DecidedAt *time.Time `json:"decidedAt"`
	} `json:"approval"`
	text int // textLen
}

// eventMessage is the part of an event's message the benchmark reads.
type eventMessage struct {
	Role    string `json:"role"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

// textLen is the length of the text of the event's message so far.
func (e *event) textLen() int { return e.text }

// decode decodes an event frame into e. The fan-out case's frames are read without
// encoding/json where their shape allows (it decodes 100 copies of every event): a
// message_update whose message is so far one text block (plainTextUpdate) and the role of a
// message_start (plainMessageRole). Any other frame goes through json.Unmarshal.
func (e *event) decode(b []byte) error {
	if n, ok := plainTextUpdate(b); ok {
		e.Type, e.text = "message_update", n
		return nil
	}
	if role, ok := plainMessageRole(b); ok {
		e.Type, e.Message = "message_start", &eventMessage{Role: role}
		return nil
	}
	if err := json.Unmarshal(b, e); err != nil {
		return err
	}
	if e.Message != nil {
		for _, b := range e.Message.Content {
			if b.Type == "text" {
				e.text += len(b.Text)
			}
		}
	}
	return nil
}

// plainTextUpdate returns the text length of a message_update frame whose message is so far
// one text block, with no escape in its JSON string, encoded in agent.Event's and
// agent.Message's field order:
//
//	{"type":"message_update","sessionId":"…","messageId":"…","message":{"id":"…",
//	"role":"assistant","content":[{"type":"text","text":"…"}],…
//
// A JSON string without an escape holds its text byte for byte. ok is false for any other frame
// (another shape, order or block, an escaped character), which must be decoded.
func plainTextUpdate(b []byte) (n int, ok bool) {
	rest, ok := plainParts(b, plainUpdateParts)
	if !ok {
		return 0, false
	}
	text, rest, ok := plainString(rest)
	if !ok || !(bytes.HasPrefix(rest, []byte(`"}],`)) || bytes.HasPrefix(rest, []byte(`"}]}`))) {
		return 0, false
	}
	return len(text), true
}

// plainMessageRole returns the message's role in a message_start frame encoded in agent.Event's
// and agent.Message's field order, {"type":"message_start","sessionId":"…","messageId":"…",
// "message":{"id":"…","role":"…",… ok is false for any other frame.
func plainMessageRole(b []byte) (role string, ok bool) {
	rest, ok := plainParts(b, plainStartParts)
	if !ok {
		return "", false
	}
	r, rest, ok := plainString(rest)
	if !ok || !bytes.HasPrefix(rest, []byte(`",`)) {
		return "", false
	}
	for _, known := range []string{"assistant", "user", "toolResult"} {
		if known == string(r) {
			return known, true
		}
	}
	return string(r), true
}

// plainParts reads b as parts[0], a string value, parts[1], … up to the last part and returns
// what follows it. ok is false if b does not read so, or a string value has an escape.
func plainParts(b []byte, parts [][]byte) (rest []byte, ok bool) {
	rest = b
	for i, p := range parts {
		if i > 0 {
			if _, rest, ok = plainString(rest); !ok {
				return nil, false
			}
		}
		if rest, ok = bytes.CutPrefix(rest, p); !ok {
			return nil, false
		}
	}
	return rest, true
}

// The fixed parts of the frames plainTextUpdate and plainMessageRole read; a string value sits
// between each two.
var (
	plainUpdateParts = [][]byte{[]byte(`{"type":"message_update","sessionId":"`), []byte(`","messageId":"`),
		[]byte(`","message":{"id":"`), []byte(`","role":"assistant","content":[{"type":"text","text":"`)}
	plainStartParts = [][]byte{[]byte(`{"type":"message_start","sessionId":"`), []byte(`","messageId":"`),
		[]byte(`","message":{"id":"`), []byte(`","role":"`)}
)

// plainString splits b, which starts inside a JSON string, at the string's closing quote: the
// string's bytes and the rest from the quote on. ok is false if an escape comes first.
func plainString(b []byte) (s, rest []byte, ok bool) {
	i := bytes.IndexAny(b, `"\`)
	if i < 0 || b[i] != '"' {
		return nil, nil, false
	}
	return b[:i], b[i:], true
}

// readUntilEnd reads a socket's events until agent_end, calling f (when not nil) with each event,
// its frame and the time the frame arrived; frame is valid only during the call. It returns how
// many events arrived; errDropped when the server closed the socket first (a viewer that falls
// behind is dropped and must re-sync).
//
// The viewers share the server's CPUs, so reading is kept lean: ctx closes the socket when it
// ends (rather than being watched by the library for every read, one context.AfterFunc each on
// a context shared by every viewer), frames are read into one reused buffer, and only the
// event types in decode are decoded (nil: decoded); the others are only counted.
func readUntilEnd(ctx context.Context, c *websocket.Conn, decode map[string]bool, f func(ev *event, frame []byte, at time.Time)) (int, error) {
	if decode == nil {
		decode = decoded
	}
	stop := context.AfterFunc(ctx, func() { c.CloseNow() })
	defer stop()
	var buf bytes.Buffer
	n := 0
	for {
		buf.Reset()
		_, r, err := c.Reader(context.Background())
		if err == nil {
			_, err = buf.ReadFrom(r)
		}
		at := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			if websocket.CloseStatus(err) == websocket.StatusTryAgainLater {
				return n, errDropped
			}
			return n, err
		}
		b := buf.Bytes()
		n++
		var ev event
		if typ, ok := frameType(b); ok && !decode[typ] {
			ev.Type = typ
		} else if err := ev.decode(b); err != nil {
			return n, err
		}
		if f != nil {
			f(&ev, b, at)
		}
		if ev.Type == "agent_end" {
			if ev.Error != "" {
				return n, fmt.Errorf("run failed: %s", ev.Error)
			}
			return n, nil
		}
	}
}

// decoded are the event types readUntilEnd decodes by default; fanoutDecoded those the fan-out
// case looks into.
var (
	fanoutDecoded = map[string]bool{"message_start": true, "message_update": true, "agent_end": true}
	decoded       = map[string]bool{"message_start": true, "message_update": true, "approval_requested": true,
		"approval_resolved": true, "tool_execution_start": true, "agent_end": true}
)

// frameType reads the type of an event frame, which the server writes first: {"type":"...",
func frameType(b []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(b, []byte(`{"type":"`))
	if !ok {
		return "", false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 {
		return "", false
	}
	for _, t := range eventTypes {
		if t == string(rest[:i]) {
			return t, true // no copy for a known type
		}
	}
	return string(rest[:i]), true
}

// eventTypes are the SPEC §2 event types and the snapshot.
var eventTypes = []string{"message_update", "tool_execution_update", "message_start", "message_end",
	"tool_execution_start", "tool_execution_end", "turn_start", "turn_end", "agent_start", "agent_end",
	"approval_requested", "approval_resolved", "session_updated", "snapshot"}

// frameBytes returns the first string value of a field in a frame, without decoding it: the
// top-level one for the fields the fan-out case reads. key is the field's name in quotes with
// the colon and the value's opening quote, as messageIDKey.
func frameBytes(b, key []byte) []byte {
	i := bytes.Index(b, key)
	if i < 0 {
		return nil
	}
	rest := b[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return nil
	}
	return rest[:j]
}

// The keys frameBytes reads.
var (
	messageIDKey  = []byte(`"messageId":"`)
	toolCallIDKey = []byte(`"toolCallId":"`)
)

// idCache turns the ids a viewer reads into strings, reusing the previous string for the same id
// (consecutive events mostly name the same message or call).
type idCache struct{ last [2]string }

func (c *idCache) get(b []byte) string {
	for _, s := range c.last {
		if s == string(b) {
			return s
		}
	}
	s := string(b)
	c.last[0], c.last[1] = s, c.last[0]
	return s
}

var errDropped = errors.New("the server dropped the socket (viewer fell behind)")

// process is the server binary running as its own process.
type process struct {
	cmd *exec.Cmd
	api *api
}

// startServer starts bin with args and waits for its login line (SPEC §11).
func startServer(ctx context.Context, bin string, args ...string) (*process, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = io.Discard
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case l := <-lines:
		rest, ok := strings.CutPrefix(l, "Countersign listening on ")
		base, token, ok2 := strings.Cut(rest, "/login?token=")
		if !ok || !ok2 {
			cmd.Process.Kill()
			return nil, fmt.Errorf("unexpected first line %q", l)
		}
		return &process{cmd: cmd, api: newAPI(base, token)}, nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return nil, errors.New("the server printed no login line within 30s")
	}
}

// stop interrupts the server and waits for it.
func (p *process) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// mem is a process's memory from /proc/<pid>/status, in bytes: resident (VmRSS), its peak
// (VmHWM), and the resident split into anonymous memory (heap, stacks) and pages mapped from
// files (mostly the binary's code and read-only data).
type mem struct{ rss, hwm, anon, file int64 }

func memory(pid int) (mem, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return mem{}, err
	}
	var m mem
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		var kb int64
		fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
		switch k {
		case "VmRSS":
			m.rss = kb << 10
		case "VmHWM":
			m.hwm = kb << 10
		case "RssAnon":
			m.anon = kb << 10
		case "RssFile":
			m.file = kb << 10
		}
	}
	return m, nil
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func loadavg() []float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	var a, b1, c float64
	fmt.Sscanf(string(b), "%f %f %f", &a, &b1, &c)
	return []float64{a, b1, c}
}

func gitDescribe() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
