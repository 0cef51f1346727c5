package gate

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/tool"
)

// Status is an approval's state (SPEC §3). Pending is the only state that changes.
type Status string

// The approval states.
const (
	Pending   Status = "pending"
	Approved  Status = "approved"
	Denied    Status = "denied"
	TimedOut  Status = "timed_out"
	Cancelled Status = "cancelled"
)

// Word is the status as people read it: "approved", "denied", "timed out", "cancelled", "pending".
func (s Status) Word() string {
	if s == TimedOut {
		return "timed out"
	}
	return string(s)
}

// Outcome says how a resolved approval ended, as people read it after "already": "approved by
// alice", "denied by bob", "approved for this session by owner" (released by a session grant),
// "approved automatically (policy)", "timed out", "cancelled (Run stopped by owner)".
func (a Approval) Outcome() string {
	switch {
	case a.Status == TimedOut:
		return "timed out"
	case a.Status == Cancelled && a.Reason != "":
		return "cancelled (" + a.Reason + ")"
	case a.Status == Cancelled || a.DecidedBy == "":
		return a.Status.Word()
	case a.Automatic && a.DecidedBy == ByGrant && a.Reason != "":
		return a.Reason
	case a.Automatic && a.DecidedBy == ByRule && a.RuleText != "":
		return a.Status.Word() + " automatically (rule " + a.RuleText + ")"
	case a.Automatic && a.DecidedBy == ByMode && a.Mode != "":
		return a.Status.Word() + " automatically (" + string(a.Mode) + " mode)"
	case a.Automatic:
		return a.Status.Word() + " automatically (" + a.DecidedBy + ")"
	case a.Status == Approved && a.Approvals() > 1:
		var names []string
		for _, v := range a.Votes {
			if v.Decision == Approved {
				names = append(names, v.By)
			}
		}
		return "approved by " + strings.Join(names, " and ")
	}
	return a.Status.Word() + " by " + a.DecidedBy
}

// Scope says how far an approval reaches: this call only, or every later call of the same tool in
// the session (a session grant).
type Scope string

// The scopes.
const (
	Once    Scope = "once"
	Session Scope = "session"
)

// RequestedByModel is Approval.RequestedBy for a call the model made; a nested call's is the
// name of the tool that made it.
const RequestedByModel = "model"

