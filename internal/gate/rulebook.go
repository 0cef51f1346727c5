package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"countersign/internal/apperr"
)

// RuleStore keeps the rules people made (SPEC §14: sources prompt and api); the policy file's
// rules are never stored.
type RuleStore interface {
	// Rules lists every stored rule, oldest first, with its stored hits and last use.
	Rules(ctx context.Context) ([]Rule, error)
	// CreateRule stores r (its ID set). Errors: apperr.Conflict for an id that exists,
	// apperr.NotFound for a session-scope rule of an unknown session.
	CreateRule(ctx context.Context, r Rule) error
	// DeleteRule deletes rule id; apperr.NotFound when there is none.
	DeleteRule(ctx context.Context, id string) error
	// AddRuleHits adds counted hits to stored rules and moves their last use forward; rules that
	// no longer exist are skipped.
	AddRuleHits(ctx context.Context, hits []RuleHits) error
}

// RuleHits is hits counted in memory for one rule since the last flush, and its last use.
type RuleHits struct {
	ID         string
	Hits       int64
	LastUsedAt time.Time
}

// RuleParser splits a rule's text form ("run_command(git diff:*)") into its tool pattern and
// specifier; package internal/rules provides the real one (rules.Parse). An error says what is
// wrong and where.
type RuleParser func(text string) (tool, specifier string, err error)

// Rulebook holds the rules the gate evaluates (SPEC §14): the policy file's, given at start, in
// memory and read-only, and the stored ones, compiled together with a RuleCompiler once at load and
// again on every change. The compiled set is swapped copy-on-write behind an atomic pointer:
// Evaluate, on every call's hot path, takes no lock and reads no store. Hits are counted in memory
// there and written to the store by Flush (Run's ticker, and at shutdown), off the hot path.
type Rulebook struct {
	compile RuleCompiler
	store   RuleStore
	policy  []Rule
	now     func() time.Time

	mu  sync.Mutex // serializes changes (Load, Add, Delete) and Flush
	cur atomic.Pointer[ruleSet]
}

// ruleSet is one compiled generation of the rules. It never changes once published, but for its
// counters, which are atomic and carried from one generation to the next by rule id.
type ruleSet struct {
	rules    []Rule // policy-file rules first, then stored ones, oldest first
	eval     RuleEvaluator
	counters map[string]*ruleCounter
	err      error // what the compiler refused, if anything (the other rules still apply)
}

// ruleCounter counts a rule's hits since the Rulebook loaded it; flushed of them are in the store.
type ruleCounter struct {
	hits, flushed atomic.Int64
	last          atomic.Int64 // unix nanoseconds of the last hit, 0 for none
}

// NewRulebook returns a rulebook of policy (the policy file's rules) and, after Load, the stored
// rules. compile nil means ExactCompiler. It holds the policy rules alone until Load.
func NewRulebook(compile RuleCompiler, store RuleStore, policy []Rule) *Rulebook {
	if compile == nil {
		compile = ExactCompiler
	}
	b := &Rulebook{compile: compile, store: store, policy: slices.Clone(policy), now: time.Now}
	b.publish(slices.Clone(b.policy), nil)
	return b
}

// Load reads the stored rules and compiles them with the policy file's. A stored rule that no
// longer compiles is skipped (the others apply) and reported by Err. Errors: the store's.
func (b *Rulebook) Load(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	stored, err := b.store.Rules(ctx)
	if err != nil {
		return err
	}
	b.publish(append(slices.Clone(b.policy), stored...), b.cur.Load())
	return nil
}

// publish compiles rules and makes them the current set; counters of rules that stay carry over.
// Callers hold mu (or own b exclusively).
func (b *Rulebook) publish(rules []Rule, prev *ruleSet) {
	eval, err := b.compile(rules)
	if eval == nil {
		eval = noRules{}
	}
	s := &ruleSet{rules: rules, eval: eval, err: err, counters: make(map[string]*ruleCounter, len(rules))}
	for _, r := range rules {
		if prev != nil && prev.counters[r.ID] != nil {
			s.counters[r.ID] = prev.counters[r.ID]
		} else {
			s.counters[r.ID] = &ruleCounter{}
		}
	}
	b.cur.Store(s)
}

type noRules struct{}

func (noRules) Evaluate(RuleCall) RuleDecision { return RuleDecision{} }

