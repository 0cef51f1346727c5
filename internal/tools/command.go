package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"countersign/internal/tool"
)

// RunCommandOutput is run_command's structuredContent (SPEC §10): the exit code (128+n when
// killed by signal n; -1 on timeout), stdout and stderr (each the last OutputCap bytes), the
// duration in milliseconds, and truncated when either stream was cut. A timeout returns the same
// shape with isError set.
type RunCommandOutput struct {
	ExitCode   int    `json:"exitCode"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMs int64  `json:"durationMs"`
	Truncated  bool   `json:"truncated"`
}

// MaxCommandTimeout is the largest timeoutMs run_command accepts: one hour.
const MaxCommandTimeout = time.Hour

// runCommandInput is run_command's inputSchema; the default timeout is cfg's.
func runCommandInput(cfg Config) string {
	return fmt.Sprintf(`{
  "type": "object",
  "properties": {
    "command": {"type": "string", "minLength": 1, "description": "Shell command, run with /bin/sh -c in the workspace."},
    "timeoutMs": {"type": "integer", "minimum": 1, "maximum": %d, "description": "Timeout in milliseconds (default %d)."}
  },
  "required": ["command"],
  "additionalProperties": false
}`, MaxCommandTimeout.Milliseconds(), cfg.CommandTimeout.Milliseconds())
}

const runCommandOutput = `{
  "type": "object",
  "properties": {
    "exitCode": {"type": "integer"},
    "stdout": {"type": "string"},
    "stderr": {"type": "string"},
    "durationMs": {"type": "integer", "minimum": 0},
    "truncated": {"type": "boolean"}
  },
  "required": ["exitCode", "stdout", "stderr", "durationMs", "truncated"],
  "additionalProperties": false
}`

// partialOutput caps the combined output shown with each progress update.
const partialOutput = 4 << 10

func runCommandTool(cfg Config) *tool.Tool {
	return &tool.Tool{
		Name:  "run_command",
		Title: "Run command",
		Description: "Run a shell command with /bin/sh -c in the workspace and return its exit code, " +
			"stdout and stderr (each cut to its last " + fmt.Sprint(cfg.OutputCap) + " bytes). " +
			"A non-zero exit code is reported, not treated as a failure. Processes the command " +
			"leaves running in the background are stopped when it exits.",
		InputSchema:  json.RawMessage(runCommandInput(cfg)),
		OutputSchema: json.RawMessage(runCommandOutput),
		// No annotations: the MCP defaults (not read-only, destructive, open world) make every
		// call need approval (SPEC §3, §10).
		Execute: func(ctx context.Context, arguments json.RawMessage, onUpdate func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct {
				Command   string `json:"command"`
				TimeoutMs int64  `json:"timeoutMs"`
			}
			if err := decode(arguments, &in); err != nil {
				return tool.Result{}, err
			}
			timeout := cfg.CommandTimeout
			if in.TimeoutMs > 0 {
				timeout = time.Duration(in.TimeoutMs) * time.Millisecond
			}
			return runCommand(ctx, cfg.forCall(tc), tc.Workspace(), in.Command, timeout, onUpdate)
		},
	}
}

// runCommand implements run_command.
func runCommand(ctx context.Context, cfg Config, workspace, command string, timeout time.Duration, onUpdate func(tool.Update)) (tool.Result, error) {
	stdout, stderr := newCapture(cfg.OutputCap, true), newCapture(cfg.OutputCap, true)
	rep := newReporter(onUpdate)
	defer rep.close()
	var (
		mu     sync.Mutex
		lines  int
		latest string
		recent = newCapture(partialOutput, true)
	)
	// snapshot builds an update only when one is sent: output may come far faster than 10 lines
	// a second.
	snapshot := func() tool.Update {
		mu.Lock()
		defer mu.Unlock()
		return tool.Update{
			Progress: float64(lines),
			Message:  shorten(latest, 200),
			Content:  []tool.Content{tool.Text(recent.String())},
		}
	}
	p := process{
		argv:    []string{"/bin/sh", "-c", command},
		dir:     workspace,
		env:     environ(cfg),
		timeout: timeout,
		stdout:  stdout,
		stderr:  stderr,
		onLine: func(_ bool, line []byte) {
			mu.Lock()
			lines++
			latest = string(line[:min(len(line), 1024)])
			recent.write(line)
			recent.write([]byte{'\n'})
			mu.Unlock()
			rep.update(snapshot)
		},
	}
	e, err := p.run(ctx)
	if err != nil {
		if errors.Is(err, errCannotStart) || ctx.Err() == nil {
			return tool.Result{}, err
		}
		return tool.Result{}, fmt.Errorf("command cancelled: %w", err)
	}
	out := RunCommandOutput{
		ExitCode:   e.code,
		Stdout:     stdout.String(),
		Stderr:     stderr.String(),
		DurationMs: e.duration.Milliseconds(),
		Truncated:  stdout.truncated() || stderr.truncated(),
	}
	streams := streamsText(stdout, stderr)
	if e.timedOut {
		res := success(fmt.Sprintf("Command timed out after %d ms\n\n%s", timeout.Milliseconds(), streams), out)
		res.IsError = true
		return res, nil
	}
	return success(fmt.Sprintf("Exit code %d\n\n%s", e.code, streams), out), nil
}

// streamsText renders stdout and stderr for the model, noting what was cut.
func streamsText(stdout, stderr *capture) string {
	var b strings.Builder
	for _, s := range []struct {
		name string
		c    *capture
	}{{"stdout", stdout}, {"stderr", stderr}} {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		text := s.c.String()
		switch {
		case s.c.size() == 0:
			fmt.Fprintf(&b, "%s: (empty)\n", s.name)
			continue
		case s.c.truncated():
			fmt.Fprintf(&b, "%s (last %d of %d bytes):\n", s.name, len(text), s.c.size())
		default:
			fmt.Fprintf(&b, "%s:\n", s.name)
		}
		b.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteString("\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// shorten cuts s to at most n runes, marking the cut with an ellipsis.
func shorten(s string, n int) string {
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
