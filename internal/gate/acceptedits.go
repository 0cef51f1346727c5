package gate

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
)

// acceptEditsExcluded says why accept-edits mode does not cover a file tool's write ("" when it
// does): a write that reaches the repository's configuration — anything under a .git folder
// (config, hooks), or a .gitattributes or .gitmodules file — can make programs run the next time
// git runs (core.fsmonitor, hooks, filter drivers), and an allowed `git status` would then run
// them without anyone being asked (found by a review). Such writes ask, as in default mode.
//
// The path is the tool's `path` argument, decoded as the tool decodes it (encoding/json into a
// struct: the last key matching case-insensitively), relative to workspace or absolute, with the
// symlinks of its existing part resolved, so a link in the workspace to .git/config is seen
// through. A path that cannot be read asks too.
func acceptEditsExcluded(args json.RawMessage, workspace string) string {
	var in struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(args, &in); err != nil || in.Path == "" {
		return "accept-edits mode cannot tell which file this call writes"
	}
	p := in.Path
	if workspace != "" && !filepath.IsAbs(p) {
		p = filepath.Join(workspace, p)
	}
	p = filepath.Clean(p)
	if workspace != "" {
		real, realWS := resolveExisting(p), resolveExisting(filepath.Clean(workspace))
		if rel, err := filepath.Rel(realWS, real); err == nil {
			p = rel
		}
	}
	for _, seg := range strings.Split(filepath.ToSlash(p), "/") {
		switch strings.ToLower(seg) {
		case ".git", ".gitattributes", ".gitmodules":
			return "accept-edits mode does not cover " + seg + ": a repository's configuration can make git run programs"
		}
	}
	return ""
}

// resolveExisting resolves the symlinks of the longest existing prefix of the clean absolute
// path p and joins the rest on unchanged; p itself when nothing of it resolves.
func resolveExisting(p string) string {
	rest := ""
	for dir := p; ; {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}
