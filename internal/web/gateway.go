package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	csmcp "countersign/internal/mcp"
	"countersign/internal/tool"
)

// Door 2 (SPEC §18): an MCP gateway. Countersign serves MCP at /mcp (Streamable HTTP, the
// official go-sdk: revisions 2025-11-25 and 2026-07-28) and offers the tools of the upstream
// servers of -mcp-config ("<server>__<tool>", SPEC §13) with their inputSchema, outputSchema,
// title and annotations. Each tools/call is an outside call of the client's agent session
// (gate.Service.DecideOutside, with the upstream tool: rules on "<server>__<tool>", modes,
// approvers, untrusted annotations asking): allowed, it runs upstream (the tool's Execute) and
// its result, validated against outputSchema (SPEC §1), is the answer; denied, an isError
// result with the reason; held past the deadline, an isError result naming where to approve
// it, and the same call repeated finds the decision, once.

// Gateway timings and limits (SPEC §18 Door 2).
const (
	// defaultGatewayTimeout is the client's timeout when the request does not say
	// (?timeout=<seconds> or the Countersign-Hook-Timeout header): answered hookMargin before
	// it, at 55 s, before the 60 s most MCP clients give a request.
	defaultGatewayTimeout = 60 * time.Second
	// defaultGatewayProgress is how often a held call sends notifications/progress when the
	// client gave a progressToken.
	defaultGatewayProgress = 15 * time.Second
	// gatewayMaxBody bounds a POSTed JSON-RPC message (the go-sdk answers 413 over it).
	gatewayMaxBody = 1 << 20
	// statelessRevision is the first MCP revision without sessions (2026-07-28, SEP-2575 and
	// SEP-2567): a request that names it or a later one is served statelessly.
	statelessRevision = "2026-07-28"
)

// gateway is the /mcp endpoint: one go-sdk server for every client (the tools are the same for
// all; each call finds its connection in its request's TokenInfo and its agent session from its
// MCP session), kept in step with the upstream tools (sync).
type gateway struct {
	s       *Server
	srv     *sdk.Server
	handler http.Handler // sessions: revisions up to 2025-11-25
	// stateless serves requests of revision 2026-07-28 and later (Mcp-Protocol-Version), which
	// has no sessions: each POST is a whole request, its clientInfo in its _meta.
	stateless http.Handler
	every     time.Duration // progress interval

	mu      sync.Mutex
	offered map[string]*tool.Tool // the tools the server offers, by name
	// proxied are the tools of mcp-proxy's wrapped servers (proxyTool), by digest of their
	// definition; proxiedName the latest of each name in each proxy's agent session (keepProxied):
	// a call's outcome is validated against its own proxy's definition, never another's.
	proxied, proxiedName map[string]*tool.Tool

	genMu sync.Mutex
	gens  map[string]int // session + call digest → the generation of its match key (callRef)

	// sessions are the agent sessions calls were made in, by connection and MCP session id
	// (gatewaySession): read once, not on every call. A session deleted (here or on another
	// replica) fails the next call's record (apperr.NotFound) before anything runs; the call is
	// then made again in a new session. Its mode is never taken from here: Runner.GateSession
	// reads the mode switches of every replica.
	sessMu   sync.Mutex
	sessions map[string]agent.Session
}

// maxGatewaySessions bounds gateway.sessions; past it they are forgotten and read again.
const maxGatewaySessions = 10_000

// gatewayInfo is what the HTTP edge passes, through the go-sdk's TokenInfo, to a call's handler.
type gatewayInfo struct {
	connectionID string
	timeout      time.Duration
	base         string // Countersign's address as the client reached it, for approval URLs
}

const gatewayInfoKey = "countersign"

