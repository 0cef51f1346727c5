package gate

import (
	"encoding/json"
	"strings"

	"countersign/internal/realpath"
)

// unguardedWrite says why a file tool's write (tool.WritesFiles) must be decided by a person
// whatever the rules and the mode say ("" when it need not): SPEC §14 "Paths as they resolve" —
// a path that leaves the workspace, cannot be resolved, or lands in git's or Countersign's own
// files (realpath.Place.Git: inside .git/ or .countersign at any depth, in a folder laid out as a
// git repository or completing one, a file named HEAD) never matches an allow rule and is never
// allowed by accept-edits. A review ran code without a prompt this way: accept-edits wrote
// .git/config (core.fsmonitor), or HEAD, objects/ and refs/ and a config into a plain
// workspace, and an allowed `git status` then ran what they named (issue 28).
//
// The path is the tool's `path` argument decoded as the tool decodes it (encoding/json into a
// struct: the last key matching case-insensitively), judged where the tool will open it
// (realpath.Locate from workspace: the file tools' own resolver, symlinks followed as the kernel
// would, a dangling one too). The reason names the path as it resolves, e.g. "no rule or mode
// allows writing .git/config: it is inside a .git folder, where git reads its configuration and
// hooks".
//
// Arguments with no string `path` are not judged here ("": the tool's inputSchema refuses them
// before the gate); accept-edits still asks for them (acceptEditsExcluded).
func unguardedWrite(args json.RawMessage, workspace string) string {
	_, why := judgeWrite(args, workspace)
	if why == noPath {
		return ""
	}
	return why
}

// noPath is judgeWrite's reason for arguments with no string `path`.
const noPath = "accept-edits mode cannot tell which file this call writes"

// judgeWrite is unguardedWrite, with the place it judged (the zero Place when the path cannot be
// read or resolved); for arguments with no string `path` the reason is noPath.
func judgeWrite(args json.RawMessage, workspace string) (realpath.Place, string) {
	var in struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(args, &in); err != nil || in.Path == "" {
		return realpath.Place{}, noPath
	}
	pl, err := realpath.Locate(workspace, in.Path)
	switch {
	case err != nil:
		return realpath.Place{}, "no rule or mode can tell where this call writes: " + err.Error()
	case !pl.Inside:
		return pl, "no rule or mode allows writing " + in.Path + ": it is outside the workspace"
	}
	if why := pl.Git(true); why != "" {
		return pl, "no rule or mode allows writing " + pl.Rel + ": " + why
	}
	return pl, ""
}

// acceptEditsExcluded says why accept-edits mode does not cover a file tool's write ("" when it
// does): unguardedWrite's reasons, and a .gitattributes or .gitmodules file at any depth, which
// can make programs run the next time git runs (filter drivers, submodules) — found by a review.
// Such writes ask, as in default mode.
func acceptEditsExcluded(args json.RawMessage, workspace string) string {
	pl, why := judgeWrite(args, workspace)
	if why != "" {
		return why
	}
	for _, seg := range strings.Split(pl.Rel, "/") {
		switch strings.ToLower(seg) {
		case ".gitattributes", ".gitmodules":
			return "accept-edits mode does not cover " + seg + ": a repository's configuration can make git run programs"
		}
	}
	return ""
}
