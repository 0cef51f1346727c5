package rules

import (
	"encoding/json"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"countersign/internal/gate"
)

// Suggest proposes the narrowest allow rules that cover a call, for "Always allow…" (SPEC §14);
// it is a gate.RuleSuggester. Each rule has Effect Allow; Scope, Source and CreatedBy are left
// to the caller. There is one rule, except for a command line whose simple commands one rule
// cannot cover (`echo hi && ls -1` → `run_command(echo hi:*)` and `run_command(ls:*)`).
//
//   - run_command → per simple command (suggestCommand), in order, leaving out one that a rule
//     before already covers:
//     the exact command for shells, interpreters and wrappers (`python3 -c 'print(1)'`, never
//     `python3:*`; codeReaders, wrappers), and for what runs any command or code elsewhere, in
//     a container or fetched from a registry, which SPEC §14 counts with them (runsAnything:
//     `ssh build01 uptime`, `docker run …`, `docker compose exec …`, `kubectl exec …`,
//     `go run …`, `npx …`, `pnpm dlx …`, `uvx …`, `pipx run …`, `nix run …`, `gh api …`; never
//     `ssh build01:*` nor `docker run:*`);
//     for programs with subcommands (multiCommand: git, go, npm, cargo, docker, …) the words up
//     to and including the subcommand, with the options before it (`git --no-pager log -1` →
//     `git --no-pager log:*`, never `git:*`), or the exact command when there is none
//     (`git --version`);
//     for other programs the program, then the word after it when it looks like a subcommand
//     (lowercase letters, digits, "-" and "_", not starting with "-"): `ls -la` → `ls:*`,
//     `echo hi` → `echo hi:*`.
//     A prefix that would not cover its command (an option after it runs programs,
//     optionTable) becomes the exact command. Words are shell-quoted when they need it. When
//     the command does not parse, or a first word is not literal, the whole command is the
//     specifier, exact (the person edits it; it may not compile); so too when a word of a
//     command whose suggestion is exact is not literal (`python3 -c "$X"`). A command that no rule can
//     allow (text shells read differently, a substitution, a redirection outside the
//     workspace) gets the rules for its words all the same; saving them approves this call
//     once and the same text asks again.
//   - a call with a string `path` argument inside the workspace (write_file, read_file,
//     edit-style tools) and no argument naming a command or a tool it dispatches to
//     (dispatchKeys) → <tool>(<folder>/**) for the file's workspace-relative folder, or
//     <tool>(/<file>) for a file at the workspace root (the "/" anchors it there).
//   - anything else → the tool with its exact top-level arguments as key=value, sorted by key,
//     escaped (EscapeValue), or the bare tool name when there are none.
//
// The rules together match the call they came from whenever the call is fully visible (every
// simple command readable and literal, nothing opaque).
func Suggest(c gate.RuleCall) []gate.Rule {
	r := gate.Rule{Effect: gate.Allow, Tool: c.Tool}
	var args map[string]json.RawMessage
	_ = json.Unmarshal(c.Arguments, &args)
	str := func(k string) (string, bool) {
		var s string
		raw, ok := args[k]
		if !ok || json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	}
	if commandTool(c.Tool) {
		if cmd, ok := str("command"); ok {
			specs := suggestCommand(cmd, c.Workspace)
			out := make([]gate.Rule, len(specs))
			for i, s := range specs {
				out[i] = r
				out[i].Specifier = s
			}
			return out
		}
	}
	if p, ok := str(outsidePathKey(&c)); ok && !dispatches(args) {
		if rel, inside := workspacePath(p, c.Workspace); inside && rel != "." {
			dir := path.Dir(rel)
			if dir == "." {
				r.Specifier = "/" + EscapeValue(rel)
			} else {
				r.Specifier = EscapeValue(dir) + "/**"
			}
			return []gate.Rule{r}
		}
	}
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, escapeKey(k)+"="+EscapeValue(argString(args[k])))
	}
	r.Specifier = strings.Join(parts, ",")
	return []gate.Rule{r}
}

// dispatchKeys are the arguments that name the command a tool runs or the tool it dispatches
// to (gate's riskyArguments less the paths): a path rule, which judges the path alone, would
// allow every command or tool in the folder (SPEC §14: no broader than the call).
var dispatchKeys = []string{"command", "cmd", "name", "tool", "tool_name", "toolName"}

// dispatches reports whether args carry one of dispatchKeys.
func dispatches(args map[string]json.RawMessage) bool {
	for _, k := range dispatchKeys {
		if _, ok := args[k]; ok {
			return true
		}
	}
	return false
}

