package realpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Place is where a tool's path argument lands in a workspace (Locate). It is the one answer the
// file tools open, the rules' path specifiers and accept-edits match, and the protected-files
// check judges (SPEC §14 "Paths as they resolve": joined to the workspace, cleaned, symlinks
// resolved, another name of the workspace recognised).
type Place struct {
	// Root is the workspace's real folder: absolute, clean, every symlink resolved.
	Root string
	// Abs is where the kernel would land for the path: absolute, clean, every symlink resolved
	// (a dangling one followed to its target), as Resolve gives it.
	Abs string
	// Rel is Abs relative to Root, slash-separated, "." for Root itself; "" when !Inside.
	Rel string
	// Inside reports whether Abs is Root or below it. A path written through another name of the
	// workspace (`../<its name>/x`, a symlink to it) lands inside.
	Inside bool
}

// Locate returns where the path p (relative to the folder workspace, or absolute) lands: the
// workspace and p are resolved as the kernel would resolve them (Resolve), so `..` after a
// symlink is physical, and a symlink anywhere on the way — the workspace's own included — is
// followed. An empty workspace means the process's working folder (where run_command runs when
// a session has none). The error is "the path is empty", "the path "…" contains a NUL byte", or
// Resolve's (a failing os.Lstat or os.Readlink, ErrLinkLoop); it never says the path is outside:
// that is Place.Inside.
func Locate(workspace, p string) (Place, error) {
	if p == "" {
		return Place{}, errors.New("the path is empty")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return Place{}, fmt.Errorf("the path %q contains a NUL byte", p)
	}
	ws, err := filepath.Abs(workspace) // "" is the working folder
	if err != nil {
		return Place{}, err
	}
	root, err := walk("/", ws)
	if err != nil {
		return Place{}, err
	}
	from := root
	if filepath.IsAbs(p) {
		from = "/"
	}
	abs, err := walk(from, p)
	if err != nil {
		return Place{}, err
	}
	pl := Place{Root: root, Abs: abs}
	switch {
	case abs == root:
		pl.Rel, pl.Inside = ".", true
	case strings.HasPrefix(abs, strings.TrimSuffix(root, "/")+"/"):
		pl.Rel, pl.Inside = filepath.ToSlash(strings.TrimPrefix(abs, strings.TrimSuffix(root, "/")+"/")), true
	}
	return pl, nil
}

// gitLayout are the entries of a folder git takes as a repository of its own (git's
// is_git_directory, setup.c): HEAD, with objects/ and refs/ — or with a commondir file that
// points at another repository's objects and refs (a linked worktree's folder).
var gitLayout = [...]string{"HEAD", "objects", "refs", "commondir"}

// Git says why git may take the place for its own files — its configuration, hooks, objects —
// so that a write there can make a later, allowed `git status` run programs (issue 28: an
// fsmonitor entry in .git/config; a bare repository built in the workspace by accept-edits).
// It is "" when git would not. write says the call creates or replaces the file at the place;
// reading is judged by what is there now. The reasons, in order:
//
//   - a folder on the way is named .git (any depth, any case), or .countersign;
//   - write, and the file is named HEAD (any case): a HEAD beside objects/ and refs/ makes its
//     folder a repository, and several writes decided at once (a batch) could each find the
//     layout incomplete, so every HEAD asks;
//   - a folder on the way from Root (Root and the place itself included) holds a repository
//     layout (HEAD, then objects/ and refs/, or commondir), as is_git_directory reads it, only
//     by presence;
//   - write, and the entry it creates in such a folder completes that layout.
//
// Outside the workspace it is "": the place is refused for that (Place.Inside). Git reads the
// file system: a layout made after the call was judged is not seen.
func (pl Place) Git(write bool) string {
	if !pl.Inside {
		return ""
	}
	var segs []string
	if pl.Rel != "." {
		segs = strings.Split(pl.Rel, "/")
	}
	for _, s := range segs {
		switch {
		case strings.EqualFold(s, ".git"):
			return "it is inside a .git folder, where git reads its configuration and hooks"
		case strings.EqualFold(s, ".countersign"):
			return "it is inside .countersign, Countersign's own folder"
		}
	}
	if write && len(segs) > 0 && strings.EqualFold(segs[len(segs)-1], "HEAD") {
		return "a file named HEAD makes its folder a git repository once objects/ and refs/ are beside it"
	}
	dir := pl.Root
	for i := 0; i <= len(segs); i++ {
		if i > 0 {
			dir = filepath.Join(dir, segs[i-1])
			if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
				return "" // nothing below a missing folder can be laid out yet
			}
		}
		next := ""
		if write && i < len(segs) {
			next = segs[i]
		}
		now, after := layout(dir, next)
		where := "the workspace folder"
		if i > 0 {
			where = "folder " + strings.Join(segs[:i], "/")
		}
		switch {
		case now:
			return where + " is laid out as a git repository (HEAD, objects/, refs/): git would read its configuration and run its hooks"
		case after:
			return "it would complete a git repository (HEAD, objects/, refs/) in " + where + ": git would read its configuration and run its hooks"
		}
	}
	return ""
}

// layout reports whether the folder dir holds a git repository's layout now, and whether it
// would once its entry named next ("" for none) exists.
func layout(dir, next string) (now, after bool) {
	var has, will [len(gitLayout)]bool
	for i, name := range gitLayout {
		_, err := os.Lstat(filepath.Join(dir, name))
		has[i] = err == nil
		will[i] = has[i] || (next != "" && strings.EqualFold(next, name))
	}
	complete := func(h [len(gitLayout)]bool) bool { return h[0] && ((h[1] && h[2]) || h[3]) }
	return complete(has), complete(will)
}
