package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"countersign/internal/gate"
	"countersign/internal/procenv"
	"countersign/internal/tool"
)

// protocolVersion is the MCP revision Countersign speaks. The SDK would otherwise start with the
// 2026-07-28 draft (server/discover, stateless requests, no keepalive pings); SPEC §13 is written
// against 2025-11-25, which servers of every age negotiate down from.
const protocolVersion = "2025-11-25"

// codeMethodNotFound is the JSON-RPC 2.0 error code for an unknown method.
const codeMethodNotFound = -32601

// maxTools bounds a listing, so that a server whose pagination never ends cannot exhaust memory.
const maxTools = 10000

// toolNameRule is the MCP 2025-11-25 §tools name rule, which "<server>__<tool>" must follow.
var toolNameRule = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// server is one configured MCP server: its connection, supervised by run, and its tools.
type server struct {
	m      *Manager
	cfg    ServerConfig
	log    *slog.Logger
	client *sdk.Client
	tap    tap
	stderr tail

	relist chan struct{} // a tools/list_changed arrived; capacity 1, so signals coalesce
	faults chan fault    // a call found the connection broken; capacity 1

	mu       sync.Mutex
	state    State
	err      string
	session  *sdk.ClientSession      // the current connection, nil when none
	entries  map[string]*entry       // by MCP tool name; never removed, so pointers stay stable
	current  []string                // MCP tool names the server offers, as last listed
	warnings []string                // see ServerStatus.Warnings
	calls    map[string]*pendingCall // running calls by progress token
}

// fault reports that sess broke while a call used it.
type fault struct {
	sess *sdk.ClientSession
	err  error
}

// entry is one tool of the server.
type entry struct {
	tool     *tool.Tool // built from def when first listed; registered, never mutated
	def      definition // the definition tool was built from
	stricter bool       // the server's latest annotations need approval where def's do not
}

// definition is a tool definition as the server sent it (MCP 2025-11-25 §tools, Tool).
type definition Definition

// Definition is an MCP tool definition as a server sent it (MCP 2025-11-25 §tools, Tool): its
// annotations as sent, an absent hint kept apart from a false one.
type Definition struct {
	Name         string
	Title        string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	Annotations  tool.Annotations
}