// Evaluate decides c by the current rules (a RuleEvaluator). No lock, no store read.
func (b *Rulebook) Evaluate(c RuleCall) RuleDecision { return b.cur.Load().eval.Evaluate(c) }

// Hit counts a hit for r, the rule that decided a call (Checker.Check calls it when a rule's
// decision stood: an allow rule that plan mode overrode has no hit). In memory only; Flush
// writes it.
func (b *Rulebook) Hit(r *Rule) {
	if ctr := b.cur.Load().counters[r.ID]; ctr != nil {
		ctr.hits.Add(1)
		ctr.last.Store(b.now().UnixNano())
	}
}

// Err is what the compiler refused of the current rules (nil when it took them all).
func (b *Rulebook) Err() error { return b.cur.Load().err }

// Rules lists every rule, the policy file's first, each with its hits and last use as counted so
// far (stored plus counted in memory).
func (b *Rulebook) Rules() []Rule {
	s := b.cur.Load()
	out := slices.Clone(s.rules)
	for i := range out {
		ctr := s.counters[out[i].ID]
		if ctr == nil {
			continue
		}
		out[i].Hits += ctr.hits.Load()
		if ns := ctr.last.Load(); ns != 0 {
			t := time.Unix(0, ns).UTC()
			if out[i].LastUsedAt == nil || t.After(*out[i].LastUsedAt) {
				out[i].LastUsedAt = &t
			}
		}
	}
	return out
}

// Rule returns rule id as Rules lists it, or apperr.NotFound.
func (b *Rulebook) Rule(id string) (Rule, error) {
	for _, r := range b.Rules() {
		if r.ID == id {
			return r, nil
		}
	}
	return Rule{}, apperr.Errorf(apperr.NotFound, "rule %s not found", id)
}

// Check validates r as a rule people may save: its scope has what it needs (a session id, a
// workspace), it is not a policy-file rule, and the compiler takes it. Errors: apperr.Invalid
// with the compiler's message.
func (b *Rulebook) Check(r Rule) error {
	switch r.Scope {
	case ScopeSession:
		if r.SessionID == "" {
			return apperr.Errorf(apperr.Invalid, "A session rule needs a session.")
		}
	case ScopeWorkspace:
		if r.Workspace == "" {
			return apperr.Errorf(apperr.Invalid, "A workspace rule needs a workspace folder.")
		}
	case ScopeServer:
	default:
		return apperr.Errorf(apperr.Invalid, "scope must be session, workspace or server, not %q", r.Scope)
	}
	switch r.Effect {
	case Allow, Ask, Deny:
	default:
		return apperr.Errorf(apperr.Invalid, "effect must be allow, ask or deny, not %q", r.Effect)
	}
	if r.Source == SourcePolicyFile {
		return apperr.Errorf(apperr.Invalid, "Only the policy file makes policy-file rules.")
	}
	if err := r.CheckQuorum(); err != nil {
		return apperr.Errorf(apperr.Invalid, "%s", err.Error())
	}
	if _, err := b.compile([]Rule{r}); err != nil {
		return apperr.Errorf(apperr.Invalid, "%s", err.Error())
	}
	return nil
}

// Add checks r (Check), stores it with a new id and its creation time, and makes it apply to
// the next call. It returns the rule as stored. Errors: Check's, the store's.
func (b *Rulebook) Add(ctx context.Context, r Rule) (Rule, error) {
	if err := b.Check(r); err != nil {
		return Rule{}, err
	}
	r.ID, r.CreatedAt, r.Hits, r.LastUsedAt = "r-"+strings.ToLower(NewID()[:16]), b.now().UTC(), 0, nil
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.store.CreateRule(ctx, r); err != nil {
		return Rule{}, err
	}
	prev := b.cur.Load()
	b.publish(append(slices.Clone(prev.rules), r), prev)
	return r, nil
}

