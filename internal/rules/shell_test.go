package rules

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"countersign/internal/gate"
)

const testWorkspace = "/ws"

// shellRules are the three rules of issue 17's acceptance 2.
func shellRules() []gate.Rule {
	return []gate.Rule{
		{ID: "a1", Effect: gate.Allow, Tool: "run_command", Specifier: "git diff:*", Scope: gate.ScopeServer},
		{ID: "a2", Effect: gate.Allow, Tool: "run_command", Specifier: "go test:*", Scope: gate.ScopeServer},
		{ID: "d1", Effect: gate.Deny, Tool: "run_command", Specifier: "rm:*", Scope: gate.ScopeServer},
	}
}

func mustCompile(t testing.TB, rs []gate.Rule) *Set {
	t.Helper()
	s, err := Compile(rs)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

func commandCall(cmd string) gate.RuleCall {
	args, _ := json.Marshal(map[string]string{"command": cmd})
	return gate.RuleCall{Tool: "run_command", Arguments: args, SessionID: "s1", Workspace: testWorkspace, Mode: gate.ModeDefault}
}

// outcome folds a decision into what happens to the call: "allow", "deny" or "ask" (an ask rule,
// or no rule at all: run_command then asks by its annotation default).
func outcome(d gate.RuleDecision) string {
	switch d.Effect {
	case gate.Allow:
		return "allow"
	case gate.Deny:
		return "deny"
	}
	return "ask"
}

func TestShellMatchingTable(t *testing.T) {
	set := mustCompile(t, shellRules())
	cases := []struct {
		name, cmd, want string
	}{
		{"plain prefix", "git diff", "allow"},
		{"prefix with ref", "git diff HEAD~1", "allow"},
		{"prefix with flag", "git diff --stat", "allow"},
		{"go test all", "go test ./...", "allow"},
		{"go test flags", "go test -race ./internal/...", "allow"},
		{"go test bare", "go test", "allow"},
		{"semicolon rm", "git diff; rm -rf /", "deny"},
		{"and rm", "git diff && rm x", "deny"},
		{"or rm", "git diff || rm x", "deny"},
		{"background then rm", "git diff & rm x", "deny"},
		{"pipe to sh", "git diff | sh", "ask"},
		{"command substitution rm", "git diff $(rm x)", "deny"},
		{"backquote rm", "git diff `rm x`", "deny"},
		{"quoted substitution rm", `git diff "$(rm x)"`, "deny"},
		{"substitution in default", "git diff ${X:-$(rm x)}", "deny"},
		{"substitution harmless", "git diff $(ls)", "ask"},
		{"redirect to etc", "git diff > /etc/passwd", "ask"},
		{"redirect append tmp", "git diff >> /tmp/x", "ask"},
		{"redirect relative inside", "git diff > out.txt", "allow"},
		{"redirect absolute inside", "git diff > /ws/out/d.txt", "allow"},
		{"redirect escaping", "git diff > ../out.txt", "ask"},
		{"redirect to variable", "git diff > $OUT", "ask"},
		{"stderr to dev null", "git diff 2>/dev/null", "allow"},
		{"dup and pipe", "git diff 2>&1 | go test ./...", "allow"},
		{"leading assignment", "PATH=/tmp git diff", "ask"},
		{"assignment only", "X=1", "ask"},
		{"export then git", "export X=1; git diff", "ask"},
		{"eval git", `eval "git diff"`, "ask"},
		{"eval rm", `eval "rm -rf /"`, "deny"},
		{"sh -c git", "sh -c 'git diff'", "ask"},
		{"sh -c rm", "sh -c 'rm -rf /'", "deny"},
		{"bash -c git and rm", `bash -c "git diff && rm x"`, "deny"},
		{"exec git", "exec git diff", "ask"},
		{"env git", "env git diff", "ask"},
		{"newline rm", "git diff\nrm x", "deny"},
		{"newline both allowed", "git diff\ngo test ./...", "allow"},
		{"empty quotes in program", "g''it diff", "allow"},
		{"double quoted word", `git "diff"`, "allow"},
		{"cyrillic i in git", "gіt diff", "ask"},
		{"cyrillic i in diff", "git dіff", "ask"},
		{"parse error paren", "git diff (", "ask"},
		{"parse error quote", "git diff 'oops", "ask"},
		{"rm alone", "rm -rf /", "deny"},
		{"rm by path", "/bin/rm -rf /", "deny"},
		{"rm quoted", "r''m x", "deny"},
		{"rm escaped", `\rm x`, "deny"},
		{"sudo rm", "sudo rm -rf /", "deny"},
		{"xargs rm", "xargs rm < list", "deny"},
		{"find exec rm", `find . -exec rm {} \;`, "deny"},
		{"command rm", "command rm x", "deny"},
		{"nohup rm background", "nohup rm x &", "deny"},
		{"process substitution rm", "git diff <(rm x)", "deny"},
		{"process substitution ls", "git diff <(ls)", "ask"},
		{"other git", "git status", "ask"},
		{"git alone", "git", "ask"},
		{"longer word", "git diff-tree", "ask"},
		{"joined words", "gitdiff", "ask"},
		{"uncovered pipe head", "git log | git diff", "ask"},
		{"subshell", "(git diff)", "allow"},
		{"block", "{ git diff; go test ./...; }", "allow"},
		{"if clause", "if git diff; then go test ./...; fi", "allow"},
		{"for loop arg", "for f in a b; do git diff $f; done", "ask"}, // $f may begin with "--output="
		// Unquoted expansions split into fields: X="a --output=y" makes "./$X" two words, the
		// second an option that writes (found by the fuzzer). Quoted, they stay one word.
		{"for loop arg after literal", "for f in a b; do git diff ./$f; done", "ask"},
		{"for loop arg after literal, quoted", `for f in a b; do git diff "./$f"; done`, "allow"},
		{"function", "f() { git diff; }; f", "ask"},
		{"param in later arg", "git diff $HOME", "ask"}, // may expand to an option that writes
		{"param after literal", "git diff ./$X", "ask"},
		{"param after literal, quoted", `git diff "./$X"`, "allow"},
		{"param after option name", "git diff --stat=$N", "ask"},
		{"param after option name, quoted", `git diff "--stat=$N"`, "allow"},
		{"param inside a word before a glob", "git diff 000$0*", "ask"},
		{"param as program", "$GIT diff", "ask"},
		{"arithmetic", "git diff $((1+1))", "ask"},
		{"glob later arg", "git diff *.go", "ask"}, // a file named --output=x.go would be an option
		{"glob after literal", "git diff ./*.go", "allow"},
		{"glob after folder", "git diff internal/*.go", "allow"},
		{"glob in prefix", "gi? diff", "ask"},
		{"tilde program", "~/bin/git diff", "ask"},
		{"tilde argument (a home folder decides what it becomes; found by the fuzzer)", "git diff ~0", "ask"},
		{"tilde inside a word stays literal", "git diff HEAD~2", "allow"},
		{"heredoc with substitution", "git diff <<EOF\n$(rm x)\nEOF", "deny"},
		{"quoted heredoc", "git diff <<'EOF'\nhello $(x)\nEOF", "allow"},
		{"only redirection", "> main.go", "ask"},
		{"comment hides nothing", "git diff # ; rm x", "allow"},
		{"go vet", "go vet ./...", "ask"},
		{"empty", "", "ask"},
		// dash reads $'x' as the word $x, bash as x: the readings differ, so it asks (issue 28).
		{"dollar single quote later arg", "git diff $'x'", "ask"},
		{"dollar single quote program", "$'git' diff", "ask"},
	}
	if len(cases) < 40 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := set.Evaluate(commandCall(tc.cmd))
			if got := outcome(d); got != tc.want {
				t.Fatalf("%q: got %s (%+v), want %s", tc.cmd, got, d, tc.want)
			}
			if tc.want == "deny" && !strings.HasPrefix(d.Reason, "rule run_command(rm:*) denies ") {
				t.Fatalf("%q: reason %q", tc.cmd, d.Reason)
			}
			if tc.want != "ask" && (d.Rule == nil || d.Reason == "") {
				t.Fatalf("%q: decision without rule or reason: %+v", tc.cmd, d)
			}
		})
	}
}

