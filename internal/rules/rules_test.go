package rules

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

func TestParse(t *testing.T) {
	cases := []struct{ name, text, tool, spec string }{
		{"bare tool", "read_file", "read_file", ""},
		{"tool glob", "files__*", "files__*", ""},
		{"command prefix", "run_command(git diff:*)", "run_command", "git diff:*"},
		{"command exact", "run_command(go test ./...)", "run_command", "go test ./..."},
		{"path glob", "write_file(docs/**)", "write_file", "docs/**"},
		{"key glob", "github__create_issue(repo=acme/*)", "github__create_issue", "repo=acme/*"},
		{"paren inside", "run_command(echo ')')", "run_command", "echo ')'"},
		{"escaped separators", `t(a=x\,y\=z\))`, "t", `a=x\,y\=z\)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tp, spec, err := Parse(tc.text)
			if err != nil || tp != tc.tool || spec != tc.spec {
				t.Fatalf("Parse(%q) = %q, %q, %v; want %q, %q", tc.text, tp, spec, err, tc.tool, tc.spec)
			}
			if back := Text(gate.Rule{Tool: tp, Specifier: spec}); back != tc.text {
				t.Fatalf("Text round trip: %q, want %q", back, tc.text)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, text string
		col        int
		msg        string
	}{
		{"empty", "", 1, "missing tool name"},
		{"no tool", "(x)", 1, "missing tool name"},
		{"space in tool", "read file", 5, "not allowed"},
		{"unclosed", "run_command(git diff", 21, `missing ")"`},
		{"trailing text", "write_file(docs/**)x", 21, `missing ")"`},
		{"empty specifier", "write_file()", 12, "empty specifier"},
		{"bad glob", "files__[", 1, "not a valid glob"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse(tc.text)
			var se *SyntaxError
			if !errors.As(err, &se) || se.Col != tc.col || !strings.Contains(se.Msg, tc.msg) {
				t.Fatalf("Parse(%q) error %v, want column %d %q", tc.text, err, tc.col, tc.msg)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	ok := func(r gate.Rule) gate.Rule {
		if r.Scope == "" {
			r.Scope = gate.ScopeServer
		}
		if r.Effect == "" {
			r.Effect = gate.Allow
		}
		return r
	}
	cases := []struct {
		name string
		rule gate.Rule
		err  string // "" for valid
	}{
		{"bare tool", ok(gate.Rule{Tool: "read_file"}), ""},
		{"command", ok(gate.Rule{Tool: "run_command", Specifier: "git diff:*"}), ""},
		{"command with equals", ok(gate.Rule{Tool: "run_command", Specifier: "git log --format=%H:*"}), ""},
		{"path", ok(gate.Rule{Tool: "write_file", Specifier: "docs/**"}), ""},
		{"kv", ok(gate.Rule{Tool: "github__create_issue", Specifier: "repo=acme/*,title=*"}), ""},
		{"when", ok(gate.Rule{Tool: "pay__*", When: "args.amount < 1000 && parent == null"}), ""},
		{"when on session", ok(gate.Rule{Tool: "*", When: `session.mode == "plan" && annotations.readOnlyHint`}), ""},
		{"unknown effect", gate.Rule{Effect: "maybe", Tool: "x", Scope: gate.ScopeServer}, `unknown effect "maybe"`},
		{"unknown scope", gate.Rule{Effect: gate.Allow, Tool: "x", Scope: "planet"}, `unknown scope "planet"`},
		{"session without id", ok(gate.Rule{Tool: "x", Scope: gate.ScopeSession}), "needs its session"},
		{"workspace without folder", ok(gate.Rule{Tool: "x", Scope: gate.ScopeWorkspace}), "needs its workspace"},
		{"bad tool glob", ok(gate.Rule{Tool: "files__["}), "not a valid glob"},
		{"command parse error", ok(gate.Rule{Tool: "run_command", Specifier: "git diff (:*"}), "is not shell words"},
		{"command list", ok(gate.Rule{Tool: "run_command", Specifier: "git diff; rm x"}), "one simple command"},
		{"command substitution", ok(gate.Rule{Tool: "run_command", Specifier: "git $(x):*"}), "not literal"},
		{"allow a wrapper", ok(gate.Rule{Tool: "run_command", Specifier: "sudo:*"}), "runs other commands"},
		// A rule that names an option that writes files or runs programs trusts it (SPEC §14).
		{"allow a writing option named by the rule", ok(gate.Rule{Tool: "run_command", Specifier: "git log --output=x:*"}), ""},
		{"allow an exact wrapper", ok(gate.Rule{Tool: "run_command", Specifier: "nice -n 5 make"}), ""},
		{"allow a prefix of a builtin that keeps a string", ok(gate.Rule{Tool: "run_command", Specifier: "alias:*"}), "runs other commands"},
		{"allow a prefix of trap", ok(gate.Rule{Tool: "run_command", Specifier: "trap:*"}), "runs other commands"},
		{"command with braces", ok(gate.Rule{Tool: "run_command", Specifier: "git log {a,b}:*"}), "not literal"},
		{"command with a carriage return", ok(gate.Rule{Tool: "run_command", Specifier: "git log\r:*"}), "invisible or bidirectional"},
		{"empty command", ok(gate.Rule{Tool: "run_command", Specifier: ":*"}), "no command words"},
		{"bad path glob", ok(gate.Rule{Tool: "write_file", Specifier: "docs/[**"}), "not a valid glob"},
		{"kv without value separator", ok(gate.Rule{Tool: "t", Specifier: "a=1,b"}), "must be key=glob"},
		{"kv empty key", ok(gate.Rule{Tool: "t", Specifier: "=1"}), "argument name is missing"},
		{"when syntax", ok(gate.Rule{Tool: "x", When: "args.amount <"}), "Syntax error"},
		{"when unknown variable", ok(gate.Rule{Tool: "x", When: "amount < 3"}), "undeclared reference to 'amount'"},
		{"when not bool", ok(gate.Rule{Tool: "x", When: "tool + 'x'"}), "not a bool"},
		{"tool and specifier twice", ok(gate.Rule{Tool: "write_file(a/**)", Specifier: "b/**"}), "carries a specifier"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check(tc.rule)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Check: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Check error %v, want %q", err, tc.err)
			}
		})
	}
}

func TestCheckNormalizes(t *testing.T) {
	cases := []struct {
		name string
		in   gate.Rule
		want gate.Rule
	}{
		{"text form split", gate.Rule{Effect: gate.Deny, Tool: " write_file(secrets/**) ", Scope: gate.ScopeServer},
			gate.Rule{Effect: gate.Deny, Tool: "write_file", Specifier: "secrets/**", Scope: gate.ScopeServer}},
		{"workspace cleaned", gate.Rule{Effect: gate.Allow, Tool: "x", Scope: gate.ScopeWorkspace, Workspace: "/ws/a/../b/", SessionID: "s"},
			gate.Rule{Effect: gate.Allow, Tool: "x", Scope: gate.ScopeWorkspace, Workspace: "/ws/b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Check(tc.in)
			if err != nil || got.Tool != tc.want.Tool || got.Specifier != tc.want.Specifier || got.Workspace != tc.want.Workspace || got.SessionID != tc.want.SessionID {
				t.Fatalf("Check = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func call(toolName string, args any) gate.RuleCall {
	raw, _ := json.Marshal(args)
	return gate.RuleCall{Tool: toolName, Arguments: raw, SessionID: "s1", Workspace: testWorkspace, Mode: gate.ModeDefault}
}

func TestEvaluateOrderScopeExpiry(t *testing.T) {
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	r := func(id string, eff gate.Effect, text string, scope gate.RuleScope) gate.Rule {
		rule := gate.Rule{ID: id, Effect: eff, Tool: text, Scope: scope}
		switch scope {
		case gate.ScopeSession:
			rule.SessionID = "s1"
		case gate.ScopeWorkspace:
			rule.Workspace = testWorkspace + "/"
		}
		return rule
	}
	write := call("write_file", map[string]string{"path": "docs/a.md", "content": "x"})
	cases := []struct {
		name  string
		rules []gate.Rule
		call  gate.RuleCall
		want  gate.Effect
		id    string
	}{
		{"nothing matches", []gate.Rule{r("1", gate.Allow, "read_file", gate.ScopeServer)}, write, "", ""},
		{"allow", []gate.Rule{r("1", gate.Allow, "write_file", gate.ScopeServer)}, write, gate.Allow, "1"},
		{"session deny beats server allow", []gate.Rule{r("1", gate.Allow, "write_file", gate.ScopeServer), r("2", gate.Deny, "write_file(docs/**)", gate.ScopeSession)}, write, gate.Deny, "2"},
		{"server ask beats session allow", []gate.Rule{r("1", gate.Allow, "write_file", gate.ScopeSession), r("2", gate.Ask, "write_*", gate.ScopeServer)}, write, gate.Ask, "2"},
		{"deny beats ask", []gate.Rule{r("1", gate.Ask, "write_file", gate.ScopeServer), r("2", gate.Deny, "*", gate.ScopeWorkspace)}, write, gate.Deny, "2"},
		{"first deny named", []gate.Rule{r("1", gate.Deny, "write_*", gate.ScopeServer), r("2", gate.Deny, "write_file", gate.ScopeServer)}, write, gate.Deny, "1"},
		{"other session ignored", []gate.Rule{{ID: "1", Effect: gate.Deny, Tool: "write_file", Scope: gate.ScopeSession, SessionID: "s2"}}, write, "", ""},
		{"workspace matches cleaned", []gate.Rule{r("1", gate.Allow, "write_file", gate.ScopeWorkspace)}, func() gate.RuleCall { c := write; c.Workspace = "/ws/./"; return c }(), gate.Allow, "1"},
		{"other workspace ignored", []gate.Rule{r("1", gate.Allow, "write_file", gate.ScopeWorkspace)}, func() gate.RuleCall { c := write; c.Workspace = "/other"; return c }(), "", ""},
		{"expired ignored", []gate.Rule{func() gate.Rule {
			x := r("1", gate.Deny, "write_file", gate.ScopeServer)
			x.ExpiresAt = &past
			return x
		}()}, write, "", ""},
		{"not yet expired", []gate.Rule{func() gate.Rule {
			x := r("1", gate.Deny, "write_file", gate.ScopeServer)
			x.ExpiresAt = &future
			return x
		}()}, write, gate.Deny, "1"},
		{"glob tool", []gate.Rule{r("1", gate.Allow, "files__*", gate.ScopeServer)}, call("files__read", map[string]string{}), gate.Allow, "1"},
		{"glob tool no match", []gate.Rule{r("1", gate.Allow, "files__*", gate.ScopeServer)}, call("filesx", map[string]string{}), "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := mustCompile(t, tc.rules).Evaluate(tc.call)
			if d.Effect != tc.want {
				t.Fatalf("effect %q (%s), want %q", d.Effect, d.Reason, tc.want)
			}
			if tc.want == "" {
				if d.Rule != nil || d.Reason != "" {
					t.Fatalf("no match must be the zero decision: %+v", d)
				}
				return
			}
			if d.Rule == nil || d.Rule.ID != tc.id || d.Reason == "" {
				t.Fatalf("rule %+v reason %q, want id %s", d.Rule, d.Reason, tc.id)
			}
		})
	}
}

func TestEvaluateReasons(t *testing.T) {
	set := mustCompile(t, []gate.Rule{
		{Effect: gate.Deny, Tool: "write_file", Specifier: "secrets/**", Scope: gate.ScopeServer},
		{Effect: gate.Ask, Tool: "github__create_issue", Specifier: "repo=acme/*", Scope: gate.ScopeServer},
	})
	cases := []struct {
		name string
		call gate.RuleCall
		want string
	}{
		{"path deny", call("write_file", map[string]string{"path": "secrets/k"}), "rule write_file(secrets/**) denies write_file secrets/k"},
		{"kv ask", call("github__create_issue", map[string]string{"repo": "acme/x"}), "rule github__create_issue(repo=acme/*) asks for github__create_issue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if d := set.Evaluate(tc.call); d.Reason != tc.want {
				t.Fatalf("reason %q, want %q", d.Reason, tc.want)
			}
		})
	}
}

func TestPathSpecifier(t *testing.T) {
	cases := []struct {
		name, spec, path string
		eff              gate.Effect
		want             bool
	}{
		{"folder glob", "docs/**", "docs/a/b.md", gate.Allow, true},
		{"folder glob other", "docs/**", "src/a.go", gate.Allow, false},
		{"cleaned", "docs/**", "./src/../docs/a.md", gate.Allow, true},
		{"absolute inside", "docs/**", "/ws/docs/a.md", gate.Allow, true},
		{"absolute outside", "docs/**", "/other/docs/a.md", gate.Allow, false},
		{"dotdot escaping allow", "**", "../x", gate.Allow, false},
		{"dotdot escaping via inside", "docs/**", "docs/../../other/docs/a", gate.Allow, false},
		// SPEC §14 "Paths as they resolve": another name of the workspace lands inside it.
		{"dotdot back in through the workspace's name", "docs/**", "docs/../../ws/docs/a", gate.Allow, true},
		{"the workspace's name, deny", "secrets/**", "../ws/secrets/k", gate.Deny, true},
		{"floating at depth", "*.go", "a/b/c.go", gate.Allow, true},
		{"floating at root", "*.go", "c.go", gate.Allow, true},
		{"anchored root", "/*.go", "a/c.go", gate.Allow, false},
		{"anchored root file", "/README.md", "README.md", gate.Allow, true},
		{"trailing slash", "secrets/", "secrets/k", gate.Allow, true},
		{"star does not cross", "docs/*", "docs/a/b.md", gate.Allow, false},
		{"escaping path floating deny", "*.pem", "/etc/ssl/x.pem", gate.Deny, true},
		{"escaping path floating allow", "*.pem", "/etc/ssl/x.pem", gate.Allow, false},
		{"escaping path anchored deny", "secrets/**", "/other/secrets/k", gate.Deny, false},
		{"escaped paren", `a\)/**`, "a)/b", gate.Allow, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := mustCompile(t, []gate.Rule{{Effect: tc.eff, Tool: "write_file", Specifier: tc.spec, Scope: gate.ScopeServer}})
			d := set.Evaluate(call("write_file", map[string]string{"path": tc.path}))
			if got := d.Effect == tc.eff; got != tc.want {
				t.Fatalf("%s on %q: matched %v, want %v", tc.spec, tc.path, got, tc.want)
			}
		})
	}
}

func TestKeyGlobSpecifier(t *testing.T) {
	cases := []struct {
		name, spec string
		args       any
		want       bool
	}{
		{"string", "repo=acme/*", map[string]any{"repo": "acme/web"}, true},
		{"string other", "repo=acme/*", map[string]any{"repo": "evil/web"}, false},
		{"star does not cross slash", "repo=acme/*", map[string]any{"repo": "acme/a/b"}, false},
		{"missing key", "repo=*", map[string]any{"title": "x"}, false},
		{"all keys must match", "repo=acme/*,title=bug*", map[string]any{"repo": "acme/x", "title": "feature"}, false},
		{"all keys match", "repo=acme/*,title=bug*", map[string]any{"repo": "acme/x", "title": "bug: y"}, true},
		{"number as json", "amount=1000", map[string]any{"amount": 1000}, true},
		{"object as compact json", `opts=\{"a":1\}`, map[string]any{"opts": map[string]int{"a": 1}}, true},
		{"braces are alternatives", `mode={fast\,slow}`, map[string]any{"mode": "slow"}, true},
		{"bool", "force=false", map[string]any{"force": false}, true},
		{"escaped comma", `title=a\,b`, map[string]any{"title": "a,b"}, true},
		{"escaped equals", `expr=x\=1`, map[string]any{"expr": "x=1"}, true},
		{"escaped star literal", `title=a\*`, map[string]any{"title": "ab"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := mustCompile(t, []gate.Rule{{Effect: gate.Allow, Tool: "t", Specifier: tc.spec, Scope: gate.ScopeServer}})
			if got := set.Evaluate(call("t", tc.args)).Effect == gate.Allow; got != tc.want {
				t.Fatalf("%s: matched %v, want %v", tc.spec, got, tc.want)
			}
		})
	}
}

func TestWhen(t *testing.T) {
	yes := true
	bigComprehension := "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, a+b+c+d+e > 0)))))"
	base := gate.RuleCall{Tool: "pay__send", Arguments: json.RawMessage(`{"amount": 500, "to": "bob", "rate": 0.5}`),
		Annotations: tool.Annotations{ReadOnlyHint: &yes}, SessionID: "s1", Workspace: "/ws", Mode: gate.ModePlan}
	nested := base
	nested.Parent = "codemode"
	cases := []struct {
		name, when string
		call       gate.RuleCall
		want       gate.Effect
		reason     string
	}{
		{"int comparison true", "args.amount < 1000", base, gate.Deny, ""},
		{"int comparison false", "args.amount >= 1000", base, "", ""},
		{"double", "args.rate == 0.5", base, gate.Deny, ""},
		{"parent null", "parent == null", base, gate.Deny, ""},
		{"parent set", "parent == 'codemode'", nested, gate.Deny, ""},
		{"tool", "tool.startsWith('pay__')", base, gate.Deny, ""},
		{"annotations", "annotations.readOnlyHint && annotations.destructiveHint", base, gate.Deny, ""},
		{"session", "session.mode == 'plan' && session.id == 's1' && session.workspace == '/ws'", base, gate.Deny, ""},
		{"runtime error asks", "args.missing > 1", base, gate.Ask, "the `when` of rule pay__* failed ("},
		{"cost limit asks", bigComprehension, base, gate.Ask, "the `when` of rule pay__* exceeded its cost limit, so the call asks"},
		{"dyn not bool asks", "args.to", base, gate.Ask, "not a bool, so the call asks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := mustCompile(t, []gate.Rule{{Effect: gate.Deny, Tool: "pay__*", When: tc.when, Scope: gate.ScopeServer}})
			d := set.Evaluate(tc.call)
			if d.Effect != tc.want || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("got %+v, want %q with reason containing %q", d, tc.want, tc.reason)
			}
		})
	}
}

func TestWhenFailureDoesNotOutrankDeny(t *testing.T) {
	set := mustCompile(t, []gate.Rule{
		{ID: "1", Effect: gate.Allow, Tool: "t", When: "args.missing", Scope: gate.ScopeServer},
		{ID: "2", Effect: gate.Deny, Tool: "t", Scope: gate.ScopeServer},
	})
	if d := set.Evaluate(call("t", map[string]int{})); d.Effect != gate.Deny || d.Rule.ID != "2" {
		t.Fatalf("got %+v", d)
	}
}

func TestCompileSkipsBadRules(t *testing.T) {
	set, err := Compile([]gate.Rule{
		{ID: "bad", Effect: gate.Deny, Tool: "run_command", Specifier: "rm (:*", Scope: gate.ScopeServer},
		{ID: "good", Effect: gate.Allow, Tool: "read_file", Scope: gate.ScopeServer},
		{ID: "bad2", Effect: gate.Allow, Tool: "x", When: "nope(", Scope: gate.ScopeServer},
	})
	if err == nil || !strings.HasPrefix(err.Error(), "rule run_command(rm (:*) [bad]: ") || !strings.Contains(err.Error(), "rule x [bad2]: when:") {
		t.Fatalf("error %v", err)
	}
	if set.Len() != 1 || set.Evaluate(call("read_file", map[string]string{"path": "a"})).Effect != gate.Allow {
		t.Fatalf("the good rule must still apply")
	}
	var c gate.RuleCompiler = Compiler
	ev, err := c([]gate.Rule{{Effect: gate.Allow, Tool: "read_file", Scope: gate.ScopeServer}})
	if err != nil || ev.Evaluate(call("read_file", nil)).Effect != gate.Allow {
		t.Fatalf("Compiler: %v", err)
	}
}

func TestEvaluateConcurrent(t *testing.T) {
	rules := append(shellRules(), gate.Rule{Effect: gate.Deny, Tool: "pay__*", When: "args.amount >= 1000", Scope: gate.ScopeServer},
		gate.Rule{Effect: gate.Allow, Tool: "write_file", Specifier: "docs/**", Scope: gate.ScopeServer})
	set := mustCompile(t, rules)
	calls := []struct {
		c    gate.RuleCall
		want gate.Effect
	}{
		{commandCall("git diff && rm x"), gate.Deny},
		{commandCall("go test ./..."), gate.Allow},
		{call("pay__send", map[string]int{"amount": 2000}), gate.Deny},
		{call("write_file", map[string]string{"path": "docs/x"}), gate.Allow},
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				tc := calls[(g+i)%len(calls)]
				if d := set.Evaluate(tc.c); d.Effect != tc.want {
					t.Errorf("got %q want %q", d.Effect, tc.want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestSuggest(t *testing.T) {
	cases := []struct {
		name string
		call gate.RuleCall
		text string // the rules' texts, joined with " | "
	}{
		{"git diff ref", commandCall("git diff HEAD~1"), "run_command(git diff:*)"},
		{"ls flags", commandCall("ls -la"), "run_command(ls:*)"},
		{"go test path", commandCall("go test ./..."), "run_command(go test:*)"},
		{"npm run build", commandCall("npm run build"), "run_command(npm run:*)"},
		{"make", commandCall("make"), "run_command(make:*)"},
		{"quoted program", commandCall("'my tool' x"), "run_command('my tool' x:*)"},
		// issue 28, acceptance 5: never broader than SPEC §14, and covering the call.
		{"options before the subcommand", commandCall("git --no-pager log -1"), "run_command(git --no-pager log:*)"},
		{"an option with an argument before the subcommand", commandCall("git -C sub status"), "run_command(git -C sub status:*)"},
		{"no subcommand", commandCall("git --version"), "run_command(git --version)"},
		{"go with a flag before the subcommand is no subcommand", commandCall("go -C x test"), "run_command(go -C x test:*)"},
		{"interpreter", commandCall("python3 -c 'print(1)'"), "run_command(python3 -c 'print(1)')"},
		{"interpreter script", commandCall("python3 job.py --fast"), "run_command(python3 job.py --fast)"},
		{"shell string", commandCall("sh -c 'git log'"), "run_command(sh -c 'git log')"},
		{"wrapper", commandCall("nice -n 5 make"), "run_command(nice -n 5 make)"},
		{"an option that runs programs after the prefix", commandCall("go test -toolexec x ./..."), "run_command(go test -toolexec x ./...)"},
		{"every simple command", commandCall("echo hi && ls -1"), "run_command(echo hi:*) | run_command(ls:*)"},
		// F5: what runs any command or code elsewhere, in a container or from a registry is
		// suggested exactly, like an interpreter.
		{"ssh remote command", commandCall("ssh build01 uptime"), "run_command(ssh build01 uptime)"},
		{"docker run", commandCall("docker run --rm alpine id"), "run_command(docker run --rm alpine id)"},
		{"docker exec", commandCall("docker exec c1 ls"), "run_command(docker exec c1 ls)"},
		{"docker compose run", commandCall("docker compose run web sh"), "run_command(docker compose run web sh)"},
		{"docker compose exec after options", commandCall("docker compose -f x.yml exec web ls"), "run_command(docker compose -f x.yml exec web ls)"},
		{"podman run", commandCall("podman run alpine id"), "run_command(podman run alpine id)"},
		{"kubectl exec", commandCall("kubectl exec pod -- ls"), "run_command(kubectl exec pod -- ls)"},
		{"kubectl debug", commandCall("kubectl debug node/x -it --image=busybox"), "run_command(kubectl debug node/x -it '--image=busybox')"},
		{"go run", commandCall("go run ./cmd/x"), "run_command(go run ./cmd/x)"},
		{"npx", commandCall("npx eslint ."), "run_command(npx eslint .)"},
		{"pnpm dlx", commandCall("pnpm dlx cowsay hi"), "run_command(pnpm dlx cowsay hi)"},
		{"yarn dlx", commandCall("yarn dlx cowsay"), "run_command(yarn dlx cowsay)"},
		{"uvx", commandCall("uvx ruff check"), "run_command(uvx ruff check)"},
		{"pipx run", commandCall("pipx run black ."), "run_command(pipx run black .)"},
		{"bunx", commandCall("bunx cowsay"), "run_command(bunx cowsay)"},
		{"deno run", commandCall("deno run x.ts"), "run_command(deno run x.ts)"},
		{"nix run", commandCall("nix run nixpkgs#hello"), "run_command(nix run 'nixpkgs#hello')"},
		{"nix shell", commandCall("nix shell nixpkgs#jq -c jq"), "run_command(nix shell 'nixpkgs#jq' -c jq)"},
		{"gh api", commandCall("gh api repos/o/r"), "run_command(gh api repos/o/r)"},
		{"gh codespace ssh", commandCall("gh codespace ssh -c x"), "run_command(gh codespace ssh -c x)"},
		{"docker ps stays a prefix", commandCall("docker ps -a"), "run_command(docker ps:*)"},
		{"kubectl get stays a prefix", commandCall("kubectl get pods"), "run_command(kubectl get:*)"},
		{"go build stays a prefix", commandCall("go build ./..."), "run_command(go build:*)"},
		{"gh pr stays a prefix", commandCall("gh pr list"), "run_command(gh pr:*)"},
		{"one rule covers both", commandCall("git status && git status -s"), "run_command(git status:*)"},
		{"first of a list", commandCall("git status && git diff"), "run_command(git status:*) | run_command(git diff:*)"},
		{"pipeline and subshell", commandCall("(ls -1 | grep x) && git log -1"), "run_command(ls:*) | run_command(grep x:*) | run_command(git log:*)"},
		{"write in folder", call("write_file", map[string]string{"path": "docs/guide/a.md", "content": "x"}), "write_file(docs/guide/**)"},
		{"write absolute inside", call("write_file", map[string]string{"path": "/ws/src/a.go", "content": "x"}), "write_file(src/**)"},
		{"write at root", call("write_file", map[string]string{"path": "README.md", "content": "x"}), "write_file(/README.md)"},
		{"glob chars in folder", call("write_file", map[string]string{"path": "a*b/c", "content": "x"}), `write_file(a\*b/**)`},
		// A path rule judges the path alone: a tool that also takes the command it runs or the
		// name it dispatches to gets its exact arguments, never every command in the folder.
		{"a path and a command", call("exec_in", map[string]string{"path": "src/a", "command": "ls"}), "exec_in(command=ls,path=src/a)"},
		{"a path and a dispatch name", call("files__run", map[string]string{"path": "a.sh", "name": "exec"}), "files__run(name=exec,path=a.sh)"},
		{"other tool", call("github__create_issue", map[string]any{"repo": "acme/web", "title": "a, b=c*", "n": 3}), `github__create_issue(n=3,repo=acme/web,title=a\, b\=c\*)`},
		{"no arguments", call("ping", map[string]any{}), "ping"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := Suggest(tc.call)
			texts := make([]string, len(rs))
			for i, r := range rs {
				texts[i] = Text(r)
				if r.Effect != gate.Allow {
					t.Fatalf("rule %d: effect %s", i, r.Effect)
				}
				rs[i].Scope = gate.ScopeServer
			}
			if got := strings.Join(texts, " | "); got != tc.text {
				t.Fatalf("Suggest = %q, want %q", got, tc.text)
			}
			// The rules compile and cover the call they came from.
			if d := mustCompile(t, rs).Evaluate(tc.call); d.Effect != gate.Allow {
				t.Fatalf("the suggested rules %q do not allow their own call: %+v", texts, d)
			}
		})
	}
}

// Never broader than SPEC §14 says (issue 28, acceptance 5): no suggestion for a program with
// subcommands is the program alone, and none for an interpreter or shell is a prefix.
func TestSuggestIsNeverBroaderThanTheProgramAndSubcommand(t *testing.T) {
	for _, cmd := range []string{"git --no-pager log -1", "git -c color.ui=never log", "git --git-dir=.git log",
		"go -C . test ./...", "npm --prefix . test", "docker --context x ps", "cargo +nightly build", "git --paginate diff"} {
		for _, r := range Suggest(commandCall(cmd)) {
			if r.Specifier == "git:*" || r.Specifier == "go:*" || r.Specifier == "npm:*" || r.Specifier == "docker:*" || r.Specifier == "cargo:*" {
				t.Errorf("%q: suggests %s", cmd, Text(r))
			}
		}
	}
	for _, cmd := range []string{"python3 -c 'import os'", "node -e 1", "bash -c 'ls'", "perl -e 1", "ruby x.rb", "deno run x.ts", "sudo ls",
		// F5, and a word that is not literal: the whole line, never python3:* or ssh build01:*
		`python3 -c "$X"`, `sh -c "$X"`, `ssh build01 "$CMD"`, "ssh build01 'rm -rf ~'", "docker run alpine sh",
		"docker container exec c1 sh", "podman exec c1 sh", "kubectl run x --image=busybox -- sh", "go run example.com/x@latest",
		"npx -y evil", "uv run pytest", "uv tool run ruff", "poetry run pytest", "bundle exec rake", "nix develop",
		"vagrant ssh -c id", "gcloud compute ssh vm --command=id", "cargo install evil"} {
		for _, r := range Suggest(commandCall(cmd)) {
			if strings.HasSuffix(r.Specifier, ":*") {
				t.Errorf("%q: suggests a prefix %s", cmd, Text(r))
			}
		}
	}
}

func TestAmbiguousArguments(t *testing.T) {
	set := mustCompile(t, []gate.Rule{
		{Effect: gate.Allow, Tool: "write_file", Specifier: "docs/**", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "write_file", Specifier: "secrets/**", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "git diff:*", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "run_command", Specifier: "rm:*", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "t", Specifier: "repo=acme/*", Scope: gate.ScopeServer},
		{Effect: gate.Deny, Tool: "t", Specifier: "repo=evil/*", Scope: gate.ScopeServer},
	})
	raw := func(toolName, args string) gate.RuleCall {
		return gate.RuleCall{Tool: toolName, Arguments: json.RawMessage(args), Workspace: testWorkspace}
	}
	cases := []struct {
		name string
		call gate.RuleCall
		want string
	}{
		{"plain path", raw("write_file", `{"path": "docs/a"}`), "allow"},
		{"escaped key is the same key", raw("write_file", `{"p\u0061th": "docs/a"}`), "allow"},
		{"duplicate path", raw("write_file", `{"path": "docs/a", "path": "docs/b"}`), "ask"},
		{"case variant path", raw("write_file", `{"path": "docs/a", "Path": "x/y"}`), "ask"},
		{"case variant hides a denied path", raw("write_file", `{"path": "docs/a", "PATH": "secrets/k"}`), "deny"},
		{"only another case", raw("write_file", `{"Path": "docs/a"}`), "ask"},
		{"path not a string", raw("write_file", `{"path": ["docs/a"]}`), "ask"},
		{"duplicate command", raw("run_command", `{"command": "git diff", "command": "git diff HEAD"}`), "ask"},
		{"duplicate command hides rm", raw("run_command", `{"command": "git diff", "Command": "rm -rf /"}`), "deny"},
		{"duplicate kv key", raw("t", `{"repo": "acme/a", "repo": "acme/b"}`), "ask"},
		{"case variant kv hides evil", raw("t", `{"repo": "acme/a", "REPO": "evil/b"}`), "deny"},
		{"not an object", raw("write_file", `["docs/a"]`), "ask"},
		{"invalid json", raw("write_file", `{"path": "docs/a"`), "ask"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcome(set.Evaluate(tc.call)); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestWhenDecodesArgumentsOnlyWhenRead: a `when` over parent does not decode the call's
// arguments (the activation's args are lazy), so its cost does not grow with them; a `when`
// that reads args still sees them, as do annotations and session.
func TestWhenDecodesArgumentsOnlyWhenRead(t *testing.T) {
	big := map[string]any{}
	for i := range 40 {
		big[strings.Repeat("k", i+1)] = []any{i, "value", map[string]any{"n": i}}
	}
	c := call("t", big)
	c.Parent = "review_diff"
	eval := func(when string) (gate.Effect, float64) {
		s := mustCompile(t, []gate.Rule{{ID: "1", Effect: gate.Deny, Tool: "t", When: when, Scope: gate.ScopeServer}})
		eff := s.Evaluate(c).Effect
		return eff, testing.AllocsPerRun(50, func() { s.Evaluate(c) })
	}
	cases := []struct {
		name, when string
		want       gate.Effect
	}{
		{"parent", `parent == "review_diff"`, gate.Deny},
		{"args", `size(args) == 40 && args.kkk[0] == 2`, gate.Deny},
		{"annotations", `annotations.readOnlyHint == false`, gate.Deny},
		{"session", `session.id == "s1" && session.mode == "default"`, gate.Deny},
	}
	allocs := map[string]float64{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eff, n := eval(tc.when)
			if eff != tc.want {
				t.Fatalf("when %s: effect %q, want %q", tc.when, eff, tc.want)
			}
			allocs[tc.name] = n
		})
	}
	// Decoding 40 arguments with nested values takes hundreds of allocations.
	if allocs["parent"]+100 > allocs["args"] {
		t.Errorf("a when over parent allocates %v per call, one over args %v: the arguments were decoded for parent", allocs["parent"], allocs["args"])
	}
}

// TestWhenBounded: a `when` whose static cost (every size unknown) stays within WhenCostLimit
// runs without the runtime cost tracker; one that can grow with the call's arguments keeps it,
// so it still fails closed past the limit (TestWhen, "cost limit asks").
func TestWhenBounded(t *testing.T) {
	env, err := whenEnv()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, expr string
		bounded    bool
	}{
		{"parent", `parent == "codemode"`, true},
		{"size of args", `size(args) > 8`, true},
		{"amount and parent", `args.amount < 1000 && parent == null`, true},
		{"session mode", `session.mode == "plan" || tool == "x"`, true},
		{"comprehension over args", `args.exists(k, k.startsWith("a"))`, false},
		{"regular expression on an argument", `args.name.matches("a+")`, false},
		{"nested comprehensions", "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, a+b+c+d+e > 0)))))", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ast, iss := env.Compile(tc.expr)
			if iss != nil && iss.Err() != nil {
				t.Fatal(iss.Err())
			}
			if got := whenBounded(env, ast); got != tc.bounded {
				t.Errorf("whenBounded(%s) = %v, want %v", tc.expr, got, tc.bounded)
			}
		})
	}
}

// TestGlobToolPatterns: a glob tool pattern's literal start (globPrefix) only skips the names
// that cannot match it; every name the glob matches still matches.
func TestGlobToolPatterns(t *testing.T) {
	cases := []struct {
		pattern, prefix string
		match, miss     []string
	}{
		{"files__*", "files__", []string{"files__read", "files__"}, []string{"file__read", "xfiles__read", "read_file"}},
		{"*__create", "", []string{"github__create", "a__create"}, []string{"github__create_issue"}},
		{"mcp?__*", "mcp", []string{"mcp1__x", "mcpa__y"}, []string{"mcp__x", "mcp12__x", "m__x"}},
		{"[ab]*", "", []string{"alpha", "beta"}, []string{"gamma"}},
	}
	for _, tc := range cases {
		t.Run(tc.pattern, func(t *testing.T) {
			if got := globPrefix(tc.pattern); got != tc.prefix {
				t.Errorf("globPrefix(%q) = %q, want %q", tc.pattern, got, tc.prefix)
			}
			s := mustCompile(t, []gate.Rule{{ID: "g", Effect: gate.Deny, Tool: tc.pattern, Scope: gate.ScopeServer}})
			for _, name := range tc.match {
				if d := s.Evaluate(call(name, map[string]string{})); d.Effect != gate.Deny {
					t.Errorf("%s does not match %s: %+v", name, tc.pattern, d)
				}
			}
			for _, name := range tc.miss {
				if d := s.Evaluate(call(name, map[string]string{})); d.Effect != "" {
					t.Errorf("%s matches %s: %+v", name, tc.pattern, d)
				}
			}
		})
	}
}
