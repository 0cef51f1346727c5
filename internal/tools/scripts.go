package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"countersign/internal/tool"
)

// A person's approval of a command binds the scripts it runs (SPEC §14 "A person's approval binds
// what they saw"; issue 28). `sh job.sh` reads as harmless whatever job.sh holds: the prompt
// shows each workspace script the command runs with the SHA-256 of its content when the prompt
// opened (run_command's tool.PreviewFunc, scriptsPreview, stored with the approval), and a call a
// person approved runs only if each is still that file (checkScripts) and the command runs no
// workspace script the prompt did not show (unshownScripts: an edit that names another script).
//
// Finding the scripts is best effort, from the command's parse (mvdan.cc/sh/v3/syntax, POSIX,
// else bash): in every simple command, after the wrappers env, command, exec, nice, nohup, time,
// timeout, setsid and stdbuf,
//   - a shell (sh, bash, dash, zsh, ksh, mksh, ash) with a script argument, not `-c` or `-s`
//     (`sh -e job.sh`); with none, a script its standard input is redirected from (`sh < job.sh`);
//   - an interpreter (python, python3, python3.12, node, perl, ruby, php, lua, Rscript, tclsh)
//     with a script argument, not `-c`/`-e`/`-m`… (`python3 -u tool.py`);
//   - `.` and `source` and their file (`. ./env.sh`);
//   - a first word that is a path (`./deploy`, `bin/x`).
// Only literal words count (`sh "$F"` is not seen). A path is taken relative to the workspace,
// after a literal `cd` earlier in the command (`cd sub && ./run.sh` is sub/run.sh); a `cd` to
// something not literal stops relative paths from being seen. Paths that resolve outside the
// workspace, and folders, are left out; a script that does not exist is listed as missing (it
// must still be missing when the call runs). What is not seen is not bound: a script a script
// runs, a path in a variable, `cat x | sh`, the scripts of a command past its first maxScripts.

// maxScripts bounds the scripts one preview lists.
const maxScripts = 32

// ErrScriptChangedSincePrompt is wrapped by the error of a run_command call a person approved
// when a workspace script it runs is no longer what the prompt showed (checkScripts); and
// ErrScriptNotShown when the prompt did not show it (unshownScripts). Nothing ran.
var (
	ErrScriptChangedSincePrompt = errors.New("changed on disk after the prompt showed its digest")
	ErrScriptNotShown           = errors.New("the prompt showed no digest of this script")
)

// scriptsPreview is run_command's tool.PreviewFunc: the workspace scripts the command runs, each
// with its digest (tool.Preview.Scripts; Path, Exists and Digest of the Preview itself are
// unused). nil when the command runs none that can be seen.
func scriptsPreview(ctx context.Context, arguments json.RawMessage, workspace string) (*tool.Preview, error) {
	var in struct {
		Command string `json:"command"`
	}
	if err := decode(arguments, &in); err != nil {
		return nil, err
	}
	scripts, err := scriptDigests(ctx, in.Command, workspace)
	if err != nil || len(scripts) == 0 {
		return nil, err
	}
	return &tool.Preview{Scripts: scripts}, nil
}

// checkScripts checks that every script preview p lists (Preview.Scripts) is still, in workspace,
// what the prompt showed: missing if it was missing, else a regular file with the same SHA-256.
// The first that is not is an error wrapping ErrScriptChangedSincePrompt, e.g. "job.sh changed on
// disk after the prompt showed its digest (then sha256 1a2b3c4d5e6f…, now sha256 5e6f7a8b9c0d…);
// nothing ran.
// Call run_command again to see the new digest." nil p, or one without scripts, passes. A
// workspace that cannot be opened is an error.
func checkScripts(p *tool.Preview, workspace string) error {
	if p == nil || len(p.Scripts) == 0 {
		return nil
	}
	j, err := openJail(workspace, nil)
	if err != nil {
		return err
	}
	defer j.Close()
	for _, s := range p.Scripts {
		now, ok := digestScript(context.Background(), j, s.Path)
		switch {
		case !ok:
			// Outside the workspace or a folder now: it is not the file that was shown.
			return scriptChanged(s, "not a file of the workspace")
		case now.Exists != s.Exists:
			return scriptChanged(s, digestWord(now))
		case now.SHA256 != s.SHA256:
			return scriptChanged(s, digestWord(now))
		}
	}
	return nil
}