func TestShellDenyReasonNamesTheCommand(t *testing.T) {
	set := mustCompile(t, shellRules())
	cases := []struct{ name, cmd, reason string }{
		{"top level", "git diff; rm -rf /", "rule run_command(rm:*) denies rm -rf /"},
		{"inside sh -c", "sh -c 'rm -rf x'", "rule run_command(rm:*) denies rm -rf x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if d := set.Evaluate(commandCall(tc.cmd)); d.Reason != tc.reason {
				t.Fatalf("reason %q, want %q", d.Reason, tc.reason)
			}
		})
	}
}

func TestShellAllowReason(t *testing.T) {
	set := mustCompile(t, shellRules())
	cases := []struct{ name, cmd, reason, id string }{
		{"one rule", "git diff HEAD", "rule run_command(git diff:*) allows git diff HEAD", "a1"},
		{"two rules", "go test ./... && git diff", "rules run_command(git diff:*), run_command(go test:*) allow go test ./... && git diff", "a1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := set.Evaluate(commandCall(tc.cmd))
			if d.Reason != tc.reason || d.Rule == nil || d.Rule.ID != tc.id {
				t.Fatalf("got %+v, want reason %q rule %s", d, tc.reason, tc.id)
			}
		})
	}
}

func TestShellExactSpecifier(t *testing.T) {
	set := mustCompile(t, []gate.Rule{
		{Effect: gate.Allow, Tool: "run_command", Specifier: "go test ./...", Scope: gate.ScopeServer},
		{Effect: gate.Allow, Tool: "run_command", Specifier: "grep 'a b':*", Scope: gate.ScopeServer},
	})
	cases := []struct{ name, cmd, want string }{
		{"exact", "go test ./...", "allow"},
		{"exact quoted", "go test './...'", "allow"},
		{"extra word", "go test ./... -race", "ask"},
		{"fewer words", "go test", "ask"},
		{"quoted specifier word", `grep "a b" file`, "allow"},
		{"split words differ", "grep a b file", "ask"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcome(set.Evaluate(commandCall(tc.cmd))); got != tc.want {
				t.Fatalf("%q: got %s, want %s", tc.cmd, got, tc.want)
			}
		})
	}
}

