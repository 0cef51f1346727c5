package rules

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/realpath"
	"countersign/internal/share"
)

// CommandTool is the tool whose specifiers are shell commands (its argument `command`).
const CommandTool = "run_command"

// OutsideCommandTool is an outside agent's shell tool (SPEC §18: Claude Code's and Codex's
// `Bash`, argument `command`): its specifiers are shell commands too, judged by the same text
// judge as run_command's. Countersign does not run it, so only the judge's text half applies:
// what it cannot read with certainty asks.
const OutsideCommandTool = "Bash"

// commandTool reports whether a tool's specifiers are shell commands (CommandTool,
// OutsideCommandTool).
func commandTool(name string) bool { return name == CommandTool || name == OutsideCommandTool }

// outsidePathKey is the argument that names the file of an outside agent's file tool (SPEC §18:
// Claude Code's Edit, MultiEdit, Write and Read take `file_path`, NotebookEdit
// `notebook_path`); "path" for any other tool.
func outsidePathKey(c *gate.RuleCall) string {
	if !c.Outside {
		return "path"
	}
	switch c.Tool {
	case "Edit", "MultiEdit", "Write", "Read":
		return "file_path"
	case "NotebookEdit", "NotebookRead":
		return "notebook_path"
	}
	return "path"
}

// lexicalAllowed reports whether p, an outside agent's path, may match an allow rule, judged
// lexically against workspace (the agent's cwd, which may not exist on this machine; SPEC §18):
// no ".." element, inside the workspace once cleaned, not in git's or Countersign's own files
// (.git/, .countersign) and not one of the server's own files; rel is its workspace-relative
// form.
func lexicalAllowed(p, workspace string, protected []string) (rel string, ok bool) {
	if workspace == "" {
		return "", false
	}
	for _, el := range strings.Split(filepath.ToSlash(p), "/") {
		if el == ".." {
			return "", false
		}
	}
	rel, inside := workspacePath(p, workspace)
	if !inside || rel == "." {
		return "", false
	}
	for _, el := range strings.Split(rel, "/") {
		if el == ".git" || el == ".countersign" {
			return "", false
		}
	}
	if slices.Contains(protected, filepath.Join(filepath.Clean(workspace), filepath.FromSlash(rel))) {
		return "", false
	}
	return rel, true
}

// fromCwd is paths, an outside agent's, as it opens them from cwd (RuleCall.Cwd, atCwd); paths
// itself when cwd is "".
func fromCwd(paths []string, cwd string) []string {
	if cwd == "" {
		return paths
	}
	out := make([]string, len(paths))
	for i, p := range paths {
		if p != "" {
			p = atCwd(p, cwd)
		}
		out[i] = p
	}
	return out
}

// atCwd is p as a process whose working directory is cwd opens it: a relative p joined to cwd,
// its ".." elements kept (for lexicalAllowed and realpath.Locate to judge, not to be cleaned
// away); p itself when it is absolute, or cwd is "".
func atCwd(p, cwd string) string {
	if cwd == "" || filepath.IsAbs(p) {
		return p
	}
	return strings.TrimSuffix(cwd, "/") + "/" + p
}

// specKind is how a rule's specifier is matched.
type specKind uint8

const (
	kindNone specKind = iota // no specifier: every call of the tool
	kindCmd                  // run_command: shell words, exact or "…:*"
	kindPath                 // a glob on the workspace-relative `path` argument
	kindKV                   // key=glob[,key=glob…] on top-level arguments
)

// kindOf decides the specifier kind of a rule (SPEC §14): run_command's specifier is always a
// command (an "=" in it is part of a word); for other tools a specifier with an unescaped "="
// is key=glob, one without is a path glob.
func kindOf(toolPattern, spec string) specKind {
	switch {
	case spec == "":
		return kindNone
	case commandTool(toolPattern):
		return kindCmd
	case hasUnescaped(spec, '='):
		return kindKV
	default:
		return kindPath
	}
}

// compiled is one rule ready to match.
type compiled struct {
	ord       int
	rule      gate.Rule
	text      string
	kind      specKind
	cmd       *cmdSpec
	path      *pathSpec
	kv        *kvSpec
	when      cel.Program
	workspace string // cleaned, for ScopeWorkspace
	// toolPrefix is, for a glob tool pattern, its literal start (globPrefix).
	toolPrefix string
}

