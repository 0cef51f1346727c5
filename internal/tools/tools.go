// Package tools holds Countersign's built-in tools (SPEC §10): read_file, list_files, write_file,
// run_command, git_diff, run_checks, failing_tests, and the two that call other tools through
// ExecuteTool (SPEC §4): review_diff and codemode. Each declares an outputSchema and returns
// structuredContent that matches it, plus a short text block for the model. File tools are jailed
// to the session's workspace (SPEC §9: a path outside it is an error and nothing is read or
// written); commands run in the workspace in their own process group, so cancelling a call kills
// every process it started.
package tools

import (
	"encoding/json"
	"path/filepath"
	"time"

	"countersign/internal/procenv"
	"countersign/internal/tool"
)

// Defaults of Config (SPEC §10).
const (
	// DefaultOutputCap is the default cap, in bytes, on each captured output stream of a command
	// and on the text a file or diff tool returns: 64 KiB.
	DefaultOutputCap = 64 << 10
	// DefaultCommandTimeout is run_command's timeout when the call gives no timeoutMs.
	DefaultCommandTimeout = 2 * time.Minute
	// DefaultCheckTimeout bounds each run_checks check and each failing_tests run.
	DefaultCheckTimeout = 10 * time.Minute
	// DefaultTestCommand is failing_tests' command; the packages (default "./...") are appended.
	DefaultTestCommand = "go test -json"
)

// DefaultChecks are run_checks' checks when none are configured: one check, "vet", running
// `go vet ./...` (SPEC §10).
func DefaultChecks() []Check { return []Check{{Name: "vet", Command: "go vet ./..."}} }

// Check is one named workspace check of run_checks. Command runs with `/bin/sh -c` in the
// workspace; exit status 0 is a pass. Lines of the form `file:line[:column]: text` in its output
// become messages.
type Check struct {
	Name    string `json:"name"`
	Command string `json:"command"`
}

// WorkspaceConfig overrides the check and test commands for one workspace; a zero field falls
// back to Config's.
type WorkspaceConfig struct {
	Checks      []Check
	TestCommand string
}

// Config configures the built-in tools (SPEC §10: run_checks and failing_tests "can be configured
// per workspace"). The zero value gives the defaults.
type Config struct {
	// Checks are run_checks' checks for every workspace; default DefaultChecks().
	Checks []Check
	// TestCommand is failing_tests' command, run with `/bin/sh -c` in the workspace with the
	// shell-quoted package patterns appended; it must print the `go test -json` event stream.
	// Default DefaultTestCommand.
	TestCommand string
	// Workspaces overrides Checks and TestCommand per workspace, keyed by the workspace's absolute
	// path (as tool.Context.Workspace returns it, cleaned).
	Workspaces map[string]WorkspaceConfig
	// OutputCap caps, in bytes, each of a command's stdout and stderr, read_file's content and
	// git_diff's patches; default DefaultOutputCap.
	OutputCap int
	// CommandTimeout is run_command's default timeout; default DefaultCommandTimeout.
	CommandTimeout time.Duration
	// CheckTimeout bounds each check and each test run; default DefaultCheckTimeout.
	CheckTimeout time.Duration
	// Protected are the server's own files (the database and its companions, the share key, the
	// policy file), which read_file and write_file refuse whatever path reaches them.
	Protected Protected
	// CodemodeTimeout is codemode's time limit: how long a script may run (SPEC §4 "Codemode"),
	// not counting the time it waits for its tool calls; default DefaultCodemodeTimeout.
	CodemodeTimeout time.Duration
	// Codemode configures codemode's worker process.
	Codemode CodemodeConfig
	// Env is added to the environment of every command the tools start ("KEY=value" entries;
	// later entries win). That environment starts from the server's allowlisted variables
	// (procenv: HOME LOGNAME PATH SHELL TERM USER LANG LC_* TMPDIR) and PassEnv; nothing else
	// of the server's (its COUNTERSIGN_* settings, the model providers' keys) reaches a command
	// unless Env sets it.
	Env []string
	// PassEnv names more of the server's environment variables that commands get (the -pass-env
	// flag), e.g. GOPROXY or GOFLAGS.
	PassEnv []string
	// StoreID is the identity of the store that records the calls (procenv.Call.Store): with the
	// session's and the call's ids it marks every process a call starts (callEnv), so that the
	// server that restarts on this store kills what its interrupted calls left running, and no
	// other server's (SPEC §8).
	StoreID string

	// call is the call this Config was made for (forCall); zero in the tools' configuration.
	call procenv.Call
}

// CodemodeConfig configures the worker process codemode runs its interpreter in (SPEC §4
// "Codemode"): a child of the server that the server kills at the time limit or on Stop, and that
// bounds its own memory and CPU time (ServeCodemodeWorker).
type CodemodeConfig struct {
	// Command starts a worker: a program whose main calls ServeCodemodeWorker. Default: the
	// running binary, /proc/self/exe (the file it was started from, even if replaced on disk
	// since), with the first argument CodemodeWorkerArg.
	Command []string
	// MemoryLimit is how much address space, in bytes, a worker may add to what it has when the
	// script starts (RLIMIT_AS); the script's heap may grow by half of it before the script is
	// stopped. Default DefaultCodemodeMemoryLimit.
	MemoryLimit int64
	// MaxWorkers caps the workers running script at once across every codemode call of the
	// tools Builtin returns (the server's); a worker whose script waits for its calls (a
	// person's approval) runs none and holds no running slot, and takes one again before its
	// next outcome is written. The workers alive, running or waiting, are capped at
	// CodemodeAliveFactor × MaxWorkers, since each keeps its heap (MemoryLimit bounds it). A
	// call beyond a cap waits for a slot before its worker starts (ctx still ends it; the wait
	// does not count against the time limit) and says so in a progress update ("waiting for a
	// codemode slot (8 running)", "… (32 alive)"). Default DefaultCodemodeWorkers.
	MaxWorkers int
}

