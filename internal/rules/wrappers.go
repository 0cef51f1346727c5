package rules

import (
	"path/filepath"
	"strings"
)

// Wrappers: programs that run another command or a command string. An allow rule never
// matches one by prefix (`sudo:*` would allow everything); an exact rule names every word and
// matches (`run_command(nice -n 5 make)`), unless it reads its program from standard input
// (simpleCmd.stdin). Deny and ask rules look through them (cmdSpec.denies): at every word after
// the wrapper, at the command its options leave (wrapperSpecs, with their arities), and in the
// command strings they run (sh -c, su -c, env -S, watch, eval), parsed again.

// wrapperSpec is how a wrapper's command line reads: which of its options take an argument
// (so that the command after them is found), how many operands come before the command, and
// which options carry a command string.
type wrapperSpec struct {
	args     string   // short options that take an argument (the rest of the cluster, or the next word)
	longArgs []string // long options that take the next word as their argument unless written with "="
	operands int      // operands before the command (timeout's DURATION, chroot's NEWROOT)
	strs     string   // short options whose argument is a command string (su -c)
	longStrs []string // long options whose argument is a command string (--command, --split-string)
	joins    bool     // the command is its operands joined with spaces, run by a shell (watch, sg)
	assigns  bool     // NAME=value words before the command (env)
}