// FuzzShellAllow holds the property of issue 17 (acceptance 2): a command is allowed only if the
// parser found every simple command in it and each is matched by an allow rule. The oracle
// re-parses the command itself and expands words with mvdan.cc/sh/v3/expand, not with the
// matcher's helpers.
func FuzzShellAllow(f *testing.F) {
	for _, seed := range []string{
		"git diff", "git diff; rm -rf /", "git diff && rm x", "git diff | sh", "git diff $(rm x)",
		"git diff `rm x`", "git diff > /etc/passwd", "PATH=/tmp git diff", `eval "git diff"`,
		"sh -c 'git diff'", "git diff\nrm x", "g''it diff", "gіt diff", "git diff (", "go test ./...",
		"{ git diff; go test ./...; }", "git diff <<EOF\n$(rm x)\nEOF", "for f in a; do git diff $f; done",
		"git diff 2>&1 > out", "git diff > /ws/../etc/x", `git di\ff`, "git diff ${X:=1}", "git diff > {1..99999}",
		"git diff > cs.db", "git diff >> policy.json", "git diff > a/../cs.db-wal", "go test 2> /ws/cs.db.share-key",
		"git diff --output=/tmp/x", "git diff --outp=x", "go test -exec=sh", "git diff $X", "git diff *",
		"git diff -$X", `git diff "--out"put=x`, "for f in *; do git diff $f; done", "git diff ./$X ./*",
	} {
		f.Add(seed)
	}
	set, err := NewCompiler(fuzzProtected)(shellRules())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		c := commandCall(cmd)
		d := set.Evaluate(c)
		if d.Effect != gate.Allow {
			return
		}
		// the command as the tool receives it (JSON turns invalid UTF-8 into U+FFFD)
		var args struct{ Command string }
		if err := json.Unmarshal(c.Arguments, &args); err != nil {
			t.Fatal(err)
		}
		if why := oracleAllows(args.Command); why != "" {
			t.Fatalf("%q allowed (%s) but %s", cmd, d.Reason, why)
		}
	})
}

