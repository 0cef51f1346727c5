package agent

import (
	_ "embed"
	"strings"

	"countersign/internal/apperr"
)

// BuiltinInstructions is the built-in default system prompt (SPEC §17), the file
// instructions.md embedded in the binary: it names the workspace ("{{workspace}}"), says the
// tools are listed in the request and that risky calls wait for a person who may deny them
// with a reason, and to continue from a denial rather than make the same call again.
//
//go:embed instructions.md
var BuiltinInstructions string

// WorkspaceVar is the placeholder instructions may hold for the session's workspace folder: it
// is replaced by the folder's absolute path when the session is created or its instructions are
// set (ExpandInstructions).
const WorkspaceVar = "{{workspace}}"

// MaxInstructions is the largest instructions text a session takes, in bytes (64 KiB), as
// typed (before WorkspaceVar is replaced).
const MaxInstructions = 64 << 10

// ExpandInstructions returns text with every WorkspaceVar replaced by workspace.
func ExpandInstructions(text, workspace string) string {
	return strings.ReplaceAll(text, WorkspaceVar, workspace)
}

// Environment is the block Countersign adds to every model request's system prompt, apart from
// the person's instructions (SPEC §17: the system prompt always names the workspace, as Claude
// Code's and Codex's environment blocks do): instructions the person typed, or none, never drop
// it.
func Environment(workspace string) string {
	return "<environment>\nWorkspace: " + workspace +
		"\nThe file tools read and write in the workspace, commands run there, and relative paths are relative to it.\n</environment>"
}

// SystemPrompt is the system prompt a model request of s sends: its Instructions, then the
// Environment block of its workspace.
func SystemPrompt(s Session) string {
	env := Environment(s.Workspace)
	if strings.TrimSpace(s.Instructions) == "" {
		return env
	}
	return strings.TrimRight(s.Instructions, "\n") + "\n\n" + env
}

// checkInstructions refuses instructions longer than MaxInstructions (apperr.Invalid, saying
// how long they are).
func checkInstructions(text string) error {
	if len(text) > MaxInstructions {
		return apperr.Errorf(apperr.Invalid, "The instructions are too long: %s; at most %s.",
			formatKB(len(text)), formatKB(MaxInstructions))
	}
	return nil
}
