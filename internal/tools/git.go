package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"countersign/internal/tool"
)

// MaxDiffFiles caps git_diff's files; beyond it the diff is marked truncated.
const MaxDiffFiles = 1000

// DiffFile is one file of git_diff: path (slash-separated, relative to the workspace), oldPath
// for a rename or copy, status (added, deleted, modified, renamed, copied, typechange, unmerged),
// added and deleted line counts (0 for binary files, which set binary), untracked for a file git
// does not track yet (shown as added), and its patch in unified diff format — cut at a line
// boundary when truncated is set.
type DiffFile struct {
	Path      string `json:"path"`
	OldPath   string `json:"oldPath,omitempty"`
	Status    string `json:"status,omitempty"`
	Additions int    `json:"additions"`
	Deletions int    `json:"deletions"`
	Binary    bool   `json:"binary,omitempty"`
	Untracked bool   `json:"untracked,omitempty"`
	Patch     string `json:"patch"`
	Truncated bool   `json:"truncated,omitempty"`
}

// GitDiffOutput is git_diff's structuredContent (SPEC §10: "the diff, per file"): the base compared against, the changed files,
// and truncated when files were left out or a patch was cut (patches share a budget of
// OutputCap bytes, at most a quarter of it each).
type GitDiffOutput struct {
	Base      string     `json:"base"`
	Files     []DiffFile `json:"files"`
	Truncated bool       `json:"truncated"`
}

const gitDiffInput = `{
  "type": "object",
  "properties": {
    "base": {"type": "string", "minLength": 1, "pattern": "^[^-]", "description": "Commit, branch or range to diff against (default HEAD: the working tree against the last commit)."}
  },
  "additionalProperties": false
}`

const gitDiffOutput = `{
  "type": "object",
  "properties": {
    "base": {"type": "string"},
    "files": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "path": {"type": "string"},
          "oldPath": {"type": "string"},
          "status": {"enum": ["added", "deleted", "modified", "renamed", "copied", "typechange", "unmerged", "unknown"]},
          "additions": {"type": "integer", "minimum": 0},
          "deletions": {"type": "integer", "minimum": 0},
          "binary": {"type": "boolean"},
          "untracked": {"type": "boolean"},
          "patch": {"type": "string"},
          "truncated": {"type": "boolean"}
        },
        "required": ["path", "additions", "deletions", "patch"],
        "additionalProperties": false
      }
    },
    "truncated": {"type": "boolean"}
  },
  "required": ["base", "files", "truncated"],
  "additionalProperties": false
}`

func gitDiffTool(cfg Config) *tool.Tool {
	return &tool.Tool{
		Name:  "git_diff",
		Title: "Git diff",
		Description: "Show the workspace's changes as a git diff, per file: by default the working " +
			"tree (untracked files included) against HEAD, or against `base`. Each file has its " +
			"status, added and deleted line counts and patch.",
		InputSchema:  json.RawMessage(gitDiffInput),
		OutputSchema: json.RawMessage(gitDiffOutput),
		Annotations:  readOnly(),
		Execute: func(ctx context.Context, arguments json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct {
				Base string `json:"base"`
			}
			if err := decode(arguments, &in); err != nil {
				return tool.Result{}, err
			}
			return gitDiff(ctx, cfg.forCall(tc), tc.Workspace(), in.Base)
		},
	}
}

// gitRunner runs git in one workspace.
type gitRunner struct {
	dir     string
	env     []string
	timeout time.Duration // of each git command
}

// maxGitListing caps the output of git's listing commands (name-status, numstat, ls-files).
const maxGitListing = 8 << 20

