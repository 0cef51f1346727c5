package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"countersign/internal/tool"
)

// MaxCheckMessages caps the messages of one check; beyond it the check is marked truncated.
const MaxCheckMessages = 500

// CheckMessage is one finding of a check: file (slash-separated, relative to the workspace when
// inside it), 1-based line and column when the output gave them, and the text.
type CheckMessage struct {
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	Text   string `json:"text"`
}

// CheckResult is one check of run_checks: its name and command; status "pass" (exit 0), "fail"
// (another exit code) or "error" (it could not run: not started, command not found, timed out);
// the exit code (-1 when there is none); the messages parsed from its output (every output line
// that is not a `# package` header; indented lines continue the message before them); and
// truncated when messages were left out.
type CheckResult struct {
	Name      string         `json:"name"`
	Command   string         `json:"command"`
	Status    string         `json:"status"`
	ExitCode  int            `json:"exitCode"`
	Messages  []CheckMessage `json:"messages"`
	Truncated bool           `json:"truncated"`
}

// RunChecksOutput is run_checks' structuredContent (SPEC §10): every check run, in configuration order,
// and passed when all of them passed.
type RunChecksOutput struct {
	Checks []CheckResult `json:"checks"`
	Passed bool          `json:"passed"`
}

const runChecksInput = `{
  "type": "object",
  "properties": {
    "checks": {
      "type": "array",
      "items": {"type": "string", "minLength": 1},
      "uniqueItems": true,
      "description": "Names of the configured checks to run (default: all)."
    }
  },
  "additionalProperties": false
}`

const runChecksOutput = `{
  "type": "object",
  "properties": {
    "checks": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string"},
          "command": {"type": "string"},
          "status": {"enum": ["pass", "fail", "error"]},
          "exitCode": {"type": "integer"},
          "messages": {
            "type": "array",
            "items": {
              "type": "object",
              "properties": {
                "file": {"type": "string"},
                "line": {"type": "integer", "minimum": 1},
                "column": {"type": "integer", "minimum": 1},
                "text": {"type": "string"}
              },
              "required": ["text"],
              "additionalProperties": false
            }
          },
          "truncated": {"type": "boolean"}
        },
        "required": ["name", "command", "status", "exitCode", "messages", "truncated"],
        "additionalProperties": false
      }
    },
    "passed": {"type": "boolean"}
  },
  "required": ["checks", "passed"],
  "additionalProperties": false
}`

func runChecksTool(cfg Config) *tool.Tool {
	names := make([]string, len(cfg.Checks))
	for i, c := range cfg.Checks {
		names[i] = c.Name
	}
	return &tool.Tool{
		Name:  "run_checks",
		Title: "Run checks",
		Description: "Run the workspace's configured checks (by default: " + strings.Join(names, ", ") +
			") and report, per check, pass or fail and its messages with file, line and column." +
			runsCodeNote,
		InputSchema:  json.RawMessage(runChecksInput),
		OutputSchema: json.RawMessage(runChecksOutput),
		Annotations:  runsWorkspaceCode(),
		Preview:      checksPreview(cfg),
		Execute: func(ctx context.Context, arguments json.RawMessage, onUpdate func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct {
				Checks []string `json:"checks"`
			}
			if err := decode(arguments, &in); err != nil {
				return tool.Result{}, err
			}
			return runChecks(ctx, cfg.forCall(tc), tc.Workspace(), in.Checks, onUpdate)
		},
	}
}

// selectChecks are the checks of configured that names asks for, in that order (all of them when
// names is empty); an unknown name is an error listing the configured ones.
func selectChecks(configured []Check, names []string) ([]Check, error) {
	if len(names) == 0 {
		return configured, nil
	}
	byName := map[string]Check{}
	var all []string
	for _, c := range configured {
		byName[c.Name] = c
		all = append(all, c.Name)
	}
	var checks []Check
	for _, n := range names {
		c, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("unknown check %q; configured checks: %s", n, strings.Join(all, ", "))
		}
		checks = append(checks, c)
	}
	return checks, nil
}

