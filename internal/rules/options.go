package rules

import (
	"path"
	"path/filepath"
	"strings"
)

// Options that run programs (SPEC §14 "Options that run programs"). A prefix rule trusts the
// program, not every option: `go test:*` must not allow `go test -toolexec ./evil ./...`, nor
// `make test:*` allow `make test --eval='$(shell rm x)'`. optionTable lists, per program, the
// options and operands that run other programs or code, or write files the command line does
// not name as a redirection. A simple command with one of them after the words a prefix rule
// names is never matched by that rule (the call asks); a rule that names the option itself
// (`run_command(git -c core.pager=less log:*)`) matches. Exact rules name every word. Deny and
// ask rules ignore the table.
//
// How a word is compared with an entry (optionMay):
//   - "--name": the word starts with it (`--config-env=…`, `--output-directory`), or is a long
//     option whose name is an abbreviation of it (`--ev=…`: getopt_long and git accept unique
//     prefixes; any prefix counts, whether unique or not);
//   - "-name" (a single dash and several letters: Go's flags, find's primaries): the word starts
//     with it or with "-" and it (`-toolexec=x`, `--toolexec`, `-execdir`);
//   - "-x" (one letter): the word starts with it (`-c`, `-cname=value`, `-C/elsewhere`);
//   - short (letters): a word with one dash is a cluster of short options, and any of these
//     letters in it counts (`make -sf x`, `perl -ne`), up to the first letter of shortArg,
//     which takes the rest as its argument (`awk -vfs=1`).
//
// A word that is not fully literal is judged by its literal beginning (word.lead): `-$X` or
// `"--to$Y"` may become an option, `./$F` cannot (an unquoted expansion may still split into
// new words: word.writes holds that for every program). Rows with literal set judge every
// word that is not fully literal as running a program (`git config "$KEY" …`).
//
// The row "*" applies to every program: it is writingOptions, the options of many programs
// that write files or run commands (`--output`, `--exec`, `--upload-pack`, find's `-exec`…).
type optRow struct {
	programs []string // base names of the program; "python*" is a path.Match pattern
	// sub limits the row to a subcommand: the first operand after the program's own options
	// (subcommandAt), and the words after it.
	sub      string
	before   []string // options that count only before the subcommand (git's -c and -C)
	options  []string // options that count anywhere after the program (or the subcommand)
	short    string   // letters that count inside a cluster of short options
	shortArg string   // letters of a cluster that take the rest of it as their argument
	words    []string // operands that run programs or code (npm exec, deno eval)
	contains []string // text, compared ignoring case, that runs programs anywhere in a literal word (core.pager)
	plus     bool     // a word starting with "+" runs a command (less +!cmd, vim +cmd)
	assign   bool     // an operand NAME=value overrides the program's commands (make CC=…)
	oldStyle bool     // the first argument is a cluster of short options written without "-" (tar xIf)
	literal  bool     // a word that is not fully literal counts (git config "$KEY")
	// script checks what the arguments carry (awk's and sed's program text): the index of the
	// word that runs or writes something, or -1, and what it is ("" for the word itself).
	script func(ws []word) (int, string)
}

// writingOptions are the row "*": options of many programs that write files or run commands.
// `git log --output=/tmp/x` writes anywhere; `git diff --ext-diff`, `--textconv`, `--pager`,
// `--upload-pack`, `--open-files-in-pager` run a program; `--git-dir`, `--work-tree`,
// `--exec-path`, `--config` point git elsewhere; find's -exec, -ok, -delete and -fprint* run,
// delete or write; tar's --to-command, --use-compress-program and --checkpoint-action run a
// program. A word matches an entry as optionMay says, so `--output-directory`, `--config-env`,
// `-execdir`, `-fprint0` and `--outp=x` do.
var writingOptions = []string{
	"--output", "--exec", "--upload-pack", "--receive-pack", "--ext-diff", "--textconv",
	"--git-dir", "--work-tree", "--exec-path", "--config", "--open-files-in-pager",
	"--to-command", "--use-compress-program", "--checkpoint-action", "--pager",
	"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls",
}

