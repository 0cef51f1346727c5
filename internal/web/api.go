package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// The JSON API of SPEC §12: the same core as the pages (the Runner and the store), for scripts,
// benchmarks and other clients. The owner authenticates with "Authorization: Bearer <token>"
// (the owner cookie works too). Errors are {"error": {"code", "message"}}.

// api wraps an API handler: owner only, bounded body, JSON errors.
func (s *Server) api(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		var err error = apperr.Errorf(apperr.Unauthorized, "Unauthorized: send Authorization: Bearer <owner token>")
		if s.authOwner(r) {
			err = h(w, r)
		}
		if err != nil {
			s.writeJSONError(w, r, err)
		}
	})
}

func (s *Server) writeJSONError(w http.ResponseWriter, r *http.Request, err error) {
	err = tooLarge(err)
	code := apperr.CodeOf(err)
	if code == apperr.Internal {
		s.log.Error("API request failed", "method", r.Method, "path", loggable(r.URL), "err", err)
	}
	writeJSON(w, status(code), map[string]any{"error": map[string]string{"code": string(code), "message": apperr.MessageOf(err)}})
}

func writeJSON(w http.ResponseWriter, st int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// decodeJSON reads a JSON body into v (a pointer to a struct): malformed JSON, a value of the
// wrong JSON type, unknown fields and trailing data are apperr.Invalid with a plain message
// that names the field by its JSON name and the JSON type expected ("field title: expected a
// string, got a number"), never a Go type; an oversized body is apperr.TooLarge.
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return apperr.Errorf(apperr.Invalid, "The request body is empty; it must be a JSON object.")
		}
		return apperr.Errorf(apperr.Invalid, "%s", jsonProblem(err, v))
	}
	if dec.More() {
		return apperr.Errorf(apperr.Invalid, "The request body has data after the JSON object.")
	}
	return nil
}

// jsonProblem says in JSON's terms what is wrong with a body that encoding/json refused to
// decode into v.
func jsonProblem(err error, v any) string {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("The request body is not valid JSON: %s (at byte %d).", strings.TrimPrefix(syntax.Error(), "json: "), syntax.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "The request body is not valid JSON: it ends before the JSON value does."
	case errors.As(err, &typ):
		got := jsonValueKind(typ.Value)
		if typ.Field == "" {
			return fmt.Sprintf("The request body must be a JSON object, not %s.", got)
		}
		// An item of an array field names the array: "field active: expected an array of
		// strings, got an array holding a number".
		if ft := fieldType(reflect.TypeOf(v), typ.Field); ft != nil && (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array) && ft.Elem() == typ.Type {
			return fmt.Sprintf("field %s: expected %s, got an array holding %s", typ.Field, jsonTypeOf(ft), got)
		}
		return fmt.Sprintf("field %s: expected %s, got %s", typ.Field, jsonTypeOf(typ.Type), got)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		known := jsonFields(reflect.TypeOf(v))
		if len(known) == 0 {
			return fmt.Sprintf("field %s is not known here.", name)
		}
		return fmt.Sprintf("field %s is not known here; the fields are %s.", name, strings.Join(known, ", "))
	}
	return "The request body is not valid: " + strings.TrimPrefix(err.Error(), "json: ")
}

// jsonValueKind names, with its article, the JSON value json.UnmarshalTypeError.Value describes
// ("string", "number", "number 1.5", "object", "array", "bool").
func jsonValueKind(value string) string {
	kind, _, _ := strings.Cut(value, " ")
	switch kind {
	case "string":
		return "a string"
	case "number":
		if _, n, ok := strings.Cut(value, " "); ok {
			return "the number " + n
		}
		return "a number"
	case "object":
		return "an object"
	case "array":
		return "an array"
	case "bool":
		return "a boolean"
	case "null":
		return "null"
	}
	return value
}

// jsonTypeOf is the JSON type that decodes into Go type t, with its article.
func jsonTypeOf(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.String {
			return "an array of strings"
		}
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value of another type"
}

// fieldType is the Go type of the field at path ("a.b", JSON names) in struct type t; nil when
// there is none.
func fieldType(t reflect.Type, path string) reflect.Type {
	for _, name := range strings.Split(path, ".") {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t == nil || t.Kind() != reflect.Struct {
			return nil
		}
		var next reflect.Type
		for _, f := range reflect.VisibleFields(t) {
			if f.IsExported() && !f.Anonymous && jsonName(f) == name {
				next = f.Type
				break
			}
		}
		t = next
	}
	return t
}

// jsonName is the name encoding/json gives struct field f ("-" when it skips it).
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}