// compile checks and compiles one rule.
func compile(r gate.Rule) (*compiled, error) {
	r, err := normalize(r)
	if err != nil {
		return nil, err
	}
	c := &compiled{rule: r, text: Text(r), kind: kindOf(r.Tool, r.Specifier)}
	switch c.kind {
	case kindCmd:
		c.cmd, err = compileCmdSpec(r.Specifier, r.Effect == gate.Allow)
	case kindPath:
		c.path, err = compilePathSpec(r.Specifier)
	case kindKV:
		c.kv, err = compileKVSpec(r.Specifier)
	}
	if err != nil {
		return nil, err
	}
	if r.When != "" {
		if c.when, err = compileWhen(r.When); err != nil {
			return nil, err
		}
	}
	if r.Scope == gate.ScopeWorkspace {
		c.workspace = filepath.Clean(r.Workspace)
	}
	return c, nil
}

// normalize validates the fields of a rule that need no compiling and puts them in their
// canonical form: a Tool given in text form ("write_file(docs/**)") is split into Tool and
// Specifier; spaces are trimmed; a workspace is cleaned.
func normalize(r gate.Rule) (gate.Rule, error) {
	switch r.Effect {
	case gate.Allow, gate.Ask, gate.Deny:
	default:
		return r, fmt.Errorf("unknown effect %q (want allow, ask or deny)", r.Effect)
	}
	for _, f := range []struct{ name, val string }{{"tool", r.Tool}, {"specifier", r.Specifier}, {"when", r.When}} {
		if err := visibleText(f.val); err != nil {
			return r, fmt.Errorf("%s %q: %w", f.name, f.val, err)
		}
	}
	r.Tool = strings.TrimSpace(r.Tool)
	r.Specifier = strings.TrimSpace(r.Specifier)
	if strings.Contains(r.Tool, "(") {
		if r.Specifier != "" {
			return r, fmt.Errorf("tool %q carries a specifier and the rule has another (%q)", r.Tool, r.Specifier)
		}
		tp, spec, err := Parse(r.Tool)
		if err != nil {
			return r, fmt.Errorf("rule %q: %w", r.Tool, err)
		}
		r.Tool, r.Specifier = tp, strings.TrimSpace(spec)
	} else if err := checkToolPattern(r.Tool); err != nil {
		return r, fmt.Errorf("tool %q: %w", r.Tool, err)
	}
	switch r.Scope {
	case gate.ScopeSession:
		if r.SessionID == "" {
			return r, errors.New("a session rule needs its session")
		}
		r.Workspace = ""
	case gate.ScopeWorkspace:
		if strings.TrimSpace(r.Workspace) == "" {
			return r, errors.New("a workspace rule needs its workspace folder")
		}
		r.Workspace = filepath.Clean(r.Workspace)
		r.SessionID = ""
	case gate.ScopeServer:
		r.SessionID, r.Workspace = "", ""
	default:
		return r, fmt.Errorf("unknown scope %q (want session, workspace or server)", r.Scope)
	}
	switch r.Source {
	case "", gate.SourcePrompt, gate.SourceAPI, gate.SourcePolicyFile:
	default:
		return r, fmt.Errorf("unknown source %q", r.Source)
	}
	if len(r.Reviewers) > 0 {
		names := make([]string, len(r.Reviewers))
		for i, n := range r.Reviewers {
			n = strings.TrimSpace(n)
			if n != gate.ByOwner {
				// A reviewer is a person a link is made for: the same checks as that link's
				// name (no reserved names, no look-alikes), so the two compare equal.
				var err error
				if n, err = share.NormalizeName(n); err != nil {
					return r, fmt.Errorf("reviewer %q: %s", r.Reviewers[i], apperr.MessageOf(err))
				}
			}
			names[i] = n
		}
		r.Reviewers = names
	}
	if err := r.CheckQuorum(); err != nil {
		return r, err
	}
	return r, nil
}

