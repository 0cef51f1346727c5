// Package agent runs agent sessions: the loop that sends the transcript to a model, streams its
// answer, runs its tool calls through the call pipeline and gate, and stores every entry before
// broadcasting it (SPEC §2, §3, §8). Message and event shapes follow the pi agent.
package agent

import (
	"encoding/json"
	"time"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// Role is who a transcript message is from.
type Role string

// The roles (pi's message roles).
const (
	User       Role = "user"
	Assistant  Role = "assistant"
	ToolResult Role = "toolResult"
)

// StopReason says why the model stopped (SPEC §5).
type StopReason string

// The stop reasons.
const (
	Stop    StopReason = "stop"
	ToolUse StopReason = "toolUse"
	Length  StopReason = "length"
	Error   StopReason = "error"
	Aborted StopReason = "aborted" // the run was stopped or interrupted while the model streamed
)

// Block is one content block of a message: {"type": "text", "text"}, {"type": "image", "data",
// "mimeType"}, or, in assistant messages, {"type": "toolCall", "id", "name", "arguments"} and
// {"type": "thinking", "thinking", "thinkingSignature", "id", "redacted", "data"} (pi's names).
//
// A thinking block is the model's reasoning, kept so it can be sent back as the vendor requires
// and never shown as answer text: Thinking is its readable text (may be empty or a summary);
// Signature is what the vendor needs to accept it again (Anthropic's signature, the Responses
// API's encrypted_content); ID the vendor's item id (Responses "rs_…"); Redacted with Data an
// Anthropic redacted_thinking block.
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Data      string          `json:"data,omitempty"`
	MimeType  string          `json:"mimeType,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// ArgumentsError, on a toolCall block, says why the arguments the model streamed could not
	// be read ("arguments are not valid JSON: …"); Arguments is then {}. The call does not run:
	// the model gets an error result with this text and the run goes on (SPEC §9).
	ArgumentsError string `json:"argumentsError,omitempty"`
	Thinking       string `json:"thinking,omitempty"`
	Signature      string `json:"thinkingSignature,omitempty"`
	Redacted       bool   `json:"redacted,omitempty"`
}

// Usage is the provider's token count for one assistant message, as its stream reported it
// (pi's usage shape; OpenAI `usage`, Anthropic `message_start`/`message_delta.usage`): Input
// tokens sent and not read from the prompt cache, Output tokens generated (reasoning included),
// CacheRead input tokens read from the cache, CacheWrite input tokens written to it. All counts
// are tokens; a message whose provider reported nothing has no Usage.
type Usage struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cacheRead,omitempty"`
	CacheWrite int64 `json:"cacheWrite,omitempty"`
}

// Prompt is every input token of the request (Input + CacheRead + CacheWrite): what the request
// took of the model's context window.
func (u Usage) Prompt() int64 { return u.Input + u.CacheRead + u.CacheWrite }

// Add returns the sum of u and v, field by field.
func (u Usage) Add(v Usage) Usage {
	return Usage{Input: u.Input + v.Input, Output: u.Output + v.Output,
		CacheRead: u.CacheRead + v.CacheRead, CacheWrite: u.CacheWrite + v.CacheWrite}
}

// IsZero reports whether every count is zero.
func (u Usage) IsZero() bool { return u == Usage{} }

// Message is one transcript message. User messages carry Content; assistant messages Content,
// StopReason and ErrorMessage; tool results ToolCallID, ToolName and the tool.Result fields.
type Message struct {
	ID           string     `json:"id"`
	Role         Role       `json:"role"`
	Content      []Block    `json:"content,omitempty"`
	StopReason   StopReason `json:"stopReason,omitempty"`
	ErrorMessage string     `json:"errorMessage,omitempty"`
	Model        string     `json:"model,omitempty"`
	// Usage is an assistant message's token usage as its provider reported it (nil: none).
	Usage *Usage `json:"usage,omitempty"`
	// ShortenedResults is, on an assistant message, how many earlier tool results were sent to
	// the model as a stub instead of whole in the request that produced it (SPEC §17: shortened
	// to fit the context window, never in the store or the page). They are always the oldest
	// shortenable results of the transcript (see fitContext).
	ShortenedResults int `json:"shortenedResults,omitempty"`
	// Tool results only.
	ToolCallID string       `json:"toolCallId,omitempty"`
	ToolName   string       `json:"toolName,omitempty"`
	Result     *tool.Result `json:"result,omitempty"`
	Timestamp  time.Time    `json:"timestamp"`
}

