// Package realpath says where a path lands once its symlinks are followed, as the kernel would
// follow them, including a symlink that dangles (a write through it creates its target), and
// whether it lands on one of a set of files. The gate (accept-edits), the rules engine
// (redirections) and the file tools (the server's own files) judge paths with it.
package realpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// MaxLinks bounds the symlinks Resolve follows, as the kernel does (ELOOP after 40).
const MaxLinks = 40

// ErrLinkLoop is Resolve's error for a chain of more than MaxLinks symlinks.
var ErrLinkLoop = errors.New("too many levels of symbolic links")

// Resolve returns where the kernel would land for the path p opened from the folder base
// (both absolute or relative to the process's working folder): an absolute, clean path with every
// symlink resolved, where the last elements need not exist. Unlike filepath.Clean, a ".." is
// applied after the symlink before it is followed (`out/../x` with `out -> /tmp/o` is /tmp/x),
// and a symlink that dangles is followed to its target, because a write through it creates the
// target. Once an element does not exist, the rest is joined lexically (nothing below it can be a
// symlink yet). The error is a failure of os.Lstat or os.Readlink other than "does not exist", or
// ErrLinkLoop.
func Resolve(base, p string) (string, error) {
	cur := "/"
	if !filepath.IsAbs(p) {
		b, err := filepath.Abs(base)
		if err != nil {
			return "", err
		}
		if cur, err = walk("/", b); err != nil {
			return "", err
		}
	}
	return walk(cur, p)
}

// walk is Resolve of p from cur, a folder already resolved (absolute, clean, no symlinks).
func walk(cur, p string) (string, error) {
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
		if links++; links > MaxLinks {
			return "", ErrLinkLoop
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

// IsOneOf reports whether target (absolute, resolved by Resolve) is one of files (paths,
// resolved here, a relative one from the working folder): the same resolved path, or, for a file
// that exists, the same file by os.Stat identity, so that a hard link or another symlink to it is
// caught too. An entry whose last element is a pattern (filepath.Match: `*`, `?`, `[`), such as
// "<scripts>/*.json", names the files of its folder that match, by resolved path only (a hard
// link to one is not caught: neither the file tools nor a redirection can make one). The rules
// engine and the file tools use it for the server's own files (SPEC §14: the agent can never
// write its own rules).
func IsOneOf(target string, files []string) bool {
	if len(files) == 0 {
		return false
	}
	fi, statErr := os.Stat(target)
	for _, p := range files {
		if dir, pattern := filepath.Split(p); strings.ContainsAny(pattern, `*?[`) {
			if dir == "" {
				dir = "."
			}
			realDir, err := Resolve(".", dir)
			if err != nil {
				realDir = filepath.Clean(dir)
			}
			if ok, _ := filepath.Match(pattern, filepath.Base(target)); ok && filepath.Dir(target) == realDir {
				return true
			}
			continue
		}
		real, err := Resolve(".", p)
		if err != nil {
			real = filepath.Clean(p)
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