// Approval is one gated call and its decision (SPEC §3 "Approvals"). Arguments are the arguments
// as asked and never change; EditedArguments, when set, are the validated arguments the decider
// approved instead. Automatic approvals record decisions made by rules (policy, grant, handler).
type Approval struct {
	ID               string           `json:"id"`
	SessionID        string           `json:"sessionId"`
	MessageID        string           `json:"messageId"` // the assistant message whose call (or descendant) asked
	ToolCallID       string           `json:"toolCallId"`
	ParentToolCallID string           `json:"parentToolCallId,omitempty"`
	ToolName         string           `json:"toolName"`
	ToolTitle        string           `json:"toolTitle,omitempty"`
	Arguments        json.RawMessage  `json:"arguments"`
	EditedArguments  json.RawMessage  `json:"editedArguments,omitempty"`
	Annotations      tool.Annotations `json:"annotations"`
	RequestedBy      string           `json:"requestedBy"` // RequestedByModel, or the parent tool's name
	// AskReason is why the call waited for a person (AskReason's text, shown after "asks
	// because"); "" on a rule's record.
	AskReason  string    `json:"askReason,omitempty"`
	Status     Status    `json:"status"`
	Automatic  bool      `json:"automatic"`
	DecidedBy  string    `json:"decidedBy,omitempty"`
	DecidedVia *LinkRef  `json:"decidedVia,omitempty"` // the share link a reviewer decided through; nil for the owner and rules
	Reason     string    `json:"reason,omitempty"`
	Scope      Scope     `json:"scope,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	// ExpiresAt is a pending approval's absolute deadline, fixed when it opens (Gate.OpenID:
	// creation + the approval timeout): a restart or another replica's takeover keeps it (SPEC
	// §16). nil for automatic records and approvals stored by an older version.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	DecidedAt *time.Time `json:"decidedAt,omitempty"`
	// DerivedFrom is, on an automatic decision that a session grant made, the id of the human
	// approval that granted it.
	DerivedFrom string `json:"derivedFrom,omitempty"`
	// DecisionSource says what decided (SPEC §14 audit): a handler, a rule, the mode, the
	// annotation default, or a person; "" on approvals stored before rules existed.
	DecisionSource DecisionSource `json:"decisionSource,omitempty"`
	// RuleID, RuleText and RuleSource name the rule that decided (DecisionSource FromRule, or
	// the ask rule that made the call wait); "" otherwise.
	RuleID     string     `json:"ruleId,omitempty"`
	RuleText   string     `json:"ruleText,omitempty"`
	RuleSource RuleSource `json:"ruleSource,omitempty"`
	// Mode is the session's mode when the gate decided the call ("" before modes existed).
	Mode Mode `json:"mode,omitempty"`
	// RuleScope is, on a person's decision that saved a rule ("Always allow…", "Approve for
	// session"), that rule's scope: how far the decision reaches (Scope stays Session, "more
	// than this call"); RuleID, RuleText and RuleSource name the rule then. "" otherwise.
	RuleScope RuleScope `json:"ruleScope,omitempty"`
	// Count is, on a grouped audit record, how many calls it stands for (issue 19): the nested
	// calls of one parent call that rules allowed the same way — same tool, decision source,
	// rule, mode, decider and scope — are recorded as one row whose Count adds up. 0 on every
	// other record, which stands for one call (Calls). On a grouped record ToolCallID,
	// Arguments, CreatedAt and DecidedAt are the first counted call's; the parent's nestedCalls
	// record keeps each call.
	Count int `json:"count,omitempty"`
	// LastAt is, on a grouped record, when the last call it counts was decided (UTC); nil on
	// every other record.
	LastAt *time.Time `json:"lastAt,omitempty"`
	// Approvers is how many distinct people must approve (SPEC §15; ≥ 2), copied from the ask
	// rule that opened the approval; 0 when one person decides. Reviewers are the only names
	// that may decide ("owner" for the owner); empty: anyone who may decide the session.
	Approvers int      `json:"approvers,omitempty"`
	Reviewers []string `json:"reviewers,omitempty"`
	// Votes are the people's answers so far to an approval with Approvers, in the order they
	// came (one per name); empty otherwise.
	Votes []Vote `json:"votes,omitempty"`
	// Preview is what the tool showed of the call's effect when the approval opened (a
	// write_file's file content then: tool.Preview), stored with it: the prompt's diff is drawn
	// from it, and it says which content the call was approved against. nil when the tool has
	// none (issue 19).
	Preview *tool.Preview `json:"preview,omitempty"`
}

// Calls is how many gated calls a stands for: Count on a grouped record, else 1. Whatever counts
// gated calls sums Calls over the records, not the records.
func (a Approval) Calls() int {
	return max(a.Count, 1)
}

// Grouped reports whether a is a grouped audit record (Count > 0), which stands for every call
// it counts.
func (a Approval) Grouped() bool { return a.Count > 0 }

// Grant is a session grant (SPEC §3 "approve for this session"): later calls of ToolName in the
// session skip the prompt. ApprovalID is the human decision that made it. Since SPEC §14 a grant
// is a view of a grant-shaped rule (Rule.GrantShaped; GrantOf), kept for the issue-15 grants API.
type Grant struct {
	SessionID  string    `json:"sessionId"`
	ToolName   string    `json:"toolName"`
	ApprovalID string    `json:"approvalId"`
	GrantedBy  string    `json:"grantedBy"`
	GrantedVia *LinkRef  `json:"grantedVia,omitempty"` // the share link it was granted through; nil for the owner
	CreatedAt  time.Time `json:"createdAt"`
}

// GrantOf is the grant view of a grant-shaped rule (Rule.GrantShaped).
func GrantOf(r Rule) Grant {
	return Grant{SessionID: r.SessionID, ToolName: r.Tool, ApprovalID: r.FromApproval, GrantedBy: r.CreatedBy,
		GrantedVia: r.CreatedVia, CreatedAt: r.CreatedAt}
}

// EffectiveArguments are the arguments the call runs with: the edit when there is one.
func (a Approval) EffectiveArguments() json.RawMessage {
	if len(a.EditedArguments) > 0 {
		return a.EditedArguments
	}
	return a.Arguments
}

// Resolution is a decision applied to a pending approval.
type Resolution struct {
	Status          Status
	DecidedBy       string
	DecidedVia      *LinkRef // the share link of a reviewer's decision; nil otherwise
	Reason          string
	Scope           Scope
	EditedArguments json.RawMessage
	Automatic       bool
	At              time.Time
	DerivedFrom     string
	// Source is what decided (FromPerson for a prompt's answer; FromRule when a rule released
	// it; FromHandler/"" for timeouts and cancellations). RuleID, RuleText and RuleSource name
	// the rule that released it; "" keeps what the approval had.
	Source     DecisionSource
	RuleID     string
	RuleText   string
	RuleSource RuleSource
	// RuleScope is the scope of the rule a person's decision saved (Approval.RuleScope); ""
	// keeps what the approval had.
	RuleScope RuleScope
	// Decider is, on a person's decision, who decides (DecidedBy and DecidedVia are its Name and
	// Via): Decide checks them against the approval's reviewers and counts their vote when it
	// needs several approvers (SPEC §15). nil for rules, timeouts and cancellations.
	Decider *Decider
}

// Store keeps approvals. ResolveApproval must be atomic: it changes only a pending approval
// (in SQL: UPDATE … WHERE status = 'pending') and answers apperr.Conflict otherwise, or
// apperr.NotFound for an unknown id.
type Store interface {
	CreateApproval(ctx context.Context, a Approval) error
	ResolveApproval(ctx context.Context, id string, r Resolution) (Approval, error)
	Approval(ctx context.Context, id string) (Approval, error)
	// CastVote stores v on pending approval id that needs need approvals (SPEC §15), atomically
	// with the count: a deny resolves it denied (DecidedBy v.By, v's reason); the need-th
	// distinct approve resolves it approved (DecidedBy v.By); otherwise it stays pending. It
	// returns the approval as now stored, with its Votes, and whether v was counted: false when
	// v.By had already approved (nothing changes). Errors: apperr.NotFound, apperr.Conflict
	// ("approval already resolved", or v.By already voted otherwise).
	CastVote(ctx context.Context, id string, v Vote, need int) (a Approval, counted bool, err error)
}

// Gate stores approvals, shows them (through notify) and makes calls wait for their decision.
// The first decision wins, atomically in the store; the waiting call wakes on a one-slot channel.
type Gate struct {
	store   Store
	notify  func(Approval)
	timeout time.Duration
	now     func() time.Time

	mu      sync.Mutex
	waiters map[string]chan Approval
	// watchers are the readers of a decision that do not hold the call (an AAP long poll,
	// Watch): woken, never handed the approval, by every decision and by Wake.
	watchers map[string]map[*watcher]struct{}
}

// New returns a gate over store. notify is called, outside any lock, after an approval is stored
// and after it is resolved; it must not block. timeout is how long an approval may stay pending
// (SPEC §3, default 15 minutes).
func New(store Store, timeout time.Duration, notify func(Approval)) *Gate {
	if notify == nil {
		notify = func(Approval) {}
	}
	return &Gate{store: store, notify: notify, timeout: timeout, now: time.Now, waiters: map[string]chan Approval{}}
}

// NewID returns a new random id (130 bits, base32).
func NewID() string { return rand.Text() }

// Ticket is a stored, shown, pending approval whose call waits for a decision.
type Ticket struct {
	g        *Gate
	Approval Approval
	ch       chan Approval
	timeout  time.Duration // from now to the deadline
	limit    time.Duration // the approval timeout it was opened with, for the timed-out reason
}

// Open stores a as pending, then shows it. The call waits with Ticket.Wait; opening every
// approval of a batch before waiting on any is how a batch's prompts appear together. A zero
// a.CreatedAt is now; a caller that decided the call earlier passes that moment, so the audit
// (in CreatedAt order) lists a batch's prompts and automatic records in the model's order.
func (g *Gate) Open(ctx context.Context, a Approval) (*Ticket, error) {
	return g.OpenID(ctx, NewID(), a)
}

// OpenID is Open with the approval's id chosen by the caller (a fresh NewID): for a caller that
// must know the id before the approval is visible (DecideOutside registers what the agent
// honours under it first).
func (g *Gate) OpenID(ctx context.Context, id string, a Approval) (*Ticket, error) {
	a.ID = id
	a.Status = Pending
	now := g.now().UTC()
	if a.CreatedAt.IsZero() {
		a.CreatedAt = now
	}
	if a.ExpiresAt == nil {
		exp := a.CreatedAt.Add(g.timeout)
		a.ExpiresAt = &exp
	}
	// Register the waiter before the approval is visible, so no decision can miss it.
	ch := make(chan Approval, 1)
	g.mu.Lock()
	g.waiters[a.ID] = ch
	g.mu.Unlock()
	if err := g.store.CreateApproval(ctx, a); err != nil {
		g.drop(a.ID)
		return nil, err
	}
	g.notify(a)
	return &Ticket{g: g, Approval: a, ch: ch, timeout: max(a.ExpiresAt.Sub(now), 0), limit: a.ExpiresAt.Sub(a.CreatedAt)}, nil
}

// Attach makes a call wait on an approval that is already stored and pending — one parked by an
// earlier process (SPEC §8) or by another replica (SPEC §16). It times out at the approval's
// stored deadline (ExpiresAt), whatever this gate's timeout: a restart or a takeover neither
// extends nor shortens it. An approval stored without one (by an older version) times out at
// its creation + this gate's timeout.
func (g *Gate) Attach(a Approval) *Ticket {
	ch := make(chan Approval, 1)
	g.mu.Lock()
	g.waiters[a.ID] = ch
	g.mu.Unlock()
	deadline := g.Deadline(a)
	return &Ticket{g: g, Approval: a, ch: ch, timeout: max(deadline.Sub(g.now()), 0), limit: deadline.Sub(a.CreatedAt)}
}

// Deadline is when pending approval a times out: its stored ExpiresAt, else (stored by an older
// version) its creation + the gate's timeout.
func (g *Gate) Deadline(a Approval) time.Time {
	if a.ExpiresAt != nil {
		return *a.ExpiresAt
	}
	return a.CreatedAt.Add(g.timeout)
}

// ErrParked, as (or wrapped by) the cause of a waiting call's context, makes Ticket.Wait leave
// the approval pending for a later process to pick up (SPEC §8), instead of cancelling it: a
// graceful shutdown parks what a killed process would have left parked.
var ErrParked = errors.New("approval parked for the next process")

// Wait blocks until the approval is decided, times out, or ctx ends, and returns it resolved.
// On ctx's end the approval becomes cancelled with context.Cause(ctx) as its reason, unless that
// cause is ErrParked: then it is returned still pending, untouched in the store. On timeout it
// becomes timed_out. If a person's decision won the race, that decision is returned.
func (t *Ticket) Wait(ctx context.Context) Approval {
	g := t.g
	defer g.drop(t.Approval.ID)
	timer := time.NewTimer(t.timeout)
	defer timer.Stop()
	select {
	case a := <-t.ch:
		return a
	case <-timer.C:
		return t.settle(Resolution{Status: TimedOut, DecidedBy: ByTimeout, Automatic: true,
			Reason: "no decision within " + t.limit.String()})
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), ErrParked) {
			select {
			case a := <-t.ch: // decided just now: that decision stands
				return a
			default:
				return t.Approval
			}
		}
		reason := "cancelled"
		if c := context.Cause(ctx); c != nil {
			reason = c.Error()
		}
		return t.settle(Resolution{Status: Cancelled, DecidedBy: BySystem, Automatic: true, Reason: reason})
	}
}

// Cancel resolves the approval as cancelled by the system with reason (a call that Wait left
// parked but that cannot stay parked), unless a decision got there first; it returns the
// approval as resolved.
func (t *Ticket) Cancel(reason string) Approval {
	return t.settle(Resolution{Status: Cancelled, DecidedBy: BySystem, Automatic: true, Reason: reason})
}

// settle applies a rule's resolution unless a decision got there first, in which case it returns
// that decision.
func (t *Ticket) settle(r Resolution) Approval {
	g := t.g
	// A fresh context: the call's own context may be the one that ended.
	a, err := g.Decide(context.WithoutCancel(context.Background()), t.Approval.ID, r)
	if err == nil {
		return a
	}
	if apperr.CodeOf(err) == apperr.Conflict {
		select {
		case a := <-t.ch:
			return a
		case <-time.After(time.Second):
		}
		if a, err := g.store.Approval(context.Background(), t.Approval.ID); err == nil {
			return a
		}
	}
	// The store failed: fail closed, as a cancellation.
	a = t.Approval
	a.Status, a.Reason, a.Automatic = Cancelled, "approval could not be recorded: "+err.Error(), true
	return a
}

// Decide resolves a pending approval: the first decision wins (apperr.Conflict for later ones,
// apperr.NotFound for unknown ids). It shows the result, then wakes the waiting call, if any.
// A person's decision (r.Decider set) is checked against the approval's reviewers
// (apperr.Forbidden) and, when the approval needs several approvers, counted as a vote
// (decideVote): the approval may then come back still pending, shown with the vote.
func (g *Gate) Decide(ctx context.Context, id string, r Resolution) (a Approval, err error) {
	defer apperr.Wrap(&err, "Decide(%s)", id)
	if r, err = g.stamp(r); err != nil {
		return Approval{}, err
	}
	if r.Decider != nil {
		var changed bool
		a, changed, err = g.decideVote(ctx, id, *r.Decider, r)
		return g.land(a, changed, err)
	}
	if a, err = g.store.ResolveApproval(ctx, id, r); err != nil {
		return Approval{}, err
	}
	return g.land(a, true, nil)
}

// decideRead applies a person's resolution r (r.Decider set) to a, the approval as the caller
// read it just before, pending, with the decider's rights and place among its reviewers already
// checked (Service.Decide): the store is not read again. As Decide otherwise.
func (g *Gate) decideRead(ctx context.Context, a Approval, r Resolution) (_ Approval, err error) {
	defer apperr.Wrap(&err, "Decide(%s)", a.ID)
	if r, err = g.stamp(r); err != nil {
		return Approval{}, err
	}
	a, changed, err := g.castPerson(ctx, a, *r.Decider, r)
	return g.land(a, changed, err)
}

// stamp dates r (now, unless set) and checks that it resolves the approval.
func (g *Gate) stamp(r Resolution) (Resolution, error) {
	if r.At.IsZero() {
		r.At = g.now().UTC()
	}
	if r.Status == Pending || r.Status == "" {
		return r, apperr.Errorf(apperr.Invalid, "a decision must resolve the approval")
	}
	return r, nil
}

// land shows a decision the store took (changed: it changed the approval) and wakes the waiting
// call once the approval is resolved; a vote that leaves it pending is shown and wakes nothing.
func (g *Gate) land(a Approval, changed bool, err error) (Approval, error) {
	if err != nil {
		return Approval{}, err
	}
	if !changed {
		return a, nil // the same person approving again: counted once, nothing to show
	}
	if a.Status == Pending {
		// A vote counted, more needed: every page shows it (approval_updated); the call
		// keeps waiting.
		g.notify(a)
		return a, nil
	}
	// Shown before the call wakes: every viewer gets approval_resolved before anything the
	// resumed call publishes (its tool_execution_start, even its run's agent_end).
	g.notify(a)
	g.mu.Lock()
	ch, ok := g.waiters[a.ID]
	g.mu.Unlock()
	g.signal(a.ID)
	if ok {
		select {
		case ch <- a:
		default: // one slot and one decision: never full, but never block either
		}
	}
	return a, nil
}

// Wake hands approval id, as stored, to the call in this process that waits for it, if it is
// resolved and a call waits: a decision another replica stored (SPEC §16), which this gate's
// Decide never saw. A pending approval (a vote counted, more needed) wakes nothing. Errors: the
// store's.
func (g *Gate) Wake(ctx context.Context, id string) error {
	g.signal(id) // a watcher reads the store itself
	g.mu.Lock()
	ch, ok := g.waiters[id]
	g.mu.Unlock()
	if !ok {
		return nil
	}
	a, err := g.store.Approval(ctx, id)
	if err != nil || a.Status == Pending {
		return err
	}
	select {
	case ch <- a:
	default: // already woken (by a timeout's settle racing it, say): that answer stands
	}
	return nil
}

// Waiting reports whether a call in this process waits on approval id, or a reader watches it
// (Watch). An approval pending in
// the store with no waiter was parked by an earlier process (SPEC §8).
func (g *Gate) Waiting(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.waiters[id]
	return ok || len(g.watchers[id]) > 0
}

// Record stores an approval decided by a rule (policy allowed it, session grant, handler block),
// marked automatic, so the audit lists every gated call.
func (g *Gate) Record(ctx context.Context, a Approval) (Approval, error) {
	a, err := g.Automatic(a)
	if err != nil {
		return a, err
	}
	if err := g.store.CreateApproval(ctx, a); err != nil {
		return a, err
	}
	return a, nil
}

// Automatic stamps a as a decision a rule made now (a new id, createdAt = decidedAt = now,
// automatic), for a caller that stores it itself; Record is Automatic, then the store. Error: a
// has no final status.
func (g *Gate) Automatic(a Approval) (Approval, error) {
	now := g.now().UTC()
	a.ID, a.CreatedAt, a.DecidedAt, a.Automatic = NewID(), now, &now, true
	if a.Status == "" || a.Status == Pending {
		return a, errors.New("gate: an automatic decision needs a final status")
	}
	return a, nil
}

func (g *Gate) drop(id string) {
	g.mu.Lock()
	delete(g.waiters, id)
	g.mu.Unlock()
}
