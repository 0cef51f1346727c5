// Package hookclient is `countersign hook`: the command an agent whose hooks are commands (Codex;
// later Gemini CLI, Cursor, Copilot CLI) runs for every hook event (SPEC §18, Door 1). It reads
// the event on standard input, posts it to `<url>/hooks/<agent>` with the connection's token,
// prints the server's answer for the agent on standard output and exits as the agent expects:
//
//	0   the answer is on stdout (an allow, an edit, a deny in JSON, or nothing: no verdict)
//	2   blocked: the server said so (Countersign-Hook-Exit: 2), or --fail-closed and the server
//	    could not answer (unreachable, a status other than 2xx, a timeout, a bad answer); the
//	    reason is on stderr, which Codex shows to the model
//	1   a usage error without --fail-closed (the agent goes on as if the hook said nothing)
//
// Without --fail-closed, a server that cannot answer is no verdict: nothing on stdout, exit 0,
// the reason on stderr; the agent goes its own way (Codex: its guardian or its user).
//
// It runs for every tool call, so it must start in milliseconds: it uses the standard library
// only (net/http, encoding/json, flag, os) and must never import the server's packages. The
// small binary is cmd/countersign-hook; the main binary's `countersign hook` subcommand is to
// call Main first thing, before anything else is initialised (see cmd/countersign-hook).
package hookclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The protocol shared with the server (internal/hooks, which this package must not import to
// stay small; a test checks they agree).
const (
	// MaxBodyBytes bounds the event read from stdin and the answer read from the server (4 MiB).
	MaxBodyBytes = 4 << 20
	// HeaderExit carries the exit status the answer needs ("2" blocks); absent means 0.
	HeaderExit = "Countersign-Hook-Exit"
	// HeaderStderr carries the standard error of a block, percent-encoded (url.PathEscape).
	HeaderStderr = "Countersign-Hook-Stderr"
	// HeaderTimeout tells the server the hook's timeout in seconds, so that it answers before
	// the agent stops waiting (at the deadline minus its margin).
	HeaderTimeout = "Countersign-Hook-Timeout"
)

// Agents lists the --agent values: the kinds whose hooks are commands. Claude Code is not one:
// it posts to /hooks/claude-code itself (an HTTP hook).
var Agents = []string{"codex", "gemini", "cursor", "copilot"}

// TokenEnv and URLEnv are the environment variables Main reads: the connection's token (never
// printed) and the server's base URL (when --url is not given).
const (
	TokenEnv = "COUNTERSIGN_AGENT_TOKEN"
	URLEnv   = "COUNTERSIGN_URL"
)

// minScrubbed is the shortest token that messages are scrubbed of.
const minScrubbed = 16

// DefaultTimeout is the hook's timeout when --timeout is not given, in seconds: the timeout the
// connection's snippet sets on the hook (SPEC §18: default 600 s).
const DefaultTimeout = 600

// Main runs `countersign hook` with args (the arguments after "hook"), the event on stdin, the
// answer on stdout and messages on stderr; env reads the environment (os.Getenv). It returns
// the exit status (see the package doc). The token appears in no output.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) int {
	token := env(TokenEnv)
	// scrub hides the token should a message ever carry it (a server echoing it back). A real
	// token has at least 128 random bits; a shorter one (a test's "x") is not searched for, or
	// every message would lose its letters.
	scrub := func(s string) string {
		if len(token) >= minScrubbed {
			s = strings.ReplaceAll(s, token, "[token]")
		}
		return s
	}
	say := func(format string, a ...any) {
		fmt.Fprintln(stderr, scrub("countersign hook: "+fmt.Sprintf(format, a...)))
	}

	fs := flag.NewFlagSet("countersign hook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	agent := fs.String("agent", "", "the agent that runs this hook: "+strings.Join(Agents, ", "))
	failClosed := fs.Bool("fail-closed", false, "block the call (exit 2) when Countersign cannot answer")
	base := fs.String("url", "", "Countersign's base URL (default $"+URLEnv+")")
	timeout := fs.Int("timeout", DefaultTimeout, "the hook's timeout in the agent's configuration, in seconds")
	if err := fs.Parse(args); err != nil {
		return usage(say, err.Error(), slices.Contains(args, "--fail-closed") || slices.Contains(args, "-fail-closed"))
	}
	switch {
	case fs.NArg() > 0:
		return usage(say, fmt.Sprintf("unexpected argument %q", fs.Arg(0)), *failClosed)
	case !slices.Contains(Agents, *agent):
		return usage(say, fmt.Sprintf("--agent must be one of %s, not %q (Claude Code uses an HTTP hook instead)", strings.Join(Agents, ", "), *agent), *failClosed)
	case *timeout < 2:
		return usage(say, "--timeout must be at least 2 seconds", *failClosed)
	}

	// fail ends a run the server did not answer: a block with --fail-closed, else no verdict.
	fail := func(format string, a ...any) int {
		if *failClosed {
			say("blocked, Countersign did not answer (--fail-closed): "+format, a...)
			return 2
		}
		say("no verdict, Countersign did not answer: "+format, a...)
		return 0
	}

	if token == "" {
		return fail("%s is not set", TokenEnv)
	}
	if *base == "" {
		*base = env(URLEnv)
	}
	u, err := url.Parse(*base)
	if *base == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fail("no server URL: give --url or set %s to http(s)://host[:port]", URLEnv)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/hooks/" + *agent

	event, err := io.ReadAll(io.LimitReader(stdin, MaxBodyBytes+1))
	switch {
	case err != nil:
		return fail("reading the event on stdin: %v", err)
	case len(event) > MaxBodyBytes:
		return fail("the event on stdin is over %d bytes", MaxBodyBytes)
	case len(bytes.TrimSpace(event)) == 0:
		return fail("no event on stdin")
	}

	req, err := http.NewRequest(http.MethodPost, u.String(), bytes.NewReader(event))
	if err != nil {
		return fail("%v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(HeaderTimeout, strconv.Itoa(*timeout))
	req.Header.Set("User-Agent", "countersign-hook")
	client := &http.Client{
		// One second before the agent stops waiting, so that a block still reaches it.
		Timeout:   time.Duration(*timeout-1) * time.Second,
		Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true},
		// A redirect is not followed: the token goes to the URL configured and nowhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is said once, below
		}
		return fail("POST %s: %v", u.Redacted(), err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return fail("reading the answer: %v", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fail("POST %s: %s%s", u.Redacted(), resp.Status, errorText(answer))
	}
	if len(answer) > MaxBodyBytes {
		return fail("the answer is over %d bytes", MaxBodyBytes)
	}
	answer = bytes.TrimSpace(answer)
	if len(answer) > 0 && !json.Valid(answer) {
		return fail("the answer is not JSON")
	}
	exit := 0
	switch h := resp.Header.Get(HeaderExit); h {
	case "", "0":
	case "2":
		exit = 2
	default:
		return fail("the answer's %s is %q", HeaderExit, h)
	}
	if len(answer) > 0 {
		if _, err := stdout.Write(append(answer, '\n')); err != nil {
			return fail("writing the answer: %v", err)
		}
	}
	if exit == 2 {
		reason, err := url.PathUnescape(resp.Header.Get(HeaderStderr))
		if err != nil || reason == "" {
			reason = "Blocked by Countersign"
		}
		// The reason alone, as the person or the rule gave it: Codex shows it to the model.
		fmt.Fprintln(stderr, scrub(reason))
	}
	return exit
}

// usage reports a usage error: exit 2 (a block) when the hook was meant to fail closed, else 1,
// which Codex treats as a hook that said nothing.
func usage(say func(string, ...any), msg string, failClosed bool) int {
	say("%s\nusage: countersign hook --agent %s [--fail-closed] [--url URL] [--timeout SECONDS] < event.json", msg, strings.Join(Agents, "|"))
	if failClosed {
		return 2
	}
	return 1
}

// errorText is a short excerpt of an error response's body for the message, in one line.
func errorText(body []byte) string {
	s := strings.Join(strings.Fields(string(body)), " ")
	if s == "" {
		return ""
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return ": " + s
}
