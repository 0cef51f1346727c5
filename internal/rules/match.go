package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"countersign/internal/realpath"
)

// Path specifiers (SPEC §14 `write_file(docs/**)`) match the path the tool will open (SPEC §14
// "Paths as they resolve"; realpath.Locate, the file tools' own resolver): the call's `path`
// argument joined to RuleCall.Workspace, cleaned, every symlink resolved (a dangling one
// followed), another name of the workspace (`../<its name>/x`, an absolute path through a
// symlink) recognised, and made workspace-relative with forward slashes. The glob is
// gitignore-style, with github.com/bmatcuk/doublestar/v4: `**` crosses folders, `*` does not; a
// pattern without a "/" (`*.go`, `.env`) matches at any depth; a leading "/" anchors at the
// workspace root (it is dropped); a trailing "/" means the folder and everything in it (`docs/`
// = `docs/**`).
//
// An allow rule matches only the resolved path, and NEVER one that leaves the workspace, cannot
// be resolved, or is git's or Countersign's own (realpath.Place.Git: inside `.git/` or
// `.countersign`, in or completing a folder laid out as a git repository, a write of a file
// named HEAD; judged as a write unless the tool is readOnlyHint) or one of the server's own files
// (NewCompiler): such a call is left to the mode and the annotation default, which ask for a
// write. Deny and ask rules match the path as written (cleaned, as before) OR as it resolves, so
// neither a symlink nor another name of the workspace dodges them; a pattern without a "/"
// (`*.pem`, `.env`) still matches a path outside the workspace by its base name, so
// `deny write_file(*.pem)` denies `/etc/ssl/x.pem`, while anchored patterns (`secrets/**`) say
// nothing about a path outside and do not match it. (The file tools refuse paths outside the
// workspace themselves.)

// workspacePath returns the cleaned, slash-separated, workspace-relative form of p as written
// (no symlink resolved) and whether it stays inside the workspace. With no workspace, only
// relative paths can be inside. Deny and ask rules match this form besides the resolved one;
// "Always allow…" suggests from it.
func workspacePath(p, workspace string) (string, bool) {
	if p == "" {
		return "", false
	}
	if filepath.IsAbs(p) {
		if workspace == "" {
			return filepath.ToSlash(filepath.Clean(p)), false
		}
		rel, err := filepath.Rel(filepath.Clean(workspace), filepath.Clean(p))
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
			return filepath.ToSlash(filepath.Clean(p)), false
		}
		return filepath.ToSlash(rel), true
	}
	c := path.Clean(filepath.ToSlash(p))
	if c == ".." || strings.HasPrefix(c, "../") {
		return c, false
	}
	return c, true
}

// pathSpec is a compiled path specifier.
type pathSpec struct {
	glob     string // doublestar pattern, relative to the workspace
	floating bool   // no "/" in the original: matches at any depth
}

func compilePathSpec(spec string) (*pathSpec, error) {
	g, err := unescapeSeparators(spec)
	if err != nil {
		return nil, err
	}
	g = strings.TrimSpace(g)
	ps := &pathSpec{}
	if strings.HasSuffix(g, "/") {
		g += "**"
	}
	switch {
	case strings.HasPrefix(g, "/"):
		g = strings.TrimLeft(g, "/")
	case !strings.Contains(g, "/"):
		ps.floating = true
		g = "**/" + g
	}
	if g == "" || !doublestar.ValidatePattern(g) {
		return nil, fmt.Errorf("path specifier %q is not a valid glob", spec)
	}
	ps.glob = g
	return ps, nil
}

// matchWritten reports whether the path argument p, as written (workspacePath), matches a deny
// or ask rule.
func (ps *pathSpec) matchWritten(p, workspace string) bool {
	rel, inside := workspacePath(p, workspace)
	return ps.matchRel(rel, inside, false)
}

// matchPlace reports whether the resolved place pl matches; allow says whether the rule allows
// (a place outside the workspace never matches then). The caller judges Place.Git and the
// server's own files for an allow rule.
func (ps *pathSpec) matchPlace(pl realpath.Place, allow bool) bool {
	if pl.Inside {
		return ps.matchRel(pl.Rel, true, allow)
	}
	return ps.matchRel(filepath.ToSlash(pl.Abs), false, allow)
}

// matchRel is the match of a path already made workspace-relative (inside) or absolute.
func (ps *pathSpec) matchRel(rel string, inside, allow bool) bool {
	if !inside {
		if allow || !ps.floating {
			return false
		}
		ok := doublestar.MatchUnvalidated(ps.glob, strings.TrimLeft(rel, "/"))
		return ok
	}
	ok := doublestar.MatchUnvalidated(ps.glob, rel)
	return ok
}

// kvSpec is a compiled key=glob[,key=glob…] specifier: every key must be a top-level argument
// whose value (a string as it is, anything else as compact JSON) matches its glob (doublestar
// syntax: `*` does not cross "/", `**` does, {a,b} are alternatives (write the comma `\,`), a
// backslash escapes; so a literal "{" or "*" is written `\{`, `\*`; EscapeValue does it).
type kvSpec struct {
	keys  []string
	globs []string
}

func compileKVSpec(spec string) (*kvSpec, error) {
	pairs, offs, err := splitEscaped(spec, ',')
	if err != nil {
		return nil, err
	}
	ks := &kvSpec{}
	for i, pair := range pairs {
		// the pair is already unescaped for ',' — find its '=' in the raw text instead.
		raw := rawPair(spec, offs[i])
		kv, _, err := splitEscaped(raw, '=')
		if err != nil {
			return nil, err
		}
		if len(kv) != 2 {
			return nil, fmt.Errorf("specifier %q: %q must be key=glob (escape a literal = as \\=)", spec, pair)
		}
		k := strings.TrimSpace(kv[0])
		if k == "" {
			return nil, fmt.Errorf("specifier %q: an argument name is missing before =", spec)
		}
		if !doublestar.ValidatePattern(kv[1]) {
			return nil, fmt.Errorf("specifier %q: %q is not a valid glob", spec, kv[1])
		}
		ks.keys = append(ks.keys, k)
		ks.globs = append(ks.globs, kv[1])
	}
	return ks, nil
}

// rawPair returns the raw (still escaped) text of the pair starting at off, up to the next
// unescaped ','.
func rawPair(s string, off int) string {
	for i := off; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		if s[i] == ',' {
			return s[off:i]
		}
	}
	return s[off:]
}

// hasUnescaped reports whether s holds c not preceded by an escaping backslash.
func hasUnescaped(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		if s[i] == c {
			return true
		}
	}
	return false
}

// match: every key must match; for an allow rule each key must be unambiguous (args.go), for
// deny and ask any of its values may match. It allocates nothing: values are decoded once per
// call in fs.
func (ks *kvSpec) match(fs []field, allow bool) bool {
	for i, k := range ks.keys {
		n, exact, matched := 0, 0, false
		for j := range fs {
			f := &fs[j]
			if !strings.EqualFold(f.key, k) {
				continue
			}
			n++
			if f.key == k {
				exact++
			}
			if !matched && doublestar.MatchUnvalidated(ks.globs[i], f.value()) {
				matched = true
			}
		}
		if !matched || (allow && (n != 1 || exact != 1)) {
			return false
		}
	}
	return true
}

// argString is a top-level argument as key=glob sees it: a string as it is, anything else as
// compact JSON.
func argString(raw json.RawMessage) string {
	if len(raw) > 0 && raw[0] == '"' {
		return decodeJSONString(raw)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