// unshownScripts checks that every workspace script command runs, as scriptsPreview finds them
// in workspace now, is one preview p lists: a command edited after its prompt opened may name
// another script, whose digest the prompt did not show. The first that is not listed is an error
// wrapping ErrScriptNotShown: "other.sh: the prompt showed no digest of this script, which the
// command runs; nothing ran. Call run_command again to see its digest."
// nil p lists none.
func unshownScripts(command string, p *tool.Preview, workspace string) error {
	now, err := scriptDigests(context.Background(), command, workspace)
	if err != nil || len(now) == 0 {
		return err
	}
	shown := map[string]bool{}
	if p != nil {
		for _, s := range p.Scripts {
			shown[s.Path] = true
		}
	}
	for _, s := range now {
		if !shown[s.Path] {
			return fmt.Errorf("%s: %w, which the command runs; nothing ran. Call run_command again to see its digest.",
				s.Path, ErrScriptNotShown)
		}
	}
	return nil
}

// scriptChanged is checkScripts' error for s, which is now as `now` says.
func scriptChanged(s tool.ScriptDigest, now string) error {
	return fmt.Errorf("%s %w (then %s, now %s); nothing ran. Call run_command again to see the new digest.",
		s.Path, ErrScriptChangedSincePrompt, digestWord(s), now)
}

// digestWord is how an error names a script's state: "sha256 1a2b3c4d5e6f…" or "missing".
func digestWord(s tool.ScriptDigest) string {
	if !s.Exists {
		return "missing"
	}
	return "sha256 " + s.Short()
}

// scriptDigests lists the workspace scripts command runs (commandScripts) that resolve inside
// workspace to a regular file or to nothing, each with its digest, at most maxScripts.
func scriptDigests(ctx context.Context, command, workspace string) ([]tool.ScriptDigest, error) {
	paths := commandScripts(command)
	if len(paths) == 0 {
		return nil, nil
	}
	j, err := openJail(workspace, nil)
	if err != nil {
		return nil, err
	}
	defer j.Close()
	var out []tool.ScriptDigest
	for _, p := range paths {
		if d, ok := digestScript(ctx, j, p); ok {
			out = append(out, d)
		}
		if len(out) == maxScripts {
			break
		}
	}
	return out, ctx.Err()
}

// digestScript is script p (as the command names it) in jail j: missing, or a regular file with
// its digest. ok is false when p is not a script of the workspace: it resolves outside, or to a
// folder or other non-regular file, or cannot be read.
func digestScript(ctx context.Context, j *jail, p string) (d tool.ScriptDigest, ok bool) {
	rel, ok := scriptState(j, p)
	if !ok {
		return tool.ScriptDigest{}, false
	}
	d = tool.ScriptDigest{Path: p}
	if rel == "" {
		return d, true
	}
	f, _, err := j.openRegular(rel, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return d, true
	}
	if err != nil {
		return tool.ScriptDigest{}, false
	}
	defer f.Close()
	sum, err := hashReader(ctx, f)
	if err != nil {
		return tool.ScriptDigest{}, false
	}
	d.Exists, d.SHA256 = true, sum
	return d, true
}

// scriptState resolves script p in jail j: rel is its path in the workspace when it is a regular
// file, "" when it does not exist; ok is false when it is not a script of the workspace.
func scriptState(j *jail, p string) (rel string, ok bool) {
	rel, err := j.resolve(p)
	if err != nil {
		return "", false
	}
	fi, err := j.root.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", true
	case err != nil || !fi.Mode().IsRegular():
		return "", false
	}
	return rel, true
}

