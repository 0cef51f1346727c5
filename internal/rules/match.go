package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Path specifiers (SPEC §14 `write_file(docs/**)`) match a call's `path` argument, cleaned and
// made workspace-relative: an absolute path inside RuleCall.Workspace becomes relative to it, a
// relative one is cleaned (path.Clean, forward slashes). The glob is gitignore-style, with
// github.com/bmatcuk/doublestar/v4: `**` crosses folders, `*` does not; a pattern without a "/"
// (`*.go`, `.env`) matches at any depth; a leading "/" anchors at the workspace root (it is
// dropped); a trailing "/" means the folder and everything in it (`docs/` = `docs/**`).
//
// A path that escapes the workspace (absolute outside it, or ".." leaving it) NEVER matches an
// allow rule. Deny and ask rules whose pattern has no "/" (`*.pem`, `.env`) still match such a
// path by its base name, so `deny write_file(*.pem)` denies `/etc/ssl/x.pem`; anchored patterns
// (`secrets/**`) say nothing about a path outside and do not match it. (The file tools refuse
// paths outside the workspace themselves; paths are compared as written: symlinks are not
// resolved.)

// workspacePath returns the cleaned, slash-separated, workspace-relative form of p and whether
// it stays inside the workspace. With no workspace, only relative paths can be inside.
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

// match reports whether the path argument matches; allow says whether the rule allows (an
// escaping path never matches then).
func (ps *pathSpec) match(p, workspace string, allow bool) bool {
	rel, inside := workspacePath(p, workspace)
	return ps.matchRel(rel, inside, allow)
}

// matchRel is match on a path already made workspace-relative.
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
