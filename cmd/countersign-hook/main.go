// Command countersign-hook is `countersign hook` as a small binary of its own (SPEC §18, Door 1):
// an agent whose hooks are commands runs it for every tool call, so it starts in milliseconds and
// links nothing but the standard library's HTTP client (internal/hookclient).
//
//	[[hooks.PreToolUse]]
//	matcher = "*"
//	[[hooks.PreToolUse.hooks]]
//	type = "command"
//	command = "countersign-hook --agent codex --fail-closed --timeout 600"
//	timeout = 600
//
// The first argument may be "hook", so that `countersign-hook hook --agent codex` and
// `countersign hook --agent codex` take the same arguments. The main binary (cmd/web) is to run
// the same code for its `hook` subcommand by calling hookclient.Main as the first statement of
// main, before any flag parsing or set-up; but its package-level initialisation runs first
// whatever main does (`countersign -h`: 32 ms and 73 MB peak here, 2026-12-05, against 3 ms and
// under 12 MB for this binary's whole round trip and 6–8 ms for curl's), and exec'ing this binary
// from there would add to it rather than save it. So the snippets name countersign-hook, and
// `countersign hook` is the same code for people who have only the main binary.
package main

import (
	"os"

	"countersign/internal/hookclient"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "hook" {
		args = args[1:]
	}
	os.Exit(hookclient.Main(args, os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}
