package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"countersign/internal/realpath"
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
    "command": {"type": "string", "minLength": 1, "description": "Shell command (POSIX sh; bash syntax where needed), run in the workspace."},
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
		Description: "Run a shell command (POSIX sh, as /bin/sh -c would; bash syntax where needed) in the workspace and return its exit code, " +
			"stdout and stderr (each cut to its last " + fmt.Sprint(cfg.OutputCap) + " bytes). " +
			"A non-zero exit code is reported, not treated as a failure. Processes the command " +
			"leaves running in the background are stopped when it exits.",
		InputSchema:  json.RawMessage(runCommandInput(cfg)),
		OutputSchema: json.RawMessage(runCommandOutput),
		// No annotations: the MCP defaults (not read-only, destructive, open world) make every
		// call need approval (SPEC §3, §10).
		// The workspace scripts the command runs, with their digests, shown in its prompt.
		Preview: scriptsPreview,
		Execute: func(ctx context.Context, arguments json.RawMessage, onUpdate func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct {
				Command   string `json:"command"`
				TimeoutMs int64  `json:"timeoutMs"`
			}
			if err := decode(arguments, &in); err != nil {
				return tool.Result{}, err
			}
			// A person's approval binds the scripts their prompt showed (SPEC §14; issue 28):
			// before anything runs, each is still that file, and the command (perhaps edited)
			// runs no workspace script the prompt did not show.
			if c := tc.Consent(); c.ByPerson {
				if err := checkScripts(c.Preview, tc.Workspace()); err != nil {
					return tool.Result{}, err
				}
				if err := unshownScripts(in.Command, c.Preview, tc.Workspace()); err != nil {
					return tool.Result{}, err
				}
			}
			timeout := cfg.CommandTimeout
			if in.TimeoutMs > 0 {
				timeout = time.Duration(in.TimeoutMs) * time.Millisecond
			}
			return runCommand(ctx, cfg.forCall(tc), tc, in.Command, timeout, onUpdate)
		},
	}
}

// errTimedOut is the cause of a command's context when its timeout passed.
var errTimedOut = errors.New("the command's timeout passed")

// runCommand implements run_command: the command parsed once and run in the interpreter, with
// every program it starts and every file it writes checked by the gate (shell.go).
func runCommand(ctx context.Context, cfg Config, tc tool.Context, command string, timeout time.Duration, onUpdate func(tool.Update)) (tool.Result, error) {
	workspace := tc.Workspace()
	f, err := parseCommand(command)
	if err != nil {
		return tool.Result{}, err
	}
	f.Name = "sh" // $0, as /bin/sh -c gave it
	root, err := realpath.Resolve("/", workspace)
	if err != nil {
		return tool.Result{}, fmt.Errorf("the workspace %s cannot be resolved: %w", workspace, err)
	}
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
	sh := &shellRun{tc: tc, cfg: cfg, workspace: root, protected: cfg.Protected}
	p := process{
		dir:    workspace,
		env:    environ(cfg),
		stdout: stdout,
		stderr: stderr,
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
	// The timeout counts the command's own time: it waits while the gate asks a person about
	// something the command is about to do (shellRun.authorize).
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	sh.clock = newPausableTimer(timeout, func() { cancelRun(errTimedOut) })
	defer sh.clock.stop()
	e, err := p.runWith(runCtx, func(ctx context.Context, stdin, stdout, stderr *os.File) (int, error) {
		return sh.run(ctx, f, p.dir, p.env, stdin, stdout, stderr)
	})
	if ctx.Err() == nil && errors.Is(context.Cause(runCtx), errTimedOut) {
		e.code, e.timedOut, err = -1, true, nil
	}
	var ref *refusal
	if errors.As(err, &ref) {
		out := RunCommandOutput{ExitCode: 126, Stdout: stdout.String(), Stderr: stderr.String(),
			DurationMs: e.duration.Milliseconds(), Truncated: stdout.truncated() || stderr.truncated()}
		res := success(fmt.Sprintf("%s\nNothing after it ran.\n\n%s", ref.Error(), streamsText(stdout, stderr)), out)
		res.IsError = true
		return res, nil
	}
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