func newGateway(s *Server) *gateway {
	g := &gateway{s: s, offered: map[string]*tool.Tool{}, proxied: map[string]*tool.Tool{}, proxiedName: map[string]*tool.Tool{}, gens: map[string]int{}, sessions: map[string]agent.Session{}, every: s.cfg.GatewayProgressEvery}
	if g.every <= 0 {
		g.every = defaultGatewayProgress
	}
	g.srv = sdk.NewServer(&sdk.Implementation{Name: "countersign", Title: "Countersign", Version: "1"},
		&sdk.ServerOptions{
			Logger:       discardLogger(),
			Instructions: "Every tools/call is countersigned: a call that needs a person's approval may answer that it waits for approval at a URL; call it again once approved.",
			Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
		})
	g.handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return g.srv }, &sdk.StreamableHTTPOptions{
		// Clients authenticate by bearer token on every request, so a rebinding page cannot
		// speak for them; behind a reverse proxy on the same machine the Host is the public one.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        gatewayMaxBody,
		Logger:                     discardLogger(),
	})
	g.stateless = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return g.srv }, &sdk.StreamableHTTPOptions{
		Stateless:                  true,
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        gatewayMaxBody,
		// The client hanging up ends the call's wait (and cancels its approval).
		PropagateRequestCancellation: true,
		Logger:                       discardLogger(),
	})
	g.sync()
	return g
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// GatewayToolsChanged offers /mcp's clients the tools Config.GatewayTools gives now: new and
// changed tools are added, gone ones removed, and the go-sdk tells every session
// (notifications/tools/list_changed). cmd/web calls it from the MCP Manager's OnChange.
func (s *Server) GatewayToolsChanged() { s.gateway.sync() }

func (g *gateway) sync() {
	var now []*tool.Tool
	if g.s.cfg.GatewayTools != nil {
		now = g.s.cfg.GatewayTools()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	for _, t := range now {
		seen[t.Name] = true
		if g.offered[t.Name] == t {
			continue
		}
		if err := g.add(t); err != nil {
			g.s.log.Warn("MCP gateway: a tool is not offered", "tool", t.Name, "err", err)
			continue
		}
		g.offered[t.Name] = t
	}
	var gone []string
	for name := range g.offered {
		if !seen[name] {
			gone = append(gone, name)
			delete(g.offered, name)
		}
	}
	if len(gone) > 0 {
		g.srv.RemoveTools(gone...)
	}
}

// add offers t (the go-sdk panics on a schema it refuses: that tool is not offered).
func (g *gateway) add(t *tool.Tool) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	st := &sdk.Tool{Name: t.Name, Title: t.Title, Description: t.Description, InputSchema: t.InputSchema}
	if len(t.OutputSchema) > 0 {
		st.OutputSchema = t.OutputSchema
	}
	// The upstream's annotations as it gave them (SPEC §13: shown, believed only for a trusted
	// server; the gate asks for every call of an untrusted server's tool, tool.AlwaysAsk).
	a := t.Annotations
	if a.ReadOnlyHint != nil || a.DestructiveHint != nil || a.IdempotentHint != nil || a.OpenWorldHint != nil {
		st.Annotations = &sdk.ToolAnnotations{DestructiveHint: a.DestructiveHint, OpenWorldHint: a.OpenWorldHint,
			ReadOnlyHint: a.ReadOnlyHint != nil && *a.ReadOnlyHint, IdempotentHint: a.IdempotentHint != nil && *a.IdempotentHint}
	}
	g.srv.AddTool(st, g.call(t))
	return nil
}

// mcpEndpoint is GET, POST and DELETE /mcp (SPEC §18 Door 2): a connection of kind mcp's bearer
// token admits the request (401 otherwise, with the reason, never the token), then the go-sdk
// serves it: a malformed JSON-RPC message is its 400 or JSON-RPC error, an unknown tool -32602,
// a body over 1 MiB 413.
func (s *Server) mcpEndpoint(w http.ResponseWriter, r *http.Request) error {
	connID, err := s.mcpConnection(r)
	if err != nil {
		return err
	}
	timeout, err := gatewayTimeout(r)
	if err != nil {
		return err
	}
	info := &auth.TokenInfo{UserID: connID, Expiration: time.Now().Add(time.Hour),
		Extra: map[string]any{gatewayInfoKey: gatewayInfo{connectionID: connID, timeout: timeout, base: s.baseURL(r)}}}
	// The go-sdk reads the connection from TokenInfo: a session made by one connection is
	// refused to another (its UserID check), and each call's handler knows its connection.
	verified := func(context.Context, string, *http.Request) (*auth.TokenInfo, error) { return info, nil }
	h := s.gateway.handler
	if v := r.Header.Get("Mcp-Protocol-Version"); v >= statelessRevision {
		h = s.gateway.stateless
	}
	auth.RequireBearerToken(verified, nil)(h).ServeHTTP(w, r)
	return nil
}