// ToolCalls returns the toolCall blocks of an assistant message, in the model's order.
func (m Message) ToolCalls() []Block {
	var calls []Block
	for _, b := range m.Content {
		if b.Type == "toolCall" {
			calls = append(calls, b)
		}
	}
	return calls
}

// Thinking joins the readable text of the message's thinking blocks (the model's reasoning,
// never part of its answer text).
func (m Message) Thinking() string {
	s := ""
	for _, b := range m.Content {
		if b.Type == "thinking" {
			s += b.Thinking
		}
	}
	return s
}

// Text joins the message's text blocks.
func (m Message) Text() string {
	s := ""
	for _, b := range m.Content {
		if b.Type == "text" {
			s += b.Text
		}
	}
	return s
}

// Entry is a stored transcript message: its position (Seq, from 1 per session) and its session.
type Entry struct {
	Seq       int64   `json:"seq"`
	SessionID string  `json:"sessionId"`
	Message   Message `json:"message"`
}

// State is a session's run state.
type State string

// The states. Idle and Running are stored; Waiting is Running as the store reads it back when at
// least one of the session's approvals is pending: the run is parked on a person (issue 16).
const (
	Idle    State = "idle"
	Running State = "running"
	Waiting State = "waiting"
)

// Active reports whether a run holds the session: running, or waiting for a person.
func (s State) Active() bool { return s == Running || s == Waiting }

// Session is one conversation with an agent (SPEC §12 session shape).
type Session struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Model     string    `json:"model"`
	Workspace string    `json:"workspace"`
	State     State     `json:"state"`
	CreatedAt time.Time `json:"createdAt"`
	// PendingApprovals counts the session's approvals waiting for a decision (read by the store,
	// never written through Session).
	PendingApprovals int `json:"pendingApprovals"`
	// ActiveTools is the session's active tool set (SPEC §1); nil means the registry's default.
	ActiveTools []string `json:"activeTools,omitempty"`
	// Mode is the session's mode (SPEC §14): default, plan or accept-edits. A new session gets
	// the server's default mode (Config.DefaultMode).
	Mode gate.Mode `json:"mode"`
	// Instructions is the session's system prompt (SPEC §17) as the person set it, sent with
	// every model request followed by the Environment block (SystemPrompt); "" sends that block
	// alone (also what sessions stored before instructions existed hold). It can change until the session's first message (Runner.SetInstructions).
	Instructions string `json:"instructions"`
	// Usage is the sum of the usage of the session's assistant messages, in tokens (kept by the
	// store as each message is stored, never written through Session).
	Usage Usage `json:"usage"`
	// Agent is, for an agent session (SPEC §18: the calls of an outside agent such as Claude
	// Code, countersigned through its hooks), what the agent reports of itself; nil for
	// Countersign's own sessions. The Runner never runs a loop in an agent session: it has no
	// message box, and its Workspace is the agent's cwd.
	Agent *AgentInfo `json:"agent,omitempty"`
}

// AgentInfo is an agent session's provenance (SPEC §18 "Agent sessions"): the connection whose
// token the agent's hooks carry (verified), and what the agent says of itself (not verified):
// its kind, its own session id, its permission mode, transcript path, model, and its last turn.
type AgentInfo struct {
	Kind           string `json:"kind"`                     // the connection's kind: "claude-code", "codex"…
	ConnectionID   string `json:"connectionId"`             // the connection the hooks authenticated as
	SessionID      string `json:"sessionId"`                // the agent's session_id
	PermissionMode string `json:"permissionMode,omitempty"` // permission_mode as the agent reports it
	TranscriptPath string `json:"transcriptPath,omitempty"` // transcript_path, on the agent's machine
	Model          string `json:"model,omitempty"`          // model, where the agent reports it (Codex)
	PromptID       string `json:"promptId,omitempty"`       // the last prompt_id (Claude Code) or turn_id (Codex)
	// State is what the agent last said it does: AgentWorking (a prompt came), AgentStopped (a
	// Stop: the turn ended) or AgentEnded (SessionEnd).
	State string `json:"state,omitempty"`
}

// The states an agent session's AgentInfo.State takes.
const (
	AgentWorking = "working"
	AgentStopped = "stopped"
	AgentEnded   = "ended"
)

// IsAgent reports whether s is an agent session (SPEC §18).
func (s Session) IsAgent() bool { return s.Agent != nil }