// run runs git with args and returns its stdout, at most limit bytes, and whether it was cut. A
// non-zero exit is an error carrying git's stderr.
func (g gitRunner) run(ctx context.Context, limit int, args ...string) (string, bool, error) {
	// Repository configuration is not trusted to run programs for a read-only tool: no file
	// system monitor hook, no external diff or textconv driver (--no-ext-diff, --no-textconv),
	// no filter driver (see neutralFilters).
	argv := append([]string{"git", "-c", "core.fsmonitor=false", "-c", "core.quotepath=off", "-c", "color.ui=never"}, args...)
	stdout, stderr := newCapture(limit, false), newCapture(8<<10, false)
	e, err := process{argv: argv, dir: g.dir, env: g.env, timeout: g.timeout, stdout: stdout, stderr: stderr}.run(ctx)
	if err != nil {
		if errors.Is(err, errCannotStart) {
			return "", false, fmt.Errorf("git_diff needs git: %w", err)
		}
		return "", false, err
	}
	if e.timedOut {
		return "", false, fmt.Errorf("git %s: timed out after %s", args[0], g.timeout)
	}
	if e.code != 0 {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", e.code)
		}
		return "", false, fmt.Errorf("git %s: %s", args[0], msg)
	}
	return stdout.String(), stdout.truncated(), nil
}

// gitDiff implements git_diff.
func gitDiff(ctx context.Context, cfg Config, workspace, base string) (tool.Result, error) {
	if strings.HasPrefix(base, "-") {
		return tool.Result{}, fmt.Errorf("base %q must not start with \"-\"", base)
	}
	// GIT_OPTIONAL_LOCKS=0: a read-only tool does not refresh (write) the index.
	g := gitRunner{
		dir:     workspace,
		env:     environ(cfg, "GIT_OPTIONAL_LOCKS=0", "GIT_TERMINAL_PROMPT=0", "GIT_PAGER=cat"),
		timeout: cfg.CheckTimeout,
	}
	inside, _, err := g.run(ctx, 64, "rev-parse", "--is-inside-work-tree")
	if err == nil && strings.TrimSpace(inside) != "true" {
		err = errors.New("inside a .git folder")
	}
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, ctx.Err()
		}
		return tool.Result{}, fmt.Errorf("the workspace %s is not a git repository (%v)", workspace, err)
	}

	// Filter drivers (.gitattributes "filter=x", config filter.x.clean …) would run when git
	// reads the working tree; they are switched off for every later command.
	list, _, err := g.run(ctx, maxGitListing, "config", "--list", "-z")
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, ctx.Err()
		}
		return tool.Result{}, err
	}
	g.env = append(g.env, neutralFilters(list)...)

	shown, against := base, base
	if base == "" {
		shown, against = "HEAD", "HEAD"
		if _, _, err := g.run(ctx, 256, "rev-parse", "--verify", "--quiet", "HEAD^{commit}"); err != nil {
			// No commit yet: everything is new, so compare with the empty tree.
			tree, _, err := g.run(ctx, 256, "hash-object", "-t", "tree", "/dev/null")
			if err != nil {
				return tool.Result{}, err
			}
			against = strings.TrimSpace(tree)
		}
	}
	// Explicit prefixes, whatever diff.noprefix or diff.mnemonicPrefix say: patches are matched
	// to files by their "diff --git a/… b/…" header.
	common := []string{"diff", "--no-color", "--no-ext-diff", "--no-textconv", "--relative", "--src-prefix=a/", "--dst-prefix=b/"}
	diff := func(limit int, extra ...string) (string, bool, error) {
		args := append(append(append([]string(nil), common...), extra...), "--end-of-options", against, "--")
		return g.run(ctx, limit, args...)
	}
	nameStatus, cut1, err := diff(maxGitListing, "--name-status", "-z")
	if err != nil {
		return tool.Result{}, err
	}
	numstat, cut2, err := diff(maxGitListing, "--numstat", "-z")
	if err != nil {
		return tool.Result{}, err
	}
	patch, patchCut, err := diff(4*cfg.OutputCap, "--patch")
	if err != nil {
		return tool.Result{}, err
	}

	out := GitDiffOutput{Base: shown, Files: []DiffFile{}, Truncated: cut1 || cut2}
	files, err := parseDiffListing(nameStatus, numstat)
	if err != nil {
		return tool.Result{}, err
	}
	patches := splitPatch(patch)
	k := 0 // the next patch to hand out; patches come in the files' order
	for i := range files {
		f := &files[i]
		if k < len(patches) && patchFor(patches[k], f) {
			f.Patch = patches[k]
			// The last patch read may itself have been cut by the capture.
			f.Truncated = patchCut && k == len(patches)-1
			k++
		} else if k >= len(patches) && patchCut {
			f.Truncated = true
		}
	}

	// The working tree is one side unless base is a range: then untracked files are changes too.
	if !strings.Contains(against, "..") {
		untracked, cut, err := g.run(ctx, maxGitListing, "ls-files", "--others", "--exclude-standard", "-z")
		if err != nil {
			return tool.Result{}, err
		}
		out.Truncated = out.Truncated || cut
		paths, room := splitZ(untracked), MaxDiffFiles-min(len(files), MaxDiffFiles)
		if len(paths) > room {
			paths, out.Truncated = paths[:room], true
		}
		more, err := untrackedFiles(workspace, paths, cfg.OutputCap/4)
		if err != nil {
			return tool.Result{}, err
		}
		files = append(files, more...)
	}
	if files == nil {
		files = []DiffFile{}
	}
	if len(files) > MaxDiffFiles {
		files, out.Truncated = files[:MaxDiffFiles], true
	}

	// Patches share one budget; each gets at most a quarter of it.
	budget, each := cfg.OutputCap, max(cfg.OutputCap/4, 1)
	for i := range files {
		f := &files[i]
		limit := min(budget, each)
		if len(f.Patch) > limit {
			f.Patch, f.Truncated = cutAtLine(f.Patch, limit), true
		}
		budget -= len(f.Patch)
		if f.Truncated {
			out.Truncated = true
		}
	}
	out.Files = files
	return success(diffText(out), out), nil
}