// commandScripts lists, in order and without repeats, the paths of the scripts command runs (see
// the comment at the top of this file): relative to the workspace (joined to a `cd` before, and
// cleaned) or absolute. nil when the command does not parse.
func commandScripts(command string) []string {
	var f *syntax.File
	var err error
	for _, lang := range []syntax.LangVariant{syntax.LangPOSIX, syntax.LangBash} {
		if f, err = syntax.NewParser(syntax.Variant(lang)).Parse(strings.NewReader(command), ""); err == nil {
			break
		}
	}
	if err != nil {
		return nil
	}
	var (
		out  []string
		seen = map[string]bool{}
		dir  = "." // the current folder, relative to the workspace or absolute; "" when unknown
	)
	add := func(p string) {
		if p == "" || strings.IndexByte(p, 0) >= 0 {
			return
		}
		if !filepath.IsAbs(p) {
			if dir == "" {
				return
			}
			p = path.Join(dir, p)
		}
		p = path.Clean(p)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	// A subshell or a substitution keeps its own folder: the one outside comes back after it.
	// Walk calls f(nil) after a node's children, which pops its frame.
	type frame struct {
		n   syntax.Node
		dir string
	}
	var stack []frame
	syntax.Walk(f, func(n syntax.Node) bool {
		if n == nil {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			switch top.n.(type) {
			case *syntax.Subshell, *syntax.CmdSubst, *syntax.ProcSubst:
				dir = top.dir
			}
			return true
		}
		stack = append(stack, frame{n, dir})
		st, ok := n.(*syntax.Stmt)
		if !ok {
			return true
		}
		ce, ok := st.Cmd.(*syntax.CallExpr)
		if !ok || len(ce.Args) == 0 {
			return true
		}
		words := make([]string, len(ce.Args))
		literal := make([]bool, len(ce.Args))
		for i, w := range ce.Args {
			words[i], literal[i] = literalWord(w)
		}
		if literal[0] && words[0] == "cd" {
			arg := ""
			if len(words) == 2 && literal[1] && words[1] != "-" {
				arg = words[1]
			}
			switch {
			case arg == "":
				dir = "" // cd, cd -, cd $X: not known
			case filepath.IsAbs(arg):
				dir = path.Clean(arg)
			case dir != "":
				dir = path.Join(dir, arg)
			}
			return true
		}
		script, stdin := scriptOf(words, literal)
		add(script)
		if stdin {
			for _, r := range st.Redirs {
				if r.Op == syntax.RdrIn && r.N == nil && r.Word != nil {
					if w, ok := literalWord(r.Word); ok {
						add(w)
					}
				}
			}
		}
		return true
	})
	return out
}

// runner is how a program that runs a script file reads its arguments: code options take the
// code itself, a module or standard input instead of a file (no script then); value options take
// the next word; file options take the script as their value (`php -f x.php`).
type runner struct {
	code, value, file map[string]bool
}

// set is a set of words.
func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// The programs that run a script file named by their first argument that is not an option: the
// shells, which also read one from standard input (`sh < job.sh`, `bash -s`), and interpreters by
// family (python3.12 is python, nodejs is node).
var (
	shells      = set("sh", "bash", "dash", "zsh", "ksh", "mksh", "ash")
	shellRunner = runner{value: set("-o", "+o", "-O", "+O", "--rcfile", "--init-file")}
	runners     = map[string]runner{
		"python":  {code: set("-c", "-m", "-"), value: set("-W", "-X", "--check-hash-based-pycs")},
		"pypy":    {code: set("-c", "-m", "-"), value: set("-W", "-X")},
		"node":    {code: set("-e", "-p", "--eval", "--print", "-"), value: set("-r", "--require", "--import", "--loader", "--experimental-loader", "-C", "--conditions")},
		"perl":    {code: set("-e", "-E", "-")},
		"ruby":    {code: set("-e", "-"), value: set("-r", "-I", "-C", "-E")},
		"php":     {code: set("-r", "-R", "-B", "-E", "-a"), value: set("-c", "-d", "-z"), file: set("-f")},
		"lua":     {code: set("-e", "-"), value: set("-l")},
		"Rscript": {code: set("-e")},
		"tclsh":   {},
	}
	runnerName = regexp.MustCompile(`^(python|pypy|node|perl|ruby|php|lua|Rscript|tclsh)(js)?[0-9.]*$`)
)

// wrappers are the wrappers the script search looks through: the options of each that take a
// value, and how many words after its options it takes before the command (timeout's duration).
var wrappers = map[string]struct {
	value map[string]bool
	words int
}{
	"env": {value: set("-u", "-C", "--unset", "--chdir")}, "command": {}, "exec": {value: set("-a")},
	"nice": {value: set("-n", "--adjustment")}, "nohup": {}, "time": {}, "setsid": {},
	"stdbuf":  {value: set("-i", "-o", "-e")},
	"timeout": {value: set("-k", "-s", "--kill-after", "--signal"), words: 1},
}

// scriptOf finds the script a simple command's words run (words[i] is literal when literal[i]):
// its path as written, "" for none; stdin is true for a shell given no script and no command
// string, which reads one from its standard input.
func scriptOf(words []string, literal []bool) (script string, stdin bool) {
	i := 0
	for i < len(words) && literal[i] {
		name := path.Base(words[i])
		w, ok := wrappers[name]
		if !ok {
			break
		}
		i++
		for i < len(words) && literal[i] {
			v := words[i]
			if v == "--" {
				i++
				break
			}
			if name == "env" && isAssignment(v) {
				i++
				continue
			}
			if !strings.HasPrefix(v, "-") || v == "-" {
				break
			}
			if w.value[v] {
				i++
			}
			i++
		}
		i += w.words
	}
	if i >= len(words) || !literal[i] {
		return "", false
	}
	prog, args, argLit := words[i], words[i+1:], literal[i+1:]
	base := path.Base(prog)
	r, known := shellRunner, shells[base]
	if m := runnerName.FindStringSubmatch(base); !known && m != nil {
		r, known = runners[m[1]], true
	}
	switch {
	case prog == "." || prog == "source":
		if len(args) > 0 && argLit[0] {
			return args[0], false
		}
		return "", false
	case known:
		for k := 0; k < len(args); k++ {
			a := args[k]
			if !argLit[k] {
				return "", false // not seen through: `sh $F`, `python3 $OPTS x.py`
			}
			opt, _, _ := strings.Cut(a, "=")
			switch {
			case a == "--":
				if k+1 < len(args) && argLit[k+1] {
					return args[k+1], false
				}
				return "", false
			case r.code[opt]:
				return "", false
			case r.file[a]:
				if k+1 < len(args) && argLit[k+1] {
					return args[k+1], false
				}
				return "", false
			case r.value[a]:
				k++
			case shells[base] && len(a) > 1 && (a[0] == '-' || a[0] == '+') && a[1] != '-':
				// A cluster of shell flags: -c takes a command string, -s reads standard input.
				if strings.ContainsRune(a, 'c') {
					return "", false
				}
				if strings.ContainsRune(a, 's') {
					return "", true
				}
			case strings.HasPrefix(a, "-"):
			default:
				return a, false
			}
		}
		return "", shells[base]
	case strings.Contains(prog, "/"):
		return prog, false
	}
	return "", false
}

// isAssignment reports whether w is NAME=value (env's assignments).
func isAssignment(w string) bool {
	eq := strings.IndexByte(w, '=')
	if eq <= 0 {
		return false
	}
	for i, r := range w[:eq] {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// literalWord is w's value when it is fully literal (plain, single- or double-quoted text, no
// expansion, no unquoted glob or leading tilde), else ok false.
func literalWord(w *syntax.Word) (string, bool) {
	var b strings.Builder
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, "*?[") || i == 0 && strings.HasPrefix(p.Value, "~") {
				return "", false
			}
			b.WriteString(unescape(p.Value, ""))
		case *syntax.SglQuoted:
			if p.Dollar {
				return "", false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return "", false
			}
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(unescape(l.Value, "$`\"\\\n"))
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// unescape removes the shell's backslash quoting from a literal's source text: unquoted (only
// "") a backslash quotes any character; inside double quotes only those of only. A backslash
// before a newline joins the lines.
func unescape(s, only string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (only == "" || strings.IndexByte(only, s[i+1]) >= 0) {
			i++
			if s[i] == '\n' {
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