// call is the go-sdk handler of tools/call for t.
func (g *gateway) call(t *tool.Tool) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var info gatewayInfo
		if req.Extra != nil && req.Extra.TokenInfo != nil {
			info, _ = req.Extra.TokenInfo.Extra[gatewayInfoKey].(gatewayInfo)
		}
		if info.connectionID == "" {
			return errorResult("Unauthorized: the call came without a connection"), nil
		}
		args := req.Params.Arguments
		if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
			args = json.RawMessage("{}")
		}
		// Bad input never asks a person and never runs (SPEC §1 "Arguments", §9).
		if vs := t.ValidateInput(args); len(vs) > 0 {
			return toCallResult(tool.InvalidArguments(t.Name, vs, args)), nil
		}
		args = compactJSON(args)
		name, version := "", ""
		if client := req.ClientInfo(); client != nil {
			name, version = client.Name, client.Version
		}
		sid := ""
		if req.Session != nil {
			sid = req.Session.ID()
		}
		progress := func(message string) (stop func()) { return g.progress(ctx, req, message) }
		sess, cached, err := g.session(ctx, info.connectionID, sid, name, version)
		if err != nil {
			return nil, err
		}
		v, url, ref, err := g.decide(ctx, sess, t, args, info, progress, true)
		if err != nil {
			g.forgetSession(info.connectionID, sid, name)
		}
		if apperr.CodeOf(err) == apperr.NotFound && cached {
			// The session was deleted since it was read (nothing was recorded or run): the
			// call goes into a new one.
			if sess, _, err = g.session(ctx, info.connectionID, sid, name, version); err != nil {
				return nil, err
			}
			v, url, ref, err = g.decide(ctx, sess, t, args, info, progress, true)
		}
		if err != nil {
			return nil, err
		}
		switch v.Outcome {
		case gate.Blocked:
			res := tool.ErrorResult("%s", v.Reason)
			g.consumed(ctx, sess.ID, ref, v.Approval, res, true)
			return toCallResult(res), nil
		case gate.Asked:
			return errorResult(waitingText(url)), nil
		}
		run := args
		if len(v.EditedInput) > 0 {
			run = v.EditedInput
		}
		res := t.Finalize(t.Execute(ctx, run, g.forwardProgress(ctx, req), nil))
		g.consumed(ctx, sess.ID, ref, v.Approval, res, false)
		return toCallResult(res), nil
	}
}

// waitingText is the answer to a call held past its deadline (SPEC §18 Door 2).
func waitingText(url string) string {
	return "Waiting for approval at " + url + "; call again once it is approved"
}

