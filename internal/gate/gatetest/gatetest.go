// Package gatetest is a deliberately small rules engine for the pipeline's tests: it stands in for
// package internal/rules behind the gate.RuleCompiler and parser seams, so the pipeline, the store
// and the JSON API are tested without it. It is not SPEC §14's matcher: a rule's tool is an exact
// name or "*"; a specifier is a path prefix on the "path" argument ("secrets/**" matches
// "secrets/a" and "secrets/x/y"), or "bad…" to make the compiler refuse the rule; `when` is not
// supported (refused).
package gatetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"countersign/internal/gate"
)

// Compile is a gate.RuleCompiler: it skips the rules it refuses and names the first in its error.
func Compile(rs []gate.Rule) (gate.RuleEvaluator, error) {
	set := &Set{byTool: map[string][]gate.Rule{}}
	var errs []error
	for _, r := range rs {
		if err := check(r); err != nil {
			errs = append(errs, fmt.Errorf("rule %s: %w", r.Text(), err))
			continue
		}
		set.byTool[r.Tool] = append(set.byTool[r.Tool], r)
	}
	return set, errors.Join(errs...)
}

func check(r gate.Rule) error {
	switch r.Effect {
	case gate.Allow, gate.Ask, gate.Deny:
	default:
		return fmt.Errorf("unknown effect %q", r.Effect)
	}
	if r.Tool == "" {
		return errors.New("no tool")
	}
	if strings.HasPrefix(r.Specifier, "bad") {
		return fmt.Errorf("bad specifier %q", r.Specifier)
	}
	if r.When != "" {
		return errors.New("gatetest does not compile `when`")
	}
	return nil
}

// Set is what Compile returns.
type Set struct {
	byTool map[string][]gate.Rule
}

// Evaluate applies the rules of c's tool and of "*" that are in scope and not expired: deny beats
// ask beats allow.
func (s *Set) Evaluate(c gate.RuleCall) gate.RuleDecision {
	var best gate.RuleDecision
	for _, list := range [2][]gate.Rule{s.byTool[c.Tool], s.byTool["*"]} {
		for i := range list {
			r := &list[i]
			if !inScope(r, c) || !matches(r, c) {
				continue
			}
			if rank(r.Effect) > rank(best.Effect) {
				best = gate.RuleDecision{Effect: r.Effect, Rule: r, Reason: "rule " + r.Text() + " " + verbs[r.Effect]}
			}
		}
	}
	return best
}

func rank(e gate.Effect) int {
	switch e {
	case gate.Deny:
		return 3
	case gate.Ask:
		return 2
	case gate.Allow:
		return 1
	}
	return 0
}

var verbs = map[gate.Effect]string{gate.Allow: "allows the call", gate.Ask: "asks", gate.Deny: "denies the call"}

func inScope(r *gate.Rule, c gate.RuleCall) bool {
	if r.ExpiresAt != nil && r.ExpiresAt.Before(time.Now()) {
		return false
	}
	switch r.Scope {
	case gate.ScopeSession:
		return r.SessionID == c.SessionID
	case gate.ScopeWorkspace:
		return r.Workspace == c.Workspace
	}
	return true
}

func matches(r *gate.Rule, c gate.RuleCall) bool {
	if r.Specifier == "" {
		return true
	}
	var in struct {
		Path string `json:"path"`
	}
	if json.Unmarshal(c.Arguments, &in) != nil || in.Path == "" {
		return false
	}
	prefix := strings.TrimSuffix(r.Specifier, "**")
	return strings.HasPrefix(in.Path, prefix)
}

// Parse splits "tool(specifier)" into its tool and specifier, as rules.Parse will.
func Parse(text string) (tool, specifier string, err error) {
	text = strings.TrimSpace(text)
	open := strings.IndexByte(text, '(')
	if open < 0 {
		if text == "" || strings.ContainsAny(text, " )") {
			return "", "", fmt.Errorf("col 1: %q is not a rule", text)
		}
		return text, "", nil
	}
	if !strings.HasSuffix(text, ")") || open == 0 {
		return "", "", fmt.Errorf("col %d: unbalanced parenthesis", open+1)
	}
	return text[:open], text[open+1 : len(text)-1], nil
}

// Suggest proposes an allow rule for c's tool as a whole (a gate.RuleSuggester).
func Suggest(c gate.RuleCall) []gate.Rule {
	return []gate.Rule{{Effect: gate.Allow, Tool: c.Tool}}
}
