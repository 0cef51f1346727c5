package gate

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"countersign/internal/apperr"
)

// Several approvers (SPEC §15 "Several approvers"). An ask rule may require Approvers (N ≥ 2)
// distinct people to approve a call and may name the only Reviewers who may decide it ("owner"
// stands for the session's owner). The approval the rule opens carries both; each person's
// answer is a Vote stored with it, one per name. Any deny ends it denied; the Nth distinct
// approve ends it approved. Every person's decision (owner page, JSON API, share links, decision
// links) goes through Service.Decide, which checks who may decide once, then Gate.castPerson,
// which counts the vote; Gate.Decide with a Decider does both itself. No decide path skips them.

// MinApprovers is the smallest Approvers a rule may require; 0 and 1 mean "one person", as
// every approval without the field.
const MinApprovers = 2

// MaxApprovers bounds Approvers (a rule asking for more people than could ever answer is a typo).
const MaxApprovers = 20

// Vote is one person's answer to an approval that needs several approvers: who (By, a person's
// name: "owner", a named link's person, a decision link's recipient), through which link (Via,
// nil for the owner), Approved or Denied, the reason they gave, and when (UTC).
type Vote struct {
	By       string    `json:"by"`
	Via      *LinkRef  `json:"via,omitempty"`
	Decision Status    `json:"decision"` // approved | denied
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// Quorum reports whether a needs several approvers (Approvers ≥ MinApprovers).
func (a Approval) Quorum() bool { return a.Approvers >= MinApprovers }

// Approvals is how many distinct people approved a so far.
func (a Approval) Approvals() int {
	n := 0
	for _, v := range a.Votes {
		if v.Decision == Approved {
			n++
		}
	}
	return n
}

// VotesText is the votes line a prompt shows (SPEC §15): "1 of 2 approvals — approved by
// alice", "0 of 2 approvals", "2 of 2 approvals — approved by alice, bob", with a denial
// after: "— denied by bob"; "" when a needs one person.
func (a Approval) VotesText() string {
	if !a.Quorum() {
		return ""
	}
	var approvers, deniers []string
	for _, v := range a.Votes {
		if v.Decision == Approved {
			approvers = append(approvers, v.By)
		} else {
			deniers = append(deniers, v.By)
		}
	}
	s := fmt.Sprintf("%d of %d approvals", len(approvers), a.Approvers)
	if len(approvers) > 0 {
		s += " — approved by " + strings.Join(approvers, ", ")
	}
	if len(deniers) > 0 {
		s += " — denied by " + strings.Join(deniers, ", ")
	}
	return s
}

// MayDecide reports whether d may decide a (SPEC §15): anyone the session lets decide when a
// names no Reviewers and needs one person; otherwise only people whose name is fixed — the
// owner, a link created for a person, a decision link's recipient, never a name a reviewer chose
// on an unnamed link (they could choose "alice", or a new name per vote) — and, when Reviewers
// are named, only those ("owner" is the owner), matched as people (PersonKey: a reviewer "alice"
// is the person a link for "аlice", Cyrillic а, names). Errors: apperr.Forbidden with the reason.
func (a Approval) MayDecide(d Decider) error {
	if len(a.Reviewers) == 0 && !a.Quorum() {
		return nil
	}
	if d.ChoseName {
		return apperr.Errorf(apperr.Forbidden,
			"This call needs named people (%s): a name chosen on a shared link does not count. Ask the owner for a link made for you.", a.whoText())
	}
	if len(a.Reviewers) > 0 && !slices.ContainsFunc(a.Reviewers, func(n string) bool { return SamePerson(n, d.Name) }) {
		return apperr.Errorf(apperr.Forbidden, "%s is not a listed reviewer of this call (reviewers: %s).", d.Name, strings.Join(a.Reviewers, ", "))
	}
	return nil
}

func (a Approval) whoText() string {
	if len(a.Reviewers) > 0 {
		return "reviewers: " + strings.Join(a.Reviewers, ", ")
	}
	return fmt.Sprintf("%d approvals", a.Approvers)
}

// decideVote is Decide for a person's decision (Resolution.Source FromPerson): it loads the
// approval, checks the decider against its reviewers (MayDecide), and for an approval that needs
// several approvers stores the decision as a vote (Store.CastVote, atomic: two votes at once are
// counted both, and only one of them resolves it). It answers the approval as it now is: still
// pending after a vote that did not reach Approvers (shown, the call keeps waiting), resolved
// otherwise. A second approve by the same person changes nothing and answers the approval as it
// is (200, not 409: a double click or a retried request from a phone must not look like a
// failure, and counting once is what matters); a deny after one's own approve is
// apperr.Conflict (one vote per person; the owner can still stop the run).
func (g *Gate) decideVote(ctx context.Context, id string, by Decider, r Resolution) (a Approval, changed bool, err error) {
	a, err = g.store.Approval(ctx, id)
	if err != nil {
		return Approval{}, false, err
	}
	if a.Status != Pending {
		return Approval{}, false, apperr.Errorf(apperr.Conflict, "approval already resolved")
	}
	if err := a.MayDecide(by); err != nil {
		return Approval{}, false, err
	}
	return g.castPerson(ctx, a, by, r)
}

// castPerson stores a person's decision on a, read just before and pending, whose reviewers let
// by decide: a resolution when a needs one person, else a vote, as decideVote says.
func (g *Gate) castPerson(ctx context.Context, a Approval, by Decider, r Resolution) (_ Approval, changed bool, err error) {
	id := a.ID
	if !a.Quorum() {
		a, err = g.store.ResolveApproval(ctx, id, r)
		return a, err == nil, err
	}
	if r.Scope == Session || len(r.EditedArguments) > 0 || r.RuleID != "" {
		return Approval{}, false, apperr.Errorf(apperr.Invalid,
			"This call needs %d approvals: each person approves or denies it as asked (no edits, no approving for the session).", a.Approvers)
	}
	if r.Status != Approved && r.Status != Denied {
		return Approval{}, false, apperr.Errorf(apperr.Invalid, "a vote approves or denies")
	}
	return g.store.CastVote(ctx, id, Vote{By: by.Name, Via: by.Via, Decision: r.Status, Reason: r.Reason, At: r.At}, a.Approvers)
}

// MaxReviewers bounds a rule's Reviewers.
const MaxReviewers = 50

// CheckQuorum checks a rule's people (SPEC §15): Approvers is 0 or from MinApprovers to
// MaxApprovers, Reviewers are distinct people (PersonKey: "alice" and "аlice" are one), non-empty, at most MaxReviewers and hold no comma; both
// only on an ask rule (an allow or deny rule decides without anyone). A rule asking for more
// approvers than it names reviewers could never pass and is refused too. The error says what
// is wrong, in words for the person who wrote the rule.
func (r Rule) CheckQuorum() error {
	if r.Approvers == 0 && len(r.Reviewers) == 0 {
		return nil
	}
	if r.Effect != Ask {
		return fmt.Errorf("approvers and reviewers apply to ask rules only: this %s rule decides without asking anyone", r.Effect)
	}
	if r.Approvers != 0 && (r.Approvers < MinApprovers || r.Approvers > MaxApprovers) {
		return fmt.Errorf("approvers must be from %d to %d (leave it out for one person), not %d", MinApprovers, MaxApprovers, r.Approvers)
	}
	if len(r.Reviewers) > MaxReviewers {
		return fmt.Errorf("at most %d reviewers", MaxReviewers)
	}
	seen := map[string]string{} // PersonKey → the name as listed
	for _, n := range r.Reviewers {
		first, twice := seen[PersonKey(n)]
		switch {
		case PersonKey(n) == "": // blank, or nothing visible ("\u200b")
			return fmt.Errorf("a reviewer's name is empty")
		case strings.ContainsRune(n, ','):
			return fmt.Errorf("reviewer %q: a name holds no comma", n)
		case twice && first == n:
			return fmt.Errorf("reviewer %q is listed twice", n)
		case twice:
			return fmt.Errorf("reviewers %q and %q are one person (the names look alike)", first, n)
		}
		seen[PersonKey(n)] = n
	}
	if len(r.Reviewers) > 0 && r.Approvers > len(r.Reviewers) {
		return fmt.Errorf("approvers=%d needs at least %d reviewers, not %d", r.Approvers, r.Approvers, len(r.Reviewers))
	}
	return nil
}

// SplitQuorum splits a rule's text form into its pattern and its people (SPEC §15), the
// inverse of Rule.QuorumText: "run_command(git push:*) approvers=2 reviewers=alice,bob" →
// ("run_command(git push:*)", 2, ["alice", "bob"]). The people follow the pattern (after its
// closing ")" when it has a specifier), each once, separated by spaces. Text without them comes
// back as it is. Errors: a value that is not a number, an empty list, or a key given twice.
func SplitQuorum(text string) (pattern string, approvers int, reviewers []string, err error) {
	text = strings.TrimSpace(text)
	cut := strings.IndexByte(text, ' ')
	if open := strings.IndexByte(text, '('); open >= 0 && (cut < 0 || open < cut) {
		cut = strings.LastIndexByte(text, ')') + 1
		if cut == 0 {
			return text, 0, nil, nil // no closing ")": the rule parser says so
		}
	}
	if cut < 0 || cut >= len(text) {
		return text, 0, nil, nil
	}
	fields := strings.Fields(text[cut:])
	for _, f := range fields {
		if !strings.HasPrefix(f, "approvers=") && !strings.HasPrefix(f, "reviewers=") {
			return text, 0, nil, nil // not ours: the pattern's own text (the parser judges it)
		}
	}
	seen := map[string]bool{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		if seen[k] {
			return "", 0, nil, fmt.Errorf("%s is given twice", k)
		}
		seen[k] = true
		switch k {
		case "approvers":
			n, err := strconv.Atoi(v)
			if err != nil {
				return "", 0, nil, fmt.Errorf("approvers=%s: want a number such as approvers=2", v)
			}
			approvers = n
		case "reviewers":
			if v == "" {
				return "", 0, nil, fmt.Errorf("reviewers= lists no one: want reviewers=alice,bob")
			}
			reviewers = strings.Split(v, ",")
		}
	}
	return strings.TrimSpace(text[:cut]), approvers, reviewers, nil
}