// fuzzProtected are the server's own files given to FuzzShellAllow's rules (the workspace /ws
// does not exist, so paths compare as cleaned text).
var fuzzProtected = []string{
	"/ws/cs.db", "/ws/cs.db-wal", "/ws/cs.db-shm", "/ws/cs.db-journal", "/ws/cs.db.lock",
	"/ws/cs.db.share-key", "/ws/policy.json",
}

// oracleOptions are the options the oracle refuses in an allowed command: programs' options
// that write files or run commands (the list, written out again here).
var oracleOptions = []string{
	"--output", "--exec", "--upload-pack", "--receive-pack", "--ext-diff", "--textconv",
	"--git-dir", "--work-tree", "--exec-path", "--config", "--open-files-in-pager", "-exec",
	"-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls",
	"--to-command", "--use-compress-program", "--checkpoint-action", "--pager",
}

// oracleWrites: the field is one of oracleOptions, or a long option abbreviating one.
func oracleWrites(field string) bool {
	for _, o := range oracleOptions {
		if strings.HasPrefix(field, o) {
			return true
		}
		name, _, _ := strings.Cut(field, "=")
		if strings.HasPrefix(name, "--") && len(name) > 2 && strings.HasPrefix(o, name) {
			return true
		}
	}
	return false
}

// hostile is an expansion environment chosen against the matcher: every variable but HOME holds
// an option that writes, and every folder holds a file named like one.
func hostile() *expand.Config {
	return &expand.Config{
		Env: expand.FuncEnviron(func(name string) string {
			if name == "HOME" {
				return "/home/u"
			}
			return "--output=/tmp/x"
		}),
		ReadDir2: func(string) ([]fs.DirEntry, error) { return []fs.DirEntry{hostileEntry{}}, nil },
	}
}

type hostileEntry struct{}

func (hostileEntry) Name() string               { return "--output=x" }
func (hostileEntry) IsDir() bool                { return false }
func (hostileEntry) Type() fs.FileMode          { return 0 }
func (hostileEntry) Info() (fs.FileInfo, error) { return nil, fs.ErrNotExist }

