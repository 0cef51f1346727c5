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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/benchkit"
	"countersign/internal/web"
)

// serve starts the real HTTP server (pages, JSON API, event WebSockets) for e on a free loopback
// port and returns an API client for it and a stop function.
func serve(e *benchkit.Env) (*api, func(), error) {
	token := "bench-owner-token"
	srv := web.New(web.Config{Runner: e.Runner, Store: e.DB, Broker: e.Broker, Models: e.Models,
		OwnerToken: token, Workspace: e.Dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return newAPI("http://"+ln.Addr().String(), token), func() { hs.Close() }, nil
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
	Type       string `json:"type"`
	MessageID  string `json:"messageId"`
	ToolCallID string `json:"toolCallId"`
	Error      string `json:"error"`
	Message    *struct {
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"message"`
	Approval *struct {
		ID        string     `json:"id"`
		CreatedAt time.Time  `json:"createdAt"`
		DecidedAt *time.Time `json:"decidedAt"`
	} `json:"approval"`
}

// textLen is the length of the text of the event's message so far.
func (e *event) textLen() int {
	n := 0
	if e.Message != nil {
		for _, b := range e.Message.Content {
			if b.Type == "text" {
				n += len(b.Text)
			}
		}
	}
	return n
}

// readUntilEnd reads a socket's events until agent_end, calling f (when not nil) with each event,
// its frame and the time the frame arrived. It returns how many events arrived; errDropped when the server
// closed the socket first (a viewer that falls behind is dropped and must re-sync).
func readUntilEnd(ctx context.Context, c *websocket.Conn, f func(ev *event, frame []byte, at time.Time)) (int, error) {
	n := 0
	for {
		_, b, err := c.Read(ctx)
		at := time.Now()
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusTryAgainLater {
				return n, errDropped
			}
			return n, err
		}
		n++
		var ev event
		// Only the events the cases look into are decoded: the viewers share the server's CPUs.
		if typ, ok := frameType(b); ok && !decoded[typ] {
			ev.Type = typ
		} else if err := json.Unmarshal(b, &ev); err != nil {
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

// decoded are the event types readUntilEnd decodes; the others it only counts.
var decoded = map[string]bool{"message_start": true, "message_update": true, "approval_requested": true,
	"approval_resolved": true, "tool_execution_start": true, "agent_end": true}

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
	return string(rest[:i]), true
}

// frameString returns the first string value of field in a frame (e.g. "messageId"), without
// decoding it: the top-level one for the fields the fan-out case reads.
func frameString(b []byte, field string) string {
	k := `"` + field + `":"`
	i := bytes.Index(b, []byte(k))
	if i < 0 {
		return ""
	}
	rest := b[i+len(k):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

var errDropped = errors.New("the server dropped the socket (viewer fell behind)")

// buildServer builds cmd/web into dir and returns the binary's path.
func buildServer(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "countersign")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/web")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return bin, cmd.Run()
}

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