// checksPreview is run_checks' Preview: the commands of the checks the call runs, as configured
// for the workspace (issue 34: the prompt shows them, not `Arguments {}`).
func checksPreview(cfg Config) tool.PreviewFunc {
	return func(_ context.Context, arguments json.RawMessage, workspace string) (*tool.Preview, error) {
		var in struct {
			Checks []string `json:"checks"`
		}
		if err := decode(arguments, &in); err != nil {
			return nil, err
		}
		checks, err := selectChecks(cfg.checksFor(workspace), in.Checks)
		if err != nil {
			return nil, err
		}
		p := &tool.Preview{}
		for _, c := range checks {
			p.Commands = append(p.Commands, tool.PreviewCommand{Name: c.Name, Command: c.Command})
		}
		return p, nil
	}
}

// testsPreview is failing_tests' Preview: its test command line, as configured for the workspace.
func testsPreview(cfg Config) tool.PreviewFunc {
	return func(_ context.Context, arguments json.RawMessage, workspace string) (*tool.Preview, error) {
		var in struct {
			Packages []string `json:"packages"`
		}
		if err := decode(arguments, &in); err != nil {
			return nil, err
		}
		command, err := testCommand(cfg, workspace, in.Packages)
		if err != nil {
			return nil, err
		}
		return &tool.Preview{Commands: []tool.PreviewCommand{{Name: "tests", Command: command}}}, nil
	}
}

// runChecks implements run_checks.
func runChecks(ctx context.Context, cfg Config, workspace string, names []string, onUpdate func(tool.Update)) (tool.Result, error) {
	checks, err := selectChecks(cfg.checksFor(workspace), names)
	if err != nil {
		return tool.Result{}, err
	}
	rep := newReporter(onUpdate)
	defer rep.close()
	out := RunChecksOutput{Checks: []CheckResult{}, Passed: true}
	for i, c := range checks {
		rep.update(func() tool.Update {
			return tool.Update{Progress: float64(i), Total: float64(len(checks)), Message: fmt.Sprintf("Running %s (%d of %d)", c.Name, i+1, len(checks))}
		})
		r, err := runCheck(ctx, cfg, workspace, c)
		if err != nil {
			return tool.Result{}, err
		}
		out.Checks = append(out.Checks, r)
		out.Passed = out.Passed && r.Status == "pass"
		rep.update(func() tool.Update {
			return tool.Update{Progress: float64(i + 1), Total: float64(len(checks)), Message: fmt.Sprintf("%s: %s", c.Name, r.Status)}
		})
	}
	return success(checksText(out), out), nil
}

// runCheck runs one check; only a cancelled ctx is an error.
func runCheck(ctx context.Context, cfg Config, workspace string, c Check) (CheckResult, error) {
	r := CheckResult{Name: c.Name, Command: c.Command, Messages: []CheckMessage{}}
	output := newCapture(4*cfg.OutputCap, false)
	e, err := process{
		argv:     []string{"/bin/sh", "-c", c.Command},
		dir:      workspace,
		env:      environ(cfg),
		timeout:  cfg.CheckTimeout,
		stdout:   output,
		combined: true,
	}.run(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return r, fmt.Errorf("run_checks cancelled during %s: %w", c.Name, ctx.Err())
	case err != nil:
		r.Status, r.ExitCode = "error", -1
		r.Messages = append(r.Messages, CheckMessage{Text: err.Error()})
		return r, nil
	case e.timedOut:
		r.Status, r.ExitCode = "error", -1
	case e.code == 0:
		r.Status, r.ExitCode = "pass", 0
	case e.code == 126 || e.code == 127: // the shell could not run the command
		r.Status, r.ExitCode = "error", e.code
	default:
		r.Status, r.ExitCode = "fail", e.code
	}
	r.Messages, r.Truncated = parseMessages(workspace, output.String(), MaxCheckMessages)
	r.Truncated = r.Truncated || output.truncated()
	if e.timedOut {
		r.Messages = append(r.Messages, CheckMessage{Text: fmt.Sprintf("timed out after %s", cfg.CheckTimeout)})
	}
	return r, nil
}

// positionLine matches a `file:line[:column]: text` diagnostic, as go vet, gofmt -l's tools,
// staticcheck and most compilers print them.
var positionLine = regexp.MustCompile(`^([^\s:][^:]*):(\d+)(?::(\d+))?:\s?(.*)$`)