// escapeKey escapes the separators in an argument name.
func escapeKey(k string) string {
	var b strings.Builder
	for _, r := range k {
		if r == ',' || r == '=' || r == ')' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// multiCommand are programs whose first operand is a subcommand: a suggestion for them names
// it (SPEC §14: `git log:*`, never `git:*`).
var multiCommand = map[string]bool{
	"git": true, "go": true, "npm": true, "pnpm": true, "yarn": true, "cargo": true, "rustup": true,
	"docker": true, "podman": true, "kubectl": true, "helm": true, "gh": true, "glab": true, "apt": true,
	"apt-get": true, "dnf": true, "yum": true, "brew": true, "pip": true, "pip3": true, "pipx": true, "uv": true,
	"poetry": true, "conda": true, "gem": true, "bundle": true, "composer": true, "dotnet": true,
	"systemctl": true, "terraform": true, "aws": true, "gcloud": true, "az": true, "hg": true, "svn": true,
	"nix": true, "just": true, "mvn": true, "gradle": true, "hugo": true, "flutter": true, "dart": true,
	"swift": true, "stack": true, "cabal": true, "mix": true, "opam": true, "zig": true,
}

// runners are the programs, or their subcommands, that run any command or code: on another
// machine (ssh joins its words into a line for the remote shell), in a container, or from a
// package they fetch. "" runs anything whatever follows; "a b" is the subcommand a with b
// among the words after it (`docker compose -f x.yml run web sh`).
var runners = map[string][]string{
	"ssh": {""}, "mosh": {""}, "npx": {""}, "pnpx": {""}, "bunx": {""}, "uvx": {""},
	"docker":         {"run", "exec", "compose run", "compose exec", "container run", "container exec", "debug"},
	"podman":         {"run", "exec", "compose run", "compose exec", "container run", "container exec"},
	"nerdctl":        {"run", "exec", "compose run", "compose exec", "container run", "container exec"},
	"docker-compose": {"run", "exec"},
	"podman-compose": {"run", "exec"},
	"kubectl":        {"exec", "run", "debug", "attach"},
	"oc":             {"exec", "run", "debug", "rsh", "attach"},
	"go":             {"run"},
	"cargo":          {"install"},
	"npm":            {"exec", "x"},
	"pnpm":           {"dlx", "exec", "x"},
	"yarn":           {"dlx", "exec"},
	"bun":            {"x"},
	"pipx":           {"run"},
	"uv":             {"run", "tool run"},
	"poetry":         {"run"},
	"pipenv":         {"run"},
	"bundle":         {"exec"},
	"conda":          {"run"},
	"deno":           {"run", "eval", "x"},
	"nix":            {"run", "shell", "develop"},
	"nix-shell":      {""},
	"gh":             {"api", "codespace ssh", "cs ssh", "extension exec", "ext exec"},
	"gcloud":         {"compute ssh"},
	"vagrant":        {"ssh"},
}

// runsAnything reports whether a simple command runs any command or code elsewhere (runners):
// its suggestion is the exact command, never a prefix.
func runsAnything(prog string, ws []word) bool {
	subs, ok := runners[prog]
	if !ok {
		return false
	}
	sub := subcommandAt(prog, ws)
	for _, s := range subs {
		first, then, nested := strings.Cut(s, " ")
		switch {
		case first == "":
			return true
		case sub < 0 || ws[sub].val != first:
			continue
		case !nested:
			return true
		}
		for _, w := range ws[sub+1:] {
			if w.val == then {
				return true
			}
		}
	}
	return false
}

// suggestCommand is the run_command specifiers for a command line (see Suggest).
func suggestCommand(cmd, workspace string) []string {
	whole := strings.TrimSpace(cmd)
	v := viewShell(cmd, redirScope{workspace: workspace})
	if len(v.cmds) == 0 {
		return []string{whole}
	}
	var specs []string
	var chosen []*cmdSpec
	for i := range v.cmds {
		c := &v.cmds[i]
		covered := false
		for _, cs := range chosen {
			if ok, _ := cs.allows(c); ok {
				covered = true
				break
			}
		}
		if covered {
			continue
		}
		spec := suggestFor(c)
		if spec == "" {
			return []string{whole}
		}
		if slices.Contains(specs, spec) {
			continue
		}
		specs = append(specs, spec)
		if cs, err := compileCmdSpec(spec, true); err == nil {
			chosen = append(chosen, cs)
		}
	}
	return specs
}

// suggestFor is the specifier for one simple command: its prefix (see Suggest) when that
// covers it, else the exact command; "" when its program is not literal.
func suggestFor(c *simpleCmd) string {
	w0 := c.words[0]
	if !w0.exact || w0.val == "" {
		return ""
	}
	exact := exactSpec(c)
	prog := filepath.Base(w0.val)
	if readsCode(prog) || isWrapper(w0.val) || runsAnything(prog, c.words) {
		// exact, or the whole line when a word is not literal (`python3 -c "$X"`): never a
		// prefix such as python3:*
		return exact
	}
	n := 1 // words in the prefix
	if multiCommand[prog] {
		sub := subcommandAt(prog, c.words)
		if sub < 0 || !c.words[sub].exact {
			if exact != "" {
				return exact
			}
		} else {
			n = sub + 1
		}
	} else if len(c.words) > 1 && c.words[1].exact && subcommandLike(c.words[1].val) {
		n = 2
	}
	words := make([]string, 0, n)
	for _, w := range c.words[:n] {
		if !w.exact {
			break
		}
		words = append(words, quoteWord(w.val))
	}
	spec := strings.Join(words, " ") + ":*"
	if cs, err := compileCmdSpec(spec, true); err == nil {
		if ok, _ := cs.allows(c); ok || exact == "" {
			return spec
		}
	}
	if exact != "" {
		return exact
	}
	return spec
}

// exactSpec is the exact specifier of a simple command (every word quoted), or "" when a word
// is not literal or cannot be quoted.
func exactSpec(c *simpleCmd) string {
	words := make([]string, 0, len(c.words))
	for _, w := range c.words {
		if !w.exact {
			return ""
		}
		q, err := syntax.Quote(w.val, syntax.LangPOSIX)
		if err != nil {
			return ""
		}
		words = append(words, q)
	}
	return strings.Join(words, " ")
}

// subcommandLike: lowercase letters, digits, "-" and "_", not starting with "-".
func subcommandLike(s string) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// quoteWord quotes a word for the shell when it needs it.
func quoteWord(s string) string {
	q, err := syntax.Quote(s, syntax.LangPOSIX)
	if err != nil {
		return s
	}
	return q
}
