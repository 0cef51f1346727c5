package rules

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"countersign/internal/realpath"
)

// Shell matching (SPEC §14 "Commands are parsed, not string-matched", "Rules judge the action,
// not the text"). This is the text judge of run_command: the first check of the commands
// Countersign runs, and the whole check of the commands an outside agent's own shell runs
// (SPEC §18), so it is conservative: what it cannot read with certainty never matches allow.
//
// A command is read twice by mvdan.cc/sh/v3/syntax, as POSIX shell (dash, /bin/sh on Debian)
// and as bash. A call is ALLOWED by run_command rules only when all of these hold:
//   - the command is at most 1 MiB (maxCommandBytes) and shells read it alike (unreadableText,
//     sameTree): it holds no carriage return, NUL, other control character but tab and
//     newline, DEL or C1 control (a backslash before CR-LF is one of them), no comment ending
//     in a backslash, no word whose braces bash expands and dash does not (`{a,b}`, `{1..3}`),
//     and the POSIX and bash parses are the same tree (`$'x'`, `&>`, `[[`, `time`, `declare`,
//     `((…))` are read differently). Such text is opaque: it never matches allow, and the
//     prompt says why;
//   - the POSIX parse succeeded;
//   - there is no command substitution ($(…), `…`), process substitution, arithmetic expansion,
//     function definition, declaration (export/readonly/local), bash/zsh-only construct,
//     assignment (`PATH=/tmp git diff`, `X=1`), or statement that is only a redirection
//     (`> file`) anywhere in it;
//   - every redirection is one checkRedirect accepts, and none stands on a line that changes
//     directory (cd, pushd, popd: checkRedirect places targets from the workspace); a change of
//     directory is followed only to a literal "./…", "../…" or absolute folder inside the
//     workspace (a bare `cd sub` may go through CDPATH), and then no program is named by a
//     relative path (dirChange);
//   - every simple command (of lists, pipelines, &&, ||, ;, newlines, subshells, { } blocks,
//     if/while/until/for/case bodies) is matched by some allow rule; a simple command is
//     matched by a prefix rule (`git diff:*`) when its first words are exactly those words and
//     the rest are arguments, by an exact rule (`go test ./...`) when its words are exactly
//     those words;
//   - after the words a prefix rule names, no word is, or may expand to, an option that runs
//     programs or writes files (optionTable: `go test -toolexec …`, `git -c core.pager=…`,
//     `make --eval`, `find -exec`, `python3 -c`, `sed 's/x/y/e'`, …; writingOptions for every
//     program): a rule that names the option itself matches;
//   - a prefix rule never matches a wrapper, a program that runs another command or a string
//     (wrappers: eval, exec, source, ".", sh/bash/dash/zsh/…, env, command, xargs, nohup,
//     nice, timeout, time, sudo, chrt, taskset, setpriv, unshare, systemd-run, …, and the
//     builtins that keep a string or change later commands: alias, trap, hash, shopt, …); an
//     exact rule may (`run_command(nice -n 5 make)`). A shell or interpreter whose standard input is a
//     redirection, a here-document or a pipe (simpleCmd.stdin) reads its program there: no rule
//     matches it.
//
// Words. Quotes are resolved as the shell resolves them: `g''it diff`, `"git" diff` and
// `g\it diff` are the words git and diff, so they are matched as `git diff` (they are exactly
// what /bin/sh runs; for the same reason `r''m -rf /` is denied by `rm:*`). Unicode look-alikes
// are different bytes and simply do not match. A word compared with a rule's words (the matched
// prefix, or every word of an exact rule) must be fully literal: no parameter expansion, no
// unquoted glob character (* ? [) and no leading unquoted ~. The arguments after a matched
// prefix may also contain plain parameter expansions ($X, ${X}), globs and ~: they only produce
// more arguments to the same program; any other expansion (${X:-…}, ${#X}, …) is not seen
// through. No word may be, or may become, an option that writes files or runs programs: so an
// argument that begins with an expansion or a glob (`$F`, `*.go`) is not seen through either,
// while `./$F` quoted, `src/*.go` and `"--stat=$N"` are.
//
// A call is DENIED (or ASKED) when any simple command anywhere, including inside substitutions,
// here-documents, assignments and the bash reading of the line, is matched by a deny (or ask)
// rule. For these (cmdSpec.denies):
//   - the program is compared by its base name (`/bin/rm -rf /` is `rm`), leading assignments
//     are ignored (`PATH=/tmp rm x`), and an unquoted $IFS splits a word as the shell would
//     (`rm${IFS}-rf /` is `rm -rf /`);
//   - options are compared as a set (denyPattern): `deny rm -rf:*` matches `rm -fr`, `rm -r -f`,
//     `rm -Rf`, `rm --recursive --force` and `rm x -rf`; the subcommand is found after the
//     program's own options (`git -C d --no-pager push` for `git push:*`);
//   - wrappers are looked through: the command after their options (wrapperSpecs, with their
//     arities: `nice -n 5 rm`, `timeout 5 rm`, `chrt 1 rm`), and every word after them
//     (`sudo rm x`, `xargs rm`, `find . -exec rm {} ;`);
//   - command strings are parsed again and searched the same way, to a depth of 3: `sh -c '…'`
//     (after its options and "--": `sh -c -- '…'`), `eval …`, `su -c`, `env -S`, `watch '…'`,
//     `trap '…'`, alias values, here-documents fed to a shell, also behind other wrappers
//     (`env sh -c '…'`).
//
// That is best effort: what cannot be seen at all (a variable holding a command, a script
// file) is not denied, but it is never allowed either, so the call asks. Text that shells read
// differently is denied if a deny rule matches any reading of it, and asks otherwise.