// parseMessages turns a check's output into messages, at most max (truncated reports more).
func parseMessages(workspace, output string, max int) ([]CheckMessage, bool) {
	msgs := []CheckMessage{}
	truncated := false
	for _, line := range strings.Split(output, "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "# ") {
			continue
		}
		if (line[0] == ' ' || line[0] == '\t') && len(msgs) > 0 {
			last := &msgs[len(msgs)-1]
			last.Text += "\n" + strings.TrimRight(line, " \t\r")
			continue
		}
		if len(msgs) == max {
			truncated = true
			break
		}
		text := strings.TrimPrefix(strings.TrimRight(line, "\r"), "vet: ")
		m := CheckMessage{Text: text}
		if sub := positionLine.FindStringSubmatch(text); sub != nil {
			m.File = checkFile(workspace, sub[1])
			m.Line, _ = strconv.Atoi(sub[2])
			m.Column, _ = strconv.Atoi(sub[3])
			m.Text = sub[4]
		}
		msgs = append(msgs, m)
	}
	return msgs, truncated
}

// checkFile shows a file named in a check's output relative to the workspace when it is inside.
func checkFile(workspace, file string) string {
	if filepath.IsAbs(file) {
		if rel, err := filepath.Rel(workspace, file); err == nil && !strings.HasPrefix(rel, "..") {
			file = rel
		}
	}
	return filepath.ToSlash(filepath.Clean(file))
}

