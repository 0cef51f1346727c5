// Package tool defines what a tool is in Countersign: its definition (name, schemas, annotations,
// exposure), the result it returns, and the rules that turn whatever a tool did into a result the
// model and the UI can trust. Terms follow MCP 2025-11-25 §tools and the pi agent.
package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
)

// Exposure decides who sees and who may call a tool (SPEC §1, exposure table).
type Exposure string

// The exposures. The zero value means Direct.
const (
	Direct    Exposure = "direct"     // active when registered; declared while active; callable by ExecuteTool while active
	ModelOnly Exposure = "model-only" // active when registered; declared while active; never callable by ExecuteTool
	Codemode  Exposure = "codemode"   // inactive until activated; declared only if active; always callable by ExecuteTool
	Deferred  Exposure = "deferred"   // like Codemode
	Hidden    Exposure = "hidden"     // never active, never declared, never callable
)

// Annotations are the MCP tool hints (MCP 2025-11-25 §tools, ToolAnnotations). A nil field means
// the server said nothing, which is not the same as false: see Effective for the MCP defaults.
type Annotations struct {
	ReadOnlyHint    *bool `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool `json:"openWorldHint,omitempty"`
}

// Hint is one effective annotation value and whether it came from the MCP default.
type Hint struct {
	Name      string `json:"name"`
	Value     bool   `json:"value"`
	Defaulted bool   `json:"defaulted"`
}

// Effective returns the four hints with MCP defaults filled in (readOnlyHint false,
// destructiveHint true, idempotentHint false, openWorldHint true), marking the defaulted ones.
func (a Annotations) Effective() []Hint {
	h := func(name string, p *bool, def bool) Hint {
		if p == nil {
			return Hint{Name: name, Value: def, Defaulted: true}
		}
		return Hint{Name: name, Value: *p}
	}
	return []Hint{
		h("readOnlyHint", a.ReadOnlyHint, false),
		h("destructiveHint", a.DestructiveHint, true),
		h("idempotentHint", a.IdempotentHint, false),
		h("openWorldHint", a.OpenWorldHint, true),
	}
}

// Bool returns a pointer to b, for annotation literals.
func Bool(b bool) *bool { return &b }

// Update is one progress report from a running tool (pi's onUpdate; MCP notifications/progress).
// Progress and Total are in the tool's own units; Total 0 means unknown. Content, when set, is
// partial output to show on the tool card.
type Update struct {
	Progress float64   `json:"progress"`
	Total    float64   `json:"total,omitempty"`
	Message  string    `json:"message,omitempty"`
	Content  []Content `json:"content,omitempty"`
}

// Outcome is what ExecuteTool returns for a nested call (SPEC §4): never a Go error for a tool
// failure; IsError mirrors Result.IsError.
type Outcome struct {
	ToolCall   Call   `json:"toolCall"`
	Result     Result `json:"result"`
	IsError    bool   `json:"isError"`
	DurationMs int64  `json:"durationMs"`
}

// Call is one request to run a tool: the model's tool call, or a nested one.
type Call struct {
	ID               string          `json:"id"`
	ParentToolCallID string          `json:"parentToolCallId,omitempty"`
	Name             string          `json:"name"`
	Arguments        json.RawMessage `json:"arguments"`
}

// Context is what a running tool gets besides its arguments (SPEC §4): where it works and a way
// to call other tools through the same pipeline as the model's calls.
type Context interface {
	// ToolCallID is the id of the running call ("c1", or "c1/2" for a nested one).
	ToolCallID() string
	// SessionID is the id of the session the call runs in.
	SessionID() string
	// Workspace is the absolute path of the session's workspace folder.
	Workspace() string
	// ExecuteTool runs another tool through the full call pipeline (lookup, validation,
	// tool_call handlers, approval, execute, tool_result handlers, output validation). Failures
	// of any kind come back as an Outcome with IsError set, never as a panic.
	ExecuteTool(ctx context.Context, name string, arguments any) Outcome
	// Consent says how this call came to run (SPEC §14 "Checked where it happens"): whether a
	// person approved it as written, and what their prompt showed of its effect.
	Consent() Consent
	// Authorize asks the gate about one action this running call is about to take inside itself
	// (SPEC §14 "Checked where it happens"): a program run_command's shell is about to start, a
	// file one of its redirections is about to open. The action is described as a call of a tool
	// (name, arguments: run_command {"command": "<the program's argv, shell-quoted>"}), and the
	// gate decides it as a nested call of this one: a deny rule refuses it always; when a person
	// approved this call as written (Consent.ByPerson) anything else is allowed; otherwise rules
	// (and the session's mode) that allow it allow it, and what they do not cover becomes a
	// nested approval shown in this call's card, decided through the same gate (several
	// approvers, inbox, webhooks and decision links apply). uncovered, when not "", says why no
	// rule may allow the action (it reaches outside the workspace, say): deny and ask rules still
	// apply, then a person is asked with that reason. A refused action comes back with Allowed
	// false and the reason, for the error the running call reports.
	Authorize(ctx context.Context, name string, arguments any, uncovered string) Authorization
}

// NestedTools is what a Context may also offer: the names of the tools the running call may call
// through ExecuteTool (its session's active direct tools and the codemode and deferred ones,
// CallableNested), sorted. Codemode lists them as the keys of its `tools` object.
type NestedTools interface {
	NestedTools() []string
}

// Consent is how a running call came to run (SPEC §14): ByPerson is true when a person approved
// it as written in a prompt or through a decision link (not a rule, grant, mode or annotation
// default); Preview is what that person's prompt showed of the call's effect (tool.Preview; nil
// when none was shown), which a tool that writes checks is still true before it writes (SPEC §14
// "A person's approval binds what they saw").
type Consent struct {
	ByPerson bool
	Preview  *Preview
}

// Authorization is the gate's answer to Context.Authorize: Allowed, or the reason it was not
// (a deny rule's reason, a person's denial, "no person can be asked"). Nested is true when a
// person was asked (the action shows as a nested call of the running one).
type Authorization struct {
	Allowed bool
	Reason  string
	Nested  bool
}

// ExecuteFunc runs a tool. arguments have been validated against the tool's inputSchema.
// onUpdate may be called any number of times, from any goroutine, until ExecuteFunc returns.
// Return a Result with IsError for "an error that has data"; return a Go error for "an error that
// has none" (SPEC §1 results, rules 1 and 2). ctx is cancelled on Stop.
type ExecuteFunc func(ctx context.Context, arguments json.RawMessage, onUpdate func(Update), tc Context) (Result, error)

// InputCheckFunc checks arguments that passed the tool's inputSchema for what a schema cannot
// say, such as a file path that must resolve inside the workspace. workspace is the absolute path
// of the session's workspace folder. It returns every violation, each a JSON pointer into
// arguments and a message; nil lets the call go on. It runs at step 2 of the call pipeline
// (SPEC §3), before the tool_call handlers and the approval prompt, for model and nested calls
// alike, so it must be quick and change nothing; the things it checks can change before the tool
// runs, so the tool checks them again then.
type InputCheckFunc func(arguments json.RawMessage, workspace string) []Violation

// Preview is what a tool shows a person of what a call would change, computed once when the
// call's approval opens and stored with it (SPEC §3 "What a prompt shows"; issue 19): for
// write_file, the file's content then, which the prompt's diff is drawn against, live, on reload
// and after an edit, without reading the workspace again. Path is the "path" argument it was
// computed for. Exists is false for a new file. Error, when set, is why there is no content
// (too large, a folder, not a regular file); Content is "" then.
//
// A person's approval binds what they saw (SPEC §14; issue 28): Digest is the SHA-256 (lowercase
// hex) of the file's whole content when the preview was made — also of a file too large to show —
// and "" for a new file (Exists false) or one that could not be read (a folder). Scripts are the
// workspace scripts a run_command call runs (`sh job.sh`, `./deploy`), each with its digest then.
// A tool that runs after a person's approval (Consent.ByPerson) checks them first and writes or
// runs nothing when the workspace changed. Stored as JSON with the approval: fields added here
// need no migration.
type Preview struct {
	Path    string         `json:"path"`
	Exists  bool           `json:"exists"`
	Content string         `json:"content,omitempty"`
	Error   string         `json:"error,omitempty"`
	Digest  string         `json:"digest,omitempty"`
	Scripts []ScriptDigest `json:"scripts,omitempty"`
	// Commands are the shell commands a call will run that its arguments do not spell out
	// (run_checks' configured checks, failing_tests' test command), as configured for the
	// workspace when the approval opened: the prompt shows them, not `{}`.
	Commands []PreviewCommand `json:"commands,omitempty"`
}

// PreviewCommand is one command a call will run (Preview.Commands): its name ("vet", "tests")
// and its command line as `/bin/sh -c` gets it.
type PreviewCommand struct {
	Name    string `json:"name"`
	Command string `json:"command"`
}

// ScriptDigest is one workspace script a command runs, as its prompt showed it (Preview.Scripts):
// Path as the command names it (relative to the workspace, or absolute inside it), whether it
// existed, and the SHA-256 (lowercase hex) of its content then ("" when it did not exist).
type ScriptDigest struct {
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
	SHA256 string `json:"sha256,omitempty"`
}

// Short is the start of the digest as prompts and errors show it: its first 12 hex digits and
// an ellipsis ("1a2b3c4d5e6f…").
func (s ScriptDigest) Short() string {
	if len(s.SHA256) <= 12 {
		return s.SHA256
	}
	return s.SHA256[:12] + "…"
}

// PreviewFunc computes a call's Preview from arguments that passed the tool's checks, with the
// session's workspace. It reads, never writes. nil (and no error) means nothing to show; an error
// means no preview (the prompt then shows none), not a refused call.
type PreviewFunc func(ctx context.Context, arguments json.RawMessage, workspace string) (*Preview, error)

// Tool is a tool definition. Register it in a Registry, which compiles its schemas.
type Tool struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  Annotations     `json:"annotations"`
	Exposure     Exposure        `json:"exposure"`
	// DefaultActive, when non-nil and false, registers a direct or model-only tool inactive.
	DefaultActive *bool `json:"defaultActive,omitempty"`
	// Sequential tools run one at a time within a batch instead of concurrently (SPEC §2).
	Sequential bool `json:"-"`
	// AlwaysAsk forces approval whatever the annotations say (untrusted MCP servers, SPEC §13).
	AlwaysAsk bool `json:"-"`
	// AskReason says why AlwaysAsk is set, as the prompt shows it after "asks because", e.g.
	// "server files is not trusted".
	AskReason string `json:"-"`
	// WritesFiles marks a file tool that writes only the file its "path" argument names, a path
	// its InputCheck keeps inside the workspace: accept-edits mode allows it (SPEC §14).
	WritesFiles bool `json:"-"`
	// InputCheck, when set, checks the arguments right after inputSchema (see InputCheckFunc).
	InputCheck InputCheckFunc `json:"-"`
	// Preview, when set, computes what the approval prompt shows of the call's effect; the gate
	// stores it with the approval (see Preview).
	Preview PreviewFunc `json:"-"`
	Execute ExecuteFunc `json:"-"`

	input  *schema
	output *schema
}

// ActiveByDefault reports whether the tool is in a new session's active set (SPEC §1 table).
func (t *Tool) ActiveByDefault() bool {
	switch t.Exposure {
	case Direct, ModelOnly, "":
		return t.DefaultActive == nil || *t.DefaultActive
	}
	return false
}

// DisplayTitle is Title, or Name when there is none.
func (t *Tool) DisplayTitle() string {
	if t.Title != "" {
		return t.Title
	}
	return t.Name
}

// HasOutputSchema reports whether the tool declares an outputSchema.
func (t *Tool) HasOutputSchema() bool { return t.output != nil }

var nameRule = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// compile checks the name rule (MCP 2025-11-25 §tools: 1–128 of [A-Za-z0-9_.-]) and compiles
// both schemas as JSON Schema 2020-12 with root type object.
func (t *Tool) compile() error {
	if !nameRule.MatchString(t.Name) {
		return fmt.Errorf("tool name %q: must be 1 to 128 characters of A-Z a-z 0-9 _ . -", t.Name)
	}
	switch t.Exposure {
	case "":
		t.Exposure = Direct
	case Direct, ModelOnly, Codemode, Deferred, Hidden:
	default:
		return fmt.Errorf("tool %s: unknown exposure %q", t.Name, t.Exposure)
	}
	if t.Execute == nil {
		return fmt.Errorf("tool %s: no execute function", t.Name)
	}
	var err error
	if t.input, err = compileSchema(t.Name, "inputSchema", t.InputSchema); err != nil {
		return err
	}
	if t.input == nil {
		return fmt.Errorf("tool %s: inputSchema is required", t.Name)
	}
	t.input.strictKeys = true
	if len(t.OutputSchema) > 0 {
		if t.output, err = compileSchema(t.Name, "outputSchema", t.OutputSchema); err != nil {
			return err
		}
	}
	return nil
}
