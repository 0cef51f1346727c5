package agent

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"countersign/internal/gate"
)

// ToolSpec is a tool as declared to a model: name, description and inputSchema.
type ToolSpec struct {
	Name        string          `json:"name"`
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Request is one model request: the session's instructions (the system prompt, SPEC §17), the
// transcript as the model is to see it (possibly shortened for its context window) and the
// declared tools.
type Request struct {
	SessionID string
	System    string
	Messages  []Message
	Tools     []ToolSpec
}

// Delta is one streamed piece of an assistant message; one field is set:
//   - Text: answer text;
//   - Thinking: reasoning text (shown apart from the answer, never as answer text);
//   - ToolCall: a tool call complete, with valid arguments;
//   - Partial: a tool call whose arguments are still streaming (never gated or run);
//   - Retry: the request failed with a retryable error and is tried again after a wait.
type Delta struct {
	Text     string
	Thinking string
	ToolCall *Block
	Partial  *PartialCall
	Retry    *Retry
}

// PartialCall is a tool call while its arguments stream: Index is its position among the
// message's calls (from 0), ID and Name as far as known, Arguments the raw JSON text so far
// (usually not valid JSON yet).
type PartialCall struct {
	Index     int    `json:"index"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Retry says a model request failed and will be tried again (SPEC §17 "retrying (429) in 2 s"):
// Attempt is the retry's number (from 1), Status the HTTP status (0 for a connection error),
// Wait how long until it is sent, Reason the provider's message.
type Retry struct {
	Attempt int           `json:"attempt"`
	Status  int           `json:"status,omitempty"`
	Wait    time.Duration `json:"waitNs"`
	Reason  string        `json:"reason,omitempty"`
}

// ErrContextLength is what a Model's error wraps (errors.Is) when the provider refused the request
// because it does not fit the model's context window (OpenAI context_length_exceeded, Anthropic
// "prompt is too long"): the agent shortens harder and tries once more (SPEC §17).
var ErrContextLength = errors.New("the request does not fit the model's context window")

// ContextWindow is implemented by models that know their context window: the most input tokens
// one request may carry (the agent shortens the transcript to fit, SPEC §17).
type ContextWindow interface {
	ContextWindow() int
}

// Model streams one assistant message. It calls onDelta for each piece as it arrives and returns
// the whole message, or an error (a provider failure) that ends the run. It must return promptly
// when ctx is cancelled.
type Model interface {
	Stream(ctx context.Context, req Request, onDelta func(Delta)) (Message, error)
}

// Models finds a model by its name ("faux:demo", "openai:gpt-4o", ...).
type Models interface {
	// Model returns the model named name, or an apperr.Invalid error naming what is offered.
	Model(name string) (Model, error)
	// Names lists the model names offered in the New-session form.
	Names() []string
}

// Store is what the agent keeps: sessions and their transcripts (SPEC §8). AppendEntry commits
// the entry before it returns; the agent broadcasts only what is committed.
type Store interface {
	CreateSession(ctx context.Context, s Session) error
	// Session returns apperr.NotFound for an unknown id.
	Session(ctx context.Context, id string) (Session, error)
	// Sessions lists every session, newest first.
	Sessions(ctx context.Context) ([]Session, error)
	SetSessionState(ctx context.Context, id string, st State) error
	SetActiveTools(ctx context.Context, id string, names []string) error
	// SetSessionTitle renames a session; apperr.NotFound for an unknown id.
	SetSessionTitle(ctx context.Context, id, title string) error
	// SetSessionInstructions sets a session's instructions, only while it has no transcript
	// entry (checked in the same statement): apperr.Conflict once it has one, apperr.NotFound
	// for an unknown id.
	SetSessionInstructions(ctx context.Context, id, instructions string) error
	// DeleteSession deletes a session with its transcript, approvals, grants and share links;
	// apperr.NotFound for an unknown id.
	DeleteSession(ctx context.Context, id string) error
	// AppendEntry stores m as the session's next entry and returns it with its Seq; records, if
	// any, are stored in the same transaction (all or nothing): the automatic audit records of
	// the message's calls.
	AppendEntry(ctx context.Context, sessionID string, m Message, records ...gate.Approval) (Entry, error)
	// AppendOutsideCall stores m with a, an outside call's automatic approval, and c, its
	// outside call, in one transaction (SPEC §18; gate.OutsideDecided).
	AppendOutsideCall(ctx context.Context, sessionID string, m Message, a gate.Approval, c gate.OutsideCall) (Entry, error)
	// AppendOutsideOutcome stores m, an outside call's result, with the outcome the agent
	// reported on the call's outside call (approvalID), in one transaction.
	AppendOutsideOutcome(ctx context.Context, sessionID string, m Message, approvalID string, outcome json.RawMessage, at time.Time) (Entry, error)
	// Entries returns the session's transcript in order.
	Entries(ctx context.Context, sessionID string) ([]Entry, error)

	gate.Store
	// CreateApprovals stores decided approvals in one transaction, all or none (the automatic
	// audit records of nested calls, written in batches). A grouped record (Count > 0) whose id
	// is stored already is merged into that row: its count grows by Count, its lastAt becomes
	// the later one, the rest stays (issue 19); CreateApproval merges one the same way.
	CreateApprovals(ctx context.Context, as []gate.Approval) error
	// Approvals lists a session's approvals in creation order; status "" means every status. A
	// grouped record stands for Count calls (gate.Approval.Calls).
	Approvals(ctx context.Context, sessionID string, status gate.Status) ([]gate.Approval, error)
	// SetSessionMode sets a session's mode (SPEC §14); apperr.NotFound for an unknown id.
	SetSessionMode(ctx context.Context, id string, mode gate.Mode) error
	// The rules people made (SPEC §14): the rulebook reads them at start and writes changes
	// and hits.
	gate.RuleStore
	// PendingApprovals lists every session's pending approvals (used at restart).
	PendingApprovals(ctx context.Context) ([]gate.Approval, error)
	// SessionsInState lists the sessions in a state (used at restart).
	SessionsInState(ctx context.Context, st State) ([]Session, error)
}

// Observer is told what operators count (SPEC §16 metrics: cmd/web wires a Prometheus one);
// Config.Observer nil tells nobody. Its methods are called on the calls' path: they must be
// quick and must not block.
type Observer interface {
	// RunStarted: a run started (a message sent, or a parked run resumed at start).
	RunStarted()
	// ToolCall: a call of tool (model-issued or nested) ended with outcome: ok, error (its
	// result has isError), denied, blocked, timed_out, cancelled or interrupted.
	ToolCall(tool, outcome string)
	// Decided: a person decided an approval: wait is from the prompt's creation to the
	// decision, start from the decision to the call's start (0 when it was not approved).
	Decided(wait, start time.Duration)
}
