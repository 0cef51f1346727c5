package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/a-h/templ"

	"countersign/internal/tool"
	"countersign/web/templates"
)

// Renderer draws a tool's call and result in its card instead of the generic view (arguments as
// JSON; result text and structuredContent). Either function may be nil. A renderer that fails —
// returns an error, panics, or cannot read the data — falls back to the generic view.
type Renderer struct {
	// Call renders the call from its arguments and the session's workspace.
	Call func(arguments json.RawMessage, workspace string) (templ.Component, error)
	// Result renders a result that is not a contract violation.
	Result func(res tool.Result) (templ.Component, error)
}

// BuiltinRenderers are the renderers of the built-in tools.
func BuiltinRenderers() map[string]Renderer {
	return map[string]Renderer{
		"run_command": {
			Call: func(args json.RawMessage, workspace string) (templ.Component, error) {
				var in struct {
					Command string `json:"command"`
				}
				if err := json.Unmarshal(args, &in); err != nil || in.Command == "" {
					return nil, fmt.Errorf("no command in %s", args)
				}
				return templates.RunCommandCall(in.Command, workspace), nil
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
	}
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