// Delete deletes rule id for the next call (calls already decided stay decided). Errors:
// apperr.NotFound for an unknown id; apperr.Forbidden for a policy-file rule (change the file).
func (b *Rulebook) Delete(ctx context.Context, id string) (Rule, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev := b.cur.Load()
	i := slices.IndexFunc(prev.rules, func(r Rule) bool { return r.ID == id })
	if i < 0 {
		return Rule{}, apperr.Errorf(apperr.NotFound, "rule %s not found", id)
	}
	r := prev.rules[i]
	if r.ReadOnly() {
		return Rule{}, apperr.Errorf(apperr.Forbidden, "Rule %s comes from the policy file and is read-only; change the file and restart.", r.Text())
	}
	if err := b.store.DeleteRule(ctx, id); err != nil && apperr.CodeOf(err) != apperr.NotFound {
		return Rule{}, err
	}
	b.publish(slices.Delete(slices.Clone(prev.rules), i, i+1), prev)
	return r, nil
}

// ForgetSession drops the session rules of a deleted session from memory (the store deletes
// their rows with the session).
func (b *Rulebook) ForgetSession(sessionID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev := b.cur.Load()
	kept := slices.DeleteFunc(slices.Clone(prev.rules), func(r Rule) bool {
		return r.Scope == ScopeSession && r.SessionID == sessionID
	})
	if len(kept) != len(prev.rules) {
		b.publish(kept, prev)
	}
}

// Flush writes the hits counted since the last flush of stored rules to the store (policy-file
// rules are counted in memory only). Errors: the store's; the hits stay counted for the next.
func (b *Rulebook) Flush(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.cur.Load()
	var batch []RuleHits
	var ctrs []*ruleCounter
	var deltas []int64
	for _, r := range s.rules {
		if r.ReadOnly() {
			continue
		}
		ctr := s.counters[r.ID]
		n := ctr.hits.Load()
		d := n - ctr.flushed.Load()
		if d <= 0 {
			continue
		}
		batch = append(batch, RuleHits{ID: r.ID, Hits: d, LastUsedAt: time.Unix(0, ctr.last.Load()).UTC()})
		ctrs, deltas = append(ctrs, ctr), append(deltas, d)
	}
	if len(batch) == 0 {
		return nil
	}
	if err := b.store.AddRuleHits(ctx, batch); err != nil {
		return fmt.Errorf("flush rule hits: %w", err)
	}
	for i, ctr := range ctrs {
		ctr.flushed.Add(deltas[i])
	}
	return nil
}

// Run flushes hits every interval until ctx ends, then once more (with a fresh context, so a
// shutdown keeps the last counts). Errors are passed to logErr and retried at the next tick.
func (b *Rulebook) Run(ctx context.Context, every time.Duration, logErr func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := b.Flush(ctx); err != nil && logErr != nil {
				logErr(err)
			}
		case <-ctx.Done():
			if err := b.Flush(context.WithoutCancel(ctx)); err != nil && logErr != nil {
				logErr(err)
			}
			return
		}
	}
}

// ExactCompiler is the RuleCompiler used until package internal/rules is wired in: it takes
// rules without a specifier or a `when` whose tool is an exact name or "*" (what "Approve for
// session" makes) and refuses the others, naming them. Scope and expiry apply; deny beats ask
// beats allow.
func ExactCompiler(rules []Rule) (RuleEvaluator, error) {
	e := exactRules{}
	var errs []error
	for _, r := range rules {
		if r.Specifier != "" || r.When != "" || strings.ContainsAny(r.Tool, "*?[") && r.Tool != "*" {
			errs = append(errs, fmt.Errorf("rule %s: this server has no rules engine for specifiers, conditions or tool globs", r.Text()))
			continue
		}
		e[r.Tool] = append(e[r.Tool], r)
	}
	return e, errors.Join(errs...)
}

type exactRules map[string][]Rule

func (e exactRules) Evaluate(c RuleCall) RuleDecision {
	var best RuleDecision
	rank := func(ef Effect) int {
		switch ef {
		case Deny:
			return 3
		case Ask:
			return 2
		case Allow:
			return 1
		}
		return 0
	}
	now := time.Now()
	for _, list := range [2][]Rule{e[c.Tool], e["*"]} {
		for i := range list {
			r := &list[i]
			if r.ExpiresAt != nil && r.ExpiresAt.Before(now) {
				continue
			}
			if (r.Scope == ScopeSession && r.SessionID != c.SessionID) || (r.Scope == ScopeWorkspace && r.Workspace != c.Workspace) {
				continue
			}
			if rank(r.Effect) > rank(best.Effect) {
				best = RuleDecision{Effect: r.Effect, Rule: r}
			}
		}
	}
	return best
}
