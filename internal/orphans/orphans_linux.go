//go:build linux

package orphans

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"countersign/internal/procenv"
)

// Find returns the pids of the living processes (zombies excluded: their environment is gone)
// marked with call or a call nested in it (procenv.Call.Within), in ascending order. Processes
// whose environment this one may not read (another user's, or a non-dumpable one) are not
// considered. Errors: /proc cannot be listed.
func Find(call procenv.Call) ([]int, error) {
	found, err := scan(call)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(found))
	for pid := range found {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids, nil
}

// Kill ends every process Find reports for call, with its process group (SIGKILL to the process
// and to -pgid: what it started there dies too, marked or not), and looks again until none is
// left, so that what a process forked meanwhile goes as well. It returns the pids it killed, in
// ascending order, once none is left. It never signals this process or its process group (a
// marked process may have joined it), nor a process whose owner (procenv.OwnerVar: the server
// that started the call) is another process that is still alive: a replica that takes a session
// over from another one that is alive but was cut off from the database kills nothing that
// replica owns (issue 33, SPEC §16); that call's record is the taker's, its result the owner's
// to drop (its lease is lost). Errors: ctx's; /proc cannot be listed; a *SurvivedError
// when some were still there after KillWait.
func Kill(ctx context.Context, call procenv.Call) (killed []int, err error) {
	self, selfGroup := os.Getpid(), syscall.Getpgrp()
	deadline := time.Now().Add(KillWait)
	seen := map[int]bool{}
	for {
		found, err := scan(call)
		if err != nil {
			return sorted(seen), err
		}
		delete(found, self)
		for pid := range found {
			if ownedByLive(pid, self) {
				delete(found, pid)
			}
		}
		if len(found) == 0 {
			return sorted(seen), nil
		}
		if time.Now().After(deadline) {
			left := make([]int, 0, len(found))
			for pid := range found {
				left = append(left, pid)
			}
			slices.Sort(left)
			return sorted(seen), &SurvivedError{PIDs: left}
		}
		for pid, pgid := range found {
			seen[pid] = true
			if pgid > 1 && pgid != selfGroup {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return sorted(seen), ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

func sorted(set map[int]bool) []int {
	if len(set) == 0 {
		return nil
	}
	out := make([]int, 0, len(set))
	for pid := range set {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// scan reads every process's environment and returns those marked with call or a call nested in
// it, each with its process group (0 when it ended meanwhile).
func scan(call procenv.Call) (map[int]int, error) {
	dir, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	found := map[int]int{}
	prefix := []byte(procenv.CallVar + "=")
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		env, err := os.ReadFile("/proc/" + name + "/environ")
		if err != nil {
			continue // gone, or not ours to read
		}
		if !marked(env, prefix, call) {
			continue
		}
		found[pid] = processGroup(name)
	}
	return found, nil
}

// marked reports whether environ (NUL-separated entries, as /proc/<pid>/environ holds them) has
// a CallVar entry (prefix) for call or a call nested in it.
func marked(environ, prefix []byte, call procenv.Call) bool {
	for len(environ) > 0 {
		entry := environ
		if i := bytes.IndexByte(environ, 0); i >= 0 {
			entry, environ = environ[:i], environ[i+1:]
		} else {
			environ = nil
		}
		if value, ok := bytes.CutPrefix(entry, prefix); ok {
			if c, ok := procenv.ParseCall(string(value)); ok && c.Within(call) {
				return true
			}
		}
	}
	return false
}

// processGroup is the process group of pid (named as in /proc), from /proc/<pid>/stat (proc(5):
// the fifth field, after the command name in parentheses, which may itself hold spaces and
// parentheses); 0 when it cannot be read.
func processGroup(pid string) int {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:])) // state ppid pgrp …
	if len(f) < 3 {
		return 0
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return 0
	}
	return pgid
}

// ownedByLive reports whether process pid's environment names an owner (procenv.OwnerVar) other
// than self that is still alive: the same pid with the same start time, not a zombie.
func ownedByLive(pid, self int) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	prefix := []byte(procenv.OwnerVar + "=")
	for _, entry := range bytes.Split(env, []byte{0}) {
		value, ok := bytes.CutPrefix(entry, prefix)
		if !ok {
			continue
		}
		p, start, ok := strings.Cut(string(value), " ")
		owner, err := strconv.Atoi(p)
		if !ok || err != nil || owner <= 0 || owner == self {
			return false
		}
		return start != "0" && procenv.StartTime(owner) == start && !zombie(owner)
	}
	return false
}

// zombie reports whether process pid has ended and waits to be reaped (state Z in
// /proc/<pid>/stat), or cannot be read.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}