// jsonFields lists the JSON names of struct type t's fields, as encoding/json decodes them.
func jsonFields(t reflect.Type) []string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		if name := jsonName(f); name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// apiCreateSession creates a session: {title, model, workspace?, instructions?} → 201 the
// session. workspace absent: the server's -workspace; instructions absent: the default
// instructions (SPEC §17), "" none; over agent.MaxInstructions bytes: 400.
func (s *Server) apiCreateSession(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Title        string  `json:"title"`
		Model        string  `json:"model"`
		Workspace    string  `json:"workspace"`
		Instructions *string `json:"instructions"`
	}
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	if in.Workspace == "" {
		in.Workspace = s.cfg.Workspace
	}
	sess, err := s.cfg.Runner.CreateSessionWith(r.Context(), agent.NewSession{Title: in.Title, Model: in.Model,
		Workspace: in.Workspace, Instructions: in.Instructions})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sess)
	return nil
}

// apiSessions lists the sessions, newest first; ?q= keeps those whose title contains it
// (case-insensitive), as the session list's search does.
func (s *Server) apiSessions(w http.ResponseWriter, r *http.Request) error {
	sessions, err := s.searchSessions(r.Context(), r.URL.Query().Get("q"))
	if err != nil {
		return err
	}
	if sessions == nil {
		sessions = []agent.Session{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": sessions})
	return nil
}

func (s *Server) apiSession(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	sess, err := s.cfg.Store.Session(r.Context(), id)
	if err != nil {
		return err
	}
	entries, err := s.cfg.Store.Entries(r.Context(), id)
	if err != nil {
		return err
	}
	if entries == nil {
		entries = []agent.Entry{}
	}
	writeJSON(w, http.StatusOK, struct {
		agent.Session
		Entries []agent.Entry `json:"entries"`
	}{sess, entries})
	return nil
}

// apiRenameSession changes a session: {title?, mode?, instructions?} → 200 the session. title
// renames it (400 for an empty or too long one); mode switches its mode for the next call (SPEC
// §14: default, plan or accept-edits, else 400; pending calls the new mode allows are released,
// none is denied); instructions replace its instructions (SPEC §17) until its first message,
// 409 after it, 400 over agent.MaxInstructions bytes. 400 for a body with none of them; 404
// unknown. A refused body changes nothing. Owner only, like every /api route.
func (s *Server) apiRenameSession(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Title        *string    `json:"title"`
		Mode         *gate.Mode `json:"mode"`
		Instructions *string    `json:"instructions"`
	}
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	if in.Title == nil && in.Mode == nil && in.Instructions == nil {
		return apperr.Errorf(apperr.Invalid, "Send a title, a mode or instructions to change.")
	}
	if in.Title != nil {
		if err := agent.CheckTitle(*in.Title); err != nil {
			return err
		}
	}
	id := r.PathValue("id")
	var sess agent.Session
	var err error
	if in.Mode != nil {
		// Checked before the title changes: a refused body changes nothing.
		switch *in.Mode {
		case gate.ModeDefault, gate.ModePlan, gate.ModeAcceptEdits:
		default:
			return apperr.Errorf(apperr.Invalid, "mode must be default, plan or accept-edits, not %q", *in.Mode)
		}
	}
	// Instructions first: they are the change that can be refused for the session's state (a
	// first message), and the others are checked already.
	if in.Instructions != nil {
		if sess, err = s.cfg.Runner.SetInstructions(r.Context(), id, *in.Instructions); err != nil {
			return err
		}
	}
	if in.Title != nil {
		if sess, err = s.cfg.Runner.RenameSession(r.Context(), id, *in.Title); err != nil {
			return err
		}
	}
	if in.Mode != nil {
		if err = s.cfg.Gate.SetMode(r.Context(), id, *in.Mode); err != nil {
			return err
		}
		if sess, err = s.cfg.Store.Session(r.Context(), id); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, sess)
	return nil
}

// apiDeleteSession deletes a session with its transcript, approvals, grants, share links and
// audit: 204; 409 while a run is busy (Stop first); 404 unknown.
func (s *Server) apiDeleteSession(w http.ResponseWriter, r *http.Request) error {
	if err := s.cfg.Runner.DeleteSession(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) apiSend(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Text string `json:"text"`
	}
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	if err := s.cfg.Runner.Send(r.Context(), r.PathValue("id"), in.Text); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted"})
	return nil
}

func (s *Server) apiStop(w http.ResponseWriter, r *http.Request) error {
	if err := s.cfg.Runner.Stop(r.Context(), r.PathValue("id"), gate.ByOwner); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted"})
	return nil
}

// apiTool is a tool as the API lists it (SPEC §12 tools).
type apiTool struct {
	Name         string           `json:"name"`
	Title        string           `json:"title,omitempty"`
	Description  string           `json:"description,omitempty"`
	Exposure     tool.Exposure    `json:"exposure"`
	Annotations  tool.Annotations `json:"annotations"`
	Effective    []tool.Hint      `json:"effectiveAnnotations"`
	InputSchema  json.RawMessage  `json:"inputSchema"`
	OutputSchema json.RawMessage  `json:"outputSchema,omitempty"`
	Active       bool             `json:"active"`
}

func (s *Server) toolList(sess agent.Session) []apiTool {
	active := map[string]bool{}
	for _, n := range s.cfg.Runner.ActiveTools(sess) {
		active[n] = true
	}
	out := []apiTool{}
	for _, t := range s.cfg.Runner.Tools().All() {
		if t.Exposure == tool.Hidden {
			continue
		}
		out = append(out, apiTool{Name: t.Name, Title: t.Title, Description: t.Description, Exposure: t.Exposure,
			Annotations: t.Annotations, Effective: t.Annotations.Effective(), InputSchema: t.InputSchema,
			OutputSchema: t.OutputSchema, Active: active[t.Name]})
	}
	return out
}

func (s *Server) apiTools(w http.ResponseWriter, r *http.Request) error {
	sess, err := s.cfg.Store.Session(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": s.toolList(sess)})
	return nil
}

func (s *Server) apiSetTools(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Active []string `json:"active"`
	}
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	id := r.PathValue("id")
	_, ignored, err := s.cfg.Runner.SetActiveTools(r.Context(), id, in.Active)
	if err != nil {
		return err
	}
	sess, err := s.cfg.Store.Session(r.Context(), id)
	if err != nil {
		return err
	}
	if ignored == nil {
		ignored = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tools": s.toolList(sess), "ignored": ignored})
	return nil
}

func (s *Server) apiApprovals(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := s.cfg.Store.Session(r.Context(), id); err != nil {
		return err
	}
	st := gate.Status(r.URL.Query().Get("status"))
	switch st {
	case "", gate.Pending, gate.Approved, gate.Denied, gate.TimedOut, gate.Cancelled:
	default:
		return apperr.Errorf(apperr.Invalid, "status must be one of pending, approved, denied, timed_out, cancelled")
	}
	as, err := s.cfg.Store.Approvals(r.Context(), id, st)
	if err != nil {
		return err
	}
	if as == nil {
		as = []gate.Approval{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": as})
	return nil
}

// apiDecide decides an approval: 200 with the approval, 409 already resolved, 404 unknown.
func (s *Server) apiDecide(w http.ResponseWriter, r *http.Request) error {
	var d gate.Answer
	if err := decodeJSON(r, &d); err != nil {
		return err
	}
	d.By = gate.Owner()
	// The owner decides in every session: the gate reads the approval (once) and finds it.
	a, err := s.cfg.Gate.Decide(r.Context(), gate.AnySession, r.PathValue("id"), d)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

// apiEvents streams a session's events as JSON over a WebSocket: first a snapshot (the
// session, its pending approvals and the run's live state), then each SPEC §2 event
// {type, sessionId, ...}, one per message. Updates superseded while the client was slow are
// coalesced; the events queued for a client that is behind are sent in one batch.
func (s *Server) apiEvents(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := s.cfg.Store.Session(r.Context(), id); err != nil {
		return err
	}
	s.pumpEvents(w, r, id, eventSocket{
		limit: ownerSockets,
		first: func(ctx context.Context) ([][]byte, bool) {
			sess, err := s.cfg.Store.Session(ctx, id)
			if err != nil {
				return nil, false
			}
			pending, err := s.cfg.Store.Approvals(ctx, id, gate.Pending)
			if err != nil {
				return nil, false
			}
			if pending == nil {
				pending = []gate.Approval{}
			}
			snapshot, err := json.Marshal(map[string]any{"type": "snapshot", "sessionId": id, "session": sess,
				"state": sess.State, "pendingApprovals": pending, "live": s.cfg.Runner.Live(id)})
			if err != nil {
				s.log.Error("API snapshot", "session", id, "err", err)
				return nil, false
			}
			return [][]byte{snapshot}, true
		},
		message: func(_ context.Context, msgs [][]byte, ev *agent.Event) [][]byte {
			// The encoding made once for all the session's viewers (agent.Event.MarshalJSON).
			b, err := ev.MarshalJSON()
			if err != nil {
				s.log.Error("API event encoding", "session", id, "type", ev.Type, "err", err)
				return msgs
			}
			return append(msgs, b)
		},
		behind: "fell behind; reconnect for a new snapshot",
		// The session_deleted event is sent, then the socket closes normally.
		deletedStatus: websocket.StatusNormalClosure,
		deletedReason: "session deleted",
		sendDeleted:   true,
		what:          "API event",
	})
	return nil
}
