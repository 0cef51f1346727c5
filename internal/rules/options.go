package rules

import (
	"path"
	"path/filepath"
	"slices"
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
//     option whose name is an abbreviation of it (`--ev=…`, `--ev …`: getopt_long, argparse
//     and git accept unique prefixes; any prefix of three characters or more, dashes included,
//     counts, whether unique or not, unless the row lists the word as plain);
//   - "-name" (a single dash and several letters: Go's flags, find's primaries): the word starts
//     with it or with "-" and it (`-toolexec=x`, `--toolexec`, `-execdir`); in a row with
//     longOnly (getopt_long_only: ld) an abbreviation with one dash counts too (`-plug`);
//   - "-x" (one letter): the word starts with it (`-c`, `-cname=value`, `-C/elsewhere`);
//   - short (letters): a word with one dash is a cluster of short options, and any of these
//     letters in it counts (`make -sf x`, `perl -ne`), up to the first letter of shortArg,
//     which takes the rest as its argument (`awk -vfs=1`).
//
// A row with strip compares an option also without that prefix of its name (`-test.trace=x`
// and `--test.trace=x` are go test's `-trace=x`).
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
	atFile   bool     // a word starting with "@" reads more options from a file (gcc @opts)
	longOnly bool     // "-name" entries may be abbreviated with one dash too (getopt_long_only)
	strip    string   // a prefix of option names the program also accepts (go test's "test.")
	// plain are long options that are matched exactly and run nothing, though they are
	// prefixes of entries (pytest's --co is --collect-only, not --config-file): an exact
	// match wins over an abbreviation in getopt_long and argparse alike.
	plain []string
	// script checks what the arguments carry (awk's and sed's program text, pytest's
	// plugins, ssh's remote command): the index of the word that runs or writes something, or
	// -1, and what it is ("" for the word itself).
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
	// After the subcommand git reads clusters of short options (`git rebase -kx sh`,
	// `git format-patch -ko /tmp/x`): shortArg are the letters whose argument ends the cluster.
	{programs: []string{"git"}, sub: "config", literal: true, options: []string{"--edit", "--file", "--blob"}, short: "ef"},
	{programs: []string{"git"}, sub: "clone", options: []string{"--template", "--separate-git-dir"}, short: "uc", shortArg: "obj"},
	{programs: []string{"git"}, sub: "init", options: []string{"--template", "--separate-git-dir"}},
	{programs: []string{"git"}, sub: "rebase", options: []string{"--exec", "--interactive"}, short: "xi", shortArg: "sXCS"},
	{programs: []string{"git"}, sub: "difftool", options: []string{"--extcmd", "--tool"}, short: "xt"},
	{programs: []string{"git"}, sub: "mergetool", options: []string{"--tool"}, short: "t", shortArg: "O"},
	{programs: []string{"git"}, sub: "grep", short: "O", shortArg: "efABCm"},
	// format-patch -o and archive -o write where they are told (their long forms,
	// --output-directory and --output, are writingOptions).
	{programs: []string{"git"}, sub: "format-patch", options: []string{"--output-directory"}, short: "o", shortArg: "vSGUlIOMCBX"},
	{programs: []string{"git"}, sub: "archive", options: []string{"--output"}, short: "o"},
	// apply --unsafe-paths writes outside the work tree; checkout-index --prefix writes where
	// it is told.
	{programs: []string{"git"}, sub: "apply", options: []string{"--unsafe-paths"}},
	{programs: []string{"git"}, sub: "checkout-index", options: []string{"--prefix"}},
	{programs: []string{"git"}, sub: "bisect", words: []string{"run"}},
	{programs: []string{"git"}, sub: "submodule", words: []string{"foreach"}},
	{programs: []string{"git"}, sub: "filter-branch", options: []string{"--env-filter", "--tree-filter", "--index-filter",
		"--parent-filter", "--msg-filter", "--commit-filter", "--tag-name-filter", "--setup"}},
	{programs: []string{"git"}, sub: "send-email", options: []string{"--smtp-server", "--sendmail-cmd", "--to-cmd", "--cc-cmd", "--header-cmd"}},
	{programs: []string{"git"}, sub: "archive", options: []string{"--remote"}},

	// go: -toolexec, -exec and -vettool run a program; -overlay and -modfile swap the code that
	// builds, -C builds another folder; -o, -outputdir, the profiles, -gocoverdir and the test
	// binary's log and fuzz cache write anywhere; -ldflags=-extld=… and -extar=… pick the
	// linker and archiver. go test takes every test flag also as -test.X and --test.X (strip),
	// and gives the test binary everything after -args. `go env -w` writes GOFLAGS for every
	// later command.
	{programs: []string{"go"}, options: []string{"-toolexec", "-exec", "-vettool", "-overlay", "-modfile", "-C", "-o",
		"-outputdir", "-coverprofile", "-cpuprofile", "-memprofile", "-blockprofile", "-mutexprofile", "-trace",
		"-pkgdir", "-gocoverdir", "-testlogfile", "-fuzzcachedir"}, contains: []string{"extld", "extar"}, strip: "test."},
	{programs: []string{"go"}, sub: "test", options: []string{"-args"}},
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
	{programs: []string{"shuf"}, short: "o", shortArg: "ni"},

	// remote shells: the command that reaches the other side, and ssh's options (ProxyCommand,
	// LocalCommand run here) and configuration files.
	{programs: []string{"rsync"}, short: "eM", shortArg: "fBT", options: []string{"--rsh", "--rsync-path", "--remote-option",
		"--log-file", "--write-batch", "--only-write-batch"}},
	{programs: []string{"ssh"}, short: "oF", shortArg: "BbcDEeIiJLlmOpQRSWw", script: sshCommand},
	{programs: []string{"scp"}, short: "oFS", shortArg: "cDilJP"},
	{programs: []string{"sftp"}, short: "oFSDb", shortArg: "BcilJPRs"},

	// pagers and editors: commands at start, key files, the pager and preprocessors man runs;
	// less -o/-O and --log-file copy the input to a file; vim -s and -e/-E read commands from a
	// file or standard input, -w/-W and -V write a file.
	{programs: []string{"less", "more"}, plus: true, short: "koO", shortArg: "bhjpPtTxyz#D",
		options: []string{"--lesskey-file", "--lesskey-src", "--lesskey-content", "--log-file", "--LOG-FILE"}},
	{programs: []string{"man"}, short: "PHpC", options: []string{"--html", "--preprocessor", "--config-file"}},
	{programs: []string{"vi", "vim", "nvim", "view", "vimdiff", "ex", "gvim"}, plus: true, short: "cSuUisWwVeE", options: []string{"--cmd"}},
	{programs: []string{"emacs", "emacsclient"}, options: []string{"--eval", "-eval", "--load", "-load", "--funcall", "-funcall",
		"--script", "-script", "-l", "-f", "-x"}},

	// search tools that run a program per file.
	{programs: []string{"rg"}, options: []string{"--pre"}},
	{programs: []string{"fd", "fdfind"}, short: "xX", options: []string{"--exec-batch"}},

	// downloads that write where they are told, or read settings that do.
	{programs: []string{"curl"}, short: "oOcDK", shortArg: "HdXuAeFTbmwxrECyYztUQP", options: []string{"--output-dir",
		"--cookie-jar", "--dump-header", "--trace", "--libcurl", "--stderr", "--etag-save", "--hsts", "--alt-svc",
		"--remote-name"}, contains: []string{"%output{"}},
	{programs: []string{"wget"}, short: "oOaPe", options: []string{"--execute", "--append-output", "--directory-prefix",
		"--use-askpass", "--save-cookies", "--warc-file", "--rejected-log", "--hsts-file"}},

	// build tools: cmake -E runs a command, -P a script, -C a cache script.
	{programs: []string{"cmake"}, short: "EPC"},

	// C compilers: -wrapper runs every program the driver starts through another one; -B takes
	// them (cc1, as, ld) from another folder; spec files rewrite the commands it runs;
	// -fplugin and -fpass-plugin load code into the compiler; -fuse-ld= and --ld-path= pick
	// the linker (a path, in clang); -Xclang, -Xlinker, -Xassembler, -Xpreprocessor, -Wl,,
	// -Wa, and -Wp, hand any option to those programs (`-Wl,-plugin,x.so`, `-Xclang -load`);
	// --gcc-toolchain, --gcc-install-dir and -ccc- pick other programs; -cc1 reads the
	// front end's own options (-load); @file reads more options from a file (clang's --config
	// is a writingOption). -o, -MF, -aux-info, -fopt-info=, -ftime-trace= and -dumpdir write
	// where they are told, like go's and sort's -o.
	{programs: []string{"gcc", "cc", "g++", "c++", "clang", "clang++", "cpp", "gfortran", "gccgo",
		"gcc-[0-9]*", "g++-[0-9]*", "clang-[0-9]*", "clang++-[0-9]*", "*-gcc", "*-g++", "*-gcc-[0-9]*", "*-g++-[0-9]*",
		"*-clang", "*-clang++"},
		options: []string{"-wrapper", "-B", "-specs", "--specs", "-fplugin", "-fpass-plugin", "-fuse-ld", "--ld-path",
			"-Xclang", "-Xlinker", "-Xassembler", "-Xpreprocessor", "-Wl,", "-Wa,", "-Wp,", "--gcc-toolchain",
			"--gcc-install-dir", "-ccc-", "-cc1", "-o", "-MF", "-aux-info", "-fopt-info", "-ftime-trace=", "-dumpdir"},
		atFile: true},
	// tcc -run compiles and runs the program.
	{programs: []string{"tcc"}, options: []string{"-run", "-B", "-o", "-Wl,"}, atFile: true},
	// linkers: -plugin loads code (GNU ld reads long options after one dash, abbreviated too);
	// mold -run runs a command; -o and -Map write where they are told.
	{programs: []string{"ld", "ld.bfd", "ld.gold", "ld.lld", "lld", "ld64.lld", "mold", "ld.mold"},
		options:  []string{"-plugin", "--plugin", "--load-pass-plugin", "-run", "-o", "-Map", "--dependency-file"},
		longOnly: true, atFile: true},
	// rustc: -C linker= and -C link-arg(s)= run or feed the linker (`-Clinker=sh`, `--codegen
	// linker=sh`), -Z unstable options (codegen-backend= loads a library), --extern and -L load
	// procedural macros into the compiler, --sysroot takes its libraries from elsewhere;
	// -o, --out-dir, --emit TYPE=PATH and -C incremental= write where they are told; @file reads
	// more options. cargo: -Z, -C (another package, whose build script runs), --manifest-path
	// the same, --target-dir, --artifact-dir and --out-dir write elsewhere, `cargo rustc --`
	// passes rustc's options, `install` builds (and runs the build script of) a package from
	// the registry; --config is a writingOption (build.rustc-wrapper, target.*.runner).
	{programs: []string{"rustc"}, options: []string{"-Z", "--extern", "-L", "--sysroot", "-o", "--out-dir", "--emit"},
		contains: []string{"linker", "link-arg", "incremental"}, atFile: true},
	{programs: []string{"cargo"}, before: []string{"-C"}, options: []string{"-Z", "--manifest-path", "--target-dir", "--artifact-dir",
		"--out-dir"}, words: []string{"install"}, contains: []string{"linker", "link-arg"}},

	// pytest: --basetemp empties the folder it names; -p and --pdbcls import a module (-p no:X
	// only turns a plugin off: pytestPlugins); -c/--config-file, -o/--override-ini, --rootdir
	// and --confcutdir change which settings and conftest.py files (code) are read;
	// --junitxml, --junit-xml, --resultlog, --result-log, --log-file, --report-log, --html and
	// --debug write where they are told; --pastebin sends the results to a web service. The
	// same for `python3 -m pytest` (pythonModule).
	{programs: []string{"pytest", "py.test", "pytest-3"}, short: "co", shortArg: "kmrpWn",
		options: []string{"--basetemp", "--config-file", "--override-ini", "--rootdir", "--confcutdir", "--pdbcls",
			"--junitxml", "--junit-xml", "--resultlog", "--result-log", "--log-file", "--report-log", "--html", "--debug",
			"--pastebin"}, plain: []string{"--co"}, script: pytestPlugins},
	// builtins that set a variable named by an operand: `printf -v PATH …`, `read PATH` change
	// where every later program is looked up.
	{programs: []string{"printf"}, options: []string{"-v"}},
	{programs: []string{"read", "getopts"}, script: envNames},
	{programs: []string{"sqlite3"}, contains: []string{".shell", ".system", ".output", ".once", ".load", ".save", ".backup"}, options: []string{"-cmd", "-init"}},
}

