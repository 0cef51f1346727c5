//go:build linux

package main

import "golang.org/x/sys/unix"

// dropDumpable marks the server process non-dumpable (prctl(2) PR_SET_DUMPABLE 0). The kernel
// then treats its /proc/<pid> files as root's: environ, mem, maps, fd and the like can be read
// only by root, not by other processes of the same user (ptrace(2), "Ptrace access mode
// checking"). Why: the server's environment holds the owner token and the model providers' keys,
// and the processes it starts (tool commands, MCP stdio servers) run as its user; without this
// one `tr '\0' '\n' < /proc/$PPID/environ` reads them all. It does not hide /proc/<pid>/cmdline
// (world-readable: a -token flag is visible to every user), it does nothing against root, and it
// does not stop a child from reading the files the user can read (the database, the share key).
// A child's exec makes it dumpable again (codemode's worker, commands), which is what they need.
// Errors: only what prctl returns.
func dropDumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
