package tools

import (
	"errors"
	"fmt"

	"countersign/internal/realpath"
)

// ErrProtected is wrapped by the error a file tool returns for a path that reaches one of the
// server's own files (Config.Protected).
var ErrProtected = errors.New("one of the server's own files")

// Protected names files the file tools never read or write, whatever path reaches them (SPEC §14:
// "The agent can never write its own rules: the policy file and the database are outside what
// file tools may touch"; issue 28): the database and its -wal, -shm and -journal files, its lock,
// the share and notify keys, the policy file, the MCP config (its servers' secrets, and the
// programs it starts), the -system-prompt file and the -scripts folder's scripts. `make run` keeps the
// database in the folder it serves as the workspace, so this matters by default. Entries are
// paths (absolute, or relative to the server's working folder); a file that exists is compared
// by identity (os.SameFile), so a symlink or a hard link inside the workspace does not reach it
// either, one that does not exist yet by its cleaned real path; an entry ending in a pattern
// ("<scripts>/*.json") covers the files of its folder that match (realpath.IsOneOf). The path judged is the one the tool opens (jail.resolve).
type Protected []string

// check returns an error wrapping ErrProtected when target (an absolute path with its symlinks
// resolved, existing or not) is one of p's files; display is the path as the call gave it.
func (p Protected) check(target, display string) error {
	if realpath.IsOneOf(target, p) {
		return fmt.Errorf("path %q is %w", display, ErrProtected)
	}
	return nil
}
