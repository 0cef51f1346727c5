// Package rules is the rules engine of SPEC §14: it parses and prints the text form of rules,
// checks a rule before it is saved, compiles a set of rules once (specifier → matcher, `when` →
// CEL program) into an evaluator indexed by tool name, matches run_command calls by parsing the
// command with mvdan.cc/sh/v3/syntax, suggests the narrowest rule for a call ("Always allow…"),
// and loads the policy file. It builds on the vocabulary of internal/gate (gate.Rule,
// gate.RuleCall, gate.RuleDecision) and knows nothing of the store, the web or the agent.
//
// # Rule text
//
// A rule's text is a tool pattern, optionally followed by a specifier in parentheses:
//
//	read_file                              every call of read_file
//	files__*                               every tool whose name matches the glob (path.Match syntax)
//	run_command(git diff:*)                a command whose words start with "git diff"
//	run_command(go test ./...)             a command of exactly these words
//	write_file(docs/**)                    a file tool whose workspace-relative path matches
//	github__create_issue(repo=acme/*)      top-level arguments, key=glob[,key=glob…]
//
// The specifier is everything between the first "(" and the final ")", so a ")" inside it needs
// no escape. In key=glob specifiers a backslash escapes the separators: `\,` and `\=` stand for a
// literal comma and equals sign, `\)` for ")"; any other backslash is left for the glob, where it
// escapes the next character (`\*` is a literal star, `\\` a backslash). run_command specifiers
// are shell words and use the shell's own quoting (`run_command(grep 'a b':*)`); path specifiers
// follow the key=glob rules for `\)`.
package rules

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"countersign/internal/gate"
	"countersign/internal/invisible"
)

// SyntaxError is an error in a rule's text: Col is the 1-based column (in bytes) where it is.
type SyntaxError struct {
	Col int
	Msg string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("column %d: %s", e.Col, e.Msg) }

// Parse splits a rule's text into its tool pattern and its specifier ("" when there are no
// parentheses), SPEC §14: "run_command(git diff:*)" → ("run_command", "git diff:*"). It checks
// the shape only (no invisible or bidirectional character anywhere (visibleText), a non-empty
// tool pattern of name characters and globs, valid path.Match syntax, a closing ")" at the very
// end, a non-empty specifier); whether the specifier compiles for the tool is Check's business.
// Errors are *SyntaxError with the column.
func Parse(text string) (toolPattern, specifier string, err error) {
	if err := visibleText(text); err != nil {
		return "", "", err
	}
	open := strings.IndexByte(text, '(')
	toolPattern = text
	if open >= 0 {
		toolPattern = text[:open]
	}
	if err := checkToolPattern(toolPattern); err != nil {
		return "", "", err
	}
	if open < 0 {
		return toolPattern, "", nil
	}
	if !strings.HasSuffix(text, ")") || len(text) == open+1 {
		return "", "", &SyntaxError{Col: len(text) + 1, Msg: `missing ")" at the end of the rule`}
	}
	specifier = text[open+1 : len(text)-1]
	if strings.TrimSpace(specifier) == "" {
		return "", "", &SyntaxError{Col: open + 2, Msg: "empty specifier in parentheses (leave the parentheses out to match every call)"}
	}
	return toolPattern, specifier, nil
}

// visibleText refuses text holding a character a person cannot see as written (invisible.Find:
// bidirectional overrides and isolates, zero-width characters, controls other than tab and
// newline, spaces other than U+0020, bytes that are not UTF-8): a rule that reads
// "run_command(git log:*)" on the Rules page must be that rule (SPEC §14; Trojan Source). The
// error is a *SyntaxError at the character's byte column, e.g. "column 18: U+202E is an
// invisible or bidirectional character (byte 18): type the rule without it".
func visibleText(s string) error {
	off, r, found := invisible.Find(s)
	if !found {
		return nil
	}
	what := fmt.Sprintf("%U is an invisible or bidirectional character", r)
	if r == utf8.RuneError {
		what = "a byte that is not UTF-8"
	}
	return &SyntaxError{Col: off + 1, Msg: fmt.Sprintf("%s (byte %d): type the rule without it", what, off+1)}
}

// checkToolPattern validates a tool pattern: non-empty, no spaces, quotes or parentheses, and
// valid path.Match syntax.
func checkToolPattern(p string) error {
	if p == "" {
		return &SyntaxError{Col: 1, Msg: "missing tool name"}
	}
	for i, r := range p {
		switch {
		case r == '_' || r == '-' || r == '.' || r == '*' || r == '?' || r == '[' || r == ']' || r == '^' || r == '!' || r == ':' || r == '/':
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		default:
			return &SyntaxError{Col: i + 1, Msg: fmt.Sprintf("%q is not allowed in a tool name or pattern", r)}
		}
	}
	if _, err := path.Match(p, ""); err != nil {
		return &SyntaxError{Col: 1, Msg: fmt.Sprintf("tool pattern %q is not a valid glob", p)}
	}
	return nil
}

// Text is the inverse of Parse: the rule's text form, Tool followed by "(Specifier)" when there
// is one (the effect, scope and `when` are not part of it). Parse(Text(r)) gives back r.Tool
// and r.Specifier. It is gate.Rule.Pattern, the one place the text form is written.
func Text(r gate.Rule) string { return r.Pattern() }

// EscapeValue escapes s for use as a literal glob inside a key=glob or path specifier: the
// separators ",", "=" and ")" get `\` in front, and so do the glob characters `*?[]{}\`.
func EscapeValue(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case ',', '=', ')', '*', '?', '[', ']', '{', '}', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// splitEscaped splits s on unescaped sep, turning `\,` `\=` `\)` into the plain character and
// keeping every other backslash sequence for the glob. A trailing lone backslash is an error
// at its offset.
func splitEscaped(s string, sep byte) ([]string, []int, error) {
	var parts []string
	var offs []int
	var b strings.Builder
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return nil, nil, &SyntaxError{Col: i + 1, Msg: "a backslash at the end escapes nothing"}
			}
			n := s[i+1]
			if n == ',' || n == '=' || n == ')' {
				b.WriteByte(n)
			} else {
				b.WriteByte('\\')
				b.WriteByte(n)
			}
			i++
		case sep != 0 && c == sep:
			parts = append(parts, b.String())
			offs = append(offs, start)
			b.Reset()
			start = i + 1
		default:
			b.WriteByte(c)
		}
	}
	parts = append(parts, b.String())
	offs = append(offs, start)
	return parts, offs, nil
}

// unescapeSeparators turns `\,` `\=` `\)` into the plain character, keeping other escapes.
func unescapeSeparators(s string) (string, error) {
	parts, _, err := splitEscaped(s, 0)
	if err != nil {
		return "", err
	}
	return strings.Join(parts, ""), nil
}
