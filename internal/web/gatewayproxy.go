package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	csmcp "countersign/internal/mcp"
	"countersign/internal/mcpproxy"
	"countersign/internal/tool"
)

// `countersign mcp-proxy` (SPEC §18 Door 2) runs a stdio server on the client's machine and asks
// here about each call: POST /mcp/decide holds it as the gateway holds its own calls (the same
// gate, match key, deadline and agent session), POST /mcp/outcome takes what the server answered,
// validates it against the tool's outputSchema and records it on the call's card.

// proxyNameRule is what a wrapped server's and its tools' names must match (MCP tool names, and
// "<server>__<tool>" unambiguous).
var proxyNameRule = regexp.MustCompile(`^[A-Za-z0-9.-]+(_[A-Za-z0-9.-]+)*$`)

// maxProxyTools bounds the tool definitions kept for proxies (a token holder could send many).
const maxProxyTools = 4096

// proxyTool is the tool a proxy's call is of: "<server>__<name>", the definition as the wrapped
// server gave it, its schemas compiled, always asking unless a rule allows (its annotations are
// the proxy's word, never believed). Errors: apperr.Invalid for a definition that is not one.
func (g *gateway) proxyTool(server string, raw json.RawMessage) (*tool.Tool, error) {
	sum := sha256.Sum256(append([]byte(server+"\x00"), raw...))
	key := hex.EncodeToString(sum[:])
	g.mu.Lock()
	t, ok := g.proxied[key]
	g.mu.Unlock()
	if ok {
		return t, nil
	}
	d, err := csmcp.DecodeDefinition(raw)
	if err != nil {
		return nil, apperr.Errorf(apperr.Invalid, "tool: not an MCP tool definition: %v", err)
	}
	if !proxyNameRule.MatchString(server) || strings.Contains(server, "__") || len(server) > 60 {
		return nil, apperr.Errorf(apperr.Invalid, "server %q: use letters, digits, '.', '-' and single '_' (at most 60)", server)
	}
	if d.Name == "" || len(d.Name) > 64 || strings.ContainsAny(d.Name, " \t\n/\\") {
		return nil, apperr.Errorf(apperr.Invalid, "tool name %q is not one MCP allows", d.Name)
	}
	if bytes.Equal(bytes.TrimSpace(d.OutputSchema), []byte("null")) {
		d.OutputSchema = nil
	}
	t = &tool.Tool{Name: server + "__" + d.Name, Title: d.Title, Description: d.Description, InputSchema: d.InputSchema,
		OutputSchema: d.OutputSchema, Annotations: d.Annotations, Exposure: tool.Direct, AlwaysAsk: true,
		AskReason: "server " + server + " runs behind mcp-proxy and is not trusted",
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{}, errors.New("this tool runs in countersign mcp-proxy, not here")
		}}
	// A registry of its own compiles the schemas (and refuses what tool.Registry refuses).
	if err := tool.NewRegistry().Register(t); err != nil {
		return nil, apperr.Errorf(apperr.Invalid, "tool %s: %v", t.Name, err)
	}
	g.mu.Lock()
	if len(g.proxied) >= maxProxyTools {
		clear(g.proxied)
	}
	g.proxied[key] = t
	g.mu.Unlock()
	return t, nil
}

// keepProxied makes t the latest definition of its name in agent session sessionID, the one
// /mcp/outcome validates that session's calls' results against (proxiedIn).
func (g *gateway) keepProxied(sessionID string, t *tool.Tool) {
	g.mu.Lock()
	if len(g.proxiedName) >= maxProxyTools {
		clear(g.proxiedName)
	}
	g.proxiedName[sessionID+"\x00"+t.Name] = t
	g.mu.Unlock()
}

// proxiedIn is the latest definition of tool name that agent session sessionID's proxy sent
// (keepProxied); nil when this process has none.
func (g *gateway) proxiedIn(sessionID, name string) *tool.Tool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.proxiedName[sessionID+"\x00"+name]
}

// mcpConnection is the mcp connection r's bearer token names; apperr.Unauthorized otherwise
// (the reason, never the token).
func (s *Server) mcpConnection(r *http.Request) (string, error) {
	return s.agentConnection(r, gate.GatewayAgent)
}

// gatewayTimeout is the request's client timeout: ?timeout= or the Countersign-Hook-Timeout
// header, else defaultGatewayTimeout.
func gatewayTimeout(r *http.Request) (time.Duration, error) {
	if r.URL.Query().Get("timeout") == "" && r.Header.Get(HeaderHookTimeout) == "" {
		return defaultGatewayTimeout, nil
	}
	return hookTimeout(r)
}

// readStrict decodes r's JSON body into v: unknown fields, trailing data and a body over the
// limit are refused (apperr.Invalid, apperr.TooLarge).
func readStrict(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return apperr.Errorf(apperr.TooLarge, "the body is over the limit")
		}
		return apperr.Errorf(apperr.Invalid, "the body could not be read: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apperr.Errorf(apperr.Invalid, "the body is not the expected JSON: %v", err)
	}
	if dec.More() {
		return apperr.Errorf(apperr.Invalid, "the body has data after its JSON value")
	}
	return nil
}

