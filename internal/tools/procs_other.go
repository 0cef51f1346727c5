//go:build !linux

package tools

import "syscall"

// childAttr returns the attributes of a process a tool starts: its own process group (Setpgid),
// so that one signal to -pgid ends it and whatever it started there. There is no parent-death
// signal outside Linux: a crash of the server leaves the process running.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