// decide passes a call of t with args (valid, compact) in agent session sess through the gate
// (gate.Service.DecideOutside: an outside call of t, matched by tool and arguments within the
// session, held until info's deadline); progress, while it is held, sends "waiting for
// approval: <url>". queue says a call a rule, the mode or a default decided may be recorded
// after the answer (agent.Runner.QueueAgentCall): not for mcp-proxy, whose allowed call's outcome
// comes in a later request (/mcp/outcome) that any replica may serve, and must find the call
// stored there. It returns the verdict, the URL where the call is approved, and the call's match
// key it was asked under (for consumed). Errors: the gate's and the store's.
func (g *gateway) decide(ctx context.Context, sess agent.Session, t *tool.Tool, args json.RawMessage, info gatewayInfo,
	progress func(message string) (stop func()), queue bool) (gate.OutsideVerdict, string, callRef, error) {
	digest := callDigest(t.Name, args)
	ref, err := g.ref(ctx, sess.ID, digest)
	if err != nil {
		return gate.OutsideVerdict{}, "", callRef{}, err
	}
	url := info.base + "/sessions/" + sess.ID
	deadline := hookDeadline(time.Now(), info.timeout)
	stopProgress := progress("waiting for approval: " + url)
	defer stopProgress()
	for {
		// The session as of now, each time: a call asked anew after another request took its
		// decision is judged in the mode the session has then (a switch while it was held applies).
		gs := g.s.cfg.Runner.GateSession(sess)
		v, queued, err := g.decideAs(ctx, sess, gs, t, args, ref, deadline, queue)
		ref.queued = queued
		if err != nil || v.Outcome == gate.Asked {
			return v, url, ref, err
		}
		used, err := g.claimed(ctx, sess.ID, v.Approval)
		if err != nil {
			return gate.OutsideVerdict{}, "", callRef{}, err
		}
		if !used {
			return v, url, ref, nil
		}
		// Another request used this decision since this one learnt its generation (another
		// replica, or the same call in flight twice): it is used, and the call is asked as the
		// next generation.
		g.taken(sess.ID, ref)
		if ref, err = g.ref(ctx, sess.ID, digest); err != nil {
			return gate.OutsideVerdict{}, "", callRef{}, err
		}
	}
}

// decideAs passes the call through the gate as generation ref (decide); queued says a call
// decided without a person is recorded after the answer, its outcome then too (consumed).
func (g *gateway) decideAs(ctx context.Context, sess agent.Session, gs gate.SessionInfo, t *tool.Tool, args json.RawMessage,
	ref callRef, deadline time.Time, queue bool) (_ gate.OutsideVerdict, queued bool, _ error) {
	// A call a rule, the mode or a default decided is recorded after the answer (Later: issue 35,
	// no commit on the answer's path) — unless a record queued so was refused by the store: then
	// it is stored first, and a store that refuses it fails the call. One that asks a person is
	// stored before it is shown.
	later := queue && g.s.cfg.Runner.AgentRecordsQueued()
	oreq := gate.OutsideRequest{SessionID: sess.ID, Event: gate.EventToolsCall, ToolName: t.Name, Input: args, Session: &gs,
		MatchKey: ref.key(), Looked: ref.looked, Prev: ref.prev, Deadline: deadline, Tool: t, CancelOnHangUp: true, CallsAgain: true, Later: later}
	oreq.Record = func(ctx context.Context, callID string, decided *gate.OutsideDecided) (string, error) {
		m := agent.Message{Role: agent.Assistant, StopReason: agent.ToolUse,
			Model: sess.Model, Content: []agent.Block{{Type: "toolCall", ID: callID, Name: t.Name, Arguments: args}}}
		if decided != nil && later {
			return g.s.cfg.Runner.QueueAgentCall(sess, m, *decided, g.lost(sess.ID)).ID, nil
		}
		m, err := g.s.cfg.Runner.RecordAgentCall(ctx, sess, m, decided)
		return m.ID, err
	}
	v, err := g.s.cfg.Gate.DecideOutside(ctx, oreq)
	return v, later, err
}

// claimed takes a, the decision a call was given, to run or refuse the call now, and reports
// whether it was used already: taken by another request (another replica, SPEC §16, or the same
// call in flight twice on one decision: both are given it, one runs) or its call has an outcome.
// One conditional update in the store (ClaimOutsideCall), so a decision is used once. A decision
// made for this call now (by a rule, the mode or a default when asked, its record perhaps still
// queued) is this request's alone and is not claimed.
func (g *gateway) claimed(ctx context.Context, sessionID string, a gate.Approval) (used bool, err error) {
	if a.ID == "" || decidedAtOnce(a) {
		return false, nil
	}
	ok, err := g.s.agents.ClaimOutsideCall(ctx, sessionID, a.ID, time.Now())
	return !ok, err
}

