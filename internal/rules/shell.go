package rules

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"

	"countersign/internal/realpath"
)

// Shell matching (SPEC §14 "Commands are parsed, not string-matched").
//
// run_command runs its `command` argument with /bin/sh -c in the workspace, and /bin/sh is dash
// on Debian, so commands are parsed as POSIX shell (syntax.LangPOSIX). Bash-only syntax (process
// substitution, [[ ]], $'…', arrays, <<<) is a parse error there, and a parse error never
// allows: the call asks. For deny and ask rules only, a command that is not POSIX is parsed a
// second time as bash, best effort, so that `git diff <(rm x)` is still denied by
// `deny run_command(rm:*)`.
//
// A call is ALLOWED by run_command rules only when all of these hold:
//   - the POSIX parse succeeded;
//   - there is no command substitution ($(…), `…`), process substitution, arithmetic expansion,
//     function definition, declaration (export/readonly/local), bash/zsh-only construct,
//     assignment (`PATH=/tmp git diff`, `X=1`), or statement that is only a redirection
//     (`> file`) anywhere in it;
//   - every redirection is a here-document without substitutions, a duplication of a file
//     descriptor (2>&1, >&-), or a file given as literal words that is /dev/null or, cleaned,
//     inside the workspace (absolute inside RuleCall.Workspace, or relative without escaping
//     ".."), and that is still inside the workspace's real path once symlinks are resolved as
//     the kernel resolves them (`docs/out/x` with `docs/out -> /tmp/o` is /tmp/o/x; a dangling
//     symlink is followed to the file a write would create), and is none of the server's own
//     files (NewCompiler: the database and its companions, the policy file; SPEC §14 "The agent
//     can never write its own rules"), compared by real path and by identity. Symlinks are read
//     when the call is decided: one created later (by an earlier command of the same line, say
//     `ln -s /etc d && ls > d/x`, allowed only if `ln` is) is not seen;
//   - every simple command (of lists, pipelines, &&, ||, ;, newlines, subshells, { } blocks,
//     if/while/until/for/case bodies) is matched by some allow rule; a simple command is
//     matched by a prefix rule (`git diff:*`) when its first words are exactly those words and
//     the rest are arguments, by an exact rule (`go test ./...`) when its words are exactly
//     those words;
//   - no word is, or may expand to, an option that writes files or runs programs
//     (writingOptions: `git log --output=/tmp/x`, `find . -exec …`, `tar --to-command=…`);
//   - the program is not a wrapper that runs another command or a string (eval, exec, source,
//     ".", sh/bash/dash/zsh/… , env, command, builtin, xargs, nohup, nice, timeout, time,
//     sudo, doas, su, chroot, setsid, stdbuf, ionice, flock, watch, busybox, strace):
//     such a command never matches an allow rule, whatever the rule says.
//
// Words. Quotes are resolved as the shell resolves them: `g''it diff`, `"git" diff` and
// `g\it diff` are the words git and diff, so they are matched as `git diff` (they are exactly
// what /bin/sh runs; for the same reason `r''m -rf /` is denied by `rm:*`). Unicode look-alikes
// are different bytes and simply do not match. A word compared with a rule's words (the matched
// prefix, or every word of an exact rule) must be fully literal: no parameter expansion, no
// unquoted glob character (* ? [) and no leading unquoted ~. The arguments after a matched
// prefix may also contain plain parameter expansions ($X, ${X}), globs and ~: they only produce
// more arguments to the same program; any other expansion (${X:-…}, ${#X}, …) is not seen
// through. No word may be, or may become, an option that writes files or runs programs
// (writingOptions): so an argument that begins with an expansion or a glob (`$F`, `*.go`) is not
// seen through either, while `./$F`, `src/*.go` and `--stat=$N` are.
//
// A call is DENIED (or ASKED) when any simple command anywhere, including inside substitutions,
// here-documents and assignments, is matched by a deny (or ask) rule. For these the program is
// compared by its base name (`/bin/rm -rf /` is `rm`), leading assignments are ignored
// (`PATH=/tmp rm x`), the words of a wrapper are tried at every position after the wrapper
// (`sudo rm x`, `xargs rm`, `find . -exec rm {} ;`), and the string of `sh -c '…'`, `bash -c`
// and `eval …` is parsed again and searched the same way, to a depth of 3. That is best effort:
// what cannot be seen at all (a variable holding a command, a script file) is not denied, but it
// is never allowed either, so the call asks.

