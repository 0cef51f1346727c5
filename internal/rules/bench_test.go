package rules

import (
	"fmt"
	"testing"

	"countersign/internal/gate"
)

// benchRules is 1,000 rules: 10 on run_command, 10 on write_file, 10 on github__create_issue,
// 5 glob patterns that match none of them, and the rest on other tools.
func benchRules() []gate.Rule {
	var rs []gate.Rule
	add := func(eff gate.Effect, toolName, spec string) {
		rs = append(rs, gate.Rule{ID: fmt.Sprint(len(rs)), Effect: eff, Tool: toolName, Specifier: spec, Scope: gate.ScopeServer})
	}
	for _, c := range []string{"git diff:*", "go test:*", "git status", "ls:*", "go vet:*", "make:*", "cat:*", "npm run:*"} {
		add(gate.Allow, "run_command", c)
	}
	add(gate.Deny, "run_command", "rm:*")
	add(gate.Ask, "run_command", "git push:*")
	for i := 0; i < 9; i++ {
		add(gate.Allow, "write_file", fmt.Sprintf("dir%d/**", i))
	}
	add(gate.Deny, "write_file", "secrets/**")
	for i := 0; i < 9; i++ {
		add(gate.Allow, "github__create_issue", fmt.Sprintf("repo=org%d/*", i))
	}
	add(gate.Deny, "github__create_issue", "repo=acme/private")
	for i := 0; i < 5; i++ {
		add(gate.Allow, fmt.Sprintf("mcp%d__*", i), "")
	}
	for len(rs) < 1000 {
		add(gate.Allow, fmt.Sprintf("tool_%d", len(rs)), "")
	}
	return rs
}

func BenchmarkSetEvaluate(b *testing.B) {
	set := mustCompile(b, benchRules())
	if set.Len() != 1000 {
		b.Fatalf("%d rules", set.Len())
	}
	cases := []struct {
		name string
		call gate.RuleCall
		want gate.Effect
	}{
		{"write_file path", call("write_file", map[string]string{"path": "dir3/a/b.md", "content": "hello"}), gate.Allow},
		{"key=glob", call("github__create_issue", map[string]string{"repo": "org7/web", "title": "bug"}), gate.Allow},
		{"no rule on tool", call("read_file", map[string]string{"path": "a.go"}), ""},
		{"run_command", commandCall("git diff HEAD~1 -- internal/ && go test ./internal/rules/"), gate.Allow},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			if d := set.Evaluate(tc.call); d.Effect != tc.want {
				b.Fatalf("got %+v", d)
			}
			b.ReportAllocs()
			for b.Loop() {
				set.Evaluate(tc.call)
			}
		})
	}
}