// DefaultCodemodeWorkers is the default cap on codemode workers running script: 8 (and 32
// alive, CodemodeAliveFactor). A script waiting for a person's approval holds no running slot
// (issue 35: eight waiting scripts blocked a ninth).
const DefaultCodemodeWorkers = 8

// withDefaults fills the zero fields of c with the defaults.
func (c Config) withDefaults() Config {
	if len(c.Checks) == 0 {
		c.Checks = DefaultChecks()
	}
	if c.TestCommand == "" {
		c.TestCommand = DefaultTestCommand
	}
	if c.OutputCap <= 0 {
		c.OutputCap = DefaultOutputCap
	}
	if c.CommandTimeout <= 0 {
		c.CommandTimeout = DefaultCommandTimeout
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = DefaultCheckTimeout
	}
	if c.CodemodeTimeout <= 0 {
		c.CodemodeTimeout = DefaultCodemodeTimeout
	}
	if len(c.Codemode.Command) == 0 {
		c.Codemode.Command = []string{"/proc/self/exe", CodemodeWorkerArg}
	}
	if c.Codemode.MemoryLimit <= 0 {
		c.Codemode.MemoryLimit = DefaultCodemodeMemoryLimit
	}
	if c.Codemode.MaxWorkers <= 0 {
		c.Codemode.MaxWorkers = DefaultCodemodeWorkers
	}
	return c
}

// checksFor returns the checks configured for workspace.
func (c Config) checksFor(workspace string) []Check {
	if w, ok := c.Workspaces[filepath.Clean(workspace)]; ok && len(w.Checks) > 0 {
		return w.Checks
	}
	return c.Checks
}

// testCommandFor returns the test command configured for workspace.
func (c Config) testCommandFor(workspace string) string {
	if w, ok := c.Workspaces[filepath.Clean(workspace)]; ok && w.TestCommand != "" {
		return w.TestCommand
	}
	return c.TestCommand
}

// Builtin returns the built-in tools of SPEC §10 configured by cfg, in this order: read_file,
// list_files, write_file, run_command, git_diff, run_checks, failing_tests, review_diff,
// codemode (model-only, inactive until activated). Each is a fresh
// *tool.Tool, ready to register; none shares mutable state with another.
func Builtin(cfg Config) []*tool.Tool {
	cfg = cfg.withDefaults()
	return []*tool.Tool{
		readFileTool(cfg),
		listFilesTool(cfg),
		writeFileTool(cfg),
		runCommandTool(cfg),
		gitDiffTool(cfg),
		runChecksTool(cfg),
		failingTestsTool(cfg),
		reviewDiffTool(cfg),
		codemodeTool(cfg),
	}
}

// readOnly are the annotations of the tools that only look (SPEC §10: readOnly, closed world).
func readOnly() tool.Annotations {
	return tool.Annotations{ReadOnlyHint: tool.Bool(true), OpenWorldHint: tool.Bool(false)}
}

// runsWorkspaceCode are the annotations of run_checks and failing_tests (issue 15, item 9). They
// run `go vet` / `go test` or the workspace's configured commands, which build and execute the
// workspace's own code (a test file's init, TestMain, a go.mod toolchain line that downloads and
// runs another Go): that code can write anywhere the server's user can and reach the network. So
// they are not read-only (readOnlyHint false) and open-world (openWorldHint true); destructiveHint
// is left absent, as no one can promise what the code does. SPEC §3's default then asks
// (!readOnlyHint && (destructiveHint ?? true)) unless a rule allows the call.
func runsWorkspaceCode() tool.Annotations {
	return tool.Annotations{ReadOnlyHint: tool.Bool(false), OpenWorldHint: tool.Bool(true)}
}

// runsCodeNote ends the descriptions of the tools with runsWorkspaceCode annotations.
const runsCodeNote = " This builds and runs the workspace's own code (test files, init functions, " +
	"go.mod toolchains), which can change files outside the workspace or use the network, so the " +
	"tool is not read-only and asks for approval unless a rule allows it."

// success is a successful result: one text block and structuredContent.
func success(text string, structuredContent any) tool.Result {
	return tool.Result{
		Content:           []tool.Content{tool.Text(text)},
		StructuredContent: tool.Structured(structuredContent),
	}
}

// decode unmarshals validated arguments into v; arguments may be empty.
func decode(arguments json.RawMessage, v any) error {
	if len(arguments) == 0 {
		return nil
	}
	return json.Unmarshal(arguments, v)
}

// emitter returns onUpdate, or a no-op when it is nil.
func emitter(onUpdate func(tool.Update)) func(tool.Update) {
	if onUpdate == nil {
		return func(tool.Update) {}
	}
	return onUpdate
}
