// Package procenv decides what environment the processes Countersign starts for others get:
// tool commands (run_command, run_checks, failing_tests, git_diff) and MCP stdio servers.
//
// They start from an allowlist, never from the server's whole environment: the server's own
// holds the owner token (COUNTERSIGN_TOKEN) and the model providers' keys (OPENAI_API_KEY,
// ANTHROPIC_API_KEY, …), and a command's output lands in a transcript that reviewers may see.
// The allowlist is the MCP SDKs' convention for stdio servers (the TypeScript SDK's
// getDefaultEnvironment: HOME LOGNAME PATH SHELL TERM USER) plus the locale (LANG, LC_*) and
// TMPDIR. The operator names more with -pass-env (COUNTERSIGN_PASS_ENV); a server's own "env"
// in the MCP config and a tool's configured entries are added by their callers.
//
// Every process a tool call starts is also marked with the call (CallVar), so that a restarted
// server can find what a crash left running (internal/orphans, SPEC §8).
//
// The package imports nothing of Countersign's, so every adapter can use it.
package procenv

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
)

// inherited are the variables every child process gets from the server's environment, when set.
var inherited = map[string]bool{
	"HOME": true, "LOGNAME": true, "PATH": true, "SHELL": true, "TERM": true, "USER": true,
	"LANG": true, "TMPDIR": true,
}

// Allowed reports whether the server's environment variable name passes to a child process:
// one of HOME LOGNAME PATH SHELL TERM USER LANG TMPDIR, a locale variable (LC_*), or one of pass
// (the -pass-env names; exact, case-sensitive).
func Allowed(name string, pass []string) bool {
	if inherited[name] || strings.HasPrefix(name, "LC_") {
		return true
	}
	for _, p := range pass {
		if p == name {
			return true
		}
	}
	return false
}

// Filter returns the entries of environ ("NAME=value", as os.Environ returns them) whose names
// are Allowed with pass, in their order. The result is a new slice: callers may append to it.
func Filter(environ []string, pass []string) []string {
	out := make([]string, 0, len(inherited)+len(pass)+4)
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if ok && Allowed(name, pass) {
			out = append(out, kv)
		}
	}
	return out
}

// ParseNames reads a -pass-env value: variable names separated by commas ("GOPROXY,GOFLAGS");
// spaces around a name and empty items are ignored, so "" is no names. Error: a name that is
// not a portable environment variable name (letters, digits and "_", not starting with a
// digit), quoted in the message.
func ParseNames(s string) ([]string, error) {
	var names []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !validName(n) {
			return nil, fmt.Errorf("%q is not an environment variable name (letters, digits and _, not starting with a digit)", n)
		}
		names = append(names, n)
	}
	return names, nil
}

func validName(n string) bool {
	for i, c := range n {
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return n != ""
}

// CallVar is the environment variable that marks every process a tool call starts with the call
// (Call.Entry). An environment is inherited, so what those processes start carries it too, even
// after leaving the call's process group (setsid): a server that restarts after a crash finds by
// it what its interrupted calls left running, and kills it before it records them as
// interrupted (SPEC §8; internal/orphans).
const CallVar = "COUNTERSIGN_CALL"

// Call identifies one tool call among those of every server on the machine, for the marker of
// its processes. Store is the identity of the store that records the call ("sqlite:" and the
// database file's real path, or "postgres:" and the database's system identifier and oid):
// servers of other stores, which the test suite runs side by side, never match it. SessionID and
// ToolCallID are the call's as the store has them ("c1/2" for the second call nested in c1).
type Call struct {
	Store, SessionID, ToolCallID string
}

// Entry is c's environment entry: "COUNTERSIGN_CALL=<store> <sessionId> <toolCallId>", each field
// escaped with url.PathEscape, so that no field holds a space, and no value holds a NUL (which
// exec refuses) or a newline.
func (c Call) Entry() string {
	return CallVar + "=" + url.PathEscape(c.Store) + " " + url.PathEscape(c.SessionID) + " " + url.PathEscape(c.ToolCallID)
}

// ParseCall reads the value of a CallVar entry (what follows "COUNTERSIGN_CALL="); ok is false
// when it is not one Entry wrote.
func ParseCall(value string) (c Call, ok bool) {
	f := strings.Split(value, " ")
	if len(f) != 3 {
		return Call{}, false
	}
	var err [3]error
	c.Store, err[0] = url.PathUnescape(f[0])
	c.SessionID, err[1] = url.PathUnescape(f[1])
	c.ToolCallID, err[2] = url.PathUnescape(f[2])
	return c, err[0] == nil && err[1] == nil && err[2] == nil
}

// Within reports whether c is call, or a call nested in it (at any depth): the same store and
// session, and a tool call id that is call's or starts with call's and "/".
func (c Call) Within(call Call) bool {
	return c.Store == call.Store && c.SessionID == call.SessionID &&
		(c.ToolCallID == call.ToolCallID || strings.HasPrefix(c.ToolCallID, call.ToolCallID+"/"))
}

// WithCall returns env ("NAME=value" entries) with c's Entry as its only CallVar entry, last:
// one env already held (set by a tool's configuration, or inherited from an outer call) is
// dropped. The result is a new slice.
func WithCall(env []string, c Call) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); name != CallVar {
			out = append(out, kv)
		}
	}
	return append(out, c.Entry())
}

// OwnerVar is the environment variable that names, beside the call's marker (CallVar), the
// server process that started the call's processes (Owner): "<pid> <start>", its process id and
// its start time (field 22 of /proc/<pid>/stat, in clock ticks since boot; "0" where there is no
// /proc), so that a pid used again by another process is not taken for the server. A server
// taking over another replica's session kills what the call left running only when its owner is
// gone (internal/orphans): a takeover kills nothing a live server owns (issue 33, SPEC §16).
const OwnerVar = "COUNTERSIGN_OWNER"

var owner = sync.OnceValue(func() string {
	pid := os.Getpid()
	return strconv.Itoa(pid) + " " + StartTime(pid)
})

// Owner is this process's OwnerVar value.
func Owner() string { return owner() }

// StartTime is process pid's start time as OwnerVar writes it: field 22 of /proc/<pid>/stat
// (proc(5); read after the command name in parentheses, which may hold spaces), or "0" when it
// cannot be read.
func StartTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "0"
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "0"
	}
	f := strings.Fields(string(b[i+1:])) // state(3) ppid(4) … starttime(22)
	if len(f) < 20 {
		return "0"
	}
	return f[19]
}

// WithOwner returns env ("NAME=value" entries) with this process as its only OwnerVar entry,
// last. The result is a new slice.
func WithOwner(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); name != OwnerVar {
			out = append(out, kv)
		}
	}
	return append(out, OwnerVar+"="+Owner())
}