// Check validates and normalizes one rule before it is saved (SPEC §14): no invisible or
// bidirectional character in its tool, specifier or `when` (a *SyntaxError with the byte
// column, wrapped: "specifier \"rm\u200b:*\": column 3: U+200B is …"), a known effect and
// scope (a session rule names its session, a workspace rule its folder, which is cleaned), a
// tool pattern in path.Match syntax, a specifier that compiles for the tool's kind (shell words
// for run_command, key=glob with an "=", else a path glob) and a `when` that compiles with CEL
// to a boolean. A Tool in text form ("write_file(docs/**)") is split into Tool and Specifier.
// The error says what is wrong; for `when` it is the CEL compiler's message.
func Check(r gate.Rule) (gate.Rule, error) {
	c, err := compile(r)
	if err != nil {
		return r, err
	}
	return c.rule, nil
}

// Set is a compiled set of rules (SPEC §14), indexed by exact tool name with a short list of
// glob tool patterns, so Evaluate only looks at rules that can match the call. It is immutable
// and safe for concurrent use; compile a new Set when the rules change.
type Set struct {
	exact map[string][]*compiled
	globs []*compiled
	n     int
	// protected are the server's own files (absolute, clean): never a redirection target of an
	// allowed command nor a path an allow rule matches (see NewCompiler).
	protected []string
}

// Len is the number of rules that compiled.
func (s *Set) Len() int { return s.n }