// wrappers run another command or a string: never matched by an allow rule; deny rules look at
// the words after them.
var wrappers = map[string]bool{
	"eval": true, "exec": true, "source": true, ".": true, "command": true, "builtin": true,
	"env": true, "xargs": true, "nohup": true, "nice": true, "ionice": true, "timeout": true,
	"time": true, "sudo": true, "doas": true, "su": true, "chroot": true, "setsid": true,
	"stdbuf": true, "flock": true, "watch": true, "busybox": true, "strace": true, "ltrace": true,
	"unbuffer": true, "script": true, "run-parts": true, "parallel": true,
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true,
	"fish": true, "csh": true, "tcsh": true, "rbash": true,
}

// writingOptions are programs' own options that write files or run commands (SPEC §14: what the
// matcher cannot see through never matches allow): `git log --output=/tmp/x` writes anywhere,
// `git diff --ext-diff`, `--textconv`, `--pager`, `--upload-pack`, `--open-files-in-pager` run a
// program, `--git-dir`, `--work-tree`, `--exec-path`, `--config` point git elsewhere, find's
// -exec, -ok, -delete and -fprint* run, delete or write, tar's --to-command,
// --use-compress-program and --checkpoint-action run a program. A simple command with such a
// word anywhere (prefix included) is never matched by an allow rule, whatever the rule says, so
// the call asks; deny and ask matching ignores this list. A word matches an entry when it starts
// with it (`--output-directory`, `--config-env`, `-execdir`, `-fprint0`), and a long option
// also when its name (before "=") is an abbreviation of one (`--outp=x`: git's parse-options and
// getopt_long accept unique prefixes). A word that is not fully literal is judged by its literal
// beginning: `--out$X`, `-$X`, and a word that begins with an expansion, a tilde or a glob
// (`$OPT`, `~x`, `*`, which a file named `--output=x` would turn into that option) may become such
// an option; so may a word with an unquoted expansion anywhere (`./$X`: field splitting makes new
// words of its value). Quoted, `"./$X"` is one word and judged by its beginning.
// Program-specific short options (`git grep -O`, `curl -o`, `sort -o`) are not in the list: a
// prefix rule on such a program allows them.
var writingOptions = []string{
	"--output", "--exec", "--upload-pack", "--receive-pack", "--ext-diff", "--textconv",
	"--git-dir", "--work-tree", "--exec-path", "--config", "--open-files-in-pager",
	"--to-command", "--use-compress-program", "--checkpoint-action", "--pager",
	"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls",
}

// writingOption reports whether w may be one of writingOptions: w is the word when complete,
// else its literal beginning (the rest unknown).
func writingOption(w string, complete bool) bool {
	if w == "" {
		return !complete
	}
	if w[0] != '-' {
		return false
	}
	for _, o := range writingOptions {
		if strings.HasPrefix(w, o) || (!complete && strings.HasPrefix(o, w)) {
			return true
		}
	}
	name, _, eq := strings.Cut(w, "=")
	if (complete || eq) && len(name) > 2 && strings.HasPrefix(name, "--") {
		for _, o := range writingOptions {
			if strings.HasPrefix(o, name) {
				return true
			}
		}
	}
	return false
}

// shells take a command string after -c.
var shells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true,
	"fish": true, "csh": true, "tcsh": true, "rbash": true, "busybox": true,
}

// word is one shell word as the matcher sees it.
type word struct {
	val   string // the literal value, quotes and backslashes resolved (partial when !exact)
	exact bool   // fully literal: can be compared with a rule's word
	arg   bool   // acceptable as an argument after a matched prefix
	// writes: it is, or may expand to, one of writingOptions (never matched by allow)
	writes bool
}

// simpleCmd is one simple command found in a command line.
type simpleCmd struct {
	words   []word
	assigns bool   // leading VAR=… assignments
	text    string // its source text, for reasons
}

// program is the base name of the first word, for deny matching.
func (c *simpleCmd) program() string {
	if len(c.words) == 0 {
		return ""
	}
	return filepath.Base(c.words[0].val)
}

// shellView is what the matcher saw of one command line.
type shellView struct {
	cmds []simpleCmd // every simple command that can be allowed (empty when opaque by parse error)
	// opaque is why the line can never be allowed ("" when it can be, if every command is
	// matched): a parse error, a substitution, an assignment, a redirection outside, …
	opaque string
	// hidden are simple commands that can only be denied or asked: those inside substitutions
	// are in cmds too; these are the ones re-parsed from sh -c / eval strings and from the
	// bash reading of a non-POSIX line.
	hidden []simpleCmd
}

// cmdSpec is a compiled run_command specifier.
type cmdSpec struct {
	words  []string
	prefix bool // "…:*"
}