// maxCommandBytes is the longest command the judge reads (1 MiB): a longer one asks.
const maxCommandBytes = 1 << 20

// word is one shell word as the matcher sees it.
type word struct {
	val   string // the literal value, quotes and backslashes resolved (partial when !exact)
	exact bool   // fully literal: can be compared with a rule's word
	arg   bool   // acceptable as an argument after a matched prefix
	// writes: it is, or may expand to, one of writingOptions, or may split into several words
	// (an unquoted expansion): never matched by allow after a rule's words
	writes bool
	// lead is the literal beginning of the word: val up to the first expansion, unquoted glob
	// character or leading tilde; complete says nothing unknown follows (lead == val).
	lead     string
	complete bool
	// fields are the words the shell may make of it, for deny and ask rules: val split where
	// an unquoted $IFS stands (nil when there is none: the word is val).
	fields []string
	brace  bool // bash expands braces in it ({a,b}, {1..3}); dash does not
}

// simpleCmd is one simple command found in a command line.
type simpleCmd struct {
	words   []word
	assigns bool   // leading VAR=… assignments
	text    string // its source text, for reasons
	// stdin: its standard input may be a program text: an input redirection or here-document
	// on it (or on a block around it), or a pipe into it.
	stdin bool
	// options are its words that run programs or write files (programOptions), in order.
	options []optionHit
}

// program is the base name of the first word, for deny matching.
func (c *simpleCmd) program() string {
	if len(c.words) == 0 {
		return ""
	}
	return filepath.Base(c.words[0].val)
}

// denyWords are the command's words as deny and ask rules see them: each word's value, split
// where an unquoted $IFS stands.
func (c *simpleCmd) denyWords() []string {
	out := make([]string, 0, len(c.words))
	for _, w := range c.words {
		if w.fields != nil {
			out = append(out, w.fields...)
			continue
		}
		out = append(out, w.val)
	}
	return out
}

// shellView is what the matcher saw of one command line.
type shellView struct {
	cmds []simpleCmd // every simple command that can be allowed (empty when opaque by parse error)
	// opaque is why the line can never be allowed ("" when it can be, if every command is
	// matched): a parse error, a substitution, an assignment, a redirection outside, …
	opaque string
	// unreadable: opaque because shells may read the text differently, or the judge does not
	// read it at all (too long, or no parse): the prompt says so whatever the rules are.
	unreadable bool
	// hidden are simple commands that can only be denied or asked: those inside substitutions
	// are in cmds too; these are the ones re-parsed from sh -c / eval strings, seen behind
	// wrappers, and from the bash reading of a line.
	hidden []simpleCmd
	// stdinCalls are the calls whose standard input may carry a program (simpleCmd.stdin),
	// marked while walking.
	stdinCalls map[*syntax.CallExpr]bool
	// moves: the line changes directory (cd, pushd, popd); redirects: it redirects to or from a
	// file. Together they are opaque: checkRedirect places a target from the workspace.
	moves, redirects bool
}