// progress sends notifications/progress every g.every while a call is held, when the client gave
// a progressToken (mcp.HoldProgress); the returned func stops it and waits.
func (g *gateway) progress(ctx context.Context, req *sdk.CallToolRequest, message string) (stop func()) {
	return csmcp.HoldProgress(ctx, req, g.every, message)
}

// forwardProgress passes the upstream's progress on to the client, when it gave a progressToken.
func (g *gateway) forwardProgress(ctx context.Context, req *sdk.CallToolRequest) func(tool.Update) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	return func(u tool.Update) {
		_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: u.Progress, Total: u.Total, Message: u.Message})
	}
}

// callRef names a call by its digest and the generation of its match key (key).
type callRef struct {
	digest string // callDigest; "" names no call
	gen    int
	// queued says the call, when no person decided it, was recorded after its answer (decide):
	// its outcome is too, behind it, whatever the log says since (a store that hangs now does
	// not hold the answer of a call that ran).
	queued bool
	// looked says ref has just read the generation's call in the store: prev, nil for none
	// (passed to the gate, gate.OutsideRequest.Looked, so it does not read it again).
	looked bool
	prev   *gate.OutsideCall
}

// key is the call's match key: the generation first, so the call id the gate makes of it (its
// first characters) differs between generations.
func (c callRef) key() string { return "g" + strconv.Itoa(c.gen) + "-" + c.digest }

// ref is the call with digest in agent session sessionID as asked now: its generation moves on
// each time a decision is used (taken), so the same call repeated after its deadline finds the
// decision, once, and the one after that asks again. The generation is found in the store when
// this process does not know it: the first whose outside call has no outcome yet, was not taken
// (claimed) and was not decided when it was asked (usedAtOnce).
func (g *gateway) ref(ctx context.Context, sessionID, digest string) (callRef, error) {
	id := sessionID + "\x00" + digest
	g.genMu.Lock()
	n, ok := g.gens[id]
	g.genMu.Unlock()
	if ok {
		return callRef{digest: digest, gen: n}, nil
	}
	var prev *gate.OutsideCall // the call of generation n, as read now; nil: none
	for ; ; n++ {
		c, err := g.s.agents.OutsideCallByKey(ctx, sessionID, callRef{digest: digest, gen: n}.key())
		if apperr.CodeOf(err) == apperr.NotFound {
			break
		}
		if err != nil {
			return callRef{}, err
		}
		if c.Outcome == nil && c.ClaimedAt == nil {
			used, err := g.usedAtOnce(ctx, c)
			if err != nil {
				return callRef{}, err
			}
			if !used {
				prev = &c
				break
			}
		}
	}
	g.genMu.Lock()
	defer g.genMu.Unlock()
	if cur, ok := g.gens[id]; ok && cur > n {
		// Another request moved the call on meanwhile: what was read is not this generation's.
		return callRef{digest: digest, gen: cur}, nil
	}
	g.keep(id, n)
	return callRef{digest: digest, gen: n, looked: true, prev: prev}, nil
}