// neutralFilters returns environment entries (GIT_CONFIG_COUNT, GIT_CONFIG_KEY_n,
// GIT_CONFIG_VALUE_n: git's -c, without its parsing of "=" in names) that switch off every filter
// driver configured in list, the output of `git config --list -z`: for each driver x of a
// filter.x.* key, filter.x.clean, .smudge and .process become empty (git then runs nothing and
// uses the content as it is) and filter.x.required false (so a missing filter is no error). The
// repository's configuration decides which drivers exist and its .gitattributes where they run;
// a read-only tool runs neither. Diffs of files under a filter (say, Git LFS) then compare the
// raw working-tree content with the stored blob. Nil when no filter is configured.
func neutralFilters(list string) []string {
	var names []string
	seen := map[string]bool{}
	for _, entry := range strings.Split(list, "\x00") {
		key, _, _ := strings.Cut(entry, "\n")
		// Section and key names are case-insensitive (git prints them lowercased); the
		// subsection, the driver's name, is not, and may hold dots.
		rest, ok := strings.CutPrefix(strings.ToLower(key), "filter.")
		i := strings.LastIndexByte(rest, '.')
		if !ok || i <= 0 {
			continue
		}
		name := key[len("filter.") : len("filter.")+i]
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	var env []string
	n := 0
	for _, name := range names {
		for _, kv := range [][2]string{{"clean", ""}, {"smudge", ""}, {"process", ""}, {"required", "false"}} {
			env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=filter.%s.%s", n, name, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", n, kv[1]))
			n++
		}
	}
	return append(env, fmt.Sprintf("GIT_CONFIG_COUNT=%d", n))
}

// diffStatus maps git's status letters to words.
var diffStatus = map[byte]string{
	'A': "added", 'D': "deleted", 'M': "modified", 'R': "renamed", 'C': "copied",
	'T': "typechange", 'U': "unmerged", 'X': "unknown",
}