// DecodeDefinition reads a tool definition from its JSON as the server sent it (name, title —
// else annotations.title —, description, inputSchema, outputSchema, annotations); the manager's
// tools/list and the gateway's mcp-proxy (a wrapped server's tools) read it the same way. Errors:
// raw is not a JSON object of that shape (json's error).
func DecodeDefinition(raw json.RawMessage) (Definition, error) {
	var w struct {
		Name         string          `json:"name"`
		Title        string          `json:"title"`
		Description  string          `json:"description"`
		InputSchema  json.RawMessage `json:"inputSchema"`
		OutputSchema json.RawMessage `json:"outputSchema"`
		Annotations  *struct {
			Title string `json:"title"`
			tool.Annotations
		} `json:"annotations"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return Definition{}, err
	}
	d := Definition{Name: w.Name, Title: w.Title, Description: w.Description, InputSchema: w.InputSchema, OutputSchema: w.OutputSchema}
	if a := w.Annotations; a != nil {
		d.Annotations = a.Annotations
		if d.Title == "" {
			d.Title = a.Title
		}
	}
	return d, nil
}

func newServer(m *Manager, cfg ServerConfig) *server {
	s := &server{
		m: m, cfg: cfg,
		log:     m.log.With("mcpServer", cfg.Name),
		relist:  make(chan struct{}, 1),
		faults:  make(chan fault, 1),
		state:   Starting,
		entries: map[string]*entry{},
		calls:   map[string]*pendingCall{},
	}
	s.tap.progress = s.onProgressParams
	return s
}

// run connects, serves and reconnects with backoff until ctx ends. ready is called once the
// first attempt has succeeded or failed.
func (s *server) run(ctx context.Context, ready func()) {
	s.client = sdk.NewClient(&sdk.Implementation{Name: "countersign", Version: version()}, &sdk.ClientOptions{
		Logger:                      s.log,
		Capabilities:                &sdk.ClientCapabilities{}, // no roots, sampling or elicitation
		ToolListChangedHandler:      s.onToolListChanged,
		ProgressNotificationHandler: s.onProgress,
	})
	delay := s.m.backoffMin
	for {
		sess, err := s.connect(ctx)
		if err == nil {
			s.log.Info("MCP server up", "tools", len(s.currentTools()))
			ready()
			since := time.Now()
			err = s.serve(ctx, sess)
			s.disconnect(ctx, sess, err)
			if time.Since(since) >= s.m.backoffMax {
				delay = s.m.backoffMin // it ran fine for a while: start the backoff over
			}
		} else if ctx.Err() == nil {
			s.setDown(err)
			ready()
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("MCP server down; reconnecting", "in", delay, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, s.m.backoffMax)
	}
}

// connect starts or reaches the server, initializes the session (MCP 2025-11-25 §lifecycle) and
// lists its tools, all within the connect timeout.
func (s *server) connect(ctx context.Context) (*sdk.ClientSession, error) {
	cctx, cancel := context.WithTimeout(ctx, s.m.connectTimeout)
	defer cancel()
	s.stderr.reset()
	sess, err := s.client.Connect(cctx, s.transport(), &sdk.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err != nil {
		return nil, s.explain(cctx, fmt.Errorf("connecting: %w", err))
	}
	s.mu.Lock()
	s.session = sess // routes tools/list_changed; calls still wait for Up
	s.mu.Unlock()
	if err := s.list(cctx, sess); err != nil {
		s.mu.Lock()
		s.session = nil
		s.mu.Unlock()
		_ = sess.Close()
		return nil, s.explain(cctx, fmt.Errorf("listing tools: %w", err))
	}
	s.update(func() { s.state, s.err = Up, "" })
	return sess, nil
}

// explain adds what the user needs to err: that the attempt timed out, and what a stdio server
// printed on stderr.
func (s *server) explain(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %s: %w", s.m.connectTimeout, err)
	}
	if t := s.stderr.String(); t != "" {
		err = fmt.Errorf("%w; stderr: %s", err, t)
	}
	return err
}

// transport returns a fresh transport for one connection attempt.
func (s *server) transport() sdk.Transport {
	if s.cfg.URL != "" {
		return &sdk.StreamableClientTransport{
			Endpoint: s.cfg.URL,
			HTTPClient: &http.Client{Transport: &httpTransport{
				base: http.DefaultTransport, headers: s.cfg.Headers, tap: &s.tap,
			}},
		}
	}
	cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
	// An allowlist of the server's environment, never all of it (procenv), then the server's own.
	cmd.Env = procenv.Filter(os.Environ(), s.m.passEnv)
	keys := make([]string, 0, len(s.cfg.Env))
	for k := range s.cfg.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+s.cfg.Env[k])
	}
	cmd.Stderr = &s.stderr
	// A grandchild holding stderr open must not keep Wait (and so Close) from returning.
	cmd.WaitDelay = s.m.terminateDuration
	return &tappedTransport{
		Transport: &sdk.CommandTransport{Command: cmd, TerminateDuration: s.m.terminateDuration},
		tap:       &s.tap,
	}
}

// serve waits until the session ends, a call reports it broken, or ctx ends, re-listing the
// tools on every tools/list_changed. It returns why the session is over.
func (s *server) serve(ctx context.Context, sess *sdk.ClientSession) error {
	ended := make(chan error, 1)
	go func() { ended <- sess.Wait() }()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	unanswered := make(chan error, 1)
	if s.m.keepAlive > 0 {
		go s.ping(sctx, sess, unanswered)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-unanswered:
			return err
		case err := <-ended:
			if err == nil {
				return errors.New("the server closed the connection")
			}
			return fmt.Errorf("the connection was lost: %w", err)
		case f := <-s.faults:
			if f.sess == sess {
				return f.err
			}
		case <-s.relist:
			lctx, cancel := context.WithTimeout(ctx, s.m.connectTimeout)
			err := s.list(lctx, sess)
			cancel()
			if err != nil {
				return fmt.Errorf("listing tools after tools/list_changed: %w", err)
			}
		}
	}
}

// ping pings the server every keepAlive interval (MCP 2025-11-25 §utilities "ping") until ctx
// ends, and reports the first ping left unanswered for half an interval: a hung server is down.
// (The SDK's ClientOptions.KeepAlive closes the session without saying why, and does nothing
// from protocol 2026-07-28 on.)
func (s *server) ping(ctx context.Context, sess *sdk.ClientSession, unanswered chan<- error) {
	tick := time.NewTicker(s.m.keepAlive)
	defer tick.Stop()
	timeout := s.m.keepAlive / 2
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := sess.Ping(pctx, nil)
		cancel()
		var we *jsonrpc.Error
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.As(err, &we) && we.Code == codeMethodNotFound:
			return // the server does not implement ping; crashes still show as a lost connection
		case errors.As(err, &we):
		default:
			unanswered <- fmt.Errorf("did not answer a ping within %s: %w", timeout, err)
			return
		}
	}
}

// disconnect marks the server down with why (unless Countersign is closing) and closes the
// session; for a stdio server that ends the process (stdin closed, then SIGTERM, then SIGKILL).
func (s *server) disconnect(ctx context.Context, sess *sdk.ClientSession, why error) {
	if ctx.Err() == nil {
		s.setDown(why)
	}
	closeErr := sess.Close()
	s.mu.Lock()
	if s.session == sess {
		s.session = nil
	}
	s.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	// For a stdio server, Close reports how the process ended ("signal: killed", "exit status 1").
	var details []string
	var exitErr *exec.ExitError
	if errors.As(closeErr, &exitErr) && !strings.Contains(why.Error(), exitErr.String()) {
		details = append(details, "process "+exitErr.String())
	}
	if t := s.stderr.String(); t != "" {
		details = append(details, "stderr: "+t)
	}
	if len(details) > 0 {
		s.setDown(fmt.Errorf("%w (%s)", why, strings.Join(details, "; ")))
	}
}

// setDown marks the server down with err, dropping its session so calls fail at once.
func (s *server) setDown(err error) {
	s.update(func() {
		s.state, s.err, s.session = Down, err.Error(), nil
	})
}

// update runs f under the lock and fires OnChange if the server's status changed.
func (s *server) update(f func()) {
	s.mu.Lock()
	before := s.statusLocked()
	f()
	after := s.statusLocked()
	s.mu.Unlock()
	if !reflect.DeepEqual(before, after) {
		s.m.changed()
	}
}

// list fetches every page of tools/list (MCP 2025-11-25 §tools, "Listing Tools") and updates the
// tool set: new tools get new *tool.Tool values; known ones keep theirs.
func (s *server) list(ctx context.Context, sess *sdk.ClientSession) error {
	s.tap.take() // forget definitions of an earlier, abandoned listing
	var listed []*sdk.Tool
	for t, err := range sess.Tools(ctx, nil) {
		var we *jsonrpc.Error
		switch {
		case errors.As(err, &we) && we.Code == codeMethodNotFound:
			listed = nil // a server without tools (resources or prompts only) is up with none
		case err != nil:
			return err
		case len(listed) == maxTools:
			return fmt.Errorf("the server lists more than %d tools", maxTools)
		default:
			listed = append(listed, t)
			continue
		}
		break
	}
	raw := s.tap.take()
	var defs []definition
	var warnings []string
	seen := map[string]bool{}
	for _, t := range listed {
		name := s.cfg.Name + separator + t.Name
		switch {
		case seen[t.Name]:
			warnings = append(warnings, fmt.Sprintf("the server lists tool %q twice; the first is used", t.Name))
			continue
		case !toolNameRule.MatchString(name):
			warnings = append(warnings, fmt.Sprintf("tool %q is not offered: %q breaks the tool name rule [A-Za-z0-9_.-]{1,128}", t.Name, name))
			continue
		}
		seen[t.Name] = true
		defs = append(defs, toDefinition(t, raw[t.Name]))
	}
	s.update(func() {
		current := make([]string, 0, len(defs))
		for _, d := range defs {
			e, ok := s.entries[d.Name]
			if !ok {
				e = &entry{tool: s.newTool(d), def: d}
				s.entries[d.Name] = e
			}
			e.stricter = false
			if !d.equal(e.def) {
				warnings = append(warnings, fmt.Sprintf("tool %s changed its definition after it was registered; the first one stays in force until Countersign restarts", e.tool.Name))
				e.stricter = s.cfg.Trusted && !gate.NeedsApproval(e.def.Annotations) && gate.NeedsApproval(d.Annotations)
			}
			current = append(current, d.Name)
		}
		s.current, s.warnings = current, warnings
	})
	return nil
}

// toDefinition reads a tool's definition from the raw JSON the server sent, which keeps absent
// annotations apart from false ones, falling back to the SDK's decoding without it.
func toDefinition(t *sdk.Tool, raw json.RawMessage) definition {
	d := definition{Name: t.Name}
	if w, err := DecodeDefinition(raw); raw != nil && err == nil && w.Name == t.Name {
		d = definition(w)
	} else {
		d.Title, d.Description = t.Title, t.Description
		d.InputSchema, _ = json.Marshal(t.InputSchema)
		if t.OutputSchema != nil {
			d.OutputSchema, _ = json.Marshal(t.OutputSchema)
		}
		if a := t.Annotations; a != nil {
			// Without the wire form, a false readOnlyHint or idempotentHint may have been absent:
			// count it absent, which has the same effective value.
			if a.ReadOnlyHint {
				d.Annotations.ReadOnlyHint = tool.Bool(true)
			}
			if a.IdempotentHint {
				d.Annotations.IdempotentHint = tool.Bool(true)
			}
			d.Annotations.DestructiveHint = a.DestructiveHint
			d.Annotations.OpenWorldHint = a.OpenWorldHint
			if d.Title == "" {
				d.Title = a.Title
			}
		}
	}
	if bytes.Equal(bytes.TrimSpace(d.OutputSchema), []byte("null")) {
		d.OutputSchema = nil
	}
	return d
}

// equal reports whether two definitions are the same, comparing schemas as JSON values.
func (d definition) equal(o definition) bool {
	same := func(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	sameJSON := func(a, b json.RawMessage) bool {
		if len(a) == 0 || len(b) == 0 {
			return len(a) == len(b)
		}
		var x, y any
		return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
	}
	return d.Name == o.Name && d.Title == o.Title && d.Description == o.Description &&
		sameJSON(d.InputSchema, o.InputSchema) && sameJSON(d.OutputSchema, o.OutputSchema) &&
		same(d.Annotations.ReadOnlyHint, o.Annotations.ReadOnlyHint) &&
		same(d.Annotations.DestructiveHint, o.Annotations.DestructiveHint) &&
		same(d.Annotations.IdempotentHint, o.Annotations.IdempotentHint) &&
		same(d.Annotations.OpenWorldHint, o.Annotations.OpenWorldHint)
}

// newTool builds the Countersign tool for d (SPEC §13): "<server>__<tool>", exposure direct, the
// server's schemas, title and annotations; AlwaysAsk unless the server is trusted.
func (s *server) newTool(d definition) *tool.Tool {
	return &tool.Tool{
		Name:         s.cfg.Name + separator + d.Name,
		Title:        d.Title,
		Description:  d.Description,
		InputSchema:  d.InputSchema,
		OutputSchema: d.OutputSchema,
		Annotations:  d.Annotations,
		Exposure:     tool.Direct,
		AlwaysAsk:    !s.cfg.Trusted,
		AskReason:    askReason(s.cfg),
		Execute:      s.execute(d.Name),
	}
}

// askReason is why a call of an untrusted server's tool asks whatever its annotations say; "" for
// a trusted server.
func askReason(cfg ServerConfig) string {
	if cfg.Trusted {
		return ""
	}
	return "server " + cfg.Name + " is not trusted"
}

// currentTools returns the tools the server offers, as last listed.
func (s *server) currentTools() []*tool.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*tool.Tool, 0, len(s.current))
	for _, name := range s.current {
		out = append(out, s.entries[name].tool)
	}
	return out
}

func (s *server) status() ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statusLocked()
}

func (s *server) statusLocked() ServerStatus {
	st := ServerStatus{
		Name: s.cfg.Name, Transport: s.cfg.Transport(), Trusted: s.cfg.Trusted, State: s.state,
		Tools: make([]string, 0, len(s.current)), Warnings: slices.Clone(s.warnings),
	}
	if s.state != Up {
		st.Error = s.err
	}
	for _, name := range s.current {
		st.Tools = append(st.Tools, s.entries[name].tool.Name)
	}
	sort.Strings(st.Tools)
	return st
}

// execute returns the Execute of the server's tool name: tools/call through the current session
// (MCP 2025-11-25 §tools, "Calling Tools"), with a progress token so notifications/progress reach
// onUpdate (§utilities "progress"). Cancelling ctx makes the SDK send notifications/cancelled
// (§utilities "cancellation"). A server that is down, or breaks during the call, gives a Go error
// "MCP server <name> is down: …" (SPEC §1 rule 2: an error that has no data).
func (s *server) execute(name string) tool.ExecuteFunc {
	return func(ctx context.Context, args json.RawMessage, onUpdate func(tool.Update), _ tool.Context) (tool.Result, error) {
		sess, err := s.callable(name)
		if err != nil {
			return tool.Result{}, err
		}
		if len(bytes.TrimSpace(args)) == 0 {
			args = json.RawMessage("{}")
		}
		token := fmt.Sprintf("countersign-%d", s.m.tokens.Add(1))
		pc := &pendingCall{onUpdate: onUpdate}
		s.mu.Lock()
		s.calls[token] = pc
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.calls, token)
			s.mu.Unlock()
			pc.finish() // after this no update reaches onUpdate, as ExecuteFunc promises
		}()
		params := &sdk.CallToolParams{Name: name, Arguments: args}
		params.SetProgressToken(token)
		res, err := sess.CallTool(ctx, params)
		if err != nil {
			return tool.Result{}, s.callError(ctx, sess, name, err)
		}
		return toResult(res)
	}
}

// callable returns the session to call tool name through, or why it cannot be called.
func (s *server) callable(name string) (*sdk.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state == Starting || (s.state == Up && s.session == nil):
		return nil, fmt.Errorf("MCP server %s is still starting; try again in a moment", s.cfg.Name)
	case s.state == Down:
		return nil, fmt.Errorf("MCP server %s is down: %s (Countersign is reconnecting)", s.cfg.Name, s.err)
	case !slices.Contains(s.current, name):
		return nil, fmt.Errorf("MCP server %s no longer offers tool %q", s.cfg.Name, name)
	case s.entries[name].stricter:
		return nil, fmt.Errorf("MCP server %s changed the annotations of tool %q so that its calls need approval, "+
			"but Countersign registered it without; restart Countersign to use the new definition", s.cfg.Name, name)
	}
	return s.session, nil
}

// callError explains a failed tools/call. A JSON-RPC error is the server's answer (unknown tool,
// invalid params); a broken connection marks the server down and starts a reconnect.
func (s *server) callError(ctx context.Context, sess *sdk.ClientSession, name string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("MCP server %s: call of tool %s cancelled: %w", s.cfg.Name, name, context.Cause(ctx))
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return fmt.Errorf("MCP server %s refused the call of tool %s: %s (JSON-RPC error %d)", s.cfg.Name, name, we.Message, we.Code)
	}
	if errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, sdk.ErrSessionMissing) || !alive(sess) {
		s.fault(sess, err)
		return fmt.Errorf("MCP server %s is down: %v", s.cfg.Name, err)
	}
	return fmt.Errorf("MCP server %s: calling tool %s: %v", s.cfg.Name, name, err)
}

// alive pings the server (MCP 2025-11-25 §utilities "ping").
func alive(sess *sdk.ClientSession) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return sess.Ping(ctx, nil) == nil
}

// fault marks the server down at once, so the next call fails without waiting, and tells serve
// to reconnect.
func (s *server) fault(sess *sdk.ClientSession, err error) {
	s.update(func() {
		if s.session == sess {
			s.state, s.err, s.session = Down, err.Error(), nil
		}
	})
	select {
	case s.faults <- fault{sess, err}:
	default:
	}
}

// onToolListChanged handles notifications/tools/list_changed (MCP 2025-11-25 §tools, "List
// Changed Notification") by asking serve to list the tools again.
func (s *server) onToolListChanged(_ context.Context, req *sdk.ToolListChangedRequest) {
	s.mu.Lock()
	current := req.Session == s.session
	s.mu.Unlock()
	if current {
		select {
		case s.relist <- struct{}{}:
		default:
		}
	}
}

// onProgressParams routes notifications/progress (MCP 2025-11-25 §utilities "progress"), as the
// tap reads it, to the call whose token it carries.
func (s *server) onProgressParams(raw json.RawMessage) {
	var p sdk.ProgressNotificationParams
	if json.Unmarshal(raw, &p) == nil {
		s.routeProgress(&p)
	}
}

// onProgress is the SDK's route for the same notifications. It runs later than the tap (see
// tap), so it only matters for a notification the tap missed; pendingCall drops the repeats.
func (s *server) onProgress(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	s.routeProgress(req.Params)
}

func (s *server) routeProgress(p *sdk.ProgressNotificationParams) {
	token, _ := p.ProgressToken.(string)
	s.mu.Lock()
	pc := s.calls[token]
	s.mu.Unlock()
	if pc != nil {
		pc.update(tool.Update{Progress: p.Progress, Total: p.Total, Message: p.Message})
	}
}

// pendingCall guards a call's onUpdate so that no update reaches it after Execute returned, and
// each notification reaches it once: progress must increase with each notification (MCP
// 2025-11-25 §utilities "progress"), so one that does not is a repeat.
type pendingCall struct {
	mu       sync.Mutex
	done     bool
	started  bool
	last     float64
	onUpdate func(tool.Update)
}

func (pc *pendingCall) update(u tool.Update) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.done || pc.onUpdate == nil || (pc.started && u.Progress <= pc.last) {
		return
	}
	pc.started, pc.last = true, u.Progress
	pc.onUpdate(u)
}

func (pc *pendingCall) finish() {
	pc.mu.Lock()
	pc.done = true
	pc.mu.Unlock()
}

// toResult keeps the MCP result's shape (SPEC §13): content, structuredContent, isError. Text
// and image blocks are kept as they are; blocks Countersign cannot show (audio, resources) become
// a text block saying what they were.
func toResult(res *sdk.CallToolResult) (tool.Result, error) {
	r := tool.Result{Content: make([]tool.Content, 0, len(res.Content)), IsError: res.IsError}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			r.Content = append(r.Content, tool.Text(c.Text))
		case *sdk.ImageContent:
			r.Content = append(r.Content, tool.Content{Type: "image",
				Data: base64.StdEncoding.EncodeToString(c.Data), MimeType: c.MIMEType})
		case *sdk.AudioContent:
			r.Content = append(r.Content, tool.Text(fmt.Sprintf("[audio content (%s, %d bytes) not shown]", c.MIMEType, len(c.Data))))
		case *sdk.ResourceLink:
			r.Content = append(r.Content, tool.Text(fmt.Sprintf("[resource link %s: %s]", c.Name, c.URI)))
		case *sdk.EmbeddedResource:
			switch {
			case c.Resource == nil: // the SDK decodes {"type":"resource"} with no resource
				r.Content = append(r.Content, tool.Text("[embedded resource with no contents]"))
			case c.Resource.Text != "":
				r.Content = append(r.Content, tool.Text(c.Resource.Text))
			default:
				r.Content = append(r.Content, tool.Text(fmt.Sprintf("[embedded resource %s (%s, %d bytes) not shown]",
					c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob))))
			}
		default:
			r.Content = append(r.Content, tool.Text(fmt.Sprintf("[content block of type %T not shown]", c)))
		}
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return tool.Result{}, fmt.Errorf("structuredContent: %v", err)
		}
		r.StructuredContent = b
	}
	return r, nil
}

// tail keeps the end of a stdio server's stderr, to explain why it failed.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 512

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailSize; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is the kept stderr on one line, "" if there is none.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(strings.Fields(string(t.buf)), " ")
}

func (t *tail) reset() {
	t.mu.Lock()
	t.buf = nil
	t.mu.Unlock()
}

// version is Countersign's module version, sent as clientInfo.version (MCP 2025-11-25
// §lifecycle, initialize).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}