// checksText renders run_checks' result for the model.
func checksText(out RunChecksOutput) string {
	var b strings.Builder
	if out.Passed {
		fmt.Fprintf(&b, "All %d checks passed.\n", len(out.Checks))
	} else {
		b.WriteString("Checks failed.\n")
	}
	for _, c := range out.Checks {
		fmt.Fprintf(&b, "%s: %s (exit %d, %d messages) — %s\n", c.Name, c.Status, c.ExitCode, len(c.Messages), c.Command)
		for _, m := range c.Messages {
			b.WriteString("  ")
			if m.File != "" {
				b.WriteString(m.File)
				if m.Line > 0 {
					fmt.Fprintf(&b, ":%d", m.Line)
				}
				if m.Column > 0 {
					fmt.Fprintf(&b, ":%d", m.Column)
				}
				b.WriteString(": ")
			}
			b.WriteString(strings.ReplaceAll(m.Text, "\n", "\n  "))
			b.WriteString("\n")
		}
		if c.Truncated {
			b.WriteString("  [more output left out]\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// TestFailure is one failure of failing_tests: the package's import path, the test's name (with
// "/" for subtests; empty when the package failed outside any test, e.g. a build failure) and the
// output that goes with it (the last 8 KiB).
type TestFailure struct {
	Package string `json:"package"`
	Test    string `json:"test,omitempty"`
	Output  string `json:"output"`
}

// FailingTestsOutput is failing_tests' structuredContent (SPEC §10): the failures in the order they
// happened; passed, failed and skipped count tests (subtests included), and failed also counts
// package-level failures, so it equals len(failures); packages counts the packages that reported
// a result; truncated when failures' output was cut to keep the total within OutputCap.
type FailingTestsOutput struct {
	Failures  []TestFailure `json:"failures"`
	Passed    int           `json:"passed"`
	Failed    int           `json:"failed"`
	Skipped   int           `json:"skipped"`
	Packages  int           `json:"packages"`
	Truncated bool          `json:"truncated"`
}

const failingTestsInput = `{
  "type": "object",
  "properties": {
    "packages": {
      "type": "array",
      "items": {"type": "string", "minLength": 1, "pattern": "^[^-]"},
      "minItems": 1,
      "description": "Package patterns to test (default [\"./...\"])."
    }
  },
  "additionalProperties": false
}`

const failingTestsOutput = `{
  "type": "object",
  "properties": {
    "failures": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "package": {"type": "string"},
          "test": {"type": "string"},
          "output": {"type": "string"}
        },
        "required": ["package", "output"],
        "additionalProperties": false
      }
    },
    "passed": {"type": "integer", "minimum": 0},
    "failed": {"type": "integer", "minimum": 0},
    "skipped": {"type": "integer", "minimum": 0},
    "packages": {"type": "integer", "minimum": 0},
    "truncated": {"type": "boolean"}
  },
  "required": ["failures", "passed", "failed", "skipped", "packages", "truncated"],
  "additionalProperties": false
}`

func failingTestsTool(cfg Config) *tool.Tool {
	return &tool.Tool{
		Name:  "failing_tests",
		Title: "Failing tests",
		Description: "Run the workspace's tests (by default `" + cfg.TestCommand + " ./...`) and " +
			"return the failing tests with their output, plus counts of passed, failed and " +
			"skipped tests." + runsCodeNote,
		InputSchema:  json.RawMessage(failingTestsInput),
		OutputSchema: json.RawMessage(failingTestsOutput),
		Annotations:  runsWorkspaceCode(),
		Preview:      testsPreview(cfg),
		Execute: func(ctx context.Context, arguments json.RawMessage, onUpdate func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct {
				Packages []string `json:"packages"`
			}
			if err := decode(arguments, &in); err != nil {
				return tool.Result{}, err
			}
			return failingTests(ctx, cfg.forCall(tc), tc.Workspace(), in.Packages, onUpdate)
		},
	}
}

// testEvent is one event of `go test -json` (cmd/test2json).
type testEvent struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string // build-output and build-fail events
	FailedBuild string // a package's fail event when its build failed
}

// failureOutputCap caps the output kept per test (its last bytes); all failures' output together
// is capped at Config.OutputCap.
const failureOutputCap = 8 << 10

// testRun folds a `go test -json` event stream into failures and counts. Its methods are called
// from one goroutine (the stdout reader), but progress may run on another, hence the lock.
type testRun struct {
	mu       sync.Mutex
	outputs  map[[2]string]*capture // by {package, test}; test "" for the package itself
	build    map[string]*capture    // build output by import path
	failedIn map[string]bool        // packages with a failing test
	out      FailingTestsOutput
	nonJSON  *capture // stdout lines that are not events
	lastPkg  string
	totalCap int
	spent    int
}

func newTestRun(totalCap int) *testRun {
	return &testRun{
		outputs:  map[[2]string]*capture{},
		build:    map[string]*capture{},
		failedIn: map[string]bool{},
		out:      FailingTestsOutput{Failures: []TestFailure{}},
		nonJSON:  newCapture(8<<10, true),
		totalCap: totalCap,
	}
}

// line handles one line of stdout.
func (r *testRun) line(b []byte) {
	var ev testEvent
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &ev) != nil || ev.Action == "" {
		r.nonJSON.write(b)
		r.nonJSON.write([]byte{'\n'})
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch ev.Action {
	case "build-output":
		r.captureFor(r.build, ev.ImportPath).write([]byte(ev.Output))
	case "output":
		key := [2]string{ev.Package, ev.Test}
		c := r.outputs[key]
		if c == nil {
			c = newCapture(failureOutputCap, true)
			r.outputs[key] = c
		}
		c.write([]byte(ev.Output))
	case "pass", "skip", "fail":
		if ev.Test == "" {
			r.lastPkg = ev.Package
			r.out.Packages++
			if ev.Action == "fail" && (ev.FailedBuild != "" || !r.failedIn[ev.Package]) {
				output := ""
				for _, c := range []*capture{r.build[ev.FailedBuild], r.outputs[[2]string{ev.Package, ""}]} {
					if c != nil {
						output += c.String()
						r.out.Truncated = r.out.Truncated || c.truncated()
					}
				}
				r.fail(ev.Package, "", output)
			}
			delete(r.outputs, [2]string{ev.Package, ""})
			return
		}
		key := [2]string{ev.Package, ev.Test}
		switch ev.Action {
		case "pass":
			r.out.Passed++
		case "skip":
			r.out.Skipped++
		case "fail":
			r.failedIn[ev.Package] = true
			output := ""
			if c := r.outputs[key]; c != nil {
				output = c.String()
				r.out.Truncated = r.out.Truncated || c.truncated()
			}
			r.fail(ev.Package, ev.Test, output)
		}
		delete(r.outputs, key)
	}
}

// fail records a failure, within the total output cap.
func (r *testRun) fail(pkg, test, output string) {
	r.out.Failed++
	if room := r.totalCap - r.spent; len(output) > room {
		output = tailString(output, room)
		r.out.Truncated = true
	}
	r.spent += len(output)
	r.out.Failures = append(r.out.Failures, TestFailure{Package: pkg, Test: test, Output: output})
}

// tailString returns at most the last n bytes of s, starting on a UTF-8 boundary.
func tailString(s string, n int) string {
	if n >= len(s) {
		return s
	}
	if n <= 0 {
		return ""
	}
	t := s[len(s)-n:]
	for i := 0; i < utf8.UTFMax-1 && len(t) > 0 && !utf8.RuneStart(t[0]); i++ {
		t = t[1:]
	}
	return t
}

func (r *testRun) captureFor(m map[string]*capture, key string) *capture {
	c := m[key]
	if c == nil {
		c = newCapture(failureOutputCap, true)
		m[key] = c
	}
	return c
}

// progress is the update for the run so far.
func (r *testRun) progress() tool.Update {
	r.mu.Lock()
	defer r.mu.Unlock()
	return tool.Update{
		Progress: float64(r.out.Packages),
		Message: fmt.Sprintf("%d packages done, %d tests run (%d failed); last: %s",
			r.out.Packages, r.out.Passed+r.out.Failed+r.out.Skipped, r.out.Failed, r.lastPkg),
	}
}

// failingTests implements failing_tests.
// testCommand is failing_tests' command line for packages (default ./...) in workspace.
func testCommand(cfg Config, workspace string, packages []string) (string, error) {
	if len(packages) == 0 {
		packages = []string{"./..."}
	}
	command := cfg.testCommandFor(workspace)
	for _, p := range packages {
		if strings.HasPrefix(p, "-") {
			return "", fmt.Errorf("package pattern %q must not start with \"-\"", p)
		}
		command += " " + shellQuote(p)
	}
	return command, nil
}

func failingTests(ctx context.Context, cfg Config, workspace string, packages []string, onUpdate func(tool.Update)) (tool.Result, error) {
	command, err := testCommand(cfg, workspace, packages)
	if err != nil {
		return tool.Result{}, err
	}
	run := newTestRun(cfg.OutputCap)
	rep := newReporter(onUpdate)
	defer rep.close()
	stderr := newCapture(8<<10, true)
	e, err := process{
		argv:    []string{"/bin/sh", "-c", command},
		dir:     workspace,
		env:     environ(cfg),
		timeout: cfg.CheckTimeout,
		stderr:  stderr,
		onLine: func(isStderr bool, line []byte) {
			if isStderr {
				return
			}
			run.line(line)
			rep.update(run.progress)
		},
	}.run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, fmt.Errorf("failing_tests cancelled: %w", ctx.Err())
		}
		return tool.Result{}, err
	}
	run.mu.Lock()
	out := run.out
	run.mu.Unlock()
	if e.timedOut {
		res := success(fmt.Sprintf("Tests timed out after %s.\n\n%s", cfg.CheckTimeout, testsText(out)), out)
		res.IsError = true
		return res, nil
	}
	if e.code != 0 && len(out.Failures) == 0 {
		detail := strings.TrimSpace(stderr.String() + "\n" + run.nonJSON.String())
		return tool.Result{}, fmt.Errorf("the test command %q failed (exit %d) without reporting a failing test: %s", command, e.code, detail)
	}
	if e.code == 0 && out.Packages == 0 {
		detail := strings.TrimSpace(stderr.String() + "\n" + run.nonJSON.String())
		if detail != "" {
			return tool.Result{}, errors.New("the test command reported no packages: " + detail)
		}
	}
	return success(testsText(out), out), nil
}

// testsText renders failing_tests' result for the model.
func testsText(out FailingTestsOutput) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d passed, %d failed, %d skipped in %d packages.\n", out.Passed, out.Failed, out.Skipped, out.Packages)
	for _, f := range out.Failures {
		name := f.Package
		if f.Test != "" {
			name += " " + f.Test
		} else {
			name += " (package)"
		}
		fmt.Fprintf(&b, "\nFAIL %s\n%s", name, f.Output)
		if !strings.HasSuffix(f.Output, "\n") {
			b.WriteString("\n")
		}
	}
	if out.Truncated {
		b.WriteString("\n[Some failure output was left out.]\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}
