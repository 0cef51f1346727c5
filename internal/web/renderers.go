package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/a-h/templ"

	"countersign/internal/render"
	"countersign/internal/tool"
	"countersign/web/templates"
)

// Renderer draws a tool's call and result in its card instead of the generic view (arguments as
// JSON; result text and structuredContent). Either function may be nil. A renderer that fails —
// returns an error, panics, or cannot read the data — falls back to the generic view.
type Renderer struct {
	// Call renders the call: its arguments, where it runs and, once it ended, its result.
	Call func(c CallInfo) (templ.Component, error)
	// Result renders a successful result (errors and contract violations use the generic view).
	Result func(res tool.Result) (templ.Component, error)
	// FileEdit says the tool's arguments are a file's {path, content}: a prompt's Edit shows a
	// Path field and the content as plain text (with the JSON folded below), and the call view
	// (Call) previews the edit as it is typed.
	FileEdit bool
}

// CallInfo is what a call renderer sees.
type CallInfo struct {
	// Arguments are the arguments the call runs (or ran) with: an approved edit when there is one.
	Arguments json.RawMessage
	// Workspace is the session's workspace folder.
	Workspace string
	// Cwd is, for an outside agent's call, the working directory its event reported
	// (gate.OutsideCall.Cwd), where its command runs; "" otherwise.
	Cwd string
	// Result is the call's result once it has one; nil while it waits or runs.
	Result *tool.Result
	// Finished is true once the call ended, even when its result body is not at hand (a
	// nested call rebuilt from its parent's record).
	Finished bool
	// Preview is what the tool computed of the call's effect when its approval opened, stored
	// with it (gate.Approval.Preview): a waiting write_file's diff is drawn from it, never from
	// the workspace. nil when there is none.
	Preview *tool.Preview
}

// commandsCall draws a call whose commands its arguments do not spell out (run_checks,
// failing_tests) as the commands its approval's preview lists (tool.Preview.Commands), where
// they run, and its arguments when there are any; without a preview it is the generic view.
func commandsCall(c CallInfo) (templ.Component, error) {
	if c.Preview == nil || len(c.Preview.Commands) == 0 {
		return nil, fmt.Errorf("no commands in the preview")
	}
	args := ""
	if t := bytes.TrimSpace(c.Arguments); len(t) > 0 && !bytes.Equal(t, []byte("{}")) {
		args = render.EscapeHiddenJSON(string(t))
	}
	return templates.CommandsCall(c.Preview.Commands, c.Workspace, args), nil
}

// BuiltinRenderers are the renderers of the built-in tools.
func BuiltinRenderers() map[string]Renderer {
	return map[string]Renderer{
		"run_command": {
			Call: func(c CallInfo) (templ.Component, error) {
				var in struct {
					Command string `json:"command"`
				}
				if err := json.Unmarshal(c.Arguments, &in); err != nil || in.Command == "" {
					return nil, fmt.Errorf("no command in %s", c.Arguments)
				}
				var scripts []tool.ScriptDigest
				if c.Preview != nil {
					scripts = c.Preview.Scripts
				}
				return templates.RunCommandCall(in.Command, c.Workspace, scripts, c.Finished), nil
			},
			Result: func(res tool.Result) (templ.Component, error) {
				var out struct {
					ExitCode  *int   `json:"exitCode"`
					Stdout    string `json:"stdout"`
					Stderr    string `json:"stderr"`
					Truncated bool   `json:"truncated"`
				}
				if err := json.Unmarshal(res.StructuredContent, &out); err != nil || out.ExitCode == nil {
					return nil, fmt.Errorf("no exitCode in structuredContent")
				}
				return templates.RunCommandResult(*out.ExitCode, out.Stdout, out.Stderr, out.Truncated), nil
			},
		},
		"write_file":    {Call: writeFileCall, FileEdit: true},
		"run_checks":    {Call: commandsCall},
		"failing_tests": {Call: commandsCall},
		// An outside agent's tools (SPEC §18), as the agent's tool reads them: a Bash command as
		// a command, an Edit as a diff of old_string and new_string, a Write as the file's
		// content — each only when its arguments hold nothing else that changes what runs
		// (drawsAll), or the card would hide it.
		"Bash": {Call: func(c CallInfo) (templ.Component, error) {
			var in struct {
				Command string `json:"command"`
			}
			if err := drawsAll(c.Arguments, "command", "description"); err != nil {
				return nil, err
			}
			if err := json.Unmarshal(c.Arguments, &in); err != nil || in.Command == "" {
				return nil, fmt.Errorf("no command in %s", c.Arguments)
			}
			dir := c.Workspace
			if c.Cwd != "" {
				dir = c.Cwd // where the agent's shell runs it
			}
			return templates.RunCommandCall(in.Command, dir, nil, c.Finished), nil
		}},
		"Edit": {Call: func(c CallInfo) (templ.Component, error) {
			var in struct {
				FilePath  string `json:"file_path"`
				OldString string `json:"old_string"`
				NewString string `json:"new_string"`
			}
			if err := drawsAll(c.Arguments, "file_path", "old_string", "new_string"); err != nil {
				return nil, err
			}
			if err := json.Unmarshal(c.Arguments, &in); err != nil || in.FilePath == "" {
				return nil, fmt.Errorf("no file_path in %s", c.Arguments)
			}
			return templates.FileDiff(render.Diff(in.FilePath, in.OldString, in.NewString, true)), nil
		}},
		"Write": {Call: func(c CallInfo) (templ.Component, error) {
			var in struct {
				FilePath string `json:"file_path"`
				Content  string `json:"content"`
			}
			if err := drawsAll(c.Arguments, "file_path", "content"); err != nil {
				return nil, err
			}
			if err := json.Unmarshal(c.Arguments, &in); err != nil || in.FilePath == "" {
				return nil, fmt.Errorf("no file_path in %s", c.Arguments)
			}
			return templates.FileDiff(render.Diff(in.FilePath, "", in.Content, false)), nil
		}},
		"codemode": {Call: func(c CallInfo) (templ.Component, error) {
			var in struct {
				Code string `json:"code"`
			}
			if err := json.Unmarshal(c.Arguments, &in); err != nil || in.Code == "" {
				return nil, fmt.Errorf("no code in %s", c.Arguments)
			}
			// The script, highlighted; a fence longer than any backtick run inside keeps it whole.
			fence := "```"
			for strings.Contains(in.Code, fence) {
				fence += "`"
			}
			return templates.CodeBlock(render.Markdown(fence + "js\n" + in.Code + "\n" + fence)), nil
		}},
	}
}

