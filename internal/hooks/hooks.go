// Package hooks reads and answers the hook dialects of the agents people already run (SPEC §18,
// Door 1): Claude Code's HTTP hooks and the command hooks of Codex, which copied Claude Code's
// shapes. Parse turns one hook event, as the agent sent it, into an Event; Encode turns a Verdict
// into the answer that agent honours for that event. The package is pure: no I/O, no store, no
// gate; the web handler of `POST /hooks/{kind}` and the gate are wired to it elsewhere.
//
// # Kinds
//
//	claude-code   Claude Code 2.1.328, HTTP hook bodies (the same JSON a command hook gets on stdin)
//	codex         Codex 0.169.0, command hook stdin (forwarded by `countersign hook --agent codex`)
//
// gemini, cursor and copilot are named (KindGemini…) but have no dialect yet: Parse and Encode
// refuse them like any unknown kind (apperr.NotFound, 404). A dialect is one entry of the
// dialects table: the events it sends, the fields each needs, and how it spells an answer.
//
// # Sources
//
// The shapes were read from real payloads (../shared/agents/recorded/, copied to testdata/) and
// from the agents' public hook documentation: Claude Code "Hooks reference" (PreToolUse,
// PermissionRequest decision control) and Codex "Hooks" (developers.openai.com/codex/hooks) with
// its command output schemas (codex-rs/hooks, pre-tool-use and permission-request
// .command.output.schema.json).
package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"countersign/internal/apperr"
	"countersign/internal/tool"
)

// Kind names an agent's hook dialect, as in the path of `POST /hooks/{kind}` and a connection's
// kind (SPEC §18).
type Kind string

// The kinds. Only ClaudeCode and Codex have a dialect today.
const (
	ClaudeCode Kind = "claude-code"
	Codex      Kind = "codex"
	Gemini     Kind = "gemini"  // Gemini CLI: no dialect yet
	Cursor     Kind = "cursor"  // Cursor: no dialect yet
	Copilot    Kind = "copilot" // Copilot CLI: no dialect yet
)

// EventName is a hook event's `hook_event_name`, spelled as the agents spell it.
type EventName string

// The events Countersign reads. PreToolUse and PermissionRequest are the ones a Verdict answers;
// the others shape the agent session's page and are answered with no verdict.
const (
	PreToolUse        EventName = "PreToolUse"        // before a tool runs; has tool_use_id
	PermissionRequest EventName = "PermissionRequest" // the agent would ask its user; no tool_use_id
	PostToolUse       EventName = "PostToolUse"       // the outcome, in tool_response
	PermissionDenied  EventName = "PermissionDenied"  // Claude Code: its own classifier denied (auto mode)
	UserPromptSubmit  EventName = "UserPromptSubmit"  // the person's prompt
	Stop              EventName = "Stop"              // the agent finished a turn
	SessionStart      EventName = "SessionStart"      // Codex (Claude Code refuses HTTP hooks here)
	SessionEnd        EventName = "SessionEnd"        // the agent's session ended
	PreModelRequest   EventName = "PreModelRequest"   // Codex: before a model request
	PostModelRequest  EventName = "PostModelRequest"  // Codex: after a model request
)

// MaxBodyBytes bounds one hook event's body (and one answer): 4 MiB, room for a Write of a large
// file in tool_input. A larger body is refused with apperr.TooLarge (413).
const MaxBodyBytes = 4 << 20

// MCPServer is Claude Code's `mcp_server` of an MCP tool's events (`mcp__<server>__<tool>`):
// the server's name and where it was configured ("project", "user"…).
type MCPServer struct {
	Name   string `json:"name"`
	Source string `json:"source"`
}

// Event is one hook event in Countersign's terms, whatever the agent. Fields the event does not
// carry are empty. Raw is the body exactly as sent: fields Countersign does not read (effort,
// permission_suggestions, duration_ms, token_usage…, and those of later agent versions) are kept
// there, never refused.
type Event struct {
	Kind Kind      // the dialect it was read in
	Name EventName // hook_event_name

	SessionID      string // session_id: the agent's session (required on every event)
	PromptID       string // prompt_id: Claude Code's turn (absent on `claude -p --resume`)
	TurnID         string // turn_id: Codex's turn
	Cwd            string // cwd: the agent's working directory
	PermissionMode string // permission_mode: "default", "acceptEdits", "plan", "dontAsk", "auto"…
	TranscriptPath string // transcript_path: on the agent's machine, for provenance only
	Model          string // model: Codex reports it

	ToolName     string          // tool_name: "Bash", "Edit", "mcp__<server>__<tool>"…
	ToolInput    json.RawMessage // tool_input: a JSON object, as sent
	ToolUseID    string          // tool_use_id: PreToolUse, PostToolUse (not PermissionRequest)
	ToolResponse json.RawMessage // tool_response: PostToolUse's outcome, any JSON value
	MCPServer    *MCPServer      // mcp_server: Claude Code's MCP tool calls

	Prompt               string // prompt: UserPromptSubmit
	Reason               string // reason: SessionEnd ("other", "clear"…), PermissionDenied
	LastAssistantMessage string // last_assistant_message: Stop
	StopHookActive       bool   // stop_hook_active: Stop
	Source               string // source: Codex's SessionStart ("startup", "resume")

	Raw json.RawMessage // the whole body as sent
}

