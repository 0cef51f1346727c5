package gate

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"

	"countersign/internal/realpath"
)

// acceptEditsExcluded says why accept-edits mode does not cover a file tool's write ("" when it
// does): a write that reaches the repository's configuration — anything under a .git folder
// (config, hooks), or a .gitattributes or .gitmodules file — can make programs run the next time
// git runs (core.fsmonitor, hooks, filter drivers), and an allowed `git status` would then run
// them without anyone being asked (found by a review). Such writes ask, as in default mode.
//
// The path is the tool's `path` argument, decoded as the tool decodes it (encoding/json into a
// struct: the last key matching case-insensitively), relative to workspace or absolute, with the
// symlinks followed as the kernel would (realpath.Resolve, a dangling one too), so a link in the
// workspace to .git/config, or to a hook that does not exist yet, is seen through. A path that
// cannot be resolved asks too.
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
		real, err := realpath.Resolve(workspace, p)
		realWS, werr := realpath.Resolve("/", workspace)
		if err != nil || werr != nil {
			return "accept-edits mode cannot tell where this call writes: " + errors.Join(err, werr).Error()
		}
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
