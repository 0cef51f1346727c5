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

// checkInstructions refuses instructions longer than MaxInstructions (apperr.Invalid, saying
// how long they are).
func checkInstructions(text string) error {
	if len(text) > MaxInstructions {
		return apperr.Errorf(apperr.Invalid, "The instructions are too long: %s; at most %s.",
			formatKB(len(text)), formatKB(MaxInstructions))
	}
	return nil
}