// usedAtOnce reports whether outside call c was decided without a person when it was asked (a
// rule, the mode or a default: gate.Gate.Automatic's stamp, decided at its creation), so its
// decision was used then — run or blocked in the same request — even while its outcome is still
// queued on the replica that ran it (agent.Runner.QueueAgentOutcome): a repeat of the call never
// takes that decision again. A call a rule released after it was asked is not (a person's
// call repeated after its deadline finds it).
func (g *gateway) usedAtOnce(ctx context.Context, c gate.OutsideCall) (bool, error) {
	a, err := g.s.cfg.Store.Approval(ctx, c.ApprovalID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return decidedAtOnce(a), nil
}

// decidedAtOnce reports whether approval a was decided without a person when its call was asked
// (a rule, the mode or a default: gate.Gate.Automatic's stamp, decided at its creation): its
// decision is its request's alone, used there and never claimed (claimed).
func decidedAtOnce(a gate.Approval) bool {
	return a.Automatic && a.DecidedAt != nil && a.DecidedAt.Equal(a.CreatedAt)
}

// maxGens bounds the generations kept in memory; past it they are forgotten and found again in
// the store (ref) as calls come.
const maxGens = 100_000

// keep sets id's generation to n (g.genMu held), forgetting every other first when full.
func (g *gateway) keep(id string, n int) {
	if _, ok := g.gens[id]; !ok && len(g.gens) >= maxGens {
		clear(g.gens)
	}
	g.gens[id] = n
}

// taken moves call ref of session sessionID on: its decision is used, the next call asks anew.
func (g *gateway) taken(sessionID string, ref callRef) {
	id := sessionID + "\x00" + ref.digest
	g.genMu.Lock()
	if cur, ok := g.gens[id]; !ok || cur <= ref.gen {
		g.keep(id, ref.gen+1)
	}
	g.genMu.Unlock()
}

// consumed records what became of a decided call (the upstream's result, or that it never ran)
// on its outside call and its card (SPEC §18 "Outcomes"), and moves the call's key on (key). The
// outcome of a call decided without a person is queued, to be stored after the answer behind the
// call's own record (issue 35); a person's call's is stored before consumed returns.
func (g *gateway) consumed(ctx context.Context, sessionID string, ref callRef, a gate.Approval, res tool.Result, neverRan bool) {
	if ref.digest != "" {
		g.taken(sessionID, ref)
	}
	if a.ID == "" {
		return
	}
	outcome := gatewayOutcome(res, neverRan)
	if a.Automatic && ref.queued {
		// Decided without a person: recorded after the answer, behind the call's own record.
		g.s.cfg.Runner.QueueAgentOutcome(a, res, outcome, g.lost(sessionID))
		return
	}
	if err := g.s.cfg.Runner.RecordAgentOutcome(context.WithoutCancel(ctx), a, res, outcome); err != nil {
		g.s.log.Error("MCP gateway: record a result", "approval", a.ID, "err", err)
	}
}

// gatewayOutcome is the outcome stored on a gateway call's outside call: its result as MCP shapes
// it, and whether it never ran.
func gatewayOutcome(res tool.Result, neverRan bool) json.RawMessage {
	outcome, _ := json.Marshal(map[string]any{"content": res.Content, "structuredContent": res.StructuredContent,
		"isError": res.IsError, "neverRan": neverRan})
	return outcome
}

// lost is told of a queued record of agent session sessionID that could not be stored
// (agent.Runner.QueueAgentCall): when the session is gone, the next call of its client makes a
// new one. Known gap: a session deleted on another replica is forgotten here when its deletion
// is relayed (agent.Runner.OnSessionDeleted); a call a rule allows in the relay's lag before
// that runs, and its record, refused, is only logged.
func (g *gateway) lost(sessionID string) func(error) {
	return func(err error) {
		if apperr.CodeOf(err) == apperr.NotFound {
			g.forgetSessionID(sessionID)
		}
	}
}

// callDigest is the hex SHA-256 of the tool's name and its arguments (compact JSON).
func callDigest(name string, args json.RawMessage) string {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(args)
	return hex.EncodeToString(h.Sum(nil))
}

// compactJSON is raw re-encoded (objects' members sorted, no HTML escaping, numbers as written),
// so the same arguments spelled otherwise make the same digest; raw when it is not one JSON
// value. It is also what the upstream is called with: a number is never rounded to a float64
// (9007199254740993 stays itself).
func compactJSON(raw json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return raw
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return raw
	}
	return json.RawMessage(bytes.TrimSpace(buf.Bytes()))
}

// gatewaySessionKey is connection connID's MCP session sid's key in gateway.sessions: its agent
// session id as gatewaySession names it.
func gatewaySessionKey(connID, sid, name string) string {
	_, sid, _ = agentSessionName(sid, name, "")
	return connID + "\x00" + sid
}

// agentSessionName is the client's name and version as a session's title shows them ("MCP
// client" when it gave no name) and its agent session id: the MCP session id, or for a stateless
// client (sid "") "client:" and its name.
func agentSessionName(sid, name, version string) (string, string, string) {
	if strings.TrimSpace(name) == "" {
		name, version = "MCP client", ""
	}
	if sid == "" {
		sid = "client:" + name
	}
	return name, sid, version
}

