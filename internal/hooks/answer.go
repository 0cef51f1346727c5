package hooks

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"

	"countersign/internal/apperr"
	"countersign/internal/tool"
)

// Decision is what a Verdict says about a tool call.
type Decision int

// The decisions. The zero Decision is NoVerdict: an answer nobody filled in lets the agent go on
// with its own permission flow, never allows.
const (
	NoVerdict Decision = iota // the agent goes its own way (Claude Code -p: denied; Codex: its guardian)
	Allow                     // run it (with UpdatedInput: run the edited input)
	Deny                      // block it; Reason is shown to the model
)

// String returns "no verdict", "allow" or "deny".
func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	}
	return "no verdict"
}

// Verdict is Countersign's answer to one hook event, before it is spelled in an agent's dialect.
type Verdict struct {
	Decision Decision
	// Reason is a deny's reason, shown to the model (Claude Code: permissionDecisionReason or
	// decision.message; Codex: the same, and standard error with exit 2). An empty one becomes
	// DefaultDenyReason. On an allow it is optional: Claude Code logs it.
	Reason string
	// UpdatedInput is an allow's edited tool input, a JSON object that replaces tool_input whole.
	// Only where CanEdit says the agent honours it; nil for no edit.
	UpdatedInput json.RawMessage
}

// DefaultDenyReason is the reason of a deny that has none.
const DefaultDenyReason = "Denied in Countersign"

// Answer is a Verdict spelled for one agent and event.
type Answer struct {
	// JSON is what the agent reads: Claude Code's HTTP response body (status 200), or a command
	// hook's standard output. Empty for a Codex no verdict (the hook prints nothing).
	JSON []byte
	// Exit is a command hook's exit status: 2 blocks (Codex), 0 otherwise. Always 0 for Claude
	// Code's HTTP hooks.
	Exit int
	// Stderr is a command hook's standard error when Exit is 2: the block's reason, which Codex
	// shows to the model.
	Stderr string
}

// The response headers of `POST /hooks/{kind}` for command-hook kinds, read by
// `countersign hook` (internal/hookclient): the body is the hook's standard output as is, and
//
//	Countersign-Hook-Exit: 2                  the exit status (absent: 0)
//	Countersign-Hook-Stderr: <percent-encoded> standard error (url.PathEscape), when Exit is 2
const (
	HeaderExit   = "Countersign-Hook-Exit"
	HeaderStderr = "Countersign-Hook-Stderr"
)

// Headers are the response headers that carry a command hook's exit status and standard error
// to `countersign hook` (HeaderExit, HeaderStderr); none for exit 0. Set them before writing
// JSON as the body with status 200.
func (a Answer) Headers() map[string]string {
	if a.Exit == 0 {
		return nil
	}
	return map[string]string{HeaderExit: strconv.Itoa(a.Exit), HeaderStderr: url.PathEscape(a.Stderr)}
}

// CanEdit reports whether the agent of kind honours an allow with updatedInput on event: Claude
// Code on PreToolUse and PermissionRequest; Codex on PreToolUse only (it ignores updatedInput on
// PermissionRequest and runs the original: ../shared/agents/README.md, run cx-pr-updated). The
// edit form is offered only where this is true (SPEC §18). False for unknown kinds.
func CanEdit(kind Kind, event EventName) bool {
	d, ok := dialects[kind]
	return ok && slices.Contains(d.editable, event)
}

// AllowApproves reports whether an allow on event is an approval the agent acts on: Claude Code
// on PreToolUse (it then skips PermissionRequest) and PermissionRequest; Codex on
// PermissionRequest only. Codex's PreToolUse has no plain allow: 0.169.0 ignores
// `permissionDecision: "allow"` without updatedInput and its PermissionRequest and guardian still
// decide (checked here; reports against 0.153–0.155 say it was refused as unsupported), so Encode
// spells a plain allow there as no verdict and the approval is given at its PermissionRequest,
// which MatchKey pairs with the PreToolUse.
func AllowApproves(kind Kind, event EventName) bool {
	d, ok := dialects[kind]
	return ok && slices.Contains(d.allowApproves, event)
}