// IsToolEvent reports whether the event is about one tool call (it has tool_name and tool_input).
func (e Event) IsToolEvent() bool {
	return e.Name == PreToolUse || e.Name == PermissionRequest || e.Name == PostToolUse || e.Name == PermissionDenied
}

// dialect is one agent's hook dialect: the events it sends and, per event, the fields required
// beyond session_id and hook_event_name.
type dialect struct {
	events map[EventName][]string
	// editable lists the events on which the agent honours an allow with updatedInput.
	editable []EventName
	// allowApproves lists the events on which an allow is an approval the agent acts on (on the
	// others an allow is at best ignored and is encoded as no verdict).
	allowApproves []EventName
}

// toolFields are the fields every tool event needs.
var toolFields = []string{"tool_name", "tool_input"}

// dialects is the table of implemented kinds: a new agent is one entry here and one case in
// Encode. Fields required per event come from the recorded payloads of each agent.
var dialects = map[Kind]dialect{
	// Claude Code 2.1.328: PermissionRequest has no tool_use_id; prompt_id is absent on --resume.
	ClaudeCode: {
		events: map[EventName][]string{
			PreToolUse:        append(slices.Clone(toolFields), "tool_use_id"),
			PermissionRequest: toolFields,
			PostToolUse:       append(slices.Clone(toolFields), "tool_use_id", "tool_response"),
			PermissionDenied:  append(slices.Clone(toolFields), "tool_use_id"),
			UserPromptSubmit:  {"prompt"},
			Stop:              nil,
			SessionEnd:        nil,
		},
		editable:      []EventName{PreToolUse, PermissionRequest},
		allowApproves: []EventName{PreToolUse, PermissionRequest},
	},
	// Codex 0.169.0: turn_id instead of prompt_id; its PermissionRequest adds tool_input.description
	// (the escalation's justification) to Bash; updatedInput is honoured on PreToolUse only, and a
	// PreToolUse allow is not an approval (PermissionRequest still runs).
	Codex: {
		events: map[EventName][]string{
			PreToolUse:        append(slices.Clone(toolFields), "tool_use_id"),
			PermissionRequest: toolFields,
			PostToolUse:       append(slices.Clone(toolFields), "tool_use_id", "tool_response"),
			UserPromptSubmit:  {"prompt"},
			Stop:              nil,
			SessionStart:      nil,
			SessionEnd:        nil,
			PreModelRequest:   nil,
			PostModelRequest:  nil,
		},
		editable:      []EventName{PreToolUse},
		allowApproves: []EventName{PermissionRequest},
	},
}

// dialectOf returns kind's dialect; an unknown kind, or one without a dialect yet, is
// apperr.NotFound (404).
func dialectOf(kind Kind) (dialect, error) {
	d, ok := dialects[kind]
	if !ok {
		switch kind {
		case Gemini, Cursor, Copilot:
			return dialect{}, apperr.Errorf(apperr.NotFound, "hook kind %q is not supported yet (supported: claude-code, codex)", kind)
		}
		return dialect{}, apperr.Errorf(apperr.NotFound, "unknown hook kind %q (supported: claude-code, codex)", kind)
	}
	return d, nil
}