// compileCmdSpec compiles a run_command specifier: shell words (parsed as POSIX, fully literal),
// optionally followed by ":*". A specifier whose program is a wrapper (sudo, sh, eval, …) is
// refused for allow rules, which could never match it, and accepted for deny and ask rules.
func compileCmdSpec(spec string, allow bool) (*cmdSpec, error) {
	s := strings.TrimSpace(spec)
	cs := &cmdSpec{}
	if strings.HasSuffix(s, ":*") {
		cs.prefix = true
		s = strings.TrimSpace(strings.TrimSuffix(s, ":*"))
	}
	if s == "" {
		return nil, fmt.Errorf("run_command specifier %q has no command words", spec)
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(s), "")
	if err != nil {
		return nil, fmt.Errorf("run_command specifier %q is not shell words: %v", spec, err)
	}
	if len(f.Stmts) != 1 || len(f.Stmts[0].Redirs) > 0 || f.Stmts[0].Background || f.Stmts[0].Negated {
		return nil, fmt.Errorf("run_command specifier %q must be one simple command (write one rule per command)", spec)
	}
	call, ok := f.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok || len(call.Assigns) > 0 || len(call.Args) == 0 {
		return nil, fmt.Errorf("run_command specifier %q must be plain words, without assignments or shell syntax", spec)
	}
	for _, w := range call.Args {
		rw := resolveWord(w)
		if !rw.exact {
			return nil, fmt.Errorf("run_command specifier %q: word %s is not literal (quote glob characters, ~ and $)", spec, nodeText(s, w))
		}
		cs.words = append(cs.words, rw.val)
	}
	if allow && (wrappers[cs.words[0]] || wrappers[filepath.Base(cs.words[0])]) {
		return nil, fmt.Errorf("run_command specifier %q starts with %s, which runs other commands the rules cannot see, so an allow rule could never match it (deny and ask rules may name it)", spec, cs.words[0])
	}
	for _, w := range cs.words {
		if allow && writingOption(w, true) {
			return nil, fmt.Errorf("run_command specifier %q has %s, an option that writes files or runs programs, so an allow rule could never match it (deny and ask rules may name it)", spec, w)
		}
	}
	return cs, nil
}

// allows reports whether the simple command is matched by this specifier for an allow rule.
func (cs *cmdSpec) allows(c *simpleCmd) bool {
	if c.assigns || len(c.words) < len(cs.words) || wrappers[c.words[0].val] {
		return false
	}
	if !cs.prefix && len(c.words) != len(cs.words) {
		return false
	}
	for i, w := range cs.words {
		if !c.words[i].exact || c.words[i].val != w {
			return false
		}
	}
	for _, w := range c.words[len(cs.words):] {
		if !w.arg || w.writes {
			return false
		}
	}
	return true
}

// denies reports whether the simple command is matched by this specifier for a deny or ask rule
// (best effort, see above): the program by base name, assignments ignored, wrappers looked
// through.
func (cs *cmdSpec) denies(c *simpleCmd) bool {
	if cs.denyAt(c.words, true) {
		return true
	}
	if len(c.words) == 0 {
		return false
	}
	p := c.program()
	if !wrappers[p] && p != "find" {
		return false
	}
	for i := 1; i < len(c.words); i++ {
		if cs.denyAt(c.words[i:], true) {
			return true
		}
	}
	return false
}

func (cs *cmdSpec) denyAt(ws []word, base bool) bool {
	if len(ws) < len(cs.words) || (!cs.prefix && len(ws) != len(cs.words)) {
		return false
	}
	for i, w := range cs.words {
		v := ws[i].val
		if v == w || (i == 0 && base && filepath.Base(v) == w) {
			continue
		}
		return false
	}
	return true
}

// posixParsers reuses parsers (a *syntax.Parser is not safe for concurrent use, but can parse
// again).
var posixParsers = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangPOSIX)) }}

func parsePOSIX(s string) (*syntax.File, error) {
	p := posixParsers.Get().(*syntax.Parser)
	defer posixParsers.Put(p)
	return p.Parse(strings.NewReader(s), "")
}

// maxReparse bounds how deep sh -c / eval strings are parsed again.
const maxReparse = 3

// redirScope is what redirection targets are checked against: the workspace they must stay in
// (by cleaned path and by real path) and the server's own files they must never reach.
type redirScope struct {
	workspace string
	protected []string
}

