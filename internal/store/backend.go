package store

import (
	"context"
	"encoding/json"
	"time"

	"countersign/internal/aap"
	"countersign/internal/agent"
	"countersign/internal/connections"
	"countersign/internal/gate"
	"countersign/internal/notify"
	"countersign/internal/share"
)

// Backend is the store contract (issue 21, SPEC §16): every method of the store the program
// uses, implemented by the SQLite store (internal/store/sqlite, the default) and the PostgreSQL
// store (internal/store/pg), both the one SQL store (*SQL) over their connections. Both pass one
// conformance suite (internal/store/storetest), which is where the contract's behaviour is
// pinned down: the same results, orders and apperr codes (and user messages) for the same
// calls. The methods' doc comments on *SQL are the contract's documentation; a backend differs
// only where it says so.
//
// Times are UTC with nanoseconds on both backends; ids are the caller's.
type Backend interface {
	// Sessions (session.go).
	CreateSession(ctx context.Context, s agent.Session) error
	Session(ctx context.Context, id string) (agent.Session, error)
	Sessions(ctx context.Context) ([]agent.Session, error)
	SessionsInState(ctx context.Context, st agent.State) ([]agent.Session, error)
	SetSessionState(ctx context.Context, id string, st agent.State) error
	SetSessionTitle(ctx context.Context, id, title string) error
	SetSessionInstructions(ctx context.Context, id, instructions string) error
	SetSessionMode(ctx context.Context, id string, mode gate.Mode) error
	SetActiveTools(ctx context.Context, id string, names []string) error
	DeleteSession(ctx context.Context, id string) error
	IdleSessions(ctx context.Context, before time.Time) ([]string, error)
	AppendEntry(ctx context.Context, sessionID string, m agent.Message, records ...gate.Approval) (agent.Entry, error)
	Entries(ctx context.Context, sessionID string) ([]agent.Entry, error)

	// Approvals (approval.go).
	CreateApproval(ctx context.Context, a gate.Approval) error
	CreateApprovals(ctx context.Context, as []gate.Approval) error
	ResolveApproval(ctx context.Context, id string, r gate.Resolution) (gate.Approval, error)
	Approval(ctx context.Context, id string) (gate.Approval, error)
	Approvals(ctx context.Context, sessionID string, status gate.Status) ([]gate.Approval, error)
	PendingApprovals(ctx context.Context) ([]gate.Approval, error)
	// Inbox lists a page of the pending approvals of every session or one, oldest first, with
	// their sessions' titles and workspaces; PendingCount counts them (sessionID "": every
	// session; SPEC §15).
	Inbox(ctx context.Context, q agent.InboxQuery) ([]agent.InboxItem, error)
	PendingCount(ctx context.Context, sessionID string) (int, error)
	PendingCountFor(ctx context.Context, sessionID, person string) (int, error)
	// Webhook notifications (SPEC §15): SetNotify turns the outbox on (call it before the store
	// is used concurrently); the delivery workers (one per replica) claim due rows
	// (ClaimDeliveries, RenewClaim, ReleaseClaims), wait for NextDeliveryAt and write
	// RecordAttempt (notify.Outbox); the audit page lists Deliveries; a decision link is read by
	// its token's hash and used once (DecisionLink, UseDecisionLink).
	SetNotify(receivers []notify.Receiver, links notify.LinkTokens, wake func())
	ClaimDeliveries(ctx context.Context, c notify.Claim, limit int) ([]notify.Delivery, error)
	RenewClaim(ctx context.Context, id string, c notify.Claim) (bool, error)
	ReleaseClaims(ctx context.Context, by string) error
	NextDeliveryAt(ctx context.Context, by string, now time.Time) (time.Time, bool, error)
	RecordAttempt(ctx context.Context, id string, a notify.Attempt, next *time.Time) error
	Deliveries(ctx context.Context, sessionID string) ([]notify.Delivery, error)
	DecisionLink(ctx context.Context, tokenHash string) (notify.Link, error)
	UseDecisionLink(ctx context.Context, id string, at time.Time) error
	// ForgetReceivers deletes the unused decision links of receivers not in keep and gives up
	// their pending events (a receiver removed from -notify-webhook; issue 33).
	ForgetReceivers(ctx context.Context, keep []string, now time.Time) (int64, error)
	// CastVote stores a person's vote on an approval that needs need approvals (SPEC §15): a
	// deny resolves it at once, the need-th approve resolves it approved (gate.Store.CastVote).
	CastVote(ctx context.Context, id string, v gate.Vote, need int) (gate.Approval, bool, error)

	// Rules and session grants (rules.go).
	CreateRule(ctx context.Context, r gate.Rule) error
	Rules(ctx context.Context) ([]gate.Rule, error)
	DeleteRule(ctx context.Context, id string) error
	AddRuleHits(ctx context.Context, hits []gate.RuleHits) error
	CreateGrant(ctx context.Context, g gate.Grant) error
	Grant(ctx context.Context, sessionID, toolName string) (gate.Grant, error)
	Grants(ctx context.Context, sessionID string) ([]gate.Grant, error)
	DeleteGrant(ctx context.Context, sessionID, toolName string) error

	// Share links (share.go).
	CreateShare(ctx context.Context, l share.Link) error
	Share(ctx context.Context, id string) (share.Link, error)
	ShareByHash(ctx context.Context, tokenHash string) (share.Link, error)
	Shares(ctx context.Context, sessionID string) ([]share.Link, error)
	RevokeShare(ctx context.Context, id string, at time.Time) (share.Link, error)
	TouchShare(ctx context.Context, id string, at time.Time) error

	// Agent sessions and their outside calls (outside.go, SPEC §18).
	AgentSession(ctx context.Context, connectionID, agentSessionID string) (agent.Session, error)
	UpdateAgentSession(ctx context.Context, id string, info agent.AgentInfo) error
	CreateOutsideCall(ctx context.Context, c gate.OutsideCall) error
	CreateDecidedOutsideCall(ctx context.Context, a gate.Approval, c gate.OutsideCall) error
	AppendOutsideCall(ctx context.Context, sessionID string, m agent.Message, a gate.Approval, c gate.OutsideCall) (agent.Entry, error)
	OutsideCall(ctx context.Context, approvalID string) (gate.OutsideCall, error)
	OutsideCallByKey(ctx context.Context, sessionID, key string) (gate.OutsideCall, error)
	OutsideCallByToolUse(ctx context.Context, sessionID, toolUseID string) (gate.OutsideCall, error)
	OutsideCalls(ctx context.Context, sessionID string) ([]gate.OutsideCall, error)
	MarkStoppedWaiting(ctx context.Context, approvalID string, at *time.Time) error
	WaitAgain(ctx context.Context, approvalID string, deadline time.Time) error
	SetOutsideEditedKey(ctx context.Context, approvalID, key string) error
	ClaimOutsideCall(ctx context.Context, sessionID, approvalID string, at time.Time) (bool, error)
	SetOutsideOutcome(ctx context.Context, approvalID string, outcome json.RawMessage, at time.Time) error
	AppendOutsideOutcome(ctx context.Context, sessionID string, m agent.Message, approvalID string, outcome json.RawMessage, at time.Time) (agent.Entry, error)

	// Door 3's approval requests (aap.go, SPEC §18: the Agent Approval Protocol v1).
	CreateAAPRequest(ctx context.Context, r aap.Request) error
	AAPRequest(ctx context.Context, id string) (aap.Request, error)
	AAPRequestByKey(ctx context.Context, connectionID, key string) (aap.Request, error)
	AAPRequestsDue(ctx context.Context, at time.Time) ([]aap.Request, error)
	AAPPendingRequests(ctx context.Context, connectionID string) ([]aap.Request, error)
	AAPRequestByApproval(ctx context.Context, approvalID string) (aap.Request, error)
	AAPRetainedSessions(ctx context.Context, since time.Time) ([]string, error)
	CreateAAPInstance(ctx context.Context, in aap.Instance) error
	AAPInstance(ctx context.Context, id string) (aap.Instance, error)
	AAPInstanceByKey(ctx context.Context, key string) (aap.Instance, error)
	AAPInstanceByConnection(ctx context.Context, connectionID string) (aap.Instance, error)
	DeleteAAPInstance(ctx context.Context, id string, at time.Time) error
	AAPEventsToMake(ctx context.Context) ([]aap.Event, error)
	CreateAAPEvent(ctx context.Context, e aap.Event) error
	DueAAPEvents(ctx context.Context, now time.Time, limit int) ([]aap.Event, error)
	RecordAAPAttempt(ctx context.Context, id string, at time.Time, delivered bool, next *time.Time) error
	AAPInstanceUpdate(ctx context.Context, instanceID, key string) (digest string, response []byte, err error)
	ClaimAAPEvent(ctx context.Context, id string, next, until time.Time) (bool, error)
	UpdateAAPInstance(ctx context.Context, in aap.Instance, key, digest string, response []byte, at time.Time) error

	// Connections of the agents people already run (connections.go, SPEC §18).
	CreateConnection(ctx context.Context, c connections.Connection) error
	Connection(ctx context.Context, id string) (connections.Connection, error)
	ConnectionByTokenHash(ctx context.Context, hash string) (connections.Connection, error)
	Connections(ctx context.Context) ([]connections.Connection, error)
	RevokeConnection(ctx context.Context, id string, at time.Time) (connections.Connection, error)
	TouchConnection(ctx context.Context, id string, at time.Time) error

	// Owner logins (owner.go).
	CreateOwnerSession(ctx context.Context, idHash string, createdAt, expiresAt time.Time) error
	OwnerSessionExpiry(ctx context.Context, idHash string) (time.Time, error)
	DeleteOwnerSession(ctx context.Context, idHash string) error

	// Operations.

	// SetOnCommit sets the observer told how long each commit took and how many writes it held
	// (the store commit latency of SPEC §16's metrics); nil for none. Call it before the first
	// write.
	SetOnCommit(fn func(d time.Duration, writes int))
	// Clock reads the database's clock (the webhook workers' claims compare it, SPEC §16).
	Clock(ctx context.Context) (time.Time, error)
	// OutboxPending counts the webhook deliveries neither delivered nor given up (a metric).
	OutboxPending(ctx context.Context) (int, error)
	// Failed token attempts per client address, by the database's clock (SPEC §16; FailToken,
	// TokenWait in tokenfailures.go).
	FailToken(ctx context.Context, client string, every time.Duration, burst int) error
	TokenWait(ctx context.Context, client string, every time.Duration, burst int) (time.Duration, error)
	// Ready reports whether the database answers and has every migration applied (GET /readyz):
	// nil, or an error saying which part failed.
	Ready(ctx context.Context) error
	// Close releases the database's connections; statements in flight finish first.
	Close() error
}

// Compile-time checks: a Backend is what the agent (and through it the gate and the rulebook),
// share links and connections need.
var (
	_ agent.Store       = Backend(nil)
	_ share.Store       = Backend(nil)
	_ connections.Store = Backend(nil)
)
