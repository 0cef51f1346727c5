package rules

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks bounds the symlinks resolveReal follows, as the kernel does (ELOOP after 40).
const maxLinks = 40

// errLinkLoop is resolveReal's error for a chain of more than maxLinks symlinks.
var errLinkLoop = errors.New("too many levels of symbolic links")

// resolveReal returns where the kernel would land for the path p opened from the folder base
// (both absolute or relative to the process's working folder): an absolute, clean path with every
// symlink resolved, where the last elements need not exist. Unlike filepath.Clean, a ".." is
// applied after the symlink before it is followed (`out/../x` with `out -> /tmp/o` is /tmp/x),
// and a symlink that dangles is followed to its target, because a write through it creates the
// target. Once an element does not exist, the rest is joined lexically (nothing below it can be a
// symlink yet). The error is a failure of os.Lstat or os.Readlink other than "does not exist", or
// errLinkLoop.
func resolveReal(base, p string) (string, error) {
	cur := "/"
	if !filepath.IsAbs(p) {
		b, err := filepath.Abs(base)
		if err != nil {
			return "", err
		}
		real, err := resolveReal("/", b)
		if err != nil {
			return "", err
		}
		cur = real
	}
	rest := strings.Split(filepath.ToSlash(p), "/")
	links := 0
	for i := 0; i < len(rest); i++ {
		el := rest[i]
		switch el {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // cur is already real, so its parent is the physical one
			continue
		}
		next := filepath.Join(cur, el)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return filepath.Join(append([]string{cur}, rest[i:]...)...), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", errLinkLoop
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(filepath.ToSlash(target), "/"), rest[i+1:]...)
		i = -1
	}
	return cur, nil
}

// isProtected reports whether target (absolute, resolved by resolveReal) is one of the protected
// files (absolute, clean paths): the same resolved path, or, for a file that exists, the same file
// by os.Stat identity, so that a hard link or another symlink to it is caught too. Compared as
// internal/tools.Protected compares paths for the file tools (SPEC §14: the agent can never write
// its own rules).
func isProtected(target string, protected []string) bool {
	if len(protected) == 0 {
		return false
	}
	fi, statErr := os.Stat(target)
	for _, p := range protected {
		real, err := resolveReal("/", p)
		if err != nil {
			real = p
		}
		if real == target {
			return true
		}
		if statErr == nil {
			if pfi, err := os.Stat(real); err == nil && os.SameFile(fi, pfi) {
				return true
			}
		}
	}
	return false
}
