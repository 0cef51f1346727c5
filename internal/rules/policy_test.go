package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"countersign/internal/gate"
)

func writePolicy(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadPolicyFile(t *testing.T) {
	p := writePolicy(t, `{"permissions": {"allow": ["run_command(git status)", "run_command(go test:*)"],
                 "ask":   ["write_file(.github/**)"],
                 "deny":  ["run_command(rm -rf:*)"],
                 "defaultMode": "plan"},
 "rules": [{"effect": "deny", "tool": "pay__*", "when": "args.amount >= 1000", "note": "big payments"},
           {"effect": "allow", "tool": "github__create_issue(repo=acme/*)"}]}
`)
	pol, err := LoadPolicyFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if pol.DefaultMode != gate.ModePlan {
		t.Fatalf("mode %q", pol.DefaultMode)
	}
	want := []struct {
		id, text string
		eff      gate.Effect
		pos      string
	}{
		{"policy:1", "run_command(git status)", gate.Allow, p + ":1:28"},
		{"policy:2", "run_command(go test:*)", gate.Allow, p + ":1:55"},
		{"policy:3", "write_file(.github/**)", gate.Ask, p + ":2:28"},
		{"policy:4", "run_command(rm -rf:*)", gate.Deny, p + ":3:28"},
		{"policy:5", "pay__*", gate.Deny, p + ":5:12"},
		{"policy:6", "github__create_issue(repo=acme/*)", gate.Allow, p + ":6:12"},
	}
	if len(pol.Rules) != len(want) {
		t.Fatalf("%d rules: %+v", len(pol.Rules), pol.Rules)
	}
	for i, w := range want {
		t.Run(w.id, func(t *testing.T) {
			r := pol.Rules[i]
			if r.ID != w.id || Text(r) != w.text || r.Effect != w.eff || r.Pos != w.pos ||
				r.Source != gate.SourcePolicyFile || r.Scope != gate.ScopeServer || r.CreatedBy != "policy.json" || !r.ReadOnly() {
				t.Fatalf("rule %+v, want %+v", r, w)
			}
		})
	}
	if pol.Rules[4].When != "args.amount >= 1000" || pol.Rules[4].Note != "big payments" {
		t.Fatalf("rule 5 %+v", pol.Rules[4])
	}
	set := mustCompile(t, pol.Rules)
	if d := set.Evaluate(call("pay__send", map[string]int{"amount": 1000})); d.Effect != gate.Deny {
		t.Fatalf("the policy's rules must apply: %+v", d)
	}
}

func TestLoadPolicyFileDefaults(t *testing.T) {
	pol, err := LoadPolicyFile(writePolicy(t, `{}`))
	if err != nil || pol.DefaultMode != gate.ModeDefault || len(pol.Rules) != 0 {
		t.Fatalf("%+v %v", pol, err)
	}
}

func TestLoadPolicyFileErrors(t *testing.T) {
	cases := []struct {
		name, body string
		want       string // after "<file>:"
	}{
		{"syntax error", "{\"permissions\": {\"allow\": [\"read_file\",]}}", `1:40: invalid character ']' looking for beginning of value`},
		{"syntax error line 2", "{\n  \"rules\": [\n    {\"effect\" \"deny\"}]}", `3:15: invalid character '"' after object key`},
		{"truncated", "{\"rules\": [", `1:12: unexpected end of file`},
		{"not an object", `[]`, `1:1: the policy file must be an object`},
		{"unknown top key", "{\n  \"permission\": {}}", `2:3: unknown key "permission" (want permissions or rules)`},
		{"unknown permissions key", `{"permissions": {"allowed": []}}`, `1:18: unknown key "allowed" in permissions (want allow, ask, deny or defaultMode)`},
		{"unknown rule key", "{\"rules\": [\n  {\"effect\": \"deny\", \"tools\": \"x\"}]}", `2:22: unknown key "tools" in a rule (want effect, tool, when, note, approvers or reviewers)`},
		{"unknown effect", "{\"rules\": [\n  {\"effect\": \"block\", \"tool\": \"x\"}]}", `2:14: unknown effect "block" (want allow, ask or deny)`},
		{"unknown mode", `{"permissions": {"defaultMode": "yolo"}}`, `1:33: unknown mode "yolo" (want default, plan or accept-edits)`},
		{"rule text syntax", `{"permissions": {"deny": ["run_command(rm:*"]}}`, `1:44: rule "run_command(rm:*": missing ")" at the end of the rule`},
		{"bad specifier", "{\"permissions\": {\n \"deny\": [\"write_file(docs/[**)\"]}}", `2:11: rule "write_file(docs/[**)": path specifier "docs/[**" is not a valid glob`},
		{"bad command specifier in rules", "{\"rules\": [{\"effect\": \"allow\",\n \"tool\": \"run_command(git $(x):*)\"}]}", `2:10: rule "run_command(git $(x):*)": run_command specifier "git $(x):*": word $(x) is not literal (quote glob characters, braces, ~ and $)`},
		{"cel error", "{\"rules\": [{\"effect\": \"deny\", \"tool\": \"pay__*\",\n   \"when\": \"args.amount >\"}]}", "2:12: when: ERROR: <input>:1:14: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | args.amount >\n | .............^"},
		{"rule without tool", `{"rules": [{"effect": "deny"}]}`, `1:12: a rule needs "tool"`},
		{"allow not array", `{"permissions": {"allow": "read_file"}}`, `1:27: "allow" must be an array`},
		{"trailing data", `{} {}`, `1:4: unexpected { after the policy object`},
		// Duplicate keys: which one counts differs between readers (a review started a file
		// with "permissions" twice without a word).
		{"duplicate top key", `{"permissions": {}, "permissions": {}}`, `1:21: duplicate key "permissions"`},
		{"duplicate permissions key", `{"permissions": {"defaultMode": "plan", "defaultMode": "default"}}`, `1:41: duplicate key "defaultMode"`},
		{"duplicate rule key", `{"rules": [{"effect": "deny", "tool": "x", "effect": "allow"}]}`, `1:44: duplicate key "effect"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writePolicy(t, tc.body)
			_, err := LoadPolicyFile(p)
			if err == nil || err.Error() != p+":"+tc.want {
				t.Fatalf("error\n%v\nwant\n%s:%s", err, p, tc.want)
			}
		})
	}
}

func TestLoadPolicyFileSeveralApprovers(t *testing.T) {
	p := writePolicy(t, `{"permissions": {"ask": ["run_command(git push:*) approvers=2 reviewers=alice,bob"]},
 "rules": [{"effect": "ask", "tool": "deploy", "approvers": 3, "reviewers": ["owner", "alice", "bob"]}]}`)
	pol, err := LoadPolicyFile(p)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		approvers int
		reviewers string
		text      string
	}{
		{"text form", 2, "alice,bob", "run_command(git push:*) approvers=2 reviewers=alice,bob"},
		{"rule object", 3, "owner,alice,bob", "deploy approvers=3 reviewers=owner,alice,bob"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := pol.Rules[i]
			if r.Approvers != tc.approvers || strings.Join(r.Reviewers, ",") != tc.reviewers || r.Text() != tc.text {
				t.Fatalf("got %d %v %q, want %d %s %q", r.Approvers, r.Reviewers, r.Text(), tc.approvers, tc.reviewers, tc.text)
			}
		})
	}
}

func TestLoadPolicyFileRefusesApproversOutsideAskRules(t *testing.T) {
	cases := []struct {
		name, body string
		want       string // after "<file>:"
	}{
		{"approvers on an allow rule", "{\"rules\": [\n  {\"effect\": \"allow\", \"tool\": \"deploy\", \"approvers\": 2}]}",
			`2:41: approvers and reviewers apply to ask rules only: this allow rule decides without asking anyone`},
		{"reviewers on a deny rule", "{\"rules\": [{\"effect\": \"deny\", \"tool\": \"x\",\n \"reviewers\": [\"alice\"]}]}",
			`2:2: approvers and reviewers apply to ask rules only: this deny rule decides without asking anyone`},
		{"approvers in an allow text", `{"permissions": {"allow": ["deploy approvers=2"]}}`,
			`1:28: rule "deploy approvers=2": approvers and reviewers apply to ask rules only: this allow rule decides without asking anyone`},
		{"one approver", `{"rules": [{"effect": "ask", "tool": "x", "approvers": 1}]}`,
			`1:43: approvers must be from 2 to 20 (leave it out for one person), not 1`},
		{"not a number", `{"rules": [{"effect": "ask", "tool": "x", "approvers": "2"}]}`,
			`1:56: "approvers" must be a whole number such as 2`},
		{"text not a number", `{"permissions": {"ask": ["x approvers=two"]}}`,
			`1:26: rule "x approvers=two": approvers=two: want a number such as approvers=2`},
		{"more approvers than reviewers", `{"rules": [{"effect": "ask", "tool": "x", "approvers": 3, "reviewers": ["a", "b"]}]}`,
			`1:43: approvers=3 needs at least 3 reviewers, not 2`},
		{"reserved reviewer name", `{"rules": [{"effect": "ask", "tool": "x", "reviewers": ["p0licy"]}]}`,
			`1:43: reviewer "p0licy": "p0licy" is or looks like "policy", a name the audit uses for the owner or for automatic decisions; give your own name.`},
		{"reviewer twice", `{"rules": [{"effect": "ask", "tool": "x", "reviewers": ["a", "a"]}]}`,
			`1:43: reviewer "a" is listed twice`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writePolicy(t, tc.body)
			_, err := LoadPolicyFile(p)
			if err == nil || err.Error() != p+":"+tc.want {
				t.Fatalf("error\n%v\nwant\n%s:%s", err, p, tc.want)
			}
		})
	}
}