// drawsAll is nil when args, an outside agent's call's arguments, hold no member but keys
// (exactly as spelled; Edit's replace_all when false, its default, too): a view that draws only
// those shows all the call does. Otherwise it says what the view would hide (the generic view,
// every argument, is drawn instead): Bash's dangerouslyDisableSandbox, Edit's replace_all, or a
// member of a later version of the tool.
func drawsAll(args json.RawMessage, keys ...string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return err
	}
	for k, v := range m {
		if !slices.Contains(keys, k) && !(k == "replace_all" && string(v) == "false") {
			return fmt.Errorf("the view does not draw %q", k)
		}
	}
	return nil
}

// writeFileDetails is write_file's result details as it writes them (tools.WriteFileDetails):
// what the file held before the write.
type writeFileDetails struct {
	PreviousExists   bool   `json:"previousExists"`
	PreviousContent  string `json:"previousContent,omitempty"`
	PreviousTooLarge bool   `json:"previousTooLarge,omitempty"`
}

// writeFileCall shows a write_file call as a diff: while the call waits for its approval,
// against the file's content when the approval opened (the preview stored with it; the
// workspace is not read here), and against the content it replaced once it ran.
func writeFileCall(c CallInfo) (templ.Component, error) {
	var in struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(c.Arguments, &in); err != nil || in.Path == "" {
		return nil, fmt.Errorf("no path in %s", c.Arguments)
	}
	if c.Result != nil && !c.Result.IsError && len(c.Result.Details) > 0 {
		var d writeFileDetails
		if err := json.Unmarshal(c.Result.Details, &d); err == nil && !d.PreviousTooLarge {
			return templates.FileDiff(render.Diff(in.Path, d.PreviousContent, in.Content, d.PreviousExists)), nil
		}
	}
	if c.Finished {
		return templates.WriteFileDone(in.Path), nil
	}
	p := c.Preview
	switch {
	case p == nil:
		return templates.PreviewError(in.Path, "no preview of the file was stored with this prompt"), nil
	case p.Path != in.Path:
		return templates.PreviewError(in.Path, "the preview stored with this prompt is of "+p.Path), nil
	case p.Error != "":
		return templates.PreviewError(in.Path, p.Error), nil
	}
	return templates.FileDiff(render.Diff(in.Path, p.Content, in.Content, p.Exists)), nil
}

// safeRender renders c eagerly so that a failing renderer is caught here, not halfway through
// a page; it returns nil (use the generic view) on any failure.
func (s *Server) safeRender(name string, make func() (templ.Component, error)) (out templ.Component) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Warn("tool renderer panicked; using the generic view", "tool", name, "panic", p)
			out = nil
		}
	}()
	c, err := make()
	if err != nil || c == nil {
		if err != nil {
			s.log.Debug("tool renderer declined; using the generic view", "tool", name, "err", err)
		}
		return nil
	}
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		s.log.Warn("tool renderer failed; using the generic view", "tool", name, "err", err)
		return nil
	}
	return templ.Raw(buf.String())
}
