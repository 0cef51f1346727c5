package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"countersign/internal/aap"
	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/web/templates"
)

// Door 3 (SPEC §18): the Agent Approval Protocol v1 under /aap — POST /aap/v1/requests, GET and
// DELETE /aap/v1/requests/{id} — for agents built on SDKs. An instance is a connection of kind
// api; its token is the instance credential. The lifecycle is internal/aap's Service; this file
// is the HTTP side: the credential, the body, the agent session a request lands in, and every
// answer in the protocol's shape (ErrorResponse, X-Request-ID).

// aapKind is the connection kind of an AAP instance (SPEC §18).
const aapKind = "api"

// aapDefaultSession is the agent session id of an instance's requests that name none in
// context.session_id.
const aapDefaultSession = "aap"

// aapAPI wraps an AAP handler: every answer carries X-Request-ID (a UUID naming the exchange,
// AAP v1 §5 "Errors") and Cache-Control: no-store; the body is bounded by aap.MaxBodyBytes (413
// beyond); errors are answered as ErrorResponse (writeAAPError).
func (s *Server) aapAPI(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := aap.NewUUID()
		w.Header().Set("X-Request-ID", id)
		w.Header().Set("Cache-Control", "no-store")
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, aap.MaxBodyBytes)
		}
		if err := h(w, r); err != nil {
			s.writeAAPError(w, r, id, err)
		}
	})
}

// writeAAPError answers err as an ErrorResponse (AAP v1 §5 "Errors"): an *aap.Error as it is;
// apperr codes by their meaning; anything else 500 internal with no detail (logged here).
func (s *Server) writeAAPError(w http.ResponseWriter, r *http.Request, requestID string, err error) {
	var e *aap.Error
	if !errors.As(err, &e) {
		switch apperr.CodeOf(err) {
		case apperr.Unauthorized:
			e = aap.Errorf(http.StatusUnauthorized, "invalid_credential", "%s", apperr.MessageOf(err))
		case apperr.NotFound:
			e = aap.Errorf(http.StatusNotFound, "not_found", "The resource is unavailable.")
		case apperr.TooLarge:
			e = aap.Errorf(http.StatusRequestEntityTooLarge, "request_too_large", "The body is over the limit of %d bytes.", aap.MaxBodyBytes)
		case apperr.Invalid:
			e = aap.Errorf(http.StatusBadRequest, "invalid_request", "%s", apperr.MessageOf(err))
		case apperr.MethodNotAllowed:
			e = aap.Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s", apperr.MessageOf(err))
		case apperr.Conflict:
			e = aap.Errorf(http.StatusConflict, "conflict", "%s", apperr.MessageOf(err))
		default:
			s.log.Error("aap request failed", "method", r.Method, "path", r.URL.Path, "request_id", requestID, "err", err)
			e = aap.Errorf(http.StatusInternalServerError, "internal_error", "The provider could not complete the operation.")
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(aap.ErrorBody(e, requestID))
}

// writeAAP answers v as JSON with status.
func writeAAP(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return nil
}

// aapInstance is the connection the request's instance credential names (Authorization: Bearer
// <the api connection's token>): 401 authentication for none, an unknown, revoked or other kind's
// token, with a reason that never holds the token.
func (s *Server) aapInstance(r *http.Request) (string, error) {
	if s.cfg.AAP == nil || s.cfg.AgentAuth == nil {
		return "", aap.Errorf(http.StatusNotFound, "not_found", "This server offers no approval API.")
	}
	token := bearer(r)
	if token == "" {
		return "", aap.Errorf(http.StatusUnauthorized, "missing_credential", "Send Authorization: Bearer <the instance credential>.")
	}
	connID, err := s.cfg.AgentAuth(r.Context(), token, aapKind)
	switch apperr.CodeOf(err) {
	case "":
		return connID, nil
	case apperr.Unauthorized:
		return "", aap.Errorf(http.StatusUnauthorized, "invalid_credential", "%s", apperr.MessageOf(err))
	case apperr.Internal:
		return "", err
	}
	return "", aap.Errorf(http.StatusUnauthorized, "invalid_credential", "The credential names no live instance.")
}

// readAAPBody reads the request body: 413 over aap.MaxBodyBytes.
func readAAPBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, aap.Errorf(http.StatusRequestEntityTooLarge, "request_too_large", "The body is over the limit of %d bytes.", aap.MaxBodyBytes)
		}
		return nil, aap.Errorf(http.StatusBadRequest, "invalid_request", "The body could not be read.")
	}
	return body, nil
}

