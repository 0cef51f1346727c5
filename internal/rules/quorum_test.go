package rules

import (
	"testing"

	"countersign/internal/gate"
)

// TestTheAskRuleNeedingMorePeopleWins: when several ask rules match, the most restrictive asks
// (SPEC §14, §15): the one needing more approvers, then one naming reviewers, whatever their order.
func TestTheAskRuleNeedingMorePeopleWins(t *testing.T) {
	plain := gate.Rule{ID: "plain", Effect: gate.Ask, Tool: "run_command", Scope: gate.ScopeServer}
	named := gate.Rule{ID: "named", Effect: gate.Ask, Tool: "run_command", Scope: gate.ScopeServer, Reviewers: []string{"alice"}}
	two := gate.Rule{ID: "two", Effect: gate.Ask, Tool: "run_command(git push:*)", Scope: gate.ScopeServer, Approvers: 2}
	tests := []struct {
		name  string
		rules []gate.Rule
		want  string
	}{
		{"approvers first", []gate.Rule{two, plain}, "two"},
		{"approvers last", []gate.Rule{plain, named, two}, "two"},
		{"reviewers beat none", []gate.Rule{plain, named}, "named"},
		{"the first of equals", []gate.Rule{plain, {ID: "plain2", Effect: gate.Ask, Tool: "run_command", Scope: gate.ScopeServer}}, "plain"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := mustCompile(t, tc.rules).Evaluate(call("run_command", map[string]string{"command": "git push origin main"}))
			if d.Effect != gate.Ask || d.Rule == nil || d.Rule.ID != tc.want {
				t.Fatalf("decision %+v, want ask by %s", d, tc.want)
			}
		})
	}
}

// TestSplitQuorum: the text form of a rule's people, and text that only looks like it.
func TestSplitQuorum(t *testing.T) {
	tests := []struct {
		text, pattern string
		approvers     int
		reviewers     string
		err           bool
	}{
		{"run_command(git push:*) approvers=2 reviewers=alice,bob", "run_command(git push:*)", 2, "alice,bob", false},
		{"deploy reviewers=owner", "deploy", 0, "owner", false},
		{"run_command(echo approvers=2)", "run_command(echo approvers=2)", 0, "", false},
		{"run_command(echo a) approvers=2)", "run_command(echo a) approvers=2)", 0, "", false},
		{"deploy approvers=x", "", 0, "", true},
		{"deploy approvers=2 approvers=3", "", 0, "", true},
		{"deploy reviewers=", "", 0, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			p, n, r, err := gate.SplitQuorum(tc.text)
			if (err != nil) != tc.err {
				t.Fatalf("err %v", err)
			}
			if !tc.err && (p != tc.pattern || n != tc.approvers || joinNames(r) != tc.reviewers) {
				t.Fatalf("got %q %d %v", p, n, r)
			}
		})
	}
}

func joinNames(ns []string) string {
	s := ""
	for i, n := range ns {
		if i > 0 {
			s += ","
		}
		s += n
	}
	return s
}