// splitZ splits NUL-terminated fields.
func splitZ(s string) []string {
	s = strings.TrimSuffix(s, "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// parseDiffListing reads the files of `git diff --name-status -z` with their line counts from
// `git diff --numstat -z`.
func parseDiffListing(nameStatus, numstat string) ([]DiffFile, error) {
	var files []DiffFile
	ns := splitZ(nameStatus)
	for i := 0; i < len(ns); i++ {
		code := ns[i]
		if code == "" || i+1 >= len(ns) {
			return nil, fmt.Errorf("git diff --name-status: unexpected output %q", nameStatus)
		}
		f := DiffFile{Status: diffStatus[code[0]]}
		if f.Status == "" {
			f.Status = "unknown"
		}
		if code[0] == 'R' || code[0] == 'C' {
			if i+2 >= len(ns) {
				return nil, fmt.Errorf("git diff --name-status: unexpected output %q", nameStatus)
			}
			f.OldPath, f.Path = ns[i+1], ns[i+2]
			i += 2
		} else {
			f.Path = ns[i+1]
			i++
		}
		files = append(files, f)
	}
	// Line counts by path (the new path of a rename or copy).
	type counts struct {
		adds, dels int
		binary     bool
	}
	byPath := map[string]counts{}
	nums := splitZ(numstat)
	for i := 0; i < len(nums); i++ {
		fields := strings.SplitN(nums[i], "\t", 3)
		if len(fields) != 3 {
			return nil, fmt.Errorf("git diff --numstat: unexpected output %q", numstat)
		}
		p := fields[2]
		if p == "" { // a rename or copy: the old and new paths follow
			if i+2 >= len(nums) {
				return nil, fmt.Errorf("git diff --numstat: unexpected output %q", numstat)
			}
			p = nums[i+2]
			i += 2
		}
		var c counts
		if fields[0] == "-" && fields[1] == "-" {
			c.binary = true
		} else {
			c.adds, _ = strconv.Atoi(fields[0])
			c.dels, _ = strconv.Atoi(fields[1])
		}
		byPath[p] = c
	}
	for i := range files {
		c := byPath[files[i].Path]
		files[i].Additions, files[i].Deletions, files[i].Binary = c.adds, c.dels, c.binary
	}
	return files, nil
}

// patchFor reports whether patch is f's: its header names f's paths. A quoted header (a path with
// quotes, backslashes or control characters) cannot be checked cheaply and is trusted to be in
// order.
func patchFor(patch string, f *DiffFile) bool {
	if strings.HasPrefix(patch, `diff --git "`) {
		return true
	}
	old := f.Path
	if f.OldPath != "" {
		old = f.OldPath
	}
	return strings.HasPrefix(patch, "diff --git a/"+old+" b/"+f.Path+"\n")
}

// splitPatch splits a multi-file unified diff into one patch per file, at "diff --git " lines.
func splitPatch(patch string) []string {
	var out []string
	start := -1
	for i := 0; i < len(patch); {
		if strings.HasPrefix(patch[i:], "diff --git ") {
			if start >= 0 {
				out = append(out, patch[start:i])
			}
			start = i
		}
		j := strings.IndexByte(patch[i:], '\n')
		if j < 0 {
			break
		}
		i += j + 1
	}
	if start >= 0 {
		out = append(out, patch[start:])
	}
	return out
}

// cutAtLine cuts s to at most n bytes, at the end of a line when there is one.
func cutAtLine(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if i := strings.LastIndexByte(s[:n], '\n'); i >= 0 {
		return s[:i+1]
	}
	return s[:runeStart([]byte(s), n)]
}

// untrackedFiles describes untracked files as added ones, with a patch built the way git shows a
// new file. The files are read through the workspace jail: a symlink is shown as its target,
// never followed. Files that vanished or are not regular files or symlinks are left out.
func untrackedFiles(workspace string, paths []string, patchLimit int) ([]DiffFile, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	j, err := openJail(workspace, nil)
	if err != nil {
		return nil, err
	}
	defer j.Close()
	var out []DiffFile
	for _, p := range paths {
		f := DiffFile{Path: p, Status: "added", Untracked: true}
		header := fmt.Sprintf("diff --git a/%s b/%s\n", p, p)
		fi, err := j.root.Lstat(p)
		if err != nil {
			continue // gone since git listed it
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := j.root.Readlink(p)
			if err != nil {
				continue
			}
			f.Additions = 1
			f.Patch = header + "new file mode 120000\n--- /dev/null\n+++ b/" + p + "\n@@ -0,0 +1 @@\n+" +
				target + "\n\\ No newline at end of file\n"
		case fi.Mode().IsRegular():
			mode := "100644"
			if fi.Mode()&0o111 != 0 {
				mode = "100755"
			}
			f.Patch, f.Additions, f.Binary, f.Truncated, err = newFilePatch(j, p, header+"new file mode "+mode+"\n", patchLimit)
			if err != nil {
				continue
			}
		default:
			continue
		}
		out = append(out, f)
	}
	return out, nil
}

// newFilePatch reads the untracked file p and returns its patch as an added file (at most limit
// bytes, cut at a line; cut reports that), its line count, and whether it is binary.
func newFilePatch(j *jail, p, header string, limit int) (patch string, lines int, binary, cut bool, err error) {
	// The caller saw a regular file; openRegular refuses a pipe swapped in since without blocking.
	fh, _, err := j.openRegular(p, os.O_RDONLY, 0)
	if err != nil {
		return "", 0, false, false, err
	}
	defer fh.Close()
	br := bufio.NewReaderSize(fh, 64<<10)
	if head, _ := br.Peek(8000); bytes.IndexByte(head, 0) >= 0 {
		return header + "Binary files /dev/null and b/" + p + " differ\n", 0, true, false, nil
	}
	var body strings.Builder
	atStart := true // the next chunk starts a line
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if atStart {
				lines++
			}
			if body.Len() <= limit { // past the limit, only count lines
				if atStart {
					body.WriteByte('+')
				}
				body.Write(chunk)
			}
			atStart = chunk[len(chunk)-1] == '\n'
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", 0, false, false, err
		}
	}
	if lines == 0 {
		return header, 0, false, false, nil
	}
	if !atStart {
		body.WriteString("\n\\ No newline at end of file\n")
	}
	patch = header + "--- /dev/null\n+++ b/" + p + "\n" + hunkHeader(lines) + body.String()
	if len(patch) > limit {
		return cutAtLine(patch, limit), lines, false, true, nil
	}
	return patch, lines, false, false, nil
}

