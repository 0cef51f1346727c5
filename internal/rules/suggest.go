package rules

import (
	"encoding/json"
	"path"
	"sort"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"countersign/internal/gate"
)

// Suggest proposes the narrowest allow rule that covers a call, for "Always allow…" (SPEC §14);
// it is a gate.RuleSuggester. Effect is Allow; Scope, Source and CreatedBy are left to the
// caller.
//
//   - run_command → run_command(<first words>:*), the first words of the FIRST simple command:
//     the program, then the words that follow while they look like sub-commands (lowercase
//     letters, digits, "-" and "_", not starting with "-"; so no flag, path, "=" or "~"), at
//     most 2 words: `git diff HEAD~1` → `git diff:*`, `ls -la` → `ls:*`, `go test ./...` →
//     `go test:*`, `npm run build` → `npm run:*`. Words are shell-quoted when they need it. When
//     the command does not parse or its first word is not literal, the whole command is the
//     specifier, exact (the person edits it; it may not compile); a first word that is a
//     wrapper (sudo, sh, eval, …) gives a rule Check refuses for allow, for the same reason.
//   - a call with a string `path` argument inside the workspace (write_file, read_file,
//     edit-style tools) → <tool>(<folder>/**) for the file's workspace-relative folder, or
//     <tool>(/<file>) for a file at the workspace root (the "/" anchors it there).
//   - anything else → the tool with its exact top-level arguments as key=value, sorted by key,
//     escaped (EscapeValue), or the bare tool name when there are none.
//
// The suggestion matches the call it came from whenever the call is fully visible (for a
// command line of several simple commands it covers the first one only).
func Suggest(c gate.RuleCall) gate.Rule {
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
	if c.Tool == CommandTool {
		if cmd, ok := str("command"); ok {
			r.Specifier = suggestCommand(cmd)
			return r
		}
	}
	if p, ok := str("path"); ok {
		if rel, inside := workspacePath(p, c.Workspace); inside && rel != "." {
			dir := path.Dir(rel)
			if dir == "." {
				r.Specifier = "/" + EscapeValue(rel)
			} else {
				r.Specifier = EscapeValue(dir) + "/**"
			}
			return r
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
	return r
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

// suggestCommand is the specifier for run_command (see Suggest).
func suggestCommand(cmd string) string {
	whole := strings.TrimSpace(cmd)
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(cmd), "")
	if err != nil {
		return whole
	}
	var first *syntax.CallExpr
	syntax.Walk(f, func(n syntax.Node) bool {
		if first != nil {
			return false
		}
		if ce, ok := n.(*syntax.CallExpr); ok && len(ce.Args) > 0 {
			first = ce
			return false
		}
		return true
	})
	if first == nil {
		return whole
	}
	w0 := resolveWord(first.Args[0])
	if !w0.exact || w0.val == "" {
		return whole
	}
	words := []string{quoteWord(w0.val)}
	for _, w := range first.Args[1:] {
		if len(words) == 2 {
			break
		}
		rw := resolveWord(w)
		if !rw.exact || !subcommandLike(rw.val) {
			break
		}
		words = append(words, rw.val)
	}
	return strings.Join(words, " ") + ":*"
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