// oracleAllows says why cmd must not be allowed by `git diff:*` and `go test:*` ("" if it may).
func oracleAllows(cmd string) string {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(cmd), "")
	if err != nil {
		return "it does not parse: " + err.Error()
	}
	why := ""
	calls := 0
	syntax.Walk(f, func(n syntax.Node) bool {
		if why != "" {
			return false
		}
		switch n := n.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst, *syntax.FuncDecl, *syntax.Assign, *syntax.ArithmExp,
			*syntax.DeclClause, *syntax.LetClause, *syntax.ArithmCmd, *syntax.TestClause, *syntax.CoprocClause:
			why = fmt.Sprintf("it holds a %T", n)
		case *syntax.Stmt:
			if n.Cmd == nil {
				why = "a statement has no command"
			}
			for _, r := range n.Redirs {
				if r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc {
					continue
				}
				fields, err := dashFields(r.Word)
				if err != nil || len(fields) != 1 {
					why = "a redirection target does not expand to one field"
					continue
				}
				target := fields[0]
				if (r.Op == syntax.DplOut || r.Op == syntax.DplIn) && (target == "-" || strings.Trim(target, "0123456789") == "") {
					continue
				}
				// Repeated slashes name the same path on Linux ("//ws" is "/ws"; found by the
				// fuzzer in the oracle, not in the matcher).
				for strings.Contains(target, "//") {
					target = strings.ReplaceAll(target, "//", "/")
				}
				if target == "/dev/null" {
					continue
				}
				if strings.HasPrefix(target, "/") && !strings.HasPrefix(target+"/", testWorkspace+"/") || strings.Contains("/"+target+"/", "/../") && !insideByHand(target) {
					why = "a redirection goes to " + target
				}
				abs := target
				if !strings.HasPrefix(abs, "/") {
					abs = testWorkspace + "/" + abs
				}
				if slices.Contains(fuzzProtected, path.Clean(abs)) {
					why = "a redirection goes to the server's own file " + target
				}
			}
		case *syntax.CallExpr:
			calls++
			if len(n.Args) < 2 {
				why = "a simple command has fewer than 2 words"
				return false
			}
			for _, w := range n.Args[:2] {
				for _, p := range w.Parts {
					switch p.(type) {
					case *syntax.Lit, *syntax.SglQuoted, *syntax.DblQuoted:
					default:
						why = "a matched word is not literal"
						return false
					}
				}
			}
			a, err1 := dashFields(n.Args[0])
			b, err2 := dashFields(n.Args[1])
			if err1 != nil || err2 != nil || len(a) != 1 || len(b) != 1 {
				why = "a matched word does not expand to one field"
				return false
			}
			if !(a[0] == "git" && b[0] == "diff") && !(a[0] == "go" && b[0] == "test") {
				why = "simple command " + a[0] + " " + b[0] + " is matched by no allow rule"
				return false
			}
			for _, w := range n.Args[2:] {
				fields, err := dashFieldsWith(hostile(), w)
				if err != nil {
					why = "an argument does not expand: " + err.Error()
					return false
				}
				for _, fd := range fields {
					if oracleWrites(fd) {
						why = "an argument is or may become the option " + fd
						return false
					}
				}
			}
		}
		return true
	})
	if why == "" && calls == 0 {
		why = "the parser found no simple command"
	}
	return why
}

// dashFields expands a word with mvdan.cc/sh/v3/expand as dash would: expand does bash's brace
// expansion, which dash does not have, so unquoted braces are escaped first.
func dashFields(w *syntax.Word) ([]string, error) { return dashFieldsWith(nil, w) }

// dashFieldsWith is dashFields with an expansion environment.
func dashFieldsWith(cfg *expand.Config, w *syntax.Word) ([]string, error) {
	cp := &syntax.Word{Parts: make([]syntax.WordPart, len(w.Parts))}
	for i, p := range w.Parts {
		lit, ok := p.(*syntax.Lit)
		if !ok || !strings.ContainsAny(lit.Value, "{}") {
			cp.Parts[i] = p
			continue
		}
		var b strings.Builder
		for j := 0; j < len(lit.Value); j++ {
			c := lit.Value[j]
			switch {
			case c == '\\' && j+1 < len(lit.Value):
				b.WriteByte(c)
				j++
				b.WriteByte(lit.Value[j])
			case c == '{' || c == '}':
				b.WriteByte('\\')
				b.WriteByte(c)
			default:
				b.WriteByte(c)
			}
		}
		l := *lit
		l.Value = b.String()
		cp.Parts[i] = &l
	}
	return expand.Fields(cfg, cp)
}

// insideByHand cleans a relative path segment by segment and reports whether it stays inside.
func insideByHand(p string) bool {
	if strings.HasPrefix(p, testWorkspace+"/") {
		p = strings.TrimPrefix(p, testWorkspace+"/")
	}
	depth := 0
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return false
			}
		default:
			depth++
		}
	}
	return true
}