// Parse reads one hook event of the given kind: body is the JSON the agent sent (Claude Code's
// HTTP hook body, or a command hook's stdin). The body must be one JSON object, at most
// MaxBodyBytes, without a key repeated in any object at any depth (as written, escaped, or in
// another case: tool.AmbiguousKey, SPEC §14), with a hook_event_name the dialect sends, a
// non-empty session_id, and the event's required fields: tool_name (non-empty string) and
// tool_input (an object) on tool events, tool_use_id on PreToolUse, PostToolUse and
// PermissionDenied, tool_response on PostToolUse, prompt on UserPromptSubmit. Known fields must
// have their type (strings are strings). Keys are matched exactly (encoding/json's
// case-insensitive field matching is never used). Unknown fields are kept in Raw.
//
// Errors: apperr.NotFound for an unknown kind (404), apperr.TooLarge for a body over the limit
// (413), apperr.Invalid for anything else (400), with a message that names the field. A body
// that fails is never an Event, so it can never be allowed.
func Parse(kind Kind, body []byte) (ev Event, err error) {
	defer apperr.Wrap(&err, "hooks.Parse(%s)", kind)
	d, err := dialectOf(kind)
	if err != nil {
		return Event{}, err
	}
	if len(body) > MaxBodyBytes {
		return Event{}, apperr.Errorf(apperr.TooLarge, "the hook body is %d bytes, over the limit of %d", len(body), MaxBodyBytes)
	}
	if v, err := tool.AmbiguousKey(body); err != nil {
		return Event{}, apperr.Errorf(apperr.Invalid, "the hook body is %v", err)
	} else if v != nil {
		return Event{}, apperr.Errorf(apperr.Invalid, "the hook body at %s: %s", v.Pointer, v.Message)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Event{}, apperr.Errorf(apperr.Invalid, "the hook body is not a JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return Event{}, apperr.Errorf(apperr.Invalid, "the hook body is not a JSON object: %v", err)
	}
	r := reader{fields: fields}
	ev = Event{Kind: kind, Raw: json.RawMessage(trimmed)}
	ev.Name = EventName(r.str("hook_event_name"))
	if r.err != nil {
		return Event{}, r.err
	}
	if ev.Name == "" {
		return Event{}, apperr.Errorf(apperr.Invalid, "the hook body has no hook_event_name")
	}
	required, ok := d.events[ev.Name]
	if !ok {
		return Event{}, apperr.Errorf(apperr.Invalid, "hook_event_name %q is not an event %s sends", ev.Name, kind)
	}
	for _, f := range append([]string{"session_id"}, required...) {
		if !r.present(f) {
			return Event{}, apperr.Errorf(apperr.Invalid, "%s event without %s", ev.Name, f)
		}
	}
	ev.SessionID = r.str("session_id")
	ev.PromptID = r.str("prompt_id")
	ev.TurnID = r.str("turn_id")
	ev.Cwd = r.str("cwd")
	ev.PermissionMode = r.str("permission_mode")
	ev.TranscriptPath = r.str("transcript_path")
	ev.Model = r.str("model")
	ev.ToolName = r.str("tool_name")
	ev.ToolUseID = r.str("tool_use_id")
	ev.Prompt = r.str("prompt")
	ev.Reason = r.str("reason")
	ev.LastAssistantMessage = r.str("last_assistant_message")
	ev.Source = r.str("source")
	ev.StopHookActive = r.boolean("stop_hook_active")
	ev.ToolInput = r.object("tool_input")
	ev.ToolResponse = r.value("tool_response")
	if raw := r.object("mcp_server"); raw != nil {
		var s MCPServer
		sr := reader{}
		if err := json.Unmarshal(raw, &sr.fields); err == nil {
			s.Name, s.Source = sr.str("name"), sr.str("source")
		}
		if sr.err != nil {
			return Event{}, apperr.Errorf(apperr.Invalid, "mcp_server: %s", apperr.MessageOf(sr.err))
		}
		ev.MCPServer = &s
	}
	if r.err != nil {
		return Event{}, r.err
	}
	if ev.SessionID == "" {
		return Event{}, apperr.Errorf(apperr.Invalid, "%s event with an empty session_id", ev.Name)
	}
	if slices.Contains(required, "tool_name") && ev.ToolName == "" {
		return Event{}, apperr.Errorf(apperr.Invalid, "%s event with an empty tool_name", ev.Name)
	}
	if slices.Contains(required, "tool_use_id") && ev.ToolUseID == "" {
		return Event{}, apperr.Errorf(apperr.Invalid, "%s event with an empty tool_use_id", ev.Name)
	}
	return ev, nil
}

// reader reads the top-level members of a hook body by their exact keys, keeping the first type
// error. A member that is JSON null counts as absent.
type reader struct {
	fields map[string]json.RawMessage
	err    error
}

func (r *reader) present(key string) bool {
	v, ok := r.fields[key]
	return ok && !isNull(v)
}

func (r *reader) fail(key, want string) {
	if r.err == nil {
		r.err = apperr.Errorf(apperr.Invalid, "%s must be %s", key, want)
	}
}

// str returns the string member key ("" when absent); another type is an error.
func (r *reader) str(key string) string {
	v, ok := r.fields[key]
	if !ok || isNull(v) {
		return ""
	}
	var s string
	if v[0] != '"' || json.Unmarshal(v, &s) != nil {
		r.fail(key, "a string")
		return ""
	}
	return s
}

// boolean returns the boolean member key (false when absent); another type is an error.
func (r *reader) boolean(key string) bool {
	v, ok := r.fields[key]
	if !ok || isNull(v) {
		return false
	}
	switch string(v) {
	case "true":
		return true
	case "false":
		return false
	}
	r.fail(key, "true or false")
	return false
}

// object returns the object member key as sent (nil when absent); another type is an error.
func (r *reader) object(key string) json.RawMessage {
	v, ok := r.fields[key]
	if !ok || isNull(v) {
		return nil
	}
	if v[0] != '{' {
		r.fail(key, "a JSON object")
		return nil
	}
	return v
}

// value returns the member key as sent, any JSON value (nil when absent or null).
func (r *reader) value(key string) json.RawMessage {
	v, ok := r.fields[key]
	if !ok || isNull(v) {
		return nil
	}
	return v
}

func isNull(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

// String renders the event for logs: kind, event, session and tool, never the input.
func (e Event) String() string {
	s := fmt.Sprintf("%s %s session=%s", e.Kind, e.Name, e.SessionID)
	if e.ToolName != "" {
		s += " tool=" + e.ToolName
	}
	if e.ToolUseID != "" {
		s += " tool_use_id=" + e.ToolUseID
	}
	return s
}