// viewShell parses a command line and collects its simple commands; rs says where redirections
// may go.
func viewShell(command string, rs redirScope) *shellView {
	v := &shellView{}
	f, err := parsePOSIX(command)
	if err != nil {
		v.opaque = "the command does not parse as POSIX shell: " + err.Error()
		// best effort for deny and ask: read it as bash.
		if bf, berr := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), ""); berr == nil {
			bv := &shellView{}
			bv.collect(bf, command, rs, 0)
			v.hidden = append(bv.cmds, bv.hidden...)
		}
		return v
	}
	v.collect(f, command, rs, 0)
	return v
}

// collect walks the whole AST of one parsed string.
func (v *shellView) collect(f *syntax.File, src string, rs redirScope, depth int) {
	setOpaque := func(why string) {
		if v.opaque == "" {
			v.opaque = why
		}
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case nil: // Walk's end of a node's children
		case *syntax.File, *syntax.Word, *syntax.Lit, *syntax.Comment, *syntax.BinaryCmd,
			*syntax.Block, *syntax.Subshell, *syntax.IfClause, *syntax.WhileClause,
			*syntax.ForClause, *syntax.WordIter, *syntax.CaseClause, *syntax.CaseItem:
		case *syntax.SglQuoted:
			if n.Dollar {
				setOpaque("$'…' quoting")
			}
		case *syntax.DblQuoted:
			if n.Dollar {
				setOpaque(`$"…" quoting`)
			}
		case *syntax.ParamExp:
			if !simpleParam(n) {
				setOpaque("a parameter expansion with operators")
			}
		case *syntax.Stmt:
			if n.Cmd == nil {
				setOpaque("a statement that is only a redirection")
			}
			for _, r := range n.Redirs {
				if why := checkRedirect(r, rs); why != "" {
					setOpaque(why)
				}
			}
		case *syntax.Redirect:
		case *syntax.Assign:
			setOpaque("a variable assignment")
		case *syntax.CallExpr:
			c := simpleCmd{assigns: len(n.Assigns) > 0, text: nodeText(src, n)}
			for _, w := range n.Args {
				c.words = append(c.words, resolveWord(w))
			}
			if len(n.Args) == 0 {
				setOpaque("a variable assignment")
				return true
			}
			if c.assigns {
				setOpaque("a leading variable assignment (" + c.text + ")")
			}
			if wrappers[c.words[0].val] || wrappers[c.program()] {
				setOpaque(c.program() + " runs a command the rules cannot see")
				if depth < maxReparse {
					v.reparse(c, rs, depth)
				}
			}
			v.cmds = append(v.cmds, c)
		case *syntax.CmdSubst:
			setOpaque("a command substitution")
		case *syntax.ProcSubst:
			setOpaque("a process substitution")
		case *syntax.ArithmExp:
			setOpaque("an arithmetic expansion")
		case *syntax.FuncDecl:
			setOpaque("a function definition")
		default:
			setOpaque(fmt.Sprintf("shell syntax the rules cannot see through (%T)", n))
		}
		return true
	})
}

// reparse parses the string run by sh -c or eval and adds its commands as hidden ones.
func (v *shellView) reparse(c simpleCmd, rs redirScope, depth int) {
	var s string
	p := c.program()
	switch {
	case p == "eval":
		parts := make([]string, 0, len(c.words)-1)
		for _, w := range c.words[1:] {
			parts = append(parts, w.val)
		}
		s = strings.Join(parts, " ")
	case shells[p]:
		for i := 1; i+1 < len(c.words); i++ {
			w := c.words[i].val
			if strings.HasPrefix(w, "-") && !strings.HasPrefix(w, "--") && strings.Contains(w, "c") {
				s = c.words[i+1].val
				break
			}
		}
	}
	if s == "" {
		return
	}
	for _, lang := range []syntax.LangVariant{syntax.LangPOSIX, syntax.LangBash} {
		f, err := syntax.NewParser(syntax.Variant(lang)).Parse(strings.NewReader(s), "")
		if err != nil {
			continue
		}
		inner := &shellView{}
		inner.collect(f, s, rs, depth+1)
		v.hidden = append(v.hidden, inner.cmds...)
		v.hidden = append(v.hidden, inner.hidden...)
		return
	}
}

func nodeText(src string, n syntax.Node) string {
	a, b := int(n.Pos().Offset()), int(n.End().Offset())
	if a < 0 || b > len(src) || a > b {
		return ""
	}
	return src[a:b]
}

// simpleParam is $NAME or ${NAME} with no operator.
func simpleParam(p *syntax.ParamExp) bool {
	return p.Param != nil && p.Flags == nil && !p.Excl && !p.Length && !p.Width && !p.IsSet &&
		p.NestedParam == nil && p.Index == nil && len(p.Modifiers) == 0 && p.Slice == nil &&
		p.Repl == nil && p.Names == 0 && p.Exp == nil
}

