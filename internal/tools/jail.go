package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"countersign/internal/realpath"
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
	dir       string   // the workspace as given, cleaned
	real      string   // dir with symlinks resolved
	root      *os.Root // dir opened as a traversal-resistant root
	protected Protected
}

// openJail opens the workspace folder dir, which must be an absolute path to a folder; resolve
// refuses the protected files in it.
func openJail(dir string, protected Protected) (*jail, error) {
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
	return &jail{dir: dir, real: real, root: root, protected: protected}, nil
}

// Close releases the workspace's root.
func (j *jail) Close() error { return j.root.Close() }

// resolve maps a tool's path argument (relative to the workspace, or absolute) to the path the
// tool opens: relative to the workspace's real folder ("." for the folder itself), with every
// symlink resolved as the kernel would (realpath.Locate, the one function the rules,
// accept-edits and run_command's redirections judge paths by, SPEC §14). A path that resolves
// outside the workspace is an error wrapping ErrOutsideWorkspace; one that reaches a protected
// file (the server's own) wraps ErrProtected; an empty path, a NUL byte or a path that cannot be
// resolved (a symlink loop) is an error naming the path.
func (j *jail) resolve(p string) (string, error) {
	pl, err := realpath.Locate(j.dir, p)
	if err != nil {
		if p == "" || strings.IndexByte(p, 0) >= 0 {
			return "", err
		}
		return "", fmt.Errorf("path %q: %w", p, err)
	}
	if !pl.Inside {
		return "", fmt.Errorf("path %q is %w", p, ErrOutsideWorkspace)
	}
	if pl.Root != j.real {
		// The workspace's own name was moved to another folder since openJail.
		return "", fmt.Errorf("path %q: the workspace %s changed while the call ran", p, j.dir)
	}
	if err := j.protected.check(pl.Abs, p); err != nil {
		return "", err
	}
	return filepath.FromSlash(pl.Rel), nil
}

// checkPath returns the file tools' tool.InputCheckFunc: the string argument field (absent:
// def) must resolve inside the workspace (jail.resolve), else the call stops before the gate with
// a violation at /field giving resolve's error, e.g. `path "../x" is outside the workspace`.
// A workspace that cannot be opened is no fault of the argument: the check lets the call on
// and the tool reports it when it runs. The tool resolves the path again then, as the file
// system may have changed in between. With file set (read_file, write_file) a path that exists
// must also be a regular file: a named pipe, socket, device or folder is refused here, before
// anyone is asked to approve a call that could only fail (found by a new-user review).
func checkPath(field, def string, file bool, protected Protected) tool.InputCheckFunc {
	return func(arguments json.RawMessage, workspace string) []tool.Violation {
		var in map[string]any
		if err := json.Unmarshal(arguments, &in); err != nil {
			return nil // inputSchema has accepted them; the tool's decode reports anything else
		}
		p, ok := in[field].(string)
		if !ok {
			p = def
		}
		j, err := openJail(workspace, protected)
		if err != nil {
			return nil
		}
		defer j.Close()
		rel, err := j.resolve(p)
		if err != nil {
			return []tool.Violation{{Pointer: "/" + field, Message: err.Error()}}
		}
		if file {
			if fi, err := j.root.Stat(rel); err == nil && !fi.Mode().IsRegular() {
				return []tool.Violation{{Pointer: "/" + field, Message: notRegular(rel, fi.Mode()).Error()}}
			}
		}
		return nil
	}
}

// ErrNotRegular is wrapped by the error a file tool returns for a named pipe, socket, device or
// other file that is neither a regular file nor a folder: opening one can block for ever (a pipe
// with no writer) or do something (a device), so the tools never open them (issue 15, item 6).
var ErrNotRegular = errors.New("not a regular file")

// notRegular is the error for the resolved path rel of mode: "<path> is not a regular file
// (named pipe)".
func notRegular(rel string, mode fs.FileMode) error {
	return fmt.Errorf("%s is %w (%s)", display(rel), ErrNotRegular, fileKind(mode))
}

// fileKind names the type of a file mode for a person.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "folder"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "irregular file"
}

// openRegular opens the resolved path rel through the root with flag (os.O_RDONLY, or O_WRONLY
// with O_CREATE and O_TRUNC), and keeps it only if it is a regular file, else a notRegular error.
// Callers Stat the path first and refuse anything else without opening it; this is the check
// that holds if the file is swapped in between: O_NONBLOCK makes the open of a named pipe return
// at once (reading: opened, then refused here; writing with no reader: ENXIO) instead of waiting
// for the other end, and the type is read from the opened descriptor. O_NONBLOCK changes nothing
// for a regular file.
func (j *jail) openRegular(rel string, flag int, perm fs.FileMode) (*os.File, fs.FileInfo, error) {
	f, err := j.root.OpenFile(rel, flag|syscall.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			// A named pipe (no reader) or a socket, swapped in after the caller's Stat.
			return nil, nil, fmt.Errorf("%s is %w", display(rel), ErrNotRegular)
		}
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegular(rel, fi.Mode())
	}
	return f, fi, nil
}

// walkFS is the workspace as an fs.FS for fs.WalkDir (list_files): like os.Root.FS, but a folder
// is opened with O_DIRECTORY and O_NONBLOCK, so a folder swapped for a named pipe during the walk
// fails at once instead of blocking, and Open opens regular files and folders only.
type walkFS struct{ root *os.Root }

func (w walkFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	f, err := w.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		err = notRegular(name, fi.Mode())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (w walkFS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	return w.root.Stat(name)
}

// ReadDir lists the folder name sorted by file name, as fs.ReadDir does.
func (w walkFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	f, err := w.root.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// display is how a resolved path is shown in results: slash-separated, relative to the
// workspace.
func display(rel string) string { return filepath.ToSlash(rel) }
