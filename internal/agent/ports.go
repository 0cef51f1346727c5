package agent

import (
	"context"
	"encoding/json"

	"countersign/internal/gate"
)

// ToolSpec is a tool as declared to a model: name, description and inputSchema.
type ToolSpec struct {
	Name        string          `json:"name"`
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Request is one model request: the transcript so far and the declared tools.
type Request struct {
	SessionID string
	Messages  []Message
	Tools     []ToolSpec
}

// Delta is one streamed piece of an assistant message: text, or a tool call announced.
type Delta struct {
	Text     string
	ToolCall *Block
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
	// DeleteSession deletes a session with its transcript, approvals, grants and share links;
	// apperr.NotFound for an unknown id.
	DeleteSession(ctx context.Context, id string) error
	// AppendEntry stores m as the session's next entry and returns it with its Seq; records, if
	// any, are stored in the same transaction (all or nothing): the automatic audit records of
	// the message's calls.
	AppendEntry(ctx context.Context, sessionID string, m Message, records ...gate.Approval) (Entry, error)
	// Entries returns the session's transcript in order.
	Entries(ctx context.Context, sessionID string) ([]Entry, error)

	gate.Store
	// CreateApprovals stores decided approvals in one transaction, all or none (the automatic
	// audit records of nested calls, written in batches).
	CreateApprovals(ctx context.Context, as []gate.Approval) error
	// Approvals lists a session's approvals in creation order; status "" means every status.
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