// aapCreate is POST /aap/v1/requests (AAP v1 §5 "Create a Request"): 201 with a new request
// (pending, or decided at once by a rule), 200 with a replay's request as it stands, 400 for a
// body the schema refuses or no Idempotency-Key, 409 idempotency_conflict.
func (s *Server) aapCreate(w http.ResponseWriter, r *http.Request) error {
	connID, err := s.aapInstance(r)
	if err != nil {
		return err
	}
	body, err := readAAPBody(r)
	if err != nil {
		return err
	}
	c, timeout, digest, perr := aap.ParseCreate(body)
	if perr != nil {
		return perr
	}
	key := r.Header.Get("Idempotency-Key")
	v, created, err := s.cfg.AAP.Create(r.Context(), aap.Create{ConnectionID: connID, Key: key, Body: c, Timeout: timeout, Digest: digest,
		Session: func(ctx context.Context) (string, error) { return s.aapSession(ctx, connID, c.Context) },
		Record: func(ctx context.Context, sessionID, callID string, decided *gate.OutsideDecided) (string, error) {
			return s.aapRecord(ctx, sessionID, callID, c, decided)
		}})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeAAP(w, status, v)
}

// aapGet is GET /aap/v1/requests/{id}[?wait=30s] (AAP v1 §5 "Retrieve a Request"): 200 with the
// request; with wait, held until it is terminal or the wait (at most 30 s) ends; 400 for a wait
// that is not a Duration; 404 for an id the instance did not create.
func (s *Server) aapGet(w http.ResponseWriter, r *http.Request) error {
	connID, err := s.aapInstance(r)
	if err != nil {
		return err
	}
	var wait = 0 * aap.MaxWait
	if q := r.URL.Query(); q.Has("wait") {
		d, err := aap.ParseDuration(q.Get("wait"))
		if err != nil {
			e := aap.Errorf(http.StatusBadRequest, "invalid_request", "wait: %v.", err)
			e.Param = "wait"
			return e
		}
		wait = min(d, aap.MaxWait)
	}
	v, err := s.cfg.AAP.Get(r.Context(), connID, r.PathValue("id"), wait)
	if err != nil {
		return err
	}
	return writeAAP(w, http.StatusOK, v)
}