// proxySession is the agent session id of a proxy's client session.
func proxySession(id string) (string, error) {
	if id == "" || len(id) > 128 {
		return "", apperr.Errorf(apperr.Invalid, "sessionId: 1 to 128 characters")
	}
	return "proxy:" + id, nil
}

// mcpDecide is POST /mcp/decide (mcpproxy.DecideRequest → mcpproxy.Decision).
func (s *Server) mcpDecide(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	connID, err := s.mcpConnection(r)
	if err != nil {
		return err
	}
	timeout, err := gatewayTimeout(r)
	if err != nil {
		return err
	}
	var req mcpproxy.DecideRequest
	if err := readStrict(r, &req); err != nil {
		return err
	}
	sid, err := proxySession(req.SessionID)
	if err != nil {
		return err
	}
	g := s.gateway
	t, err := g.proxyTool(req.Server, req.Tool)
	if err != nil {
		return err
	}
	args := req.Arguments
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	if vs := t.ValidateInput(args); len(vs) > 0 {
		writeJSON(w, http.StatusOK, mcpproxy.Decision{Decision: mcpproxy.Deny, Reason: tool.InvalidArguments(t.Name, vs, args).TextOf()})
		return nil
	}
	args = compactJSON(args)
	sess, err := s.gatewaySession(ctx, connID, sid, req.ClientInfo.Name, req.ClientInfo.Version)
	if err != nil {
		return err
	}
	g.keepProxied(sess.ID, t)
	info := gatewayInfo{connectionID: connID, timeout: timeout, base: s.baseURL(r)}
	noProgress := func(string) func() { return func() {} }
	// Stored before the answer (not queued): the proxy reports the allowed call's outcome in a
	// second request, which another replica may serve (SPEC §16), where the call must be found.
	v, url, ref, err := g.decide(ctx, sess, t, args, info, noProgress, false)
	if err != nil {
		return err
	}
	d := mcpproxy.Decision{ApprovalID: v.Approval.ID, URL: url}
	switch v.Outcome {
	case gate.Allowed:
		d.Decision, d.Reason, d.Arguments = mcpproxy.Allow, v.Reason, args
		if len(v.EditedInput) > 0 {
			d.Arguments = v.EditedInput
		}
		g.taken(sess.ID, ref)
	case gate.Blocked:
		d.Decision, d.Reason = mcpproxy.Deny, v.Reason
		g.consumed(ctx, sess.ID, ref, v.Approval, tool.ErrorResult("%s", v.Reason), true)
	default:
		d.Decision, d.Reason = mcpproxy.Wait, waitingText(url)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, d)
	return nil
}

// mcpOutcome is POST /mcp/outcome (mcpproxy.OutcomeRequest → mcpproxy.Outcome): the result of an
// allowed call of this connection's proxy session, once. Errors: 404 for an approval that is not
// the session's, 409 for one not answered allow or already reported.
func (s *Server) mcpOutcome(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	connID, err := s.mcpConnection(r)
	if err != nil {
		return err
	}
	var req mcpproxy.OutcomeRequest
	if err := readStrict(r, &req); err != nil {
		return err
	}
	sid, err := proxySession(req.SessionID)
	if err != nil {
		return err
	}
	sess, err := s.agents.AgentSession(ctx, connID, sid)
	if err != nil {
		return err
	}
	// The call's record is stored before /mcp/decide answers allow (decide's queue false), on
	// whichever replica answered: it is found here.
	a, err := s.cfg.Store.Approval(ctx, req.ApprovalID)
	if err != nil || a.SessionID != sess.ID {
		return apperr.Errorf(apperr.NotFound, "no call %q in this session", req.ApprovalID)
	}
	oc, err := s.agents.OutsideCall(ctx, a.ID)
	if err != nil {
		return err
	}
	// Only a call /mcp/decide answered allow: a person's decision taken (claimed) by it, or one
	// decided at once. An approval id the proxy learnt from a wait answer does not let it report
	// an outcome of a call it was never allowed (and so use the decision up) without asking again.
	if a.Status != gate.Approved || oc.Outcome != nil || oc.ClaimedAt == nil && !decidedAtOnce(a) {
		return apperr.Errorf(apperr.Conflict, "call %s was not allowed, or its outcome is already reported", a.ID)
	}
	var res tool.Result
	var rerr error
	if req.Error != "" {
		rerr = errors.New(req.Error)
	} else if err := json.Unmarshal(req.Result, &res); err != nil {
		rerr = errors.New("the wrapped server's result is not an MCP CallToolResult: " + err.Error())
	}
	t := s.gateway.proxiedIn(sess.ID, a.ToolName)
	var final tool.Result
	if t == nil {
		final = tool.ErrorResult("Countersign no longer knows tool %s's outputSchema (it restarted): the result is not passed on unvalidated", a.ToolName)
	} else {
		final = t.Finalize(res, rerr)
	}
	// Stored before the answer (not queued), so a second report of the same call finds it.
	if err := s.cfg.Runner.RecordAgentOutcome(context.WithoutCancel(ctx), a, final, gatewayOutcome(final, false)); err != nil {
		return err
	}
	out, err := json.Marshal(toCallResult(final))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, mcpproxy.Outcome{Result: out})
	return nil
}
