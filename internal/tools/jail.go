package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"countersign/internal/tool"
)

// ErrOutsideWorkspace is wrapped by the error a file tool returns for a path that resolves outside
// the workspace, through "..", an absolute path elsewhere or a symlink (SPEC §9: an error result,
// nothing read or written).
var ErrOutsideWorkspace = errors.New("outside the workspace")

// jail is a session's workspace opened for the file tools. Paths are checked twice: resolve
// follows symlinks itself to give a clear error before anything is touched, and every read or
// write then goes through root (an os.Root), which refuses to leave the folder even if a symlink
// is swapped in between the check and the access.
type jail struct {
	dir  string   // the workspace as given, cleaned
	real string   // dir with symlinks resolved
	root *os.Root // dir opened as a traversal-resistant root
}

// openJail opens the workspace folder dir, which must be an absolute path to a folder.
func openJail(dir string) (*jail, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("the workspace %q is not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("the workspace %s cannot be opened: %w", dir, err)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("the workspace %s cannot be opened: %w", dir, err)
	}
	return &jail{dir: dir, real: real, root: root}, nil
}

// Close releases the workspace's root.
func (j *jail) Close() error { return j.root.Close() }

// resolve maps a tool's path argument (relative to the workspace, or absolute) to a path
// relative to the workspace's real folder ("." for the folder itself) with every symlink of the
// existing part resolved. A path that resolves outside the workspace is an error wrapping
// ErrOutsideWorkspace.
func (j *jail) resolve(p string) (string, error) {
	if p == "" {
		return "", errors.New("the path is empty")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("the path %q contains a NUL byte", p)
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(j.dir, abs)
	}
	real, err := realPath(filepath.Clean(abs))
	if err != nil {
		return "", fmt.Errorf("path %q: %w", p, err)
	}
	rel, err := filepath.Rel(j.real, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path %q is %w", p, ErrOutsideWorkspace)
	}
	return rel, nil
}

// checkPath returns the file tools' tool.InputCheckFunc: the string argument field (absent:
// def) must resolve inside the workspace (jail.resolve), else the call stops before the gate with
// a violation at /field giving resolve's error, e.g. `path "../x" is outside the workspace`.
// A workspace that cannot be opened is no fault of the argument: the check lets the call on
// and the tool reports it when it runs. The tool resolves the path again then, as the file
// system may have changed in between.
func checkPath(field, def string) tool.InputCheckFunc {
	return func(arguments json.RawMessage, workspace string) []tool.Violation {
		var in map[string]any
		if err := json.Unmarshal(arguments, &in); err != nil {
			return nil // inputSchema has accepted them; the tool's decode reports anything else
		}
		p, ok := in[field].(string)
		if !ok {
			p = def
		}
		j, err := openJail(workspace)
		if err != nil {
			return nil
		}
		defer j.Close()
		if _, err := j.resolve(p); err != nil {
			return []tool.Violation{{Pointer: "/" + field, Message: err.Error()}}
		}
		return nil
	}
}

// maxLinks bounds the symlinks realPath follows, as the kernel does (ELOOP after 40).
const maxLinks = 40

// realPath returns the absolute, clean path p with every symlink resolved, where p need not
// exist: the longest existing prefix is resolved with filepath.EvalSymlinks, and a dangling
// symlink just after it is followed by hand, so that a write through it is judged by where it
// lands.
func realPath(p string) (string, error) {
	for range maxLinks {
		dir, rest := p, []string(nil)
		var real string
		for {
			r, err := filepath.EvalSymlinks(dir)
			if err == nil {
				real = r
				break
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return "", err
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				return "", err
			}
			rest = append([]string{filepath.Base(dir)}, rest...)
			dir = parent
		}
		if len(rest) == 0 {
			return real, nil
		}
		first := filepath.Join(real, rest[0])
		fi, err := os.Lstat(first)
		if errors.Is(err, fs.ErrNotExist) {
			return filepath.Join(append([]string{real}, rest...)...), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			// It appeared since EvalSymlinks looked; start over.
			continue
		}
		target, err := os.Readlink(first)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(real, target)
		}
		p = filepath.Clean(filepath.Join(append([]string{target}, rest[1:]...)...))
	}
	return "", errors.New("too many levels of symbolic links")
}

// display is how a resolved path is shown in results: slash-separated, relative to the
// workspace.
func display(rel string) string { return filepath.ToSlash(rel) }