// session is gatewaySession, read once per connection and MCP session (gateway.sessions);
// cached says it was not read now.
func (g *gateway) session(ctx context.Context, connID, sid, name, version string) (_ agent.Session, cached bool, _ error) {
	key := gatewaySessionKey(connID, sid, name)
	g.sessMu.Lock()
	sess, ok := g.sessions[key]
	g.sessMu.Unlock()
	if ok {
		return sess, true, nil
	}
	sess, err := g.s.gatewaySession(ctx, connID, sid, name, version)
	if err != nil {
		return sess, false, err
	}
	g.sessMu.Lock()
	if len(g.sessions) >= maxGatewaySessions {
		clear(g.sessions)
	}
	g.sessions[key] = sess
	g.sessMu.Unlock()
	return sess, false, nil
}

// forgetSession drops connection connID's MCP session sid from gateway.sessions (after a call in
// it failed: the session may be gone).
func (g *gateway) forgetSession(connID, sid, name string) {
	g.sessMu.Lock()
	delete(g.sessions, gatewaySessionKey(connID, sid, name))
	g.sessMu.Unlock()
}

// forgetSessionID drops agent session id from gateway.sessions: it was deleted
// (agent.Runner.OnSessionDeleted), and the next call of its client makes a new one.
func (g *gateway) forgetSessionID(id string) {
	g.sessMu.Lock()
	for k, sess := range g.sessions {
		if sess.ID == id {
			delete(g.sessions, k)
		}
	}
	g.sessMu.Unlock()
}

// gatewaySession finds connection connID's agent session sid (the call's MCP session id; for a
// stateless client, "" and its clientInfo name), or creates it: titled with the client's
// clientInfo name and version (SPEC §18: "the client's clientInfo is shown as provenance").
func (s *Server) gatewaySession(ctx context.Context, connID, sid, name, version string) (agent.Session, error) {
	name, sid, version = agentSessionName(sid, name, version)
	sess, err := s.agents.AgentSession(ctx, connID, sid)
	if apperr.CodeOf(err) != apperr.NotFound {
		return sess, err
	}
	title := strings.TrimSpace(name + " " + version)
	if len(title) > 120 {
		title = title[:120]
	}
	info := agent.AgentInfo{Kind: gate.GatewayAgent, ConnectionID: connID, SessionID: sid, State: agent.AgentWorking}
	ns := agent.Session{ID: gate.NewID(), Title: title + " · MCP", Model: "mcp", State: agent.Idle,
		Mode: s.cfg.Gate.DefaultMode(), Agent: &info}
	err = s.agents.CreateSession(ctx, ns)
	if apperr.CodeOf(err) == apperr.Conflict {
		return s.agents.AgentSession(ctx, connID, sid)
	}
	if err != nil {
		return agent.Session{}, err
	}
	sess, err = s.agents.AgentSession(ctx, connID, sid)
	if err == nil {
		s.cfg.Runner.AgentSessionChanged(ctx, sess.ID)
	}
	return sess, err
}

// errorResult is an isError result with one text block.
func errorResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, IsError: true}
}

// toCallResult is res in MCP's shape (content, structuredContent, isError).
func toCallResult(res tool.Result) *sdk.CallToolResult {
	out := &sdk.CallToolResult{Content: []sdk.Content{}, IsError: res.IsError}
	for _, c := range res.Content {
		switch c.Type {
		case "image":
			data, err := base64.StdEncoding.DecodeString(c.Data)
			if err == nil {
				out.Content = append(out.Content, &sdk.ImageContent{Data: data, MIMEType: c.MimeType})
				continue
			}
			out.Content = append(out.Content, &sdk.TextContent{Text: "[an image that could not be decoded]"})
		default:
			out.Content = append(out.Content, &sdk.TextContent{Text: c.Text})
		}
	}
	if len(res.StructuredContent) > 0 && !res.IsError {
		out.StructuredContent = json.RawMessage(res.StructuredContent)
	}
	return out
}