// aapCancel is DELETE /aap/v1/requests/{id} (AAP v1 §5 "Cancel a Request"): 200 with the
// cancelled request (again on a repeat), 409 already_terminal, 404 for an id the instance did
// not create.
func (s *Server) aapCancel(w http.ResponseWriter, r *http.Request) error {
	connID, err := s.aapInstance(r)
	if err != nil {
		return err
	}
	v, err := s.cfg.AAP.Cancel(r.Context(), connID, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeAAP(w, http.StatusOK, v)
}

// aapSession finds or makes connection connID's agent session for a request whose context is
// rctx (SPEC §18: one per connection and agent session id): the id is context.session_id when
// it is a string of at most 200 characters, else "aap".
func (s *Server) aapSession(ctx context.Context, connID string, rctx json.RawMessage) (string, error) {
	if s.agents == nil {
		return "", apperr.Errorf(apperr.Internal, "the store keeps no agent sessions")
	}
	sid := aapDefaultSession
	var c struct {
		SessionID any `json:"session_id"`
	}
	if rctx != nil && json.Unmarshal(rctx, &c) == nil {
		if v, ok := c.SessionID.(string); ok && v != "" && utf8.RuneCountInString(v) <= 200 {
			sid = v
		}
	}
	sess, err := s.agents.AgentSession(ctx, connID, sid)
	if err == nil {
		return sess.ID, nil
	}
	if apperr.CodeOf(err) != apperr.NotFound {
		return "", err
	}
	info := agent.AgentInfo{Kind: aapKind, ConnectionID: connID, SessionID: sid, State: agent.AgentWorking}
	title := "API agent"
	if sid != aapDefaultSession {
		title += " · " + sid
	}
	ns := agent.Session{ID: gate.NewID(), Title: title, Model: aapKind, State: agent.Idle, Mode: s.cfg.Gate.DefaultMode(), Agent: &info}
	err = s.agents.CreateSession(ctx, ns)
	if apperr.CodeOf(err) == apperr.Conflict {
		sess, err := s.agents.AgentSession(ctx, connID, sid)
		return sess.ID, err
	}
	if err != nil {
		return "", err
	}
	s.cfg.Runner.AgentSessionChanged(ctx, ns.ID)
	return ns.ID, nil
}

// aapRecord records request c as a tool call in agent session sessionID, under callID, with what
// the agent claims (agent_reasoning, "the agent says") and the adapter's context shown beside it
// (AAP v1 §4: reasoning is a claim from the agent and presented as such).
func (s *Server) aapRecord(ctx context.Context, sessionID, callID string, c aap.CreateApprovalRequest, decided *gate.OutsideDecided) (string, error) {
	var blocks []agent.Block
	var text []string
	if c.AgentReasoning != nil && strings.TrimSpace(*c.AgentReasoning) != "" {
		text = append(text, "The agent says: "+*c.AgentReasoning)
	}
	if len(c.Context) > 0 && string(c.Context) != "{}" {
		text = append(text, "Context (reported by the adapter): "+string(c.Context))
	}
	if len(text) > 0 {
		blocks = append(blocks, agent.Block{Type: "text", Text: strings.Join(text, "\n\n")})
	}
	blocks = append(blocks, agent.Block{Type: "toolCall", ID: callID, Name: c.Tool, Arguments: c.Arguments})
	sess, err := s.cfg.Store.Session(ctx, sessionID)
	if err != nil {
		return "", err
	}
	m, err := s.cfg.Runner.RecordAgentCall(ctx, sess, agent.Message{Role: agent.Assistant, StopReason: agent.ToolUse,
		Model: aapKind, Content: blocks}, decided)
	return m.ID, err
}

// aapProvisioner admits the provisioner (AAP v1 §5: instance operations use a provisioner token):
// the owner's bearer token, never a cookie nor an instance credential; 401 authentication
// otherwise, 404 when this server offers no instances.
func (s *Server) aapProvisioner(r *http.Request) error {
	if s.cfg.AAPInstances == nil {
		return aap.Errorf(http.StatusNotFound, "not_found", "This server offers no instance provisioning.")
	}
	if bearer(r) == "" {
		return aap.Errorf(http.StatusUnauthorized, "missing_credential", "Send Authorization: Bearer <the provisioner token>.")
	}
	if !s.ownerBearer(r) {
		// A guess of the owner token: it counts against the client's allowance, as on the
		// owner's routes (tokenFailures).
		s.failures.fail(r)
		return aap.Errorf(http.StatusUnauthorized, "invalid_credential", "The token is not a provisioner token.")
	}
	return nil
}

// aapProvision is POST /aap/v1/instances (AAP v1 §5 "Provision an Instance"): 201 with the
// instance and its credential, 200 on a replay, 400, 409 (idempotency_conflict,
// instance_deleted), 422 webhook_verification_failed.
func (s *Server) aapProvision(w http.ResponseWriter, r *http.Request) error {
	if err := s.aapProvisioner(r); err != nil {
		return err
	}
	body, err := readAAPBody(r)
	if err != nil {
		return err
	}
	out, created, err := s.cfg.AAPInstances.Provision(r.Context(), r.Header.Get("Idempotency-Key"), body)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeAAP(w, status, out)
}

// aapGetInstance is GET /aap/v1/instances/{id}: 200 with the instance (no secret, no
// credential), 404 for an unknown or deleted one.
func (s *Server) aapGetInstance(w http.ResponseWriter, r *http.Request) error {
	if err := s.aapProvisioner(r); err != nil {
		return err
	}
	v, err := s.cfg.AAPInstances.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeAAP(w, http.StatusOK, v)
}

// aapDeleteInstance is DELETE /aap/v1/instances/{id}: 204 (again on a repeat), 404 for an unknown
// id; its credential is revoked and its pending requests cancelled.
func (s *Server) aapDeleteInstance(w http.ResponseWriter, r *http.Request) error {
	if err := s.aapProvisioner(r); err != nil {
		return err
	}
	if err := s.cfg.AAPInstances.Delete(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// aapUpdateInstance is PATCH /aap/v1/instances/{id} (AAP v1 §5 "Update an Instance"): 200 with
// the instance (no secret), also on a replay; 400, 404, 409 idempotency_conflict, 422
// webhook_verification_failed.
func (s *Server) aapUpdateInstance(w http.ResponseWriter, r *http.Request) error {
	if err := s.aapProvisioner(r); err != nil {
		return err
	}
	body, err := readAAPBody(r)
	if err != nil {
		return err
	}
	v, err := s.cfg.AAPInstances.Update(r.Context(), r.PathValue("id"), r.Header.Get("Idempotency-Key"), body)
	if err != nil {
		return err
	}
	return writeAAP(w, http.StatusOK, v)
}

// aapRequestReader finds an AAP request by its approval (internal/store).
type aapRequestReader interface {
	AAPRequestByApproval(ctx context.Context, approvalID string) (aap.Request, error)
}

// maxPromptContext bounds the context a prompt shows.
const maxPromptContext = 2000

// aapPrompt adds to av, the prompt of approval approvalID made through the approval API, what
// its request says beside the call: the agent's reasoning (a claim, shown as such) and the
// adapter's context (AAP v1 §4).
func (s *Server) aapPrompt(av *templates.ApprovalView, approvalID string) {
	av.ViaAPI = true
	st, ok := s.cfg.Store.(aapRequestReader)
	if !ok {
		return
	}
	r, err := st.AAPRequestByApproval(context.Background(), approvalID)
	if err != nil {
		return
	}
	if r.AgentReasoning != nil {
		av.AgentSays = *r.AgentReasoning
	}
	if len(r.Context) > 0 && string(r.Context) != "{}" {
		av.ContextJSON = string(r.Context)
		if len(av.ContextJSON) > maxPromptContext {
			av.ContextJSON = strings.ToValidUTF8(av.ContextJSON[:maxPromptContext], "") + "…"
		}
	}
}