// Compile compiles every rule once (specifier → matcher, `when` → CEL program with a cost
// limit). A rule that does not compile is skipped, and the error names each one ("rule
// <text>: <reason>", joined, in input order); the returned Set is usable either way.
func Compile(rs []gate.Rule) (*Set, error) {
	s := &Set{exact: map[string][]*compiled{}}
	var errs []error
	for i, r := range rs {
		c, err := compile(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %s: %w", ruleLabel(r), err))
			continue
		}
		c.ord = i
		s.n++
		if strings.ContainsAny(c.rule.Tool, `*?[\`) {
			c.toolPrefix = globPrefix(c.rule.Tool)
			s.globs = append(s.globs, c)
		} else {
			s.exact[c.rule.Tool] = append(s.exact[c.rule.Tool], c)
		}
	}
	return s, errors.Join(errs...)
}

// globPrefix is the literal text a tool glob starts with (before its first *, ?, [ or \): a
// tool name that does not start with it cannot match, so Evaluate skips path.Match for it.
func globPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

func ruleLabel(r gate.Rule) string {
	t := Text(r)
	if r.Pos != "" {
		t += " (" + r.Pos + ")"
	}
	if r.ID != "" {
		t += " [" + r.ID + "]"
	}
	return t
}

// Compiler is Compile as a gate.RuleCompiler, with no protected files: NewCompiler(nil). The
// server uses NewCompiler with its own files.
var Compiler = NewCompiler(nil)

// NewCompiler returns Compile as a gate.RuleCompiler whose Sets never allow a run_command that
// redirects to, or from, one of the protected files (SPEC §14: "The agent can never write its own
// rules"), nor a call whose `path` lands on one: the server's database with its -wal, -shm,
// -journal, .lock and key files, the policy file, the MCP config, the -system-prompt file and the
// -scripts folder's scripts (cmd/web's ownFiles). Entries are paths, absolute or relative to the
// process's working folder (made absolute now), the last element possibly a pattern
// ("<scripts>/*.json"); at each evaluation they are compared as internal/tools.Protected compares
// them for the file tools (realpath.IsOneOf): by resolved real path, and for a file that exists by
// identity (os.SameFile), so a symlink or a hard link to them is caught too. Such a call is never
// allowed by a rule (it asks); deny and ask rules are unchanged.
func NewCompiler(protected []string) gate.RuleCompiler {
	var abs []string
	for _, p := range protected {
		if p == "" {
			continue
		}
		a, err := filepath.Abs(p)
		if err != nil {
			a = filepath.Clean(p)
		}
		abs = append(abs, a)
	}
	return func(rs []gate.Rule) (gate.RuleEvaluator, error) {
		s, err := Compile(rs)
		s.protected = abs
		return s, err
	}
}

// Evaluate decides a call by the rules (SPEC §14): rules out of scope (another session, another
// workspace, compared as cleaned paths) or expired (ExpiresAt before now) are ignored; then a
// matching deny beats a matching ask beats allow, whatever their scopes. For run_command, every
// simple command must be matched by some allow rule (see the package's shell notes). A `when`
// that fails or exceeds its cost makes the call ask, saying so. The zero RuleDecision means no
// rule matched.
func (s *Set) Evaluate(c gate.RuleCall) gate.RuleDecision {
	if s == nil {
		return gate.RuleDecision{}
	}
	ev := evaluation{call: c, protected: s.protected}
	for _, r := range s.exact[c.Tool] {
		ev.consider(r)
	}
	for _, r := range s.globs {
		if !strings.HasPrefix(c.Tool, r.toolPrefix) {
			continue
		}
		if ok, _ := path.Match(r.rule.Tool, c.Tool); ok {
			ev.consider(r)
		}
	}
	return ev.decide()
}

// miss is an allow rule that names a command's words but does not cover it, and why.
type miss struct {
	r   *compiled
	why string
}

// hit is a rule that matched, with what it matched.
type hit struct {
	r    *compiled
	what string
}

// evaluation is the state of one Evaluate call; what it needs of the call is computed lazily.
type evaluation struct {
	call      gate.RuleCall
	now       time.Time // read on the first rule with an expiry (the clock is slow on some VMs)
	protected []string  // Set.protected

	fieldsDone bool
	fields     []field
	strs       [2]strArgs // "path" and "command", decoded once

	// placeDone: place is where the unambiguous path lands (realpath.Locate), placeOK false
	// when it cannot be resolved; placeSafe says it is neither git's own nor one of the
	// server's files, once placeSafeDone.
	placeDone, placeOK       bool
	place                    realpath.Place
	placeSafeDone, placeSafe bool

	shellDone bool
	shells    []*shellView // one per value of "command" (several only when ambiguous)
	covered   []*compiled  // per shells[0].cmds when "command" is unambiguous: the first allow rule that covers it
	// missed is, per shells[0].cmds, the first allow rule whose words match the command but
	// which does not cover it, and why (cmdSpec.allows), for the note.
	missed []miss

	act *whenVars // built on the first `when`

	deny, ask, fail, allow hit
	failWhy                string
}

// missAt is a miss of the simple command at index i.
type missAt struct {
	i   int
	why string
}

// strArgs are the string values of one argument name (see args.go on ambiguity).
type strArgs struct {
	done        bool
	vals        []string
	unambiguous bool
}

func (ev *evaluation) args() []field {
	if !ev.fieldsDone {
		ev.fieldsDone = true
		ev.fields = topLevel(ev.call.Arguments)
	}
	return ev.fields
}

// stringArgs returns the string values of argument k and whether k is unambiguous.
func (ev *evaluation) stringArgs(k string) ([]string, bool) {
	slot := &ev.strs[0]
	if k == "command" {
		slot = &ev.strs[1]
	}
	if !slot.done {
		slot.done = true
		n, exact, strs := 0, 0, 0
		fs := ev.args()
		for j := range fs {
			f := &fs[j]
			if !strings.EqualFold(f.key, k) {
				continue
			}
			n++
			if f.key == k {
				exact++
			}
			if len(f.raw) > 0 && f.raw[0] == '"' {
				strs++
				slot.vals = append(slot.vals, f.value())
			}
		}
		slot.unambiguous = n == 1 && exact == 1 && strs == 1
	}
	return slot.vals, slot.unambiguous
}

// single is the one unambiguous string value of k.
func (ev *evaluation) single(k string) (string, bool) {
	vals, ok := ev.stringArgs(k)
	if !ok {
		return "", false
	}
	return vals[0], true
}

// unambiguousPlace is where p, the call's one unambiguous path, lands (realpath.Locate, read
// once); false when it cannot be resolved.
func (ev *evaluation) unambiguousPlace(p string) (realpath.Place, bool) {
	if !ev.placeDone {
		ev.placeDone = true
		var err error
		ev.place, err = realpath.Locate(ev.call.Workspace, p)
		ev.placeOK = err == nil
	}
	return ev.place, ev.placeOK
}

// safePlace reports whether the unambiguous path's place (unambiguousPlace, already read) may
// match an allow rule: inside the workspace, not git's or Countersign's own (Place.Git, judged
// as a write unless the tool is readOnlyHint) and not one of the server's own files (SPEC §14).
func (ev *evaluation) safePlace() bool {
	if !ev.placeSafeDone {
		ev.placeSafeDone = true
		ro := ev.call.Annotations.ReadOnlyHint
		write := ro == nil || !*ro
		ev.placeSafe = ev.placeOK && ev.place.Inside && ev.place.Git(write) == "" &&
			!realpath.IsOneOf(ev.place.Abs, ev.protected)
	}
	return ev.placeSafe
}

// judgedWhole reports whether a command or path specifier that judges argument key judges the
// whole call: always, but for an approval-API agent's call (gate.APIAgent), whose tool is the
// developer's own and may act on any other argument it takes, only when key is its one argument
// (an allow rule never passes arguments it did not read: `{"command":"git status","then":"rm -rf
// ~"}` asks).
func (ev *evaluation) judgedWhole(key string) bool {
	if ev.call.Agent != gate.APIAgent {
		return true
	}
	fs := ev.args()
	return len(fs) == 1 && fs[0].key == key
}

func (ev *evaluation) views() []*shellView {
	if !ev.shellDone {
		ev.shellDone = true
		cmds, unamb := ev.stringArgs("command")
		for _, c := range cmds {
			ev.shells = append(ev.shells, viewShell(c, redirScope{ev.call.Workspace, ev.protected, ev.call.Cwd, ev.call.CwdUnknown}))
		}
		if unamb {
			ev.covered = make([]*compiled, len(ev.shells[0].cmds))
			ev.missed = make([]miss, len(ev.shells[0].cmds))
		}
	}
	return ev.shells
}

func inScope(r *compiled, c *gate.RuleCall) bool {
	switch r.rule.Scope {
	case gate.ScopeSession:
		return r.rule.SessionID == c.SessionID
	case gate.ScopeWorkspace:
		return c.Workspace != "" && r.workspace == filepath.Clean(c.Workspace)
	default:
		return true
	}
}

func better(cur hit, r *compiled) bool { return cur.r == nil || r.ord < cur.r.ord }

// betterAsk is better for ask rules, where the most restrictive wins (SPEC §14, §15): the one
// needing more approvers, then the one naming reviewers, then the first.
func betterAsk(cur hit, r *compiled) bool {
	if cur.r == nil {
		return true
	}
	a, b := &cur.r.rule, &r.rule
	if a.Approvers != b.Approvers {
		return b.Approvers > a.Approvers
	}
	if (len(a.Reviewers) > 0) != (len(b.Reviewers) > 0) {
		return len(b.Reviewers) > 0
	}
	return r.ord < cur.r.ord
}

// matchSpec reports whether r's specifier matches the call and what it matched; for an allow
// rule on run_command, covers lists the simple commands it covers, and misses those whose
// words it names without covering them (with why).
func (ev *evaluation) matchSpec(r *compiled) (ok bool, what string, covers []int, misses []missAt) {
	allow := r.rule.Effect == gate.Allow
	switch r.kind {
	case kindPath:
		key := outsidePathKey(&ev.call)
		if ev.call.Outside {
			vals, unamb := ev.stringArgs(key)
			vals = fromCwd(vals, ev.call.Cwd)
			if allow {
				if !unamb || !ev.judgedWhole(key) || (ev.call.CwdUnknown && !filepath.IsAbs(vals[0])) {
					return false, "", nil, nil
				}
				rel, ok := lexicalAllowed(vals[0], ev.call.Workspace, ev.protected)
				if !ok || !r.path.matchRel(rel, true, true) {
					return false, "", nil, nil
				}
				return true, ev.call.Tool + " " + vals[0], nil, nil
			}
			for _, p := range vals {
				if r.path.matchWritten(p, ev.call.Workspace) {
					return true, ev.call.Tool + " " + p, nil, nil
				}
			}
			return false, "", nil, nil
		}
		if allow {
			p, ok := ev.single("path")
			if !ok {
				return false, "", nil, nil
			}
			pl, ok := ev.unambiguousPlace(p)
			if !ok || !r.path.matchPlace(pl, true) || !ev.safePlace() {
				return false, "", nil, nil
			}
			return true, ev.call.Tool + " " + p, nil, nil
		}
		vals, unamb := ev.stringArgs("path")
		for _, p := range vals {
			if r.path.matchWritten(p, ev.call.Workspace) {
				return true, ev.call.Tool + " " + p, nil, nil
			}
			var pl realpath.Place
			var err error
			if unamb {
				pl, ok = ev.unambiguousPlace(p)
			} else {
				pl, err = realpath.Locate(ev.call.Workspace, p)
				ok = err == nil
			}
			if ok && r.path.matchPlace(pl, false) {
				return true, ev.call.Tool + " " + p, nil, nil
			}
		}
		return false, "", nil, nil
	case kindKV:
		return r.kv.match(ev.args(), allow), ev.call.Tool, nil, nil
	case kindCmd:
		vs := ev.views()
		if allow {
			if ev.covered == nil || !ev.judgedWhole("command") {
				return false, "", nil, nil
			}
			for i := range vs[0].cmds {
				ok, why := r.cmd.allows(&vs[0].cmds[i])
				switch {
				case ok:
					covers = append(covers, i)
				case why != "":
					misses = append(misses, missAt{i, why})
				}
			}
			return len(covers) > 0 || len(misses) > 0, "", covers, misses
		}
		for _, v := range vs {
			for _, list := range [][]simpleCmd{v.cmds, v.hidden} {
				for i := range list {
					if r.cmd.denies(&list[i]) {
						return true, list[i].text, nil, nil
					}
				}
			}
		}
		return false, "", nil, nil
	}
	if commandTool(ev.call.Tool) {
		if allow {
			// A rule for every command (`run_command`, `*`, "Approve for session") still
			// never allows text shells may read differently, nor text the judge does not
			// read (SPEC §14): nobody can know what it runs.
			for _, v := range ev.views() {
				if v.unreadable {
					return false, "", nil, nil
				}
			}
		}
		if cmd, ok := ev.single("command"); ok {
			return true, cmd, nil, nil
		}
	}
	return true, ev.call.Tool, nil, nil
}

func (ev *evaluation) consider(r *compiled) {
	if !inScope(r, &ev.call) || (r.rule.ExpiresAt != nil && r.rule.ExpiresAt.Before(ev.clock())) {
		return
	}
	eff := r.rule.Effect
	// skip work that cannot change the outcome
	switch eff {
	case gate.Deny:
		if ev.deny.r != nil && ev.deny.r.ord < r.ord {
			return
		}
	case gate.Ask:
		if ev.deny.r != nil || (ev.ask.r != nil && !betterAsk(ev.ask, r)) {
			return
		}
	}
	ok, what, covers, misses := ev.matchSpec(r)
	if !ok {
		return
	}
	if r.when != nil {
		if ev.act == nil {
			ev.act = &whenVars{call: ev.call}
		}
		out, _, err := r.when.Eval(ev.act)
		if err != nil {
			if ev.fail.r == nil || r.ord < ev.fail.r.ord {
				ev.fail = hit{r: r}
				if strings.Contains(err.Error(), "cost limit exceeded") {
					ev.failWhy = fmt.Sprintf("the `when` of rule %s exceeded its cost limit, so the call asks", r.text)
				} else {
					ev.failWhy = fmt.Sprintf("the `when` of rule %s failed (%v), so the call asks", r.text, err)
				}
			}
			return
		}
		if out != types.True {
			if _, isBool := out.(types.Bool); !isBool && (ev.fail.r == nil || r.ord < ev.fail.r.ord) {
				ev.fail = hit{r: r}
				ev.failWhy = fmt.Sprintf("the `when` of rule %s gave %v, not a bool, so the call asks", r.text, out)
			}
			return
		}
	}
	switch eff {
	case gate.Deny:
		if better(ev.deny, r) {
			ev.deny = hit{r, what}
		}
	case gate.Ask:
		if betterAsk(ev.ask, r) {
			ev.ask = hit{r, what}
		}
	case gate.Allow:
		if covers != nil || misses != nil {
			for _, i := range covers {
				if ev.covered[i] == nil || r.ord < ev.covered[i].ord {
					ev.covered[i] = r
				}
			}
			for _, m := range misses {
				if ev.missed[m.i].r == nil || r.ord < ev.missed[m.i].r.ord {
					ev.missed[m.i] = miss{r, m.why}
				}
			}
			return
		}
		if better(ev.allow, r) {
			ev.allow = hit{r, what}
		}
	}
}

// decision is the RuleDecision h implies; its Rule points at the Set's own copy (read only).
func decision(e gate.Effect, h hit, verb string) gate.RuleDecision {
	return gate.RuleDecision{Effect: e, Rule: &h.r.rule, Reason: "rule " + h.r.text + " " + verb + " " + h.what}
}

// clock returns the time the evaluation compares expiries with, read once.
func (ev *evaluation) clock() time.Time {
	if ev.now.IsZero() {
		ev.now = time.Now()
	}
	return ev.now
}

func (ev *evaluation) decide() gate.RuleDecision {
	switch {
	case ev.deny.r != nil:
		return decision(gate.Deny, ev.deny, "denies")
	case ev.ask.r != nil:
		return decision(gate.Ask, ev.ask, "asks for")
	case ev.fail.r != nil:
		return gate.RuleDecision{Effect: gate.Ask, Rule: &ev.fail.r.rule, Reason: ev.failWhy}
	case ev.allow.r != nil:
		return decision(gate.Allow, ev.allow, "allows")
	}
	if commandTool(ev.call.Tool) {
		ev.views() // for the note, also when no run_command rule looked at the command
	}
	if ev.covered == nil || ev.shells[0].opaque != "" || len(ev.covered) == 0 {
		return gate.RuleDecision{Note: ev.note()}
	}
	var used []*compiled
	for _, r := range ev.covered {
		if r == nil {
			return gate.RuleDecision{Note: ev.note()}
		}
		if !slices.Contains(used, r) {
			used = append(used, r)
		}
	}
	slices.SortFunc(used, func(a, b *compiled) int { return a.ord - b.ord })
	texts := make([]string, len(used))
	for i, r := range used {
		texts[i] = r.text
	}
	cmd, _ := ev.single("command")
	label := "rule " + texts[0] + " allows"
	if len(texts) > 1 {
		label = "rules " + strings.Join(texts, ", ") + " allow"
	}
	also := make([]*gate.Rule, 0, len(used)-1)
	for _, r := range used[1:] {
		also = append(also, &r.rule)
	}
	return gate.RuleDecision{Effect: gate.Allow, Rule: &used[0].rule, Also: also, Reason: label + " " + cmd}
}

// note says why the rules did not allow a run_command call they looked at (gate.RuleDecision's
// Note), or "": the text shells may read differently, or that the rules do not read (the
// view's unreadable reason, whatever the rules); otherwise, when some allow rule covered or
// named part of the command line, the simple commands no allow rule covers, each with the
// rule that named its words and why it still does not cover it, or the rules that covered the
// rest: "`touch x` is not covered by run_command(git diff:*)", "`go test -toolexec x ./...` is
// not covered by run_command(go test:*): -toolexec runs programs or writes files"; before
// those, what else in the line no rule can allow ("the command has a command substitution,
// which no rule allows").
func (ev *evaluation) note() string {
	if !commandTool(ev.call.Tool) || len(ev.shells) == 0 {
		return ""
	}
	v := ev.shells[0]
	if v.unreadable {
		return v.opaque + ": no rule allows it"
	}
	if ev.covered == nil {
		return ""
	}
	var by []*compiled // the rules that covered something, in order
	for _, r := range ev.covered {
		if r != nil && !slices.Contains(by, r) {
			by = append(by, r)
		}
	}
	slices.SortFunc(by, func(a, b *compiled) int { return a.ord - b.ord })
	texts := func(rs []*compiled) string {
		t := make([]string, len(rs))
		for i, r := range rs {
			t[i] = r.text
		}
		return strings.Join(t, " or ")
	}
	anyMiss := false
	for _, m := range ev.missed {
		anyMiss = anyMiss || m.r != nil
	}
	if v.opaque != "" {
		if len(by) == 0 && !anyMiss {
			return ""
		}
		return "the command has " + v.opaque + ", which no rule allows"
	}
	var parts []string
	for i, r := range ev.covered {
		if r != nil {
			continue
		}
		c := v.cmds[i].text
		switch m := ev.missed[i]; {
		case m.r != nil:
			parts = append(parts, fmt.Sprintf("`%s` is not covered by %s: %s", c, m.r.text, m.why))
		case len(by) > 0:
			parts = append(parts, fmt.Sprintf("`%s` is not covered by %s", c, texts(by)))
		}
	}
	if len(parts) > 3 {
		parts = append(parts[:3], fmt.Sprintf("and %d more", len(parts)-3))
	}
	return strings.Join(parts, "; ")
}