// Encode spells v as kind's answer to event:
//
//	Claude Code (HTTP hooks, Hooks reference "PreToolUse / PermissionRequest decision control"):
//	  PreToolUse         {"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"|"deny",
//	                      "permissionDecisionReason":…,"updatedInput":{…}}}
//	  PermissionRequest  {"hookSpecificOutput":{"hookEventName":"PermissionRequest",
//	                      "decision":{"behavior":"allow"|"deny","message":…,"updatedInput":{…}}}}
//	  no verdict, and every other event: {}
//	Codex (command hooks: stdout JSON + exit status; Codex "Hooks", command output schemas):
//	  PreToolUse allow   no verdict (see AllowApproves)
//	  PreToolUse edit    {"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{…}}}
//	  PreToolUse deny    {"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny",
//	                      "permissionDecisionReason":…}}, exit 2, the reason on stderr
//	  PermissionRequest  {"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}};
//	                     deny: "behavior":"deny","message":…, exit 2, the reason on stderr
//	  no verdict, and every other event: nothing on stdout, exit 0
//
// A deny is spelled twice for Codex (JSON and exit 2) so that it blocks whichever Codex reads.
// Codex's output objects refuse unknown members, so nothing else is added.
//
// Errors (apperr.Invalid): an edit where CanEdit is false (it would be ignored: the original
// would run); UpdatedInput on a deny or no verdict; UpdatedInput that is not one JSON object or
// repeats a key (tool.AmbiguousKey); an allow or deny on an event that takes no decision; an
// event the dialect does not send. apperr.NotFound for an unknown kind.
func Encode(kind Kind, event EventName, v Verdict) (a Answer, err error) {
	defer apperr.Wrap(&err, "hooks.Encode(%s, %s, %s)", kind, event, v.Decision)
	d, err := dialectOf(kind)
	if err != nil {
		return Answer{}, err
	}
	if _, ok := d.events[event]; !ok {
		return Answer{}, apperr.Errorf(apperr.Invalid, "%s sends no %s event", kind, event)
	}
	if v.Decision != Allow && v.Decision != Deny && v.Decision != NoVerdict {
		return Answer{}, apperr.Errorf(apperr.Invalid, "unknown decision %d", int(v.Decision))
	}
	gating := event == PreToolUse || event == PermissionRequest
	if v.Decision != NoVerdict && !gating {
		return Answer{}, apperr.Errorf(apperr.Invalid, "%s takes no decision: only PreToolUse and PermissionRequest do", event)
	}
	if v.UpdatedInput != nil {
		if v.Decision != Allow {
			return Answer{}, apperr.Errorf(apperr.Invalid, "updatedInput goes with an allow, not with %s", v.Decision)
		}
		if !CanEdit(kind, event) {
			return Answer{}, apperr.Errorf(apperr.Invalid, "%s ignores updatedInput on %s: the original input would run", kind, event)
		}
		if err := checkObject(v.UpdatedInput); err != nil {
			return Answer{}, err
		}
	}
	reason := v.Reason
	if v.Decision == Deny && reason == "" {
		reason = DefaultDenyReason
	}

	var out any
	switch {
	case v.Decision == NoVerdict:
		if kind == ClaudeCode {
			return Answer{JSON: []byte("{}")}, nil
		}
		return Answer{}, nil
	case kind == Codex && event == PreToolUse && v.Decision == Allow && v.UpdatedInput == nil:
		return Answer{}, nil
	case event == PreToolUse:
		o := preToolUseOutput{HookEventName: PreToolUse, PermissionDecision: v.Decision.String(), UpdatedInput: v.UpdatedInput}
		if v.Decision == Deny || kind == ClaudeCode {
			o.PermissionDecisionReason = reason
		}
		out = hookOutput{o}
	default: // PermissionRequest
		dec := permissionDecision{Behavior: v.Decision.String(), UpdatedInput: v.UpdatedInput}
		if v.Decision == Deny {
			dec.Message = reason
		}
		out = hookOutput{permissionRequestOutput{HookEventName: PermissionRequest, Decision: dec}}
	}
	// Without HTML escaping: a reason reads in the agent's log as the person typed it.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return Answer{}, err
	}
	a = Answer{JSON: bytes.TrimSuffix(buf.Bytes(), []byte("\n"))}
	if kind == Codex && v.Decision == Deny {
		a.Exit, a.Stderr = 2, reason
	}
	return a, nil
}

// hookOutput is the answer's envelope, shared by Claude Code and Codex.
type hookOutput struct {
	HookSpecificOutput any `json:"hookSpecificOutput"`
}

// preToolUseOutput is PreToolUse's hookSpecificOutput.
type preToolUseOutput struct {
	HookEventName            EventName       `json:"hookEventName"`
	PermissionDecision       string          `json:"permissionDecision"`
	PermissionDecisionReason string          `json:"permissionDecisionReason,omitempty"`
	UpdatedInput             json.RawMessage `json:"updatedInput,omitempty"`
}

// permissionRequestOutput is PermissionRequest's hookSpecificOutput.
type permissionRequestOutput struct {
	HookEventName EventName          `json:"hookEventName"`
	Decision      permissionDecision `json:"decision"`
}

// permissionDecision is PermissionRequest's decision.
type permissionDecision struct {
	Behavior     string          `json:"behavior"`
	Message      string          `json:"message,omitempty"`
	UpdatedInput json.RawMessage `json:"updatedInput,omitempty"`
}

// checkObject refuses an updatedInput that is not one JSON object or that repeats a key: the
// agent would run a reading of it the person did not see.
func checkObject(doc json.RawMessage) error {
	v, err := tool.AmbiguousKey(doc)
	if err != nil {
		return apperr.Errorf(apperr.Invalid, "updatedInput is %v", err)
	}
	if v != nil {
		return apperr.Errorf(apperr.Invalid, "updatedInput at %s: %s", v.Pointer, v.Message)
	}
	if t := bytes.TrimSpace(doc); len(t) == 0 || t[0] != '{' {
		return apperr.Errorf(apperr.Invalid, "updatedInput must be a JSON object")
	}
	return nil
}