// resolveWord resolves quotes and backslashes of a word as the shell does, and judges whether it
// may be one of writingOptions by its literal beginning.
func resolveWord(w *syntax.Word) word {
	out := word{exact: true, arg: true}
	var b strings.Builder
	lead, open := 0, true // b[:lead] is the literal beginning; open while nothing unknown came
	split := false        // an unquoted expansion: field splitting may make new words of it
	stop := func() {
		if open {
			lead, open = b.Len(), false
		}
	}
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			val, globAt := unquoteLit(p.Value)
			if globAt >= 0 || (i == 0 && strings.HasPrefix(p.Value, "~")) {
				out.exact = false
			}
			if i == 0 && strings.HasPrefix(p.Value, "~") {
				// Tilde expansion: a home folder the matcher cannot see (HOME, or a user's entry
				// in the passwd database) decides what the word becomes (found by the fuzzer).
				stop()
			}
			if globAt >= 0 && open {
				lead, open = b.Len()+globAt, false
			}
			b.WriteString(val)
		case *syntax.SglQuoted:
			if p.Dollar {
				out.exact, out.arg = false, false
				stop()
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				out.exact, out.arg = false, false
				stop()
			}
			for _, dp := range p.Parts {
				switch d := dp.(type) {
				case *syntax.Lit:
					b.WriteString(unquoteDbl(d.Value))
				case *syntax.ParamExp:
					out.exact = false
					stop()
					if !simpleParam(d) {
						out.arg = false
					}
				default:
					out.exact, out.arg = false, false
					stop()
				}
			}
		case *syntax.ParamExp:
			out.exact = false
			stop()
			if !simpleParam(p) {
				out.arg = false
			}
			// Unquoted, its value is split into fields wherever it stands: "./$X" with X set
			// to "a --output=y" is two words, the second an option (found by the fuzzer).
			split = true
		default:
			out.exact, out.arg = false, false
			stop()
		}
	}
	out.val = b.String()
	if open {
		lead = len(out.val)
	}
	out.writes = split || writingOption(out.val[:lead], open)
	return out
}

// unquoteLit removes the backslashes of an unquoted literal and returns the offset in the result
// of its first unescaped glob character (-1 when there is none).
func unquoteLit(s string) (string, int) {
	if !strings.ContainsAny(s, `\*?[`) {
		return s, -1
	}
	var b strings.Builder
	glob := -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
		case c == '*' || c == '?' || c == '[':
			if glob < 0 {
				glob = b.Len()
			}
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), glob
}

// unquoteDbl removes the backslashes that escape inside double quotes ($ ` " \ newline).
func unquoteDbl(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '$', '`', '"', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\n':
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// checkRedirect says why a redirection cannot be allowed ("" when it can). A file target is
// judged where the shell will open it (realpath.Locate from the workspace, the file tools' own
// resolver, SPEC §14 "Paths as they resolve"): it must land inside the workspace (another name of
// it counts), not in git's or Countersign's own files (realpath.Place.Git, as a write unless the
// operator only reads: `> .git/config`, `>> HEAD`, a file completing a repository layout), and
// not on one of the server's own files (rs.protected); /dev/null and descriptor duplications are
// fine. The static view assumes the shell is still in the workspace (a `cd` before it is judged
// where it happens).
func checkRedirect(r *syntax.Redirect, rs redirScope) string {
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc:
		return "" // the body is walked: a substitution in it is seen there
	case syntax.DplIn, syntax.DplOut:
		w := resolveWord(r.Word)
		if w.exact && (w.val == "-" || isDigits(w.val)) {
			return ""
		}
	}
	if r.N != nil && !isDigits(r.N.Value) {
		return "a redirection to a named descriptor"
	}
	w := resolveWord(r.Word)
	if !w.exact {
		return "a redirection to a file the rules cannot name"
	}
	if w.val == "/dev/null" {
		return ""
	}
	pl, err := realpath.Locate(rs.workspace, w.val)
	if err != nil {
		return "a redirection to a path that cannot be resolved (" + w.val + ": " + err.Error() + ")"
	}
	if !pl.Inside {
		return "a redirection outside the workspace (" + w.val + ")"
	}
	if why := pl.Git(r.Op != syntax.RdrIn); why != "" {
		return "a redirection into git's own files (" + w.val + ": " + why + ")"
	}
	if realpath.IsOneOf(pl.Abs, rs.protected) {
		return "a redirection to one of the server's own files (" + w.val + ")"
	}
	return ""
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