// hunkHeader is the hunk header of a new file of n lines.
func hunkHeader(n int) string {
	if n == 1 {
		return "@@ -0,0 +1 @@\n"
	}
	return fmt.Sprintf("@@ -0,0 +1,%d @@\n", n)
}

// diffText renders the diff for the model: a summary line per file, then the patches.
func diffText(out GitDiffOutput) string {
	if len(out.Files) == 0 {
		return fmt.Sprintf("No changes against %s.", out.Base)
	}
	var b strings.Builder
	adds, dels := 0, 0
	for _, f := range out.Files {
		adds += f.Additions
		dels += f.Deletions
	}
	fmt.Fprintf(&b, "%s changed against %s, +%d -%d\n", plural(len(out.Files), "file"), out.Base, adds, dels)
	for _, f := range out.Files {
		name := f.Path
		if f.OldPath != "" {
			name = f.OldPath + " -> " + f.Path
		}
		extra := ""
		if f.Untracked {
			extra = ", untracked"
		}
		if f.Binary {
			extra += ", binary"
		}
		fmt.Fprintf(&b, "  %s %s (+%d -%d%s)\n", f.Status, name, f.Additions, f.Deletions, extra)
	}
	for _, f := range out.Files {
		if f.Patch == "" {
			continue
		}
		b.WriteString("\n")
		b.WriteString(f.Patch)
		if f.Truncated {
			b.WriteString("[patch truncated]\n")
		}
	}
	if out.Truncated {
		b.WriteString("\n[Diff truncated: some files or patches were left out or cut.]\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}