// setOpaque records the first reason the line cannot be allowed.
func (v *shellView) setOpaque(why string, unreadable bool) {
	if v.opaque == "" {
		v.opaque, v.unreadable = why, unreadable
	}
}

// cmdSpec is a compiled run_command specifier.
type cmdSpec struct {
	words  []string
	prefix bool         // "…:*"
	deny   *denyPattern // the words read for deny and ask rules
}

// compileCmdSpec compiles a run_command specifier: shell words (parsed as POSIX, fully literal),
// optionally followed by ":*". A prefix specifier whose program is a wrapper (sudo, sh, eval, …)
// is refused for allow rules, which could never match it, and accepted for deny and ask rules;
// an exact one is accepted (it names every word).
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
	if why := unreadableText(s); why != "" {
		return nil, fmt.Errorf("run_command specifier %q: %s", spec, why)
	}
	f, err := parsePOSIX(s)
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
		if !rw.exact || rw.brace {
			return nil, fmt.Errorf("run_command specifier %q: word %s is not literal (quote glob characters, braces, ~ and $)", spec, nodeText(s, w))
		}
		cs.words = append(cs.words, rw.val)
	}
	if allow && cs.prefix && isWrapper(cs.words[0]) {
		return nil, fmt.Errorf("run_command specifier %q starts with %s, which runs other commands the rules cannot see, so an allow rule could never match it (deny and ask rules may name it; an exact rule without \":*\" may too)", spec, cs.words[0])
	}
	if !allow {
		cs.deny = compileDenyPattern(cs.words)
	}
	return cs, nil
}

// allows reports whether the simple command is matched by this specifier for an allow rule.
// When the rule's words match but the command is still not covered, miss says why ("-toolexec
// runs programs or writes files"); it is "" when the words do not match.
func (cs *cmdSpec) allows(c *simpleCmd) (ok bool, miss string) {
	if c.assigns || len(c.words) < len(cs.words) {
		return false, ""
	}
	if !cs.prefix && len(c.words) != len(cs.words) {
		return false, ""
	}
	for i, w := range cs.words {
		if !c.words[i].exact || c.words[i].val != w {
			return false, ""
		}
	}
	p := c.program()
	if cs.prefix && isWrapper(c.words[0].val) {
		return false, p + " runs other commands"
	}
	if c.stdin {
		for _, w := range c.words {
			if readsCode(w.val) && (w.val == c.words[0].val || isWrapper(c.words[0].val)) {
				return false, filepath.Base(w.val) + " reads a program from its standard input here"
			}
		}
	}
	for _, h := range c.options {
		if h.at >= len(cs.words) {
			return false, fmt.Sprintf("%s runs programs or writes files", h.what)
		}
	}
	for _, w := range c.words[len(cs.words):] {
		switch {
		case !w.arg:
			return false, fmt.Sprintf("the argument %s is an expansion the rules cannot read", w.lead+"…")
		case w.writes && w.complete && writingOption(w.val, true):
			name, _, _ := strings.Cut(w.val, "=")
			if plainOption(p, name) {
				continue // pytest --co: exactly an option that runs nothing
			}
			return false, fmt.Sprintf("%s runs programs or writes files", name)
		case w.writes:
			return false, fmt.Sprintf("the argument %s may become an option that writes files or runs programs", w.lead+"…")
		}
	}
	return true, ""
}

