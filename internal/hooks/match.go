package hooks

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"

	"countersign/internal/apperr"
)

// MatchKey pairs a PermissionRequest with the PreToolUse of the same call: PermissionRequest
// carries no tool_use_id (Claude Code 2.1.328, Codex 0.169.0), so both events of one call are
// keyed by what they share (../shared/agents/README.md):
//
//	kind, session_id, the turn (Claude Code: prompt_id; Codex: turn_id), tool_name, and
//	CanonicalInput(tool_input)
//
// After an edit at Codex's PreToolUse, its PermissionRequest carries the edited input (run
// cx-pre-updated; checked against Codex 0.169.0 here): key the PreToolUse by the edited input to
// find it (a copy of the event with ToolInput set to the verdict's UpdatedInput).
//
// The key is "sha256:" and 64 hex digits over those parts, each length-prefixed. Two calls of
// the same tool with the same input in the same turn get the same key: the gate takes them in
// order (the first unmatched PreToolUse). Errors: apperr.Invalid for an event that is not
// PreToolUse or PermissionRequest, or whose tool_input is not a JSON object.
func MatchKey(e Event) (key string, err error) {
	defer apperr.Wrap(&err, "hooks.MatchKey(%s)", e.Name)
	if e.Name != PreToolUse && e.Name != PermissionRequest {
		return "", apperr.Errorf(apperr.Invalid, "only PreToolUse and PermissionRequest are matched, not %s", e.Name)
	}
	input, err := CanonicalInput(e.Kind, e.ToolName, e.ToolInput)
	if err != nil {
		return "", err
	}
	turn := e.PromptID
	if e.Kind == Codex {
		turn = e.TurnID
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(e.Kind), []byte(e.SessionID), []byte(turn), []byte(e.ToolName), input} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// CanonicalInput is a tool_input object in one spelling: members sorted by key at every depth,
// no insignificant space, numbers as written (json.Number), strings re-escaped as encoding/json
// writes them. For Codex's Bash, the top-level "description" is left out: Codex adds it (the
// escalation's justification) to PermissionRequest's tool_input but not to PreToolUse's, so the
// two events of one call differ only there (recorded codex/command-PreToolUse and
// command-PermissionRequest). Errors: apperr.Invalid when input is not one JSON object.
func CanonicalInput(kind Kind, toolName string, input json.RawMessage) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil || dec.More() {
		return nil, apperr.Errorf(apperr.Invalid, "tool_input must be one JSON object")
	}
	if kind == Codex && toolName == "Bash" {
		delete(obj, "description")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, apperr.Errorf(apperr.Invalid, "tool_input: %v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
