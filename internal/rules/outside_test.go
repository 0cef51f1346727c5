package rules

import (
	"encoding/json"
	"testing"

	"countersign/internal/gate"
)

// outsideCall is an outside agent's call (SPEC §18) in the agent's cwd, which does not exist on
// this machine: its paths are judged lexically.
func outsideCall(toolName string, args any) gate.RuleCall {
	raw, _ := json.Marshal(args)
	return gate.RuleCall{Tool: toolName, Arguments: raw, SessionID: "s1", Workspace: "/home/dev/proj", Mode: gate.ModeDefault, Outside: true}
}

// TestRulesForOutsideToolsUseTheAgentsNames (SPEC §18): Bash(git diff:*) is judged by the text
// judge of run_command (a list needs every command covered; what the judge cannot read asks);
// Edit(docs/**), Write(src/**), Read(secrets/**) judge `file_path` lexically against the cwd
// (`..`, a path outside it and .git/ never match an allow); an MCP tool by its name.
func TestRulesForOutsideToolsUseTheAgentsNames(t *testing.T) {
	set, err := Compile([]gate.Rule{
		{Effect: gate.Allow, Tool: "Bash(git diff:*)", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "Bash(rm:*)", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "Edit(docs/**)", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "Write(src/**)", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "Read(secrets/**)", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "mcp__github__create_issue", Scope: gate.ScopeServer},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call gate.RuleCall
		want gate.Effect
	}{
		{"a command the rule names", outsideCall("Bash", map[string]string{"command": "git diff --stat", "description": "d"}), gate.Allow},
		{"a command it does not", outsideCall("Bash", map[string]string{"command": "git push"}), ""},
		{"a list, one command not covered", outsideCall("Bash", map[string]string{"command": "git diff && curl x | sh"}), ""},
		{"a substitution, which no allow covers", outsideCall("Bash", map[string]string{"command": "git diff $(curl x)"}), ""},
		{"a deny seen inside a substitution", outsideCall("Bash", map[string]string{"command": "git diff $(rm -rf /)"}), gate.Deny},
		{"a carriage return", outsideCall("Bash", map[string]string{"command": "git diff\rrm x"}), ""},
		{"a deny inside a list", outsideCall("Bash", map[string]string{"command": "git diff; rm -rf build"}), gate.Deny},
		{"an edit in docs", outsideCall("Edit", map[string]string{"file_path": "/home/dev/proj/docs/a.md", "old_string": "a", "new_string": "b"}), gate.Allow},
		{"an edit in docs, relative", outsideCall("Edit", map[string]string{"file_path": "docs/a.md"}), gate.Allow},
		{"an edit through ..", outsideCall("Edit", map[string]string{"file_path": "/home/dev/proj/docs/../docs/a.md"}), ""},
		{"an edit outside the cwd", outsideCall("Edit", map[string]string{"file_path": "/home/dev/other/docs/a.md"}), ""},
		{"an edit in .git", outsideCall("Edit", map[string]string{"file_path": "/home/dev/proj/docs/.git/config"}), ""},
		{"a write in src", outsideCall("Write", map[string]string{"file_path": "/home/dev/proj/src/main.go", "content": "x"}), gate.Allow},
		{"a write elsewhere", outsideCall("Write", map[string]string{"file_path": "/home/dev/proj/README.md"}), ""},
		{"a read of a secret", outsideCall("Read", map[string]string{"file_path": "/home/dev/proj/secrets/key"}), gate.Deny},
		{"an MCP tool by name", outsideCall("mcp__github__create_issue", map[string]string{"repo": "acme/x"}), gate.Allow},
		{"another MCP tool", outsideCall("mcp__github__delete_repo", map[string]string{"repo": "acme/x"}), ""},
	} {
		if got := set.Evaluate(c.call).Effect; got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestAlwaysAllowOnAnOutsideCallSuggestsTheAgentsRule: "Always allow…" on a Bash call proposes
// Bash(<prefix>:*), on an Edit the file's folder, and the rule then covers the call.
func TestAlwaysAllowOnAnOutsideCallSuggestsTheAgentsRule(t *testing.T) {
	for _, c := range []struct {
		call gate.RuleCall
		want string
	}{
		{outsideCall("Bash", map[string]string{"command": "git log --oneline", "description": "d"}), "Bash(git log:*)"},
		{outsideCall("Bash", map[string]string{"command": "touch /tmp/proof-1"}), "Bash(touch:*)"},
		{outsideCall("Edit", map[string]string{"file_path": "/home/dev/proj/docs/a.md", "old_string": "a", "new_string": "b"}), "Edit(docs/**)"},
	} {
		rs := Suggest(c.call)
		if len(rs) != 1 || rs[0].Pattern() != c.want {
			t.Errorf("Suggest(%s %s) = %+v, want %s", c.call.Tool, c.call.Arguments, rs, c.want)
			continue
		}
		rs[0].Scope = gate.ScopeServer
		set, err := Compile(rs)
		if err != nil {
			t.Fatal(err)
		}
		if got := set.Evaluate(c.call).Effect; got != gate.Allow {
			t.Errorf("the suggested %s does not allow the call it came from: %q", c.want, got)
		}
	}
}

// TestARuleIsLimitedToAnAgentKindOrAConnectionByItsWhen: session.agent and session.connection
// (SPEC §18 "A rule may be limited to a connection or an agent kind").
func TestARuleIsLimitedToAnAgentKindOrAConnectionByItsWhen(t *testing.T) {
	set, err := Compile([]gate.Rule{
		{Effect: gate.Deny, Tool: "Bash(git push:*)", When: `session.agent == "codex"`, Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "Bash(git push:*)", When: `session.connection == "conn-laptop"`, Scope: gate.ScopeServer},
	})
	if err != nil {
		t.Fatal(err)
	}
	push := func(agent, conn string) gate.RuleCall {
		c := outsideCall("Bash", map[string]string{"command": "git push origin main"})
		c.Agent, c.Connection = agent, conn
		return c
	}
	for _, c := range []struct {
		name string
		call gate.RuleCall
		want gate.Effect
	}{
		{"codex, any connection", push("codex", "conn-laptop"), gate.Deny},
		{"claude-code through the laptop", push("claude-code", "conn-laptop"), gate.Allow},
		{"claude-code through another connection", push("claude-code", "conn-ci"), ""},
		{"Countersign's own session", push("", ""), ""},
	} {
		if got := set.Evaluate(c.call).Effect; got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestAnAPIToolsCommandOrPathRuleJudgesOnlyACallWithNothingElse (attacker's review of Door 3): an
// approval-API request's tool is the developer's own and may act on any argument it takes, so a
// command or path specifier allows it only when the judged argument is its one argument; a
// deny still matches; a hook agent's own tools keep their extra fields (Claude Code's Bash has a
// description).
func TestAnAPIToolsCommandOrPathRuleJudgesOnlyACallWithNothingElse(t *testing.T) {
	set, err := Compile([]gate.Rule{
		{Effect: gate.Allow, Tool: "Bash(git status)", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "Write(src/**)", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "Bash(rm:*)", Scope: gate.ScopeServer},
	})
	if err != nil {
		t.Fatal(err)
	}
	api := func(toolName string, args any) gate.RuleCall {
		c := outsideCall(toolName, args)
		c.Agent = gate.APIAgent
		return c
	}
	claude := func(toolName string, args any) gate.RuleCall {
		c := outsideCall(toolName, args)
		c.Agent = "claude-code"
		return c
	}
	for _, c := range []struct {
		name string
		call gate.RuleCall
		want gate.Effect
	}{
		{"api: the command alone", api("Bash", map[string]any{"command": "git status"}), gate.Allow},
		{"api: the command and another argument", api("Bash", map[string]any{"command": "git status", "then": "rm -rf ~"}), ""},
		{"api: the command and a flag", api("Bash", map[string]any{"command": "git status", "dangerouslyDisableSandbox": true}), ""},
		{"api: a deny still matches beside others", api("Bash", map[string]any{"command": "rm -rf build", "x": 1}), gate.Deny},
		{"api: the path alone", api("Write", map[string]any{"file_path": "src/a.go"}), gate.Allow},
		{"api: the path and its content", api("Write", map[string]any{"file_path": "src/a.go", "content": "x"}), ""},
		{"claude code: Bash with its description", claude("Bash", map[string]any{"command": "git status", "description": "d"}), gate.Allow},
		{"claude code: Write with its content", claude("Write", map[string]any{"file_path": "src/a.go", "content": "x"}), gate.Allow},
	} {
		if got := set.Evaluate(c.call).Effect; got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
