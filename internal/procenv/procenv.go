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
// The package imports nothing of Countersign's, so every adapter can use it.
package procenv

import (
	"fmt"
	"strings"
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