// denies reports whether the simple command is matched by this specifier for a deny or ask rule
// (best effort, see above): by position (the program by base name), and as a denyPattern;
// at the program and, for a wrapper or find, at every later word and at the command its
// options leave.
func (cs *cmdSpec) denies(c *simpleCmd) bool {
	ws := c.denyWords()
	if len(ws) == 0 {
		return false
	}
	if cs.denyAt(ws) {
		return true
	}
	p := filepath.Base(ws[0])
	if !isWrapper(p) && p != "find" {
		return false
	}
	for i := 1; i < len(ws); i++ {
		if cs.denyAt(ws[i:]) {
			return true
		}
	}
	return false
}

// denyAt: the words start with the specifier's words (the first by base name), or match its
// denyPattern.
func (cs *cmdSpec) denyAt(ws []string) bool {
	if cs.deny != nil && cs.deny.matches(ws, cs.prefix) {
		return true
	}
	if len(ws) < len(cs.words) || (!cs.prefix && len(ws) != len(cs.words)) {
		return false
	}
	for i, w := range cs.words {
		v := ws[i]
		if v == w || (i == 0 && filepath.Base(v) == filepath.Base(w)) {
			continue
		}
		return false
	}
	return true
}

// parsers reuse parsers per language (a *syntax.Parser is not safe for concurrent use, but can
// parse again). Comments are kept: one ending in a backslash is opaque.
var (
	posixParsers = sync.Pool{New: func() any {
		return syntax.NewParser(syntax.Variant(syntax.LangPOSIX), syntax.KeepComments(true))
	}}
	bashParsers = sync.Pool{New: func() any {
		return syntax.NewParser(syntax.Variant(syntax.LangBash), syntax.KeepComments(true))
	}}
)

func parsePOSIX(s string) (*syntax.File, error) {
	p := posixParsers.Get().(*syntax.Parser)
	defer posixParsers.Put(p)
	return p.Parse(strings.NewReader(s), "")
}

func parseBash(s string) (*syntax.File, error) {
	p := bashParsers.Get().(*syntax.Parser)
	defer bashParsers.Put(p)
	return p.Parse(strings.NewReader(s), "")
}

// maxReparse bounds how deep sh -c / eval strings are parsed again.
const maxReparse = 3

// redirScope is what redirection targets are checked against: the workspace they must stay in
// (by cleaned path and by real path) and the server's own files they must never reach. cwd is
// where an outside agent's shell starts (gate.RuleCall.Cwd: relative targets are opened from
// there; "" for the workspace), and cwdUnknown says that is not known (RuleCall.CwdUnknown: a
// relative target is then one the rules cannot place).
type redirScope struct {
	workspace  string
	protected  []string
	cwd        string
	cwdUnknown bool
}

// from is p, a redirection's or cd's target, as the shell opens it from where it starts: a
// relative p joined to rs.cwd (its ".." elements kept); why says, for a relative p from a cwd
// not known, that it cannot be placed.
func (rs redirScope) from(p string) (placed, why string) {
	switch {
	case filepath.IsAbs(p):
		return p, ""
	case rs.cwdUnknown:
		return "", "a relative path from a working directory the rules do not know (" + p + ")"
	}
	return atCwd(p, rs.cwd), ""
}

// viewShell parses a command line, as POSIX shell and as bash, and collects its simple
// commands; rs says where redirections may go.
func viewShell(command string, rs redirScope) *shellView {
	v := &shellView{}
	if len(command) > maxCommandBytes {
		v.setOpaque(fmt.Sprintf("the command is %d bytes long, more than the 1 MiB the rules read", len(command)), true)
		return v
	}
	if why := unreadableText(command); why != "" {
		v.setOpaque(why, true)
	}
	f, err := parsePOSIX(command)
	bf, berr := parseBash(command)
	if err != nil {
		v.setOpaque("the command does not parse as POSIX shell: "+err.Error(), true)
		// best effort for deny and ask: read it as bash.
		if berr == nil {
			bv := &shellView{}
			bv.collect(bf, command, rs, 0)
			v.hidden = append(bv.cmds, bv.hidden...)
		}
		return v
	}
	v.collect(f, command, rs, 0)
	switch {
	case berr != nil:
		v.setOpaque("bash does not read the command as POSIX shells do ("+berr.Error()+")", true)
	case !sameTree(f, bf):
		v.setOpaque("bash and POSIX shells read the command differently", true)
		bv := &shellView{}
		bv.collect(bf, command, rs, 0)
		v.hidden = append(v.hidden, bv.cmds...)
		v.hidden = append(v.hidden, bv.hidden...)
	}
	return v
}