// npmContains are the npm family's settings that run programs, however they are spelled: npm
// reads any `--<setting>=…` option and any npm_config_<setting> variable as a setting.
var npmContains = []string{"npm_config_", "script-shell", "script_shell", "node-options", "node_options",
	"onload-script", "onload_script", "--userconfig", "--globalconfig", "--git=", "--editor", "--browser",
	"--viewer", "--shell"}

// optionTable is the built-in table (SPEC §14 names the first entries). Each row's comment
// says what the entries do.
var optionTable = []optRow{
	{programs: []string{"*"}, options: writingOptions},

	// git: -c sets any configuration (core.pager, core.fsmonitor, alias.*: programs git runs),
	// --config-env the same from a variable, --exec-path picks where git's own programs come
	// from, -C reads another repository (its configuration runs programs too); all only before
	// the subcommand (`git log -c` is a diff format, `git diff -C` finds copies). Anywhere: the
	// configuration keys that name programs (`git config core.pager …`, `git clone --config …`)
	// and the ext:: transport (runs a command).
	{programs: []string{"git"}, before: []string{"-c", "-C", "--config-env", "--exec-path", "--git-dir", "--work-tree", "--namespace", "--super-prefix"},
		contains: []string{"core.pager", "core.editor", "core.fsmonitor", "core.sshcommand", "core.hookspath",
			"core.askpass", "core.gitproxy", "core.worktree", "diff.external", ".textconv", ".command", ".driver",
			".clean", ".smudge", ".process", "credential.helper", ".helper", "gpg.program", ".program",
			"sequence.editor", "pager.", "alias.", "include.path", "includeif.", ".uploadpack", ".receivepack",
			".packobjectshook", ".cmd", "ext::", "web.browser", "ssh.variant"}},
	{programs: []string{"git"}, sub: "config", literal: true, options: []string{"--edit", "-e", "--file", "-f", "--blob"}},
	{programs: []string{"git"}, sub: "clone", options: []string{"-u", "--template", "-c", "--separate-git-dir"}},
	{programs: []string{"git"}, sub: "init", options: []string{"--template", "--separate-git-dir"}},
	{programs: []string{"git"}, sub: "rebase", options: []string{"-x", "--exec", "-i", "--interactive"}},
	{programs: []string{"git"}, sub: "difftool", options: []string{"-x", "--extcmd", "-t", "--tool"}},
	{programs: []string{"git"}, sub: "mergetool", options: []string{"-t", "--tool"}},
	{programs: []string{"git"}, sub: "grep", options: []string{"-O"}},
	{programs: []string{"git"}, sub: "bisect", words: []string{"run"}},
	{programs: []string{"git"}, sub: "submodule", words: []string{"foreach"}},
	{programs: []string{"git"}, sub: "filter-branch", options: []string{"--env-filter", "--tree-filter", "--index-filter",
		"--parent-filter", "--msg-filter", "--commit-filter", "--tag-name-filter", "--setup"}},
	{programs: []string{"git"}, sub: "send-email", options: []string{"--smtp-server", "--sendmail-cmd", "--to-cmd", "--cc-cmd", "--header-cmd"}},
	{programs: []string{"git"}, sub: "archive", options: []string{"--remote"}},

	// go: -toolexec, -exec and -vettool run a program; -overlay and -modfile swap the code that
	// builds, -C builds another folder; -o, -outputdir and the profiles write anywhere;
	// -ldflags=-extld=… picks the linker; `go env -w` writes GOFLAGS for every later command.
	{programs: []string{"go"}, options: []string{"-toolexec", "-exec", "-vettool", "-overlay", "-modfile", "-C", "-o",
		"-outputdir", "-coverprofile", "-cpuprofile", "-memprofile", "-blockprofile", "-mutexprofile", "-trace",
		"-pkgdir"}, contains: []string{"extld"}},
	{programs: []string{"go"}, sub: "env", options: []string{"-w", "-u"}},

	// make: --eval and -E run make code, -f/--file/--makefile read another makefile, -C and -I
	// another folder's; NAME=value operands override the makefile's commands (CC, SHELL).
	{programs: []string{"make", "gmake", "bmake", "remake"}, options: []string{"--eval", "--file", "--makefile", "--directory", "--include-dir"},
		short: "fCEI", shortArg: "jlWoO", assign: true, literal: true},

	// find: run, delete or write.
	{programs: []string{"find"}, options: []string{"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}},

	// the npm family: exec, dlx and their kin run any package; --node-options and the script
	// shell run code; --prefix and --dir run another package's scripts.
	{programs: []string{"npm"}, words: []string{"exec", "x", "explore", "edit", "init", "create", "innit"},
		options: []string{"--call", "-c", "--prefix", "-C", "--package"}, contains: npmContains},
	{programs: []string{"npx", "bunx", "pnpx"}, options: []string{"--call", "-c", "--package", "-p"}, contains: npmContains},
	{programs: []string{"pnpm"}, words: []string{"exec", "dlx", "x", "create"}, options: []string{"-c", "--shell-mode", "-C", "--dir", "--prefix"}, contains: npmContains},
	{programs: []string{"yarn"}, words: []string{"exec", "dlx", "node", "create"}, options: []string{"--cwd"}, contains: npmContains},
	{programs: []string{"bun"}, words: []string{"x", "exec", "create"}, options: []string{"-e", "--eval", "-p", "--print", "-r",
		"--preload", "--require", "--import", "--cwd", "--shell"}, contains: npmContains},

	// interpreters: program text on the command line, modules or libraries loaded first, code
	// read from standard input ("-").
	{programs: []string{"python", "python[0-9]*", "pypy", "pypy[0-9]*"}, short: "cm", shortArg: "WXQ", words: []string{"-"}},
	{programs: []string{"node", "nodejs"}, short: "epri", options: []string{"--eval", "--print", "--require", "--import", "--loader",
		"--experimental-loader", "--inspect", "--run", "--env-file", "--interactive"}, words: []string{"-"}},
	{programs: []string{"deno"}, words: []string{"eval", "repl", "-"}, options: []string{"--eval", "--eval-file", "-A", "--allow-all",
		"--allow-run", "--allow-ffi", "--allow-write", "--config", "-c", "--env-file", "--env", "--import-map"}},
	{programs: []string{"perl", "perl[0-9]*"}, short: "eEMmxdIi", words: []string{"-"}},
	{programs: []string{"ruby", "ruby[0-9]*"}, short: "erIixSC", options: []string{"--require"}, words: []string{"-"}},
	{programs: []string{"php", "php[0-9]*"}, short: "rBREFdcaS", shortArg: "t", options: []string{"--run", "--process-begin", "--process-code",
		"--process-file", "--process-end", "--define", "--php-ini", "--interactive"}},
	{programs: []string{"lua", "lua[0-9]*", "luajit"}, short: "eli", words: []string{"-"}},
	{programs: []string{"awk", "gawk", "mawk", "nawk", "original-awk"}, short: "feilEodpDW", shortArg: "FvZ",
		options: []string{"--file", "--source", "--include", "--load", "--pretty-print", "--dump-variables", "--profile", "--debug"},
		script:  awkScript},
	{programs: []string{"sed", "gsed"}, short: "fi", shortArg: "el", options: []string{"--file", "--in-place"}, script: sedScript},

	// archives: programs run on every member, as the compressor, at checkpoints, between
	// volumes, or as the remote shell; old-style `tar xIf` clusters count too.
	{programs: []string{"tar", "gtar", "bsdtar"}, short: "IF", shortArg: "fCbHKLNTVgX", oldStyle: true,
		options: []string{"--to-command", "--use-compress-program", "--checkpoint-action", "--info-script",
			"--new-volume-script", "--rsh-command", "--rmt-command", "--index-file", "--volno-file"}},
	{programs: []string{"zip"}, options: []string{"-TT", "--unzip-command"}},
	{programs: []string{"sort"}, short: "o", shortArg: "kStT", options: []string{"--compress-program"}},

	// remote shells: the command that reaches the other side, and ssh's options (ProxyCommand,
	// LocalCommand run here) and configuration files.
	{programs: []string{"rsync"}, short: "eM", shortArg: "fBT", options: []string{"--rsh", "--rsync-path", "--remote-option",
		"--log-file", "--write-batch", "--only-write-batch"}},
	{programs: []string{"ssh"}, short: "oF", shortArg: "BbcDEeIiJLlmOpQRSWw"},
	{programs: []string{"scp"}, short: "oFS", shortArg: "cDilJP"},
	{programs: []string{"sftp"}, short: "oFSDb", shortArg: "BcilJPRs"},

	// pagers and editors: commands at start, key files, the pager and preprocessors man runs.
	{programs: []string{"less", "more"}, plus: true, short: "k", options: []string{"--lesskey-file", "--lesskey-src", "--lesskey-content"}},
	{programs: []string{"man"}, short: "PHpC", options: []string{"--html", "--preprocessor", "--config-file"}},
	{programs: []string{"vi", "vim", "nvim", "view", "vimdiff", "ex", "gvim"}, plus: true, short: "cSuUi", options: []string{"--cmd"}},
	{programs: []string{"emacs", "emacsclient"}, options: []string{"--eval", "--load", "--funcall", "--script", "-l", "-f"}},

	// search tools that run a program per file.
	{programs: []string{"rg"}, options: []string{"--pre"}},
	{programs: []string{"fd", "fdfind"}, short: "xX", options: []string{"--exec-batch"}},

	// downloads that write where they are told, or read settings that do.
	{programs: []string{"curl"}, short: "oOcDK", shortArg: "HdXuAeFTbmwxrECyYztUQP", options: []string{"--output-dir",
		"--cookie-jar", "--dump-header", "--trace", "--libcurl", "--stderr", "--etag-save", "--hsts", "--alt-svc"}},
	{programs: []string{"wget"}, short: "oOaPe", options: []string{"--execute", "--append-output", "--directory-prefix"}},

	// build tools: cmake -E runs a command, -P a script, -C a cache script.
	{programs: []string{"cmake"}, short: "EPC"},
	// builtins that set a variable named by an operand: `printf -v PATH …`, `read PATH` change
	// where every later program is looked up.
	{programs: []string{"printf"}, options: []string{"-v"}},
	{programs: []string{"read", "getopts"}, script: envNames},
	{programs: []string{"sqlite3"}, contains: []string{".shell", ".system", ".output", ".once", ".load", ".save", ".backup"}, options: []string{"-cmd", "-init"}},
}

// optionRows indexes optionTable by program base name; patterns and "*" are in optionGlobs.
var optionRows, optionGlobs = indexOptionTable()

func indexOptionTable() (map[string][]*optRow, []*optRow) {
	m := map[string][]*optRow{}
	var globs []*optRow
	for i := range optionTable {
		r := &optionTable[i]
		for _, p := range r.programs {
			if strings.ContainsAny(p, "*?[") {
				globs = append(globs, r)
				continue
			}
			m[p] = append(m[p], r)
		}
	}
	return m, globs
}

// subcommandArgs are the options of multi-command programs, before the subcommand, that take
// the next word as their argument: subcommandAt skips both.
var subcommandArgs = map[string][]string{
	"git":    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env", "--list-cmds"},
	"npm":    {"--prefix", "-C", "--userconfig", "--globalconfig", "--cache", "-w", "--workspace"},
	"pnpm":   {"-C", "--dir", "--filter", "-F"},
	"yarn":   {"--cwd"},
	"docker": {"-H", "--host", "--config", "-c", "--context", "-l", "--log-level"},
	"cargo":  {"--config", "-Z", "-C"},
	"go":     {"-C"},
}

// subcommandAt is the index of the subcommand of ws (its first operand: a word that does not
// start with "-", after the options that take an argument, subcommandArgs), or -1. A word that
// is not fully literal is an operand.
func subcommandAt(prog string, ws []word) int {
	args := subcommandArgs[prog]
	for i := 1; i < len(ws); i++ {
		w := ws[i].val
		switch {
		case !ws[i].complete && !strings.HasPrefix(ws[i].lead, "-"):
			return i
		case w == "--":
			if i+1 < len(ws) {
				return i + 1
			}
			return -1
		case !strings.HasPrefix(w, "-") || w == "-":
			return i
		}
		for _, a := range args {
			if w == a {
				i++
				break
			}
		}
	}
	return -1
}

// optionHit is a word of a simple command that runs programs (optionTable): its index, and the
// option or text that does it.
type optionHit struct {
	at   int
	what string
}

// programOptions finds the words of a simple command that run programs or write files by
// optionTable, in order; nil when there are none.
func programOptions(ws []word) []optionHit {
	if len(ws) < 2 {
		return nil
	}
	prog := filepath.Base(ws[0].val)
	var hits []optionHit
	add := func(i int, what string) {
		for _, h := range hits {
			if h.at == i {
				return
			}
		}
		hits = append(hits, optionHit{i, what})
	}
	sub := -2 // not computed yet
	check := func(r *optRow) {
		start, before := 1, -1
		if r.sub != "" || len(r.before) > 0 {
			if sub == -2 {
				sub = subcommandAt(prog, ws)
			}
			before = sub
			if before < 0 {
				before = len(ws)
			}
		}
		if r.sub != "" {
			if sub < 0 || !ws[sub].complete || ws[sub].val != r.sub {
				return
			}
			start = sub + 1
		}
		for i := start; i < len(ws); i++ {
			if what := r.match(ws[i], i < before, i == start && r.oldStyle); what != "" {
				add(i, what)
			}
		}
		if r.script != nil {
			if i, what := r.script(ws); i >= 0 {
				if what == "" {
					what = ws[i].val
				}
				add(i, what)
			}
		}
	}
	for _, r := range optionRows[prog] {
		check(r)
	}
	for _, r := range optionGlobs {
		for _, p := range r.programs {
			if p == "*" {
				continue // writingOptions: word.writes holds them
			}
			if prog == "" || p[0] != prog[0] {
				continue
			}
			if ok, _ := path.Match(p, prog); ok {
				check(r)
				break
			}
		}
	}
	if len(hits) > 1 {
		// in word order, for reasons
		for i := 1; i < len(hits); i++ {
			for j := i; j > 0 && hits[j].at < hits[j-1].at; j-- {
				hits[j], hits[j-1] = hits[j-1], hits[j]
			}
		}
	}
	return hits
}

// match says which entry of the row the word may be ("" for none); before is whether it
// stands before the subcommand, first whether it is the row's first word (old-style clusters).
func (r *optRow) match(w word, before, first bool) string {
	lead, complete := w.lead, w.complete
	if r.literal && !complete {
		return "a word that is not literal"
	}
	for _, o := range r.options {
		if optionMay(o, lead, complete) {
			return o
		}
	}
	if before {
		for _, o := range r.before {
			if optionMay(o, lead, complete) {
				return o
			}
		}
	}
	if r.short != "" && strings.HasPrefix(lead, "-") && !strings.HasPrefix(lead, "--") {
		if !complete && len(lead) == 1 {
			return "-" + r.short[:1]
		}
		if c := clusterHas(lead[1:], r.short, r.shortArg); c != 0 {
			return "-" + string(c)
		}
		if !complete && strings.IndexAny(lead[1:], r.shortArg) < 0 {
			return "-" + r.short[:1] // more letters may follow
		}
	}
	if r.oldStyle && first && !strings.HasPrefix(lead, "-") {
		if c := clusterHas(lead, r.short, ""); c != 0 {
			return string(c)
		}
		if !complete {
			return "a cluster of options that is not literal"
		}
	}
	for _, x := range r.words {
		if (complete && w.val == x) || (!complete && strings.HasPrefix(x, lead)) {
			return x
		}
	}
	if complete && len(r.contains) > 0 {
		low := strings.ToLower(w.val)
		for _, x := range r.contains {
			if strings.Contains(low, x) {
				return x
			}
		}
	}
	if r.plus && (strings.HasPrefix(lead, "+") || (!complete && lead == "")) {
		return "+"
	}
	if r.assign && !strings.HasPrefix(lead, "-") && (strings.Contains(lead, "=") || !complete) {
		return "NAME=value"
	}
	return ""
}

// clusterHas returns the first letter of letters found in a cluster of short options (the word
// without its dash), reading it no further than a letter of stop (whose argument the rest is);
// 0 when there is none.
func clusterHas(cluster, letters, stop string) byte {
	for i := 0; i < len(cluster); i++ {
		c := cluster[i]
		if strings.IndexByte(letters, c) >= 0 {
			return c
		}
		if strings.IndexByte(stop, c) >= 0 {
			return 0
		}
	}
	return 0
}

// optionMay reports whether a word whose literal beginning is lead (the whole word when
// complete) is, or may become, option o (see optRow for the forms).
func optionMay(o, lead string, complete bool) bool {
	if !complete {
		if lead == "" {
			return true // it begins with an expansion, a glob or a tilde: anything
		}
		if !strings.HasPrefix(lead, "-") {
			return false
		}
		if strings.HasPrefix(o, lead) || strings.HasPrefix(lead, o) {
			return true
		}
		if len(o) > 2 && o[1] != '-' && strings.HasPrefix(lead, "-") && (strings.HasPrefix(o, lead[1:]) || strings.HasPrefix(lead[1:], o)) {
			return true
		}
		// a long option whose name is written in full (`--outp=$X`) may abbreviate o
		name, _, eq := strings.Cut(lead, "=")
		return eq && len(name) > 2 && strings.HasPrefix(name, "--") && strings.HasPrefix(o, name)
	}
	switch {
	case strings.HasPrefix(o, "--"):
		if strings.HasPrefix(lead, o) {
			return true
		}
		name, _, _ := strings.Cut(lead, "=")
		return len(name) > 2 && strings.HasPrefix(name, "--") && strings.HasPrefix(o, name)
	case len(o) > 2:
		return strings.HasPrefix(lead, o) || (lead != "" && lead[0] == '-' && strings.HasPrefix(lead[1:], o))
	default:
		return strings.HasPrefix(lead, o)
	}
}

// writingOption reports whether a word may be one of writingOptions (the row "*"): w is the
// word when complete, else its literal beginning (the rest unknown).
func writingOption(w string, complete bool) bool {
	if w == "" {
		return !complete
	}
	if w[0] != '-' {
		return false
	}
	for _, o := range writingOptions {
		if optionMay(o, w, complete) {
			return true
		}
	}
	return false
}

// getopt is how GNU getopt_long reads a program's options, for the parsers that look for what
// the arguments carry (sedScript, awkScript): short options that take an
// argument (the rest of the word, or the next word), short options whose argument is optional
// (the rest of the word only), and long options that take an argument (after "=", or the next
// word). A long option may be abbreviated (getopt_long takes unique prefixes): a word counts as
// every entry of long it may abbreviate, with three characters or more, dashes included. No
// long option without an argument may be a prefix of an entry of long (the word would be that
// option, exactly, and the next word an operand).
type getopt struct {
	args, optArgs string
	long          []string
}

// optArg is an option with an argument, as getopt.scan read it.
type optArg struct {
	opt      string // "-e", or the entry of getopt.long; "" when the word is not literal enough to tell
	at       int    // the word holding the argument
	val      string // the argument (its literal beginning when !complete)
	complete bool
}

// longAbbrev reports whether name ("--exp", the part of a word before "=") is the long option
// o or an abbreviation of it (three characters or more, dashes included).
func longAbbrev(name, o string) bool {
	return len(name) > 2 && strings.HasPrefix(name, "--") && strings.HasPrefix(o, name)
}

// scan reads ws[1:] in order: it calls opt for each option with an argument (and with opt ""
// for a word starting with "-" whose options cannot be told: `--exp$X`, `-n$X`) and operand
// for each operand; options may follow operands (getopt permutes) until "--". It stops when
// either returns true and returns that word's index; -1 when they never do. A word that is not
// fully literal and does not start with "-" is an operand.
func (g getopt) scan(ws []word, opt func(optArg) bool, operand func(i int) bool) int {
	for i := 1; i < len(ws); i++ {
		w := ws[i]
		v := w.lead
		switch {
		case !strings.HasPrefix(v, "-") || (v == "-" && w.complete):
			if operand(i) {
				return i
			}
			continue
		case v == "--" && w.complete:
			for j := i + 1; j < len(ws); j++ {
				if operand(j) {
					return j
				}
			}
			return -1
		}
		// the argument: the rest of this word when there is one, else the next word
		arg := func(a optArg, rest bool) optArg {
			if !rest && i+1 < len(ws) {
				i++
				a.at, a.val, a.complete = i, ws[i].lead, ws[i].complete
			}
			return a
		}
		if strings.HasPrefix(v, "--") {
			name, val, eq := strings.Cut(v, "=")
			if !eq && !w.complete {
				if opt(optArg{at: i}) {
					return i
				}
				continue
			}
			for _, l := range g.long {
				if !longAbbrev(name, l) {
					continue
				}
				a := arg(optArg{opt: l, at: i, val: val, complete: w.complete}, eq)
				if opt(a) {
					return a.at
				}
				break
			}
			continue
		}
		told := false
		for j := 1; j < len(v) && !told; j++ {
			c := v[j]
			switch {
			case strings.IndexByte(g.args, c) >= 0:
				rest := v[j+1:]
				a := arg(optArg{opt: "-" + string(c), at: i, val: rest, complete: w.complete}, rest != "" || !w.complete)
				if opt(a) {
					return a.at
				}
				told = true
			case strings.IndexByte(g.optArgs, c) >= 0:
				if opt(optArg{opt: "-" + string(c), at: i, val: v[j+1:], complete: w.complete}) {
					return i
				}
				told = true
			}
		}
		if !told && !w.complete && opt(optArg{at: i}) {
			return i // more letters may follow
		}
	}
	return -1
}

// awkGetopt: gawk's, mawk's and busybox awk's options with an argument.
var awkGetopt = getopt{args: "FfvWeEilZ", optArgs: "dDLop",
	long: []string{"--field-separator", "--file", "--assign", "--source", "--exec", "--include", "--load"}}

// awkScript finds awk's program text (the first operand, unless -f, -e, -E, -W, --file,
// --source or --exec gave it: the row counts those, the program being in a file the rules
// cannot read or given by an option) and judges it: text that is not literal, or that calls
// system(), pipes to or from a command ("|"), writes with ">" or loads code ("@load",
// "@include"), counts. Options are read as getopt_long reads them (`-bF : '…'`, `--as x=1`).
func awkScript(ws []word) (int, string) {
	given := false
	at := awkGetopt.scan(ws, func(a optArg) bool {
		switch a.opt {
		case "":
			return true
		case "-f", "-e", "-E", "-W", "--file", "--source", "--exec":
			given = true
		}
		return false
	}, func(i int) bool {
		if given {
			return false
		}
		given = true
		return awkText(ws, i) >= 0
	})
	return at, ""
}

func awkText(ws []word, i int) int {
	w := ws[i]
	if !w.complete {
		return i
	}
	for _, bad := range []string{"system", "|", ">", "@"} {
		if strings.Contains(w.val, bad) {
			return i
		}
	}
	return -1
}

// sedGetopt: GNU sed's options with an argument.
var sedGetopt = getopt{args: "efl", optArgs: "i", long: []string{"--expression", "--file", "--line-length"}}

// sedScript finds sed's script (each -e or --expression, abbreviated or not, else the first
// operand) and judges it with sedRuns: a script that is not literal, or that has a command or
// flag that runs a program (e, s///e) or writes a file (w, W, s///w), counts. -f and -i count
// by the row. Options are read as getopt_long reads them (`-nl 5`, `--exp='…'`, `--e '…'`).
func sedScript(ws []word) (int, string) {
	given := false
	at := sedGetopt.scan(ws, func(a optArg) bool {
		switch a.opt {
		case "":
			return true
		case "-e", "--expression":
			given = true
			return !a.complete || sedRuns(a.val)
		case "-f", "--file":
			given = true
		}
		return false
	}, func(i int) bool {
		if given {
			return false
		}
		given = true
		return !ws[i].complete || sedRuns(ws[i].val)
	})
	return at, ""
}

// sedRuns reads a sed script (GNU sed's commands) and reports whether it has a command that
// runs a program or writes a file: e, w, W, or an s command with the e or w flag; a command it
// does not know counts too. Addresses (numbers, $, /re/, \cREc, ranges, ~steps, !) are skipped;
// the text of a, i, c and the file of r, R go to the end of the line.
func sedRuns(s string) bool {
	i := 0
	skipRE := func(delim byte) bool { // i at the first byte after the opening delimiter
		for i < len(s) {
			switch s[i] {
			case '\\':
				i += 2
				continue
			case delim:
				i++
				return true
			case '\n':
				if delim != '\n' {
					return false
				}
			}
			i++
		}
		return false
	}
	toEOL := func() {
		for i < len(s) && s[i] != '\n' {
			if s[i] == '\\' {
				i++
			}
			i++
		}
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '}' || c == '{' || c == '!':
			i++
			continue
		case c >= '0' && c <= '9' || c == '$' || c == ',' || c == '~' || c == '+':
			i++
			continue
		case c == '/':
			i++
			if !skipRE('/') {
				return true
			}
			for i < len(s) && (s[i] == 'I' || s[i] == 'M') {
				i++
			}
			continue
		case c == '\\':
			if i+1 >= len(s) {
				return true
			}
			d := s[i+1]
			i += 2
			if !skipRE(d) {
				return true
			}
			continue
		case c == '#':
			toEOL()
			continue
		}
		i++ // the command letter
		switch c {
		case 'e', 'w', 'W':
			return true
		case 'a', 'i', 'c', 'r', 'R':
			toEOL()
		case ':', 'b', 't', 'T':
			for i < len(s) && s[i] != ';' && s[i] != '\n' {
				i++
			}
		case 's', 'y':
			if i >= len(s) || s[i] == '\n' || s[i] == '\\' {
				return true
			}
			d := s[i]
			i++
			if !skipRE(d) || !skipRE(d) {
				return true
			}
			if c == 's' {
				for i < len(s) && s[i] != ';' && s[i] != '\n' && s[i] != '}' {
					f := s[i]
					switch {
					case f == 'e' || f == 'w' || f == 'W':
						return true
					case f == 'g' || f == 'p' || f == 'i' || f == 'I' || f == 'm' || f == 'M' || f == ' ' || f >= '0' && f <= '9':
					default:
						return true
					}
					i++
				}
			}
		case 'p', 'P', 'd', 'D', 'n', 'N', 'g', 'G', 'h', 'H', 'x', 'l', '=', 'q', 'Q', 'z', 'F', 'v':
			if c == 'q' || c == 'Q' || c == 'l' {
				for i < len(s) && s[i] >= '0' && s[i] <= '9' {
					i++
				}
			}
		default:
			return true
		}
	}
	return false
}

// envNames finds an operand of read or getopts that names a variable in capitals (PATH, IFS,
// LD_PRELOAD, GIT_DIR: the ones programs and the shell itself read) or is not literal.
func envNames(ws []word) (int, string) {
	for i := 1; i < len(ws); i++ {
		w := ws[i]
		if !w.complete {
			return i, ""
		}
		if strings.HasPrefix(w.val, "-") || w.val == "" {
			continue
		}
		upper := true
		for j := 0; j < len(w.val); j++ {
			if c := w.val[j]; c >= 'a' && c <= 'z' {
				upper = false
				break
			}
		}
		if upper {
			return i, ""
		}
	}
	return -1, ""
}