// wrapperSpecs are the wrappers with their option arities. A wrapper missing here is still a
// wrapper (the map wrappers); its command is looked for at every word.
var wrapperSpecs = map[string]wrapperSpec{
	"env":              {args: "uCPS", longArgs: []string{"--unset", "--chdir", "--split-string", "--default-signal", "--ignore-signal", "--block-signal"}, strs: "S", longStrs: []string{"--split-string"}, assigns: true},
	"nice":             {args: "n", longArgs: []string{"--adjustment"}},
	"ionice":           {args: "cnpPu", longArgs: []string{"--class", "--classdata", "--pid", "--pgid", "--uid"}},
	"chrt":             {args: "T", longArgs: []string{"--sched-runtime", "--sched-period", "--sched-deadline"}, operands: 1},
	"taskset":          {operands: 1},
	"timeout":          {args: "sk", longArgs: []string{"--signal", "--kill-after"}, operands: 1},
	"stdbuf":           {args: "ioe", longArgs: []string{"--input", "--output", "--error"}},
	"nohup":            {},
	"setsid":           {},
	"time":             {args: "fo", longArgs: []string{"--format", "--output"}},
	"command":          {},
	"builtin":          {},
	"exec":             {args: "a"},
	"setpriv":          {longArgs: []string{"--ruid", "--euid", "--rgid", "--egid", "--reuid", "--regid", "--groups", "--inh-caps", "--ambient-caps", "--bounding-set", "--securebits", "--pdeathsig", "--selinux-label", "--apparmor-profile", "--landlock-access", "--landlock-rule", "--seccomp-filter"}},
	"unshare":          {args: "SGRw", longArgs: []string{"--setuid", "--setgid", "--root", "--wd"}},
	"systemd-run":      {args: "pEuHMs", longArgs: []string{"--property", "--setenv", "--unit", "--host", "--machine", "--description", "--slice", "--uid", "--gid", "--nice", "--working-directory", "--on-active", "--on-boot", "--on-startup", "--on-unit-active", "--on-unit-inactive", "--on-calendar", "--on-clock-change", "--on-timezone-change", "--path-property", "--socket-property", "--timer-property", "--service-type", "--expand-environment"}},
	"sudo":             {args: "ugCDhprtTUR", longArgs: []string{"--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type", "--command-timeout", "--other-user", "--chroot"}, assigns: true},
	"doas":             {args: "uC"},
	"su":               {args: "sgG", longArgs: []string{"--shell", "--group", "--supp-group", "--whitelist-environment"}, strs: "c", longStrs: []string{"--command", "--session-command"}, operands: 1},
	"runuser":          {args: "sgGu", longArgs: []string{"--shell", "--group", "--supp-group", "--user", "--whitelist-environment"}, strs: "c", longStrs: []string{"--command", "--session-command"}},
	"sg":               {strs: "c", operands: 1, joins: true},
	"chroot":           {longArgs: []string{"--userspec", "--groups"}, operands: 1},
	"flock":            {args: "wE", longArgs: []string{"--timeout", "--conflict-exit-code"}, strs: "c", longStrs: []string{"--command"}, operands: 1},
	"xargs":            {args: "adEILnPs", longArgs: []string{"--arg-file", "--delimiter", "--replace", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var", "--eof"}},
	"watch":            {args: "nq", longArgs: []string{"--interval", "--equexit"}, joins: true},
	"script":           {args: "IOTBE", longArgs: []string{"--log-in", "--log-out", "--log-timing", "--log-io", "--echo", "--output-limit"}, strs: "c", longStrs: []string{"--command"}},
	"strace":           {args: "abeEIoOpPsSuUX", longArgs: []string{"--output", "--attach", "--user", "--env", "--trace", "--signal"}},
	"ltrace":           {args: "aAeEflnopsuLxX", longArgs: []string{"--output", "--library"}},
	"nsenter":          {args: "tSGwr", longArgs: []string{"--target", "--setuid", "--setgid", "--wd", "--root"}},
	"prlimit":          {args: "p", longArgs: []string{"--pid"}},
	"numactl":          {args: "CNmMpPi", longArgs: []string{"--cpunodebind", "--membind", "--physcpubind", "--preferred", "--interleave"}},
	"setarch":          {operands: 1},
	"faketime":         {args: "mf", operands: 1},
	"fakeroot":         {args: "lsi", longArgs: []string{"--lib", "--faked"}},
	"trickle":          {args: "dutlnw"},
	"cgexec":           {args: "g"},
	"firejail":         {},
	"bwrap":            {longArgs: []string{"--bind", "--ro-bind", "--dev-bind", "--chdir", "--setenv", "--unsetenv", "--tmpfs", "--proc", "--dev", "--dir", "--symlink", "--uid", "--gid", "--hostname", "--seccomp", "--file", "--bind-data", "--ro-bind-data", "--lock-file", "--sync-fd", "--userns", "--perms", "--size"}},
	"xvfb-run":         {args: "nsfe", longArgs: []string{"--server-num", "--server-args", "--auth-file", "--error-file"}},
	"valgrind":         {},
	"gdb":              {args: "xp", longArgs: []string{"-ex", "-iex", "--eval-command", "--command", "--pid"}},
	"pkexec":           {longArgs: []string{"--user"}},
	"dbus-run-session": {},
	"eatmydata":        {},
	"nocache":          {},
	"catchsegv":        {},
	"unbuffer":         {},
	"rlwrap":           {},
	"busybox":          {},
	"toybox":           {},
	"run-parts":        {},
	"parallel":         {},
	"proxychains":      {args: "f"},
	"proxychains4":     {args: "f"},
	"torsocks":         {},
	"caffeinate":       {},
	"linux32":          {},
	"linux64":          {},
}

// wrappers run another command or a string: never matched by a prefix allow rule; deny rules
// look at the words after them. Every key of wrapperSpecs, the shells, and the rest here.
var wrappers = func() map[string]bool {
	m := map[string]bool{"eval": true, "source": true, ".": true}
	for k := range stateBuiltins {
		m[k] = true
	}
	for k := range wrapperSpecs {
		m[k] = true
	}
	for k := range shells {
		m[k] = true
	}
	return m
}()

// stateBuiltins change what later commands of the shell do, or keep a command string to run
// later: an alias rewrites a program name (dash expands aliases in `sh -c`), trap and the
// callbacks of complete, compgen and mapfile run a string, hash -p points a name at any file,
// enable -f loads code, fc re-runs history, shopt turns aliases and other readings on. They are
// wrappers: no prefix rule matches them; deny rules read their strings (commandStrings).
var stateBuiltins = map[string]bool{
	"alias": true, "trap": true, "enable": true, "hash": true, "fc": true, "bind": true, "complete": true,
	"compgen": true, "shopt": true, "mapfile": true, "readarray": true,
}

// IsShell reports whether program (a base name) is a shell: it runs a command string after -c,
// a script, or its standard input.
func IsShell(program string) bool { return shells[program] }

// RunsOthers reports whether program (a base name) starts another program or command string
// from its arguments: a wrapper (env, nohup, timeout, xargs, sudo, …) or find (-exec).
func RunsOthers(program string) bool { return wrappers[program] || program == "find" }

// shells take a command string after -c.
var shells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true,
	"fish": true, "csh": true, "tcsh": true, "rbash": true, "busybox": true, "yash": true, "posh": true,
	"pdksh": true, "oksh": true, "loksh": true,
}

// isWrapper reports whether a program (its first word as written, or its base name) runs
// another command.
func isWrapper(prog string) bool { return wrappers[prog] || wrappers[filepath.Base(prog)] }

// shellString returns the command string a shell runs with -c (ws[0] is the shell): the first
// operand after its options when one of them is -c (in a cluster too: `-ec`), "" otherwise.
// Options with an argument (-o name, +O name, --rcfile file) are skipped; "--" and "-" end them.
func shellString(ws []string) string {
	sawC := false
	i := 1
	for ; i < len(ws); i++ {
		w := ws[i]
		if w == "--" || w == "-" {
			i++
			break
		}
		if len(w) < 2 || (w[0] != '-' && w[0] != '+') {
			break
		}
		if strings.HasPrefix(w, "--") {
			if w == "--rcfile" || w == "--init-file" {
				i++
			}
			continue
		}
		if w[0] == '-' && strings.IndexByte(w, 'c') > 0 {
			sawC = true
		}
		if strings.ContainsAny(w[1:], "oO") {
			i++ // -o pipefail, +O extglob
		}
	}
	if sawC && i < len(ws) {
		return ws[i]
	}
	return ""
}

// unwrap reads a wrapper's command line by its wrapperSpec: the command it runs (the words
// after its options, assignments and leading operands; nil when there are none) and the
// command strings its options carry. ok is false when ws[0] has no spec.
func unwrap(ws []string) (inner []string, strs []string, ok bool) {
	spec, ok := wrapperSpecs[filepath.Base(ws[0])]
	if !ok {
		return nil, nil, false
	}
	i := 1
	for ; i < len(ws); i++ {
		w := ws[i]
		if w == "--" {
			i++
			break
		}
		if len(w) < 2 || w[0] != '-' {
			break
		}
		if strings.HasPrefix(w, "--") {
			name, val, eq := strings.Cut(w, "=")
			isStr := abbreviatesAny(name, spec.longStrs)
			switch {
			case isStr && eq:
				strs = append(strs, val)
			case isStr && i+1 < len(ws):
				i++
				strs = append(strs, ws[i])
			case !eq && contains(spec.longArgs, name):
				i++
			}
			continue
		}
		if len(w) > 2 && contains(spec.longArgs, w) { // gdb -ex cmd
			i++
			continue
		}
		for j := 1; j < len(w); j++ {
			c := w[j]
			isStr := strings.IndexByte(spec.strs, c) >= 0
			if !isStr && strings.IndexByte(spec.args, c) < 0 {
				continue
			}
			arg := w[j+1:]
			if arg == "" && i+1 < len(ws) {
				i++
				arg = ws[i]
			}
			if isStr {
				strs = append(strs, arg)
			}
			break
		}
	}
	if spec.strs != "" || len(spec.longStrs) > 0 {
		// GNU getopt reads options after operands too (`su root -c '…'`, `flock f -c '…'`):
		// any later word that is a string option counts.
		for j := i; j < len(ws)-1; j++ {
			w := ws[j]
			name, _, _ := strings.Cut(w, "=")
			switch {
			case strings.HasPrefix(w, "--") && abbreviatesAny(name, spec.longStrs):
				if strings.Contains(w, "=") {
					strs = append(strs, w[len(name)+1:])
				} else {
					strs = append(strs, ws[j+1])
				}
			case len(w) == 2 && w[0] == '-' && strings.IndexByte(spec.strs, w[1]) >= 0:
				strs = append(strs, ws[j+1])
			}
		}
	}
	if spec.assigns {
		for i < len(ws) && isAssignment(ws[i]) {
			i++
		}
	}
	i += spec.operands
	if i >= len(ws) {
		return nil, strs, true
	}
	if spec.joins {
		strs = append(strs, strings.Join(ws[i:], " "))
	}
	return ws[i:], strs, true
}

// abbreviatesAny reports whether a long option's name is one of list or abbreviates one
// (getopt_long: `env --split='…'`, `su --comm '…'`); a string found this way is only searched
// by deny and ask rules, so a prefix of several counts.
func abbreviatesAny(name string, list []string) bool {
	for _, o := range list {
		if longAbbrev(name, o) {
			return true
		}
	}
	return false
}

// isAssignment: NAME=value with a valid shell name.
func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// maxStrings bounds how many command strings one simple command may hand to reparse.
const maxStrings = 8

// commandStrings returns the command strings a simple command runs, for deny and ask rules:
// `sh -c '…'`, `eval …`, `su -c '…'`, `env -S '…'`, `watch '…'` — found at the program and,
// when the program is a wrapper (or find), at every later word and through the wrappers'
// own command lines (unwrap); at most maxStrings of them.
func commandStrings(ws []string) []string {
	if len(ws) == 0 {
		return nil // `$IFS` alone: no words at all (found by the differential fuzzer)
	}
	var out []string
	add := func(s string) {
		if s != "" && len(out) < maxStrings && !contains(out, s) {
			out = append(out, s)
		}
	}
	at := func(ws []string) {
		p := filepath.Base(ws[0])
		switch {
		case p == "eval":
			add(strings.Join(ws[1:], " "))
		case shells[p]:
			add(shellString(ws))
		case p == "trap" && len(ws) > 1 && !strings.HasPrefix(ws[1], "-"):
			add(ws[1])
		case p == "alias":
			for _, w := range ws[1:] {
				if _, v, ok := strings.Cut(w, "="); ok {
					add(v)
				}
			}
		case p == "complete" || p == "compgen" || p == "mapfile" || p == "readarray":
			for i := 1; i+1 < len(ws); i++ {
				if ws[i] == "-C" {
					add(ws[i+1])
				}
			}
		}
	}
	at(ws)
	p := filepath.Base(ws[0])
	if !isWrapper(p) && p != "find" {
		return out
	}
	for i := 1; i < len(ws); i++ {
		at(ws[i:])
	}
	cur := ws
	for depth := 0; depth < 8 && len(cur) > 0; depth++ {
		inner, strs, ok := unwrap(cur)
		if !ok {
			break
		}
		for _, s := range strs {
			add(s)
		}
		cur = inner
	}
	return out
}

// denyPattern is a run_command specifier read for deny and ask rules, where the order of
// options and how they are spelled do not matter: `rm -rf:*` is the program rm, no
// subcommand, the options -r and -f; `git push --force:*` is git, the subcommand push, the
// option --force.
type denyPattern struct {
	prog string
	subs []string // the words after the program before its first option
	opts []string // each short option letter ("-r"), each long option ("--force", "--output=x"), canonical (optionAliases)
	ops  []string // the operands after the first option
}

// optionAliases are the spellings of one option, per program: rm's -R and --recursive are -r.
// A long option abbreviated (`--rec`) counts as the option it abbreviates.
var optionAliases = map[string]map[string]string{
	"rm":    {"-R": "-r", "--recursive": "-r", "--force": "-f", "--dir": "-d", "--interactive": "-i", "--verbose": "-v"},
	"cp":    {"-R": "-r", "--recursive": "-r", "--force": "-f", "--archive": "-a"},
	"chmod": {"--recursive": "-R"},
	"chown": {"--recursive": "-R"},
	"chgrp": {"--recursive": "-R"},
	"git":   {"--force": "-f", "--delete": "-d", "--all": "--all"},
	"mv":    {"--force": "-f"},
	"ln":    {"--force": "-f", "--symbolic": "-s"},
	"shred": {"--remove": "-u", "--zero": "-z"},
}

// denyArgs are options that take the next word as their argument before a subcommand, so that
// the subcommand is found after them (`git -C dir push`): subcommandArgs.

func compileDenyPattern(words []string) *denyPattern {
	if len(words) == 0 {
		return nil
	}
	dp := &denyPattern{prog: filepath.Base(words[0])}
	opt := false
	for _, w := range words[1:] {
		switch {
		case len(w) > 1 && w[0] == '-':
			opt = true
			dp.opts = append(dp.opts, optionTokens(dp.prog, w)...)
		case opt:
			dp.ops = append(dp.ops, w)
		default:
			dp.subs = append(dp.subs, w)
		}
	}
	return dp
}

// optionTokens splits an option word into what it sets: a cluster into its letters
// ("-rf" → "-r", "-f"), a long option kept whole; each made canonical by optionAliases.
func optionTokens(prog, w string) []string {
	al := optionAliases[prog]
	canon := func(t string) string {
		if c, ok := al[t]; ok {
			return c
		}
		if strings.HasPrefix(t, "--") && !strings.Contains(t, "=") && len(t) > 3 {
			for long, c := range al {
				if strings.HasPrefix(long, "--") && strings.HasPrefix(long, t) {
					return c
				}
			}
		}
		return t
	}
	if strings.HasPrefix(w, "--") {
		return []string{canon(w)}
	}
	out := make([]string, 0, len(w)-1)
	for i := 1; i < len(w); i++ {
		out = append(out, canon("-"+w[i:i+1]))
	}
	return out
}

// matches reports whether a command's words (after unwrapping) are matched: the same program
// by base name; its first operands (after the options, and their arguments for
// subcommandArgs) are the pattern's subcommand words; every option of the pattern is among
// the command's, however ordered, clustered or spelled; and the pattern's operands start the
// command's remaining operands (exact: are them).
func (dp *denyPattern) matches(ws []string, prefix bool) bool {
	if len(ws) == 0 || filepath.Base(ws[0]) != dp.prog {
		return false
	}
	args := subcommandArgs[dp.prog]
	var ops []string
	var have []string
	for i := 1; i < len(ws); i++ {
		w := ws[i]
		switch {
		case w == "--":
			ops = append(ops, ws[i+1:]...)
			i = len(ws)
		case len(w) > 1 && w[0] == '-':
			have = append(have, optionTokens(dp.prog, w)...)
			if len(ops) == 0 && contains(args, w) {
				i++
			}
		default:
			ops = append(ops, w)
		}
	}
	if len(ops) < len(dp.subs)+len(dp.ops) {
		return false
	}
	for i, s := range dp.subs {
		if ops[i] != s {
			return false
		}
	}
	for _, o := range dp.opts {
		if !hasOption(have, o) {
			return false
		}
	}
	rest := ops[len(dp.subs):]
	if !prefix && len(rest) != len(dp.ops) {
		return false
	}
	for i, o := range dp.ops {
		if rest[i] != o {
			return false
		}
	}
	return true
}

// hasOption: o is among have; a long option of the command may abbreviate it (`--forc`).
func hasOption(have []string, o string) bool {
	for _, h := range have {
		if h == o || (strings.HasPrefix(o, "--") && strings.HasPrefix(h, "--") && len(h) > 3 && !strings.Contains(o, "=") && strings.HasPrefix(o, h)) {
			return true
		}
	}
	return false
}