// collect walks the whole AST of one parsed string.
func (v *shellView) collect(f *syntax.File, src string, rs redirScope, depth int) {
	markStdin := func(n syntax.Node) {
		syntax.Walk(n, func(m syntax.Node) bool {
			if ce, ok := m.(*syntax.CallExpr); ok {
				if v.stdinCalls == nil {
					v.stdinCalls = map[*syntax.CallExpr]bool{}
				}
				v.stdinCalls[ce] = true
			}
			return true
		})
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case nil: // Walk's end of a node's children
		case *syntax.File, *syntax.Word, *syntax.Lit, *syntax.Block, *syntax.Subshell, *syntax.IfClause,
			*syntax.WhileClause, *syntax.ForClause, *syntax.WordIter, *syntax.CaseClause, *syntax.CaseItem:
		case *syntax.Comment:
			// mvdan.cc/sh continues a comment that ends in a backslash on the next line (the
			// next line's words join the command before it); shells end the comment there
			// and run the next line (found by the differential fuzzer).
			if strings.Contains(n.Text, "\\\n") || strings.HasSuffix(n.Text, `\`) {
				v.setOpaque("a comment ends in a backslash, which shells read differently", true)
			}
		case *syntax.BinaryCmd:
			if (n.Op == syntax.Pipe || n.Op == syntax.PipeAll) && n.Y != nil {
				markStdin(n.Y)
			}
		case *syntax.SglQuoted:
			if n.Dollar {
				v.setOpaque("$'…' quoting", false)
			}
		case *syntax.DblQuoted:
			if n.Dollar {
				v.setOpaque(`$"…" quoting`, false)
			}
		case *syntax.ParamExp:
			if !simpleParam(n) {
				v.setOpaque("a parameter expansion with operators", false)
			}
		case *syntax.Stmt:
			if n.Cmd == nil {
				v.setOpaque("a statement that is only a redirection", false)
			}
			for _, r := range n.Redirs {
				if why := checkRedirect(r, rs); why != "" {
					v.setOpaque(why, false)
				}
				if writesFile(r) {
					v.redirects = true
					if v.moves {
						v.setOpaque("a redirection on a line that changes directory: the rules judge it from the workspace", false)
					}
				}
				if readsInput(r.Op) && n.Cmd != nil {
					markStdin(n.Cmd)
				}
				if body := shellHeredoc(n.Cmd, r); body != "" && depth < maxReparse {
					v.reparse(body, rs, depth)
				}
			}
		case *syntax.Redirect:
		case *syntax.Assign:
			v.setOpaque("a variable assignment", false)
		case *syntax.CallExpr:
			c := simpleCmd{assigns: len(n.Assigns) > 0, text: nodeText(src, n), stdin: v.stdinCalls[n]}
			brace := false
			for _, w := range n.Args {
				rw := resolveWord(w)
				brace = brace || rw.brace
				c.words = append(c.words, rw)
			}
			if len(n.Args) == 0 {
				v.setOpaque("a variable assignment", false)
				return true
			}
			if c.assigns {
				v.setOpaque("a leading variable assignment ("+c.text+")", false)
			}
			if brace {
				v.setOpaque("bash expands the braces in "+c.text+", POSIX shells do not", true)
				if bc, ok := braceExpanded(n, c); ok {
					v.hidden = append(v.hidden, bc)
				}
			}
			if why := dirChange(c, rs); why != "" {
				v.setOpaque(why, false)
			}
			if v.moves && strings.Contains(c.words[0].val, "/") && !filepath.IsAbs(c.words[0].val) {
				v.setOpaque("a program by relative path on a line that changes directory ("+c.text+")", false)
			}
			if v.moves || isDirChange(c) {
				v.moves = true
				if v.redirects {
					v.setOpaque("a redirection on a line that changes directory ("+c.text+"): the rules judge it from the workspace", false)
				}
			}
			c.options = programOptions(c.words)
			if depth < maxReparse {
				for _, s := range commandStrings(c.denyWords()) {
					v.reparse(s, rs, depth)
				}
			}
			v.cmds = append(v.cmds, c)
		case *syntax.CmdSubst:
			v.setOpaque("a command substitution", false)
		case *syntax.ProcSubst:
			v.setOpaque("a process substitution", false)
		case *syntax.ArithmExp:
			v.setOpaque("an arithmetic expansion", false)
		case *syntax.FuncDecl:
			v.setOpaque("a function definition", false)
		default:
			v.setOpaque(fmt.Sprintf("shell syntax the rules cannot see through (%T)", n), false)
		}
		return true
	})
}

// shellHeredoc is the text of a here-document or here-string fed to a shell that reads its
// commands from it (`bash <<EOF`, `nice sh <<EOF`: no -c), for deny and ask rules; "" otherwise.
func shellHeredoc(cmd syntax.Command, r *syntax.Redirect) string {
	ce, ok := cmd.(*syntax.CallExpr)
	if !ok || len(ce.Args) == 0 {
		return ""
	}
	ws := make([]string, len(ce.Args))
	for i, w := range ce.Args {
		ws[i] = resolveWord(w).val
	}
	feeds := false
	for i := range ws {
		if shells[filepath.Base(ws[i])] && shellString(ws[i:]) == "" {
			feeds = true
			break
		}
		if !isWrapper(ws[i]) && i == 0 {
			break
		}
	}
	if !feeds {
		return ""
	}
	switch {
	case (r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc) && r.Hdoc != nil:
		return resolveWord(r.Hdoc).val
	case r.Op == syntax.WordHdoc && r.Word != nil:
		return resolveWord(r.Word).val
	}
	return ""
}

// dirChanges are the builtins that change the shell's directory.
var dirChanges = map[string]bool{"cd": true, "pushd": true, "popd": true, "chdir": true}

// isDirChange reports whether the simple command changes directory (`cd x`, `builtin cd x`,
// `command cd x`).
func isDirChange(c simpleCmd) bool {
	for _, w := range c.words {
		if dirChanges[w.val] {
			return true
		}
		if w.val != "builtin" && w.val != "command" {
			return false
		}
	}
	return false
}

// dirChange says why a directory change cannot be followed ("" when it can, or the command
// changes none): the judge places redirections and relative programs from the workspace, and
// an outside agent's shell may resolve a bare `cd sub` through CDPATH. A change is followed
// only when its target is one literal word that starts with "/", "./" or "../" (or is "." or
// ".."; CDPATH is not searched for these) and resolves (realpath.Locate) inside the workspace,
// outside git's own files.
func dirChange(c simpleCmd, rs redirScope) string {
	if !isDirChange(c) {
		return ""
	}
	i := 0
	for i < len(c.words) && !dirChanges[c.words[i].val] {
		i++
	}
	args := c.words[i+1:]
	for len(args) > 0 && (args[0].val == "-P" || args[0].val == "-L" || args[0].val == "--") {
		args = args[1:]
	}
	if len(args) != 1 || c.words[i].val != "cd" && c.words[i].val != "pushd" {
		return "a change of directory the rules cannot follow (" + c.text + ")"
	}
	t := args[0]
	if !t.exact || !(t.val == "." || t.val == ".." || strings.HasPrefix(t.val, "/") || strings.HasPrefix(t.val, "./") || strings.HasPrefix(t.val, "../")) {
		return "a change of directory the rules cannot follow (" + c.text + "; write ./dir: a shell may look a bare name up in CDPATH)"
	}
	target, why := rs.from(t.val)
	if why != "" {
		return "a change of directory the rules cannot follow (" + c.text + "): " + why
	}
	pl, err := realpath.Locate(rs.workspace, target)
	if err != nil || !pl.Inside {
		return "a change of directory outside the workspace (" + c.text + ")"
	}
	if why := pl.Git(false); why != "" {
		return "a change of directory into git's own files (" + c.text + ")"
	}
	return ""
}

// writesFile: the redirection opens a file (not a descriptor duplication, a here-document or
// /dev/null).
func writesFile(r *syntax.Redirect) bool {
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return false
	case syntax.DplIn, syntax.DplOut:
		if w := resolveWord(r.Word); w.exact && (w.val == "-" || isDigits(w.val)) {
			return false
		}
	}
	return resolveWord(r.Word).val != "/dev/null"
}

// readsInput: the redirection gives the command's standard input (or another descriptor it
// reads) from a file, a here-document or a here-string.
func readsInput(op syntax.RedirOperator) bool {
	switch op {
	case syntax.RdrIn, syntax.RdrInOut, syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc, syntax.DplIn:
		return true
	}
	return false
}

// maxBraceWords bounds the words a brace expansion may make for deny matching.
const maxBraceWords = 64

// braceExpanded is the simple command as bash runs it after brace expansion, for deny and ask
// rules (`{rm,-rf,/}` is `rm -rf /` in bash); ok is false when it would make too many words.
func braceExpanded(n *syntax.CallExpr, c simpleCmd) (simpleCmd, bool) {
	out := simpleCmd{text: c.text, assigns: c.assigns}
	for _, w := range n.Args {
		cp := &syntax.Word{Parts: append([]syntax.WordPart(nil), w.Parts...)}
		if !hasBraceExp(w) || !syntax.SplitBraces(cp) {
			out.words = append(out.words, resolveWord(w))
			continue
		}
		for bw, err := range expand.BracesSeq(nil, cp) {
			if err != nil || len(out.words) >= maxBraceWords {
				return simpleCmd{}, false
			}
			out.words = append(out.words, resolveWord(bw))
		}
	}
	return out, true
}

// reparse parses a command string run by a shell or a wrapper (commandStrings) and adds its
// commands as hidden ones, by the POSIX reading and, when it differs, the bash one too.
func (v *shellView) reparse(s string, rs redirScope, depth int) {
	for _, parse := range []func(string) (*syntax.File, error){parsePOSIX, parseBash} {
		f, err := parse(s)
		if err != nil {
			continue
		}
		inner := &shellView{}
		inner.collect(f, s, rs, depth+1)
		v.hidden = append(v.hidden, inner.cmds...)
		v.hidden = append(v.hidden, inner.hidden...)
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
	var breaks []int      // offsets in b where an unquoted $IFS splits the word
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
			if strings.Contains(p.Value, "{") {
				out.brace = true // confirmed below
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
			if p.Param != nil && p.Param.Value == "IFS" {
				breaks = append(breaks, b.Len())
			}
		default:
			out.exact, out.arg = false, false
			stop()
		}
	}
	out.val = b.String()
	if open {
		lead = len(out.val)
	}
	out.lead, out.complete = out.val[:lead], open
	out.writes = split || writingOption(out.lead, open)
	if len(breaks) > 0 {
		prev := 0
		for _, at := range append(breaks, len(out.val)) {
			if at > prev {
				out.fields = append(out.fields, out.val[prev:at])
			}
			prev = at
		}
		if out.fields == nil {
			out.fields = []string{}
		}
	}
	if out.brace {
		out.brace = hasBraceExp(w)
		if out.brace {
			out.exact = false
		}
	}
	return out
}

// hasBraceExp reports whether bash expands braces in the word ({a,b}, {1..3}; not {x},
// \{a,b} or '{a,b}'): syntax.SplitBraces on a copy leaves a BraceExp part.
func hasBraceExp(w *syntax.Word) bool {
	cp := &syntax.Word{Parts: append([]syntax.WordPart(nil), w.Parts...)}
	if !syntax.SplitBraces(cp) {
		return false
	}
	for _, p := range cp.Parts {
		if _, ok := p.(*syntax.BraceExp); ok {
			return true
		}
	}
	return false
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
	target, why := rs.from(w.val)
	if why != "" {
		return "a redirection to " + why
	}
	pl, err := realpath.Locate(rs.workspace, target)
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