// optionRows indexes optionTable by program base name; patterns are in optionGlobs (the row
// "*" is in neither: word.writes holds it).
var optionRows, optionGlobs = indexOptionTable()

// optionGlob is a pattern of a row's programs ("python[0-9]*", "*-gcc"), with its literal
// part before the first metacharacter after a leading "*" ("python", "-gcc"): a name that does
// not hold it (at its start, when anchored) cannot match, and path.Match is not called.
type optionGlob struct {
	pattern, lit string
	anchored     bool
	row          *optRow
}

func indexOptionTable() (map[string][]*optRow, []optionGlob) {
	m := map[string][]*optRow{}
	var globs []optionGlob
	for i := range optionTable {
		r := &optionTable[i]
		for _, p := range r.programs {
			switch {
			case p == "*":
			case strings.ContainsAny(p, "*?["):
				g := optionGlob{pattern: p, row: r, anchored: p[0] != '*'}
				lit := strings.TrimPrefix(p, "*")
				if k := strings.IndexAny(lit, "*?["); k >= 0 {
					lit = lit[:k]
				}
				g.lit = lit
				globs = append(globs, g)
			default:
				m[p] = append(m[p], r)
			}
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
	for _, r := range programRows(prog) {
		check(r)
	}
	if at, mod := pythonModule(prog, ws); at > 0 {
		// `python3 -m pytest --basetemp=/x`: the module's own row reads the words after it
		sub := append([]word{{val: mod, exact: true, arg: true, lead: mod, complete: true}}, ws[at+1:]...)
		for _, h := range programOptions(sub) {
			add(at+h.at, h.what)
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

// programRows are the rows of optionTable for a program (its base name), "*" left out
// (writingOptions: word.writes holds them).
func programRows(prog string) []*optRow {
	rows := optionRows[prog]
	if prog == "" {
		return rows
	}
	for i := range optionGlobs {
		g := &optionGlobs[i]
		if g.anchored && !strings.HasPrefix(prog, g.lit) || !g.anchored && !strings.Contains(prog, g.lit) {
			continue
		}
		if slices.Contains(rows, g.row) {
			continue
		}
		if ok, _ := path.Match(g.pattern, prog); ok {
			rows = append(rows[:len(rows):len(rows)], g.row)
		}
	}
	return rows
}

// plainOption reports whether a long option (its name, before "=") is one of the program's
// plain options (optRow.plain): exactly an option that runs nothing, not an abbreviation.
func plainOption(prog, name string) bool {
	for _, r := range programRows(prog) {
		if slices.Contains(r.plain, name) {
			return true
		}
	}
	return false
}

// pythonModule finds the module a Python interpreter runs with -m (`python3 -m pytest`,
// `python -Bm pytest`, `python3 -mpytest`), read as a program by optionTable: the index of
// the word that names it, and its name; 0 when there is none, or the interpreter runs
// something else first (-c, a script, standard input).
func pythonModule(prog string, ws []word) (int, string) {
	if !strings.HasPrefix(prog, "python") && !strings.HasPrefix(prog, "pypy") {
		return 0, ""
	}
	for i := 1; i < len(ws); i++ {
		v := ws[i].val
		if !ws[i].complete || !strings.HasPrefix(v, "-") || v == "-" || strings.HasPrefix(v, "--") {
			return 0, ""
		}
		for j := 1; j < len(v); j++ {
			switch v[j] {
			case 'c':
				return 0, ""
			case 'm':
				if j+1 < len(v) {
					return i, v[j+1:]
				}
				if i+1 < len(ws) && ws[i+1].complete {
					return i + 1, ws[i+1].val
				}
				return 0, ""
			case 'W', 'X':
				if j+1 == len(v) {
					i++
				}
				j = len(v)
			}
		}
	}
	return 0, ""
}

// match says which entry of the row the word may be ("" for none); before is whether it
// stands before the subcommand, first whether it is the row's first word (old-style clusters).
func (r *optRow) match(w word, before, first bool) string {
	lead, complete := w.lead, w.complete
	if r.literal && !complete {
		return "a word that is not literal"
	}
	if o := r.optionIn(r.options, lead, complete); o != "" {
		return o
	}
	if before {
		if o := r.optionIn(r.before, lead, complete); o != "" {
			return o
		}
	}
	if r.atFile && (strings.HasPrefix(lead, "@") || (!complete && lead == "")) {
		return "@file"
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

// optionIn is the entry of list the word (its literal beginning lead) may be, "" for none: as
// optionMay says, also with the row's strip removed from its name (`--test.trace=x` is
// `-trace`), and for longOnly rows abbreviated after one dash; a plain option is none.
func (r *optRow) optionIn(list []string, lead string, complete bool) string {
	if len(list) == 0 || !strings.HasPrefix(lead, "-") {
		if lead == "" && !complete && len(list) > 0 {
			return list[0] // it begins with an expansion: anything
		}
		return ""
	}
	if complete && len(r.plain) > 0 {
		name, _, _ := strings.Cut(lead, "=")
		if slices.Contains(r.plain, name) {
			return ""
		}
	}
	alt := ""
	if r.strip != "" {
		dashes := "-"
		if strings.HasPrefix(lead, "--") {
			dashes = "--"
		}
		if rest, ok := strings.CutPrefix(lead[len(dashes):], r.strip); ok {
			alt = "-" + rest
		} else if !complete && strings.HasPrefix(r.strip, lead[len(dashes):]) {
			alt = "-" // `-te$X` may become `-test.anything`
		}
	}
	// getopt_long_only reads `-r` as the short option r; `-ru` may abbreviate --run
	name, _, _ := strings.Cut(lead, "=")
	single := r.longOnly && !strings.HasPrefix(lead, "--") && len(name) > 2
	for _, o := range list {
		if optionMay(o, lead, complete) || (alt != "" && optionMay(o, alt, complete && alt != "-")) {
			return o
		}
		if single && len(o) > 2 && o[1] != '-' && optionMay("-"+o, "-"+lead, complete) {
			return o
		}
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
// the arguments carry (sedScript, awkScript, pytestPlugins): short options that take an
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

// sshArgs are ssh's short options with an argument.
const sshArgs = "BbcDEeFIiJLlmOopQRSWw"

// sshCommand: ssh joins the words after the host with spaces and the remote user's shell runs
// them as one command line, so `ssh build01 uptime '; rm -rf ~'` runs rm there. No prefix can
// tell what that line does: the last word counts, and only a rule that names every word
// after the host matches (`run_command(ssh build01 uptime)`, exactly or as a prefix);
// `ssh build01:*` matches `ssh build01` and `ssh -p 22 build01`, not a command. Options
// after the host (ssh reads them too) count the same way.
func sshCommand(ws []word) (int, string) {
	for i := 1; i < len(ws); i++ {
		v := ws[i].lead
		if v == "--" && ws[i].complete {
			i++
		} else if strings.HasPrefix(v, "-") && v != "-" {
			if k := strings.IndexAny(v[1:], sshArgs); k >= 0 && k+2 == len(v) && ws[i].complete {
				i++ // -p 22: the argument is the next word
			}
			continue
		}
		if i < len(ws)-1 {
			return len(ws) - 1, "a remote command"
		}
		return -1, ""
	}
	return -1, ""
}

// pytestGetopt: pytest's short options with an argument, and the long ones the row does not
// count already.
var pytestGetopt = getopt{args: "kmrpcoWn", long: []string{"--deselect", "--ignore", "--ignore-glob", "--maxfail",
	"--durations", "--capture", "--tb", "--import-mode", "--log-level", "--log-format", "--junit-prefix"}}

// pytestPlugins: pytest's -p imports a module as a plugin, unless its name starts with "no:"
// (which turns one off: `-p no:cacheprovider`).
func pytestPlugins(ws []word) (int, string) {
	at := pytestGetopt.scan(ws, func(a optArg) bool {
		return a.opt == "" || (a.opt == "-p" && (!a.complete || !strings.HasPrefix(a.val, "no:")))
	}, func(int) bool { return false })
	return at, "-p"
}
