package gate_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"countersign/internal/gate"
	"countersign/internal/gate/gatetest"
	"countersign/internal/tool"
)

var update = flag.Bool("update", false, "rewrite testdata/decision-table.json from the expectation function")

// decisionRow is one row of testdata/decision-table.json (issue 17, acceptance 1): a tool's
// annotations (null = absent), the session's mode, the rule on the tool (none, allow, ask,
// deny), and what must happen: "prompt", "run" or "deny", with the audit source. A browser test
// reads the same file.
type decisionRow struct {
	ReadOnlyHint    *bool  `json:"readOnlyHint"`
	DestructiveHint *bool  `json:"destructiveHint"`
	OpenWorldHint   *bool  `json:"openWorldHint"`
	Mode            string `json:"mode"`
	Rule            string `json:"rule"`
	Outcome         string `json:"outcome"`
	Source          string `json:"source"`
}

func (r decisionRow) name() string {
	s := func(p *bool) string {
		if p == nil {
			return "absent"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("ro=%s,destr=%s,world=%s/%s/rule=%s", s(r.ReadOnlyHint), s(r.DestructiveHint), s(r.OpenWorldHint), r.Mode, r.Rule)
}

// expectDecision is SPEC §14's order written out independently of gate.Check: deny and ask rules
// first, then plan mode (read-only means read-only, even under an allow rule), then an allow
// rule, then (for a tool that writes no files, as here, accept-edits is the default) SPEC §3's
// annotation default.
func expectDecision(ro, destr, world *bool, mode, rule string) (outcome, source string) {
	switch rule {
	case "deny":
		return "deny", "rule"
	case "ask":
		return "prompt", "rule"
	}
	if mode == "plan" && (ro == nil || !*ro) {
		return "deny", "mode"
	}
	if rule == "allow" {
		return "run", "rule"
	}
	val := func(p *bool, def bool) bool {
		if p == nil {
			return def
		}
		return *p
	}
	if val(destr, false) {
		return "prompt", "annotation default"
	}
	if !val(ro, false) && (val(destr, true) || val(world, true)) {
		return "prompt", "annotation default"
	}
	return "run", "annotation default"
}

func allRows() []decisionRow {
	hints := []*bool{nil, tool.Bool(true), tool.Bool(false)}
	var rows []decisionRow
	for _, ro := range hints {
		for _, d := range hints {
			for _, w := range hints {
				for _, mode := range []string{"default", "plan", "accept-edits"} {
					for _, rule := range []string{"none", "allow", "ask", "deny"} {
						o, src := expectDecision(ro, d, w, mode, rule)
						rows = append(rows, decisionRow{ro, d, w, mode, rule, o, src})
					}
				}
			}
		}
	}
	return rows
}

// TestCheckFollowsTheDecisionTable: issue 17, acceptance 1. Every combination of the three hints
// (absent, true, false) × the three modes × (no rule, an allow, ask or deny rule on the tool)
// prompts, runs or is denied exactly as the committed table says, with the audit source the table
// names; the table is the independent expectation above (regenerate with -update and review the
// diff).
func TestCheckFollowsTheDecisionTable(t *testing.T) {
	path := filepath.Join("testdata", "decision-table.json")
	if *update {
		b, err := json.MarshalIndent(allRows(), "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []decisionRow
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 27*3*4 {
		t.Fatalf("the table has %d rows, want %d", len(rows), 27*3*4)
	}
	for i, want := range allRows() {
		if rows[i].name()+rows[i].Outcome+rows[i].Source != want.name()+want.Outcome+want.Source {
			t.Errorf("row %d of the committed table is %+v, the expectation says %+v", i, rows[i], want)
		}
	}
	for _, row := range rows {
		t.Run(row.name(), func(t *testing.T) {
			tl := &tool.Tool{Name: "t", Annotations: tool.Annotations{ReadOnlyHint: row.ReadOnlyHint,
				DestructiveHint: row.DestructiveHint, OpenWorldHint: row.OpenWorldHint}}
			var rules []gate.Rule
			if row.Rule != "none" {
				rules = append(rules, gate.Rule{ID: "r1", Effect: gate.Effect(row.Rule), Tool: "t", Scope: gate.ScopeSession,
					SessionID: "s1", Source: gate.SourceAPI, CreatedBy: gate.ByOwner})
			}
			// An allow rule of another session never applies.
			rules = append(rules, gate.Rule{ID: "other", Effect: gate.Allow, Tool: "*", Scope: gate.ScopeSession, SessionID: "s2", Source: gate.SourceAPI})
			eval, err := gatetest.Compile(rules)
			if err != nil {
				t.Fatal(err)
			}
			d := gate.Checker{Rules: eval}.Check(context.Background(), gate.CheckCall{SessionID: "s1", ToolCallID: "c1",
				Tool: tl, Arguments: json.RawMessage(`{}`), Workspace: "/w", Mode: gate.Mode(row.Mode)})
			got := map[gate.Outcome]string{gate.Allowed: "run", gate.Blocked: "deny", gate.Asked: "prompt"}[d.Outcome]
			if got != row.Outcome || string(d.Source) != row.Source {
				t.Fatalf("Check = %s from %q (%s), want %s from %q", got, d.Source, d.Reason, row.Outcome, row.Source)
			}
			a := d.Record(gate.Approval{ToolName: "t"})
			if a.DecisionSource != d.Source || a.Mode != gate.Mode(row.Mode) {
				t.Errorf("record: source %q mode %q", a.DecisionSource, a.Mode)
			}
			if row.Source == "rule" && (a.RuleID != "r1" || a.RuleText != "t" || a.RuleSource != gate.SourceAPI) {
				t.Errorf("record names rule %q %q %q, want r1 t api", a.RuleID, a.RuleText, a.RuleSource)
			}
			if row.Source == "mode" && a.Reason != gate.PlanReason {
				t.Errorf("plan reason = %q", a.Reason)
			}
		})
	}
}

// gitConfigWhy is why a write of .git/config asks whatever the rules and mode say.
const gitConfigWhy = "no rule or mode allows writing .git/config: it is inside a .git folder, where git reads its configuration and hooks"

// TestCheckOrder: what the table cannot show — handlers first, an allow rule releasing a tool
// that always asks, accept-edits for file-writing tools only, and the words the audit records.
func TestCheckOrder(t *testing.T) {
	yes := tool.Bool(true)
	write := &tool.Tool{Name: "write_file", WritesFiles: true, Annotations: tool.Annotations{DestructiveHint: yes}}
	untrusted := &tool.Tool{Name: "files__read", AlwaysAsk: true, AskReason: "server files is not trusted",
		Annotations: tool.Annotations{ReadOnlyHint: yes}}
	untrustedWriter := &tool.Tool{Name: "files__write", AlwaysAsk: true, WritesFiles: true, AskReason: "server files is not trusted"}
	block := gate.Handlers{func(context.Context, gate.CallEvent) (gate.Verdict, error) {
		return gate.Verdict{Block: true, Reason: "no"}, nil
	}}
	failing := gate.Handlers{func(context.Context, gate.CallEvent) (gate.Verdict, error) { return gate.Verdict{}, errors.New("down") }}
	allowAll := []gate.Rule{{ID: "a", Effect: gate.Allow, Tool: "*", Scope: gate.ScopeServer, Source: gate.SourceAPI}}
	grant := []gate.Rule{{ID: "g", Effect: gate.Allow, Tool: "files__read", Scope: gate.ScopeSession, SessionID: "s1",
		Source: gate.SourcePrompt, CreatedBy: "bob", FromApproval: "ap1"}}
	denySecrets := []gate.Rule{{ID: "d", Effect: gate.Deny, Tool: "write_file", Specifier: "secrets/**", Scope: gate.ScopeServer, Source: gate.SourceAPI}}
	for _, tc := range []struct {
		name      string
		handlers  gate.Handlers
		rules     []gate.Rule
		tool      *tool.Tool
		args      string
		mode      gate.Mode
		want      gate.Outcome
		source    gate.DecisionSource
		decidedBy string
		reason    string
	}{
		{"a handler blocks before an allow rule", block, allowAll, write, `{}`, gate.ModeDefault, gate.Blocked, gate.FromHandler, gate.ByHandler, "no"},
		{"a failing handler blocks", failing, allowAll, write, `{}`, gate.ModeDefault, gate.Blocked, gate.FromHandler, gate.ByHandler, "tool_call handler failed: down"},
		{"accept-edits allows a file write", nil, nil, write, `{"path":"a"}`, gate.ModeAcceptEdits, gate.Allowed, gate.FromMode, gate.ByMode, "accept-edits mode allows writing files in the workspace"},
		{"accept-edits does not beat a deny rule", nil, denySecrets, write, `{"path":"secrets/k"}`, gate.ModeAcceptEdits, gate.Blocked, gate.FromRule, gate.ByRule, "rule write_file(secrets/**) denies the call"},
		{"accept-edits outside the rule's path", nil, denySecrets, write, `{"path":"docs/k"}`, gate.ModeAcceptEdits, gate.Allowed, gate.FromMode, gate.ByMode, "accept-edits mode allows writing files in the workspace"},
		// A review ran code without a prompt: accept-edits wrote .git/config (core.fsmonitor),
		// then an allowed `git status` ran it. The repository's configuration asks.
		{"accept-edits asks for .git/config", nil, nil, write, `{"path":".git/config"}`, gate.ModeAcceptEdits, gate.Asked, gate.FromMode, "", gitConfigWhy},
		{"accept-edits asks for a hook", nil, nil, write, `{"path":"sub/../.git/hooks/pre-commit"}`, gate.ModeAcceptEdits, gate.Asked, gate.FromMode, "", "no rule or mode allows writing .git/hooks/pre-commit: it is inside a .git folder, where git reads its configuration and hooks"},
		{"accept-edits asks for .gitattributes, whatever its case", nil, nil, write, `{"path":"lib/.GitAttributes"}`, gate.ModeAcceptEdits, gate.Asked, gate.FromMode, "", "accept-edits mode does not cover .GitAttributes: a repository's configuration can make git run programs"},
		{"accept-edits reads the path as the tool does (last key wins)", nil, nil, write, `{"path":"a","Path":".git/config"}`, gate.ModeAcceptEdits, gate.Asked, gate.FromMode, "", gitConfigWhy},
		{"default mode asks for a file write", nil, nil, write, `{}`, gate.ModeDefault, gate.Asked, gate.FromAnnotations, "", "destructiveHint is true"},
		{"accept-edits never releases an untrusted server's tool", nil, nil, untrustedWriter, `{}`, gate.ModeAcceptEdits, gate.Asked, gate.FromAnnotations, "", "server files is not trusted"},
		{"an untrusted server's tool asks", nil, nil, untrusted, `{}`, gate.ModeDefault, gate.Asked, gate.FromAnnotations, "", "server files is not trusted"},
		{"an allow rule releases an untrusted server's tool", nil, grant, untrusted, `{}`, gate.ModeDefault, gate.Allowed, gate.FromRule, gate.ByGrant, "approved for this session by bob"},
		{"plan mode lets a read-only untrusted tool ask", nil, nil, untrusted, `{}`, gate.ModePlan, gate.Asked, gate.FromAnnotations, "", "server files is not trusted"},
		{"an empty mode is the default", nil, nil, write, `{}`, "", gate.Asked, gate.FromAnnotations, "", "destructiveHint is true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eval, err := gatetest.Compile(tc.rules)
			if err != nil {
				t.Fatal(err)
			}
			d := gate.Checker{Handlers: tc.handlers, Rules: eval}.Check(context.Background(), gate.CheckCall{
				SessionID: "s1", Tool: tc.tool, Arguments: json.RawMessage(tc.args), Mode: tc.mode})
			a := d.Record(gate.Approval{})
			reason := a.Reason
			if a.Status == gate.Pending {
				reason = a.AskReason
			}
			if d.Outcome != tc.want || d.Source != tc.source || a.DecidedBy != tc.decidedBy || reason != tc.reason {
				t.Fatalf("got %s from %s by %q (%q), want %s from %s by %q (%q)", d.Outcome, d.Source, a.DecidedBy, reason,
					tc.want, tc.source, tc.decidedBy, tc.reason)
			}
			if tc.decidedBy == gate.ByGrant && (a.Scope != gate.Session || a.DerivedFrom != "ap1") {
				t.Errorf("a grant-shaped rule's record: scope %q derivedFrom %q", a.Scope, a.DerivedFrom)
			}
			if d.Outcome == gate.Asked && (a.Status != gate.Pending || a.AskReason != tc.reason) {
				t.Errorf("an ask's record: %s, askReason %q", a.Status, a.AskReason)
			}
			if d.Mode == "" {
				t.Error("the decision names no mode")
			}
		})
	}
}

// TestAcceptEditsSeesThroughSymlinksToTheRepositoryConfiguration: a link in the workspace to
// .git/config (or a folder linking into .git) is a write to the repository's configuration, so
// accept-edits asks; a plain file beside it is allowed.
func TestAcceptEditsSeesThroughSymlinksToTheRepositoryConfiguration(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "config"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// "hook" dangles: a write through it creates .git/hooks/pre-push.
	for link, target := range map[string]string{"cfg": ".git/config", "h": ".git/hooks", "hook": ".git/hooks/pre-push"} {
		if err := os.Symlink(filepath.Join(ws, target), filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	write := &tool.Tool{Name: "write_file", WritesFiles: true, Annotations: tool.Annotations{DestructiveHint: tool.Bool(true)}}
	for path, want := range map[string]gate.Outcome{"hook": gate.Asked, "cfg": gate.Asked, "h/pre-commit": gate.Asked, "notes.txt": gate.Allowed, filepath.Join(ws, "h", "x"): gate.Asked} {
		args, _ := json.Marshal(map[string]string{"path": path, "content": "x"})
		d := gate.Checker{}.Check(context.Background(), gate.CheckCall{SessionID: "s", Tool: write, Arguments: args, Workspace: ws, Mode: gate.ModeAcceptEdits})
		if d.Outcome != want {
			t.Errorf("accept-edits write of %s: %s (%s), want %s", path, d.Outcome, d.Reason, want)
		}
	}
}

// TestWritesIntoGitsOwnFilesAlwaysAsk (issue 28): neither accept-edits nor an allow rule lets a
// file write reach git's own files without a person — .git/ (also through a symlink), a HEAD
// anywhere (several writes decided at once could each find the layout incomplete), the write
// that completes a repository layout (HEAD, objects/, refs/) in a plain workspace, and any write
// (config, hooks/…, packed-refs, info/…) into a folder laid out as one.
func TestWritesIntoGitsOwnFilesAlwaysAsk(t *testing.T) {
	ws := t.TempDir()
	mk := func(names ...string) {
		t.Helper()
		for _, n := range names {
			p := filepath.Join(ws, n)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk(".git/config", "docs/readme.md")
	if err := os.Symlink("../.git/config", filepath.Join(ws, "docs", "link")); err != nil {
		t.Fatal(err)
	}
	write := &tool.Tool{Name: "write_file", WritesFiles: true, Annotations: tool.Annotations{DestructiveHint: tool.Bool(true)}}
	allowAll, err := gatetest.Compile([]gate.Rule{{ID: "a", Effect: gate.Allow, Tool: "*", Scope: gate.ScopeServer, Source: gate.SourceAPI}})
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, p string, mode gate.Mode, rules gate.RuleEvaluator) gate.Decision {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"path": p, "content": "x"})
		return gate.Checker{Rules: rules}.Check(context.Background(), gate.CheckCall{SessionID: "s", Tool: write,
			Arguments: args, Workspace: ws, Mode: mode})
	}
	type want struct {
		outcome gate.Outcome
		source  gate.DecisionSource
	}
	run := func(t *testing.T, cases map[string][2]want) {
		t.Helper()
		for p, w := range cases {
			if d := check(t, p, gate.ModeAcceptEdits, nil); d.Outcome != w[0].outcome || d.Source != w[0].source {
				t.Errorf("accept-edits %s: %s from %s (%s), want %s from %s", p, d.Outcome, d.Source, d.Reason, w[0].outcome, w[0].source)
			}
			if d := check(t, p, gate.ModeDefault, allowAll); d.Outcome != w[1].outcome || d.Source != w[1].source {
				t.Errorf("allow * %s: %s from %s (%s), want %s from %s", p, d.Outcome, d.Source, d.Reason, w[1].outcome, w[1].source)
			}
		}
	}
	askMode, askDefault := want{gate.Asked, gate.FromMode}, want{gate.Asked, gate.FromAnnotations}
	byMode, byRule := want{gate.Allowed, gate.FromMode}, want{gate.Allowed, gate.FromRule}
	t.Run("a plain workspace", func(t *testing.T) {
		run(t, map[string][2]want{
			"docs/new.md":     {byMode, byRule},
			".git/config":     {askMode, askDefault},
			"docs/link":       {askMode, askDefault},
			"HEAD":            {askMode, askDefault},
			"objects/pack/x":  {byMode, byRule},
			"refs/heads/main": {byMode, byRule},
			"config":          {byMode, byRule},
		})
	})
	t.Run("HEAD and objects/ there: refs/ completes the layout", func(t *testing.T) {
		mk("HEAD", "objects/pack/x")
		run(t, map[string][2]want{
			"refs/heads/main": {askMode, askDefault},
			"config":          {byMode, byRule},
		})
	})
	t.Run("a workspace laid out as a repository", func(t *testing.T) {
		mk("refs/heads/main")
		run(t, map[string][2]want{
			"config":              {askMode, askDefault},
			"hooks/post-checkout": {askMode, askDefault},
			"info/attributes":     {askMode, askDefault},
			"packed-refs":         {askMode, askDefault},
			"objects/pack/y":      {askMode, askDefault},
			"refs/heads/other":    {askMode, askDefault},
		})
	})
	d := check(t, "docs/link", gate.ModeDefault, allowAll)
	if want := "no rule or mode allows writing .git/config: it is inside a .git folder, where git reads its configuration and hooks"; d.Reason != want {
		t.Errorf("the reason is %q, want %q", d.Reason, want)
	}
}
