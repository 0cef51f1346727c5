package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"countersign/internal/tool"
)

// Bounds of review_diff's lists; what is left out is counted in a note.
const (
	// MaxReviewFindings caps review_diff's check findings.
	MaxReviewFindings = 200
	// MaxReviewFailures caps review_diff's test failures.
	MaxReviewFailures = 200
	// maxSummaryLines caps the findings and failures named in review_diff's text.
	maxSummaryLines = 10
)

// The verdicts of review_diff.
const (
	VerdictClean          = "clean"           // every step ran; checks passed and no test failed
	VerdictNeedsAttention = "needs_attention" // every step ran; a check or a test failed
	VerdictIncomplete     = "incomplete"      // a step failed, was blocked or denied (see notes)
)

// ReviewFile is one changed file of a review: its path and added and deleted line counts.
type ReviewFile struct {
	Path      string `json:"path"`
	Additions int    `json:"additions"`
	Deletions int    `json:"deletions"`
}

// ReviewFinding is one finding of a check that did not pass: the check's name, where (when the
// check's output said so) and the text.
type ReviewFinding struct {
	Check  string `json:"check"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	Text   string `json:"text"`
}

// ReviewChecks is run_checks' part of a review: passed when every check passed, the findings of
// the others, and error, the nested call's result text, when run_checks failed or did not run
// (then passed is false).
type ReviewChecks struct {
	Passed   bool            `json:"passed"`
	Findings []ReviewFinding `json:"findings"`
	Error    string          `json:"error,omitempty"`
}

// ReviewTestFailure is one failing test of a review: its package and test ("" for a package-level
// failure such as a build failure).
type ReviewTestFailure struct {
	Package string `json:"package"`
	Test    string `json:"test,omitempty"`
}

// ReviewTests is failing_tests' part of a review: counts of passed and failed tests, the
// failures, and error, the nested call's result text, when failing_tests failed or did not run.
type ReviewTests struct {
	Passed   int                 `json:"passed"`
	Failed   int                 `json:"failed"`
	Failures []ReviewTestFailure `json:"failures"`
	Error    string              `json:"error,omitempty"`
}

// ReviewOutput is review_diff's structuredContent (SPEC §4, §10): the base the diff was taken
// against, the changed files, the checks and tests, the verdict (VerdictClean,
// VerdictNeedsAttention or VerdictIncomplete) and notes for a person: steps that did not complete,
// truncation, an empty diff.
type ReviewOutput struct {
	Base    string       `json:"base"`
	Files   []ReviewFile `json:"files"`
	Checks  ReviewChecks `json:"checks"`
	Tests   ReviewTests  `json:"tests"`
	Verdict string       `json:"verdict"`
	Notes   []string     `json:"notes"`
}

const reviewDiffInput = `{
  "type": "object",
  "properties": {
    "base": {"type": "string", "minLength": 1, "pattern": "^[^-]", "description": "Commit, branch or range to review against (default HEAD: the working tree against the last commit)."}
  },
  "additionalProperties": false
}`

const reviewDiffOutput = `{
  "type": "object",
  "properties": {
    "base": {"type": "string"},
    "files": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "path": {"type": "string"},
          "additions": {"type": "integer", "minimum": 0},
          "deletions": {"type": "integer", "minimum": 0}
        },
        "required": ["path", "additions", "deletions"],
        "additionalProperties": false
      }
    },
    "checks": {
      "type": "object",
      "properties": {
        "passed": {"type": "boolean"},
        "findings": {
          "type": "array",
          "items": {
            "type": "object",
            "properties": {
              "check": {"type": "string"},
              "file": {"type": "string"},
              "line": {"type": "integer", "minimum": 1},
              "column": {"type": "integer", "minimum": 1},
              "text": {"type": "string"}
            },
            "required": ["check", "text"],
            "additionalProperties": false
          }
        },
        "error": {"type": "string"}
      },
      "required": ["passed", "findings"],
      "additionalProperties": false
    },
    "tests": {
      "type": "object",
      "properties": {
        "passed": {"type": "integer", "minimum": 0},
        "failed": {"type": "integer", "minimum": 0},
        "failures": {
          "type": "array",
          "items": {
            "type": "object",
            "properties": {
              "package": {"type": "string"},
              "test": {"type": "string"}
            },
            "required": ["package"],
            "additionalProperties": false
          }
        },
        "error": {"type": "string"}
      },
      "required": ["passed", "failed", "failures"],
      "additionalProperties": false
    },
    "verdict": {"enum": ["clean", "needs_attention", "incomplete"]},
    "notes": {"type": "array", "items": {"type": "string"}}
  },
  "required": ["base", "files", "checks", "tests", "verdict", "notes"],
  "additionalProperties": false
}`

// reviewDiffTool is review_diff (SPEC §10), the canonical nested-call tool of SPEC §4: it calls
// git_diff, run_checks and failing_tests through ExecuteTool, so each passes the gate and shows
// under the review's call, and folds their results into one review. A nested call that fails, is
// blocked or denied does not fail the review: the review is incomplete and says why.
//
// It keeps readOnly annotations: it touches nothing itself, and every call it makes is gated on
// its own, so run_checks and failing_tests, which run workspace code, ask inside it (issue 15,
// item 9). Approving review_diff never approves them.
func reviewDiffTool(Config) *tool.Tool {
	return &tool.Tool{
		Name:  "review_diff",
		Title: "Review diff",
		Description: "Review the workspace's changes: runs git_diff, run_checks and failing_tests " +
			"and returns the changed files with their line counts, the checks' findings, the " +
			"failing tests and a verdict (clean, needs_attention, or incomplete when a step could " +
			"not run). `base` is what to diff against (default HEAD). It is read-only itself: " +
			"each call it makes goes through the same approval as a direct one, so run_checks " +
			"and failing_tests, which run the workspace's code, ask for approval inside it.",
		InputSchema:  json.RawMessage(reviewDiffInput),
		OutputSchema: json.RawMessage(reviewDiffOutput),
		Annotations:  readOnly(),
		Execute: func(ctx context.Context, arguments json.RawMessage, onUpdate func(tool.Update), tc tool.Context) (tool.Result, error) {
			var in struct {
				Base string `json:"base"`
			}
			if err := decode(arguments, &in); err != nil {
				return tool.Result{}, err
			}
			return reviewDiff(ctx, in.Base, emitter(onUpdate), tc)
		},
	}
}

// reviewStep is one nested call of review_diff.
type reviewStep struct {
	name      string
	arguments json.RawMessage
}

// reviewDiff implements review_diff. It fails (with no result) only when ctx ends.
func reviewDiff(ctx context.Context, base string, onUpdate func(tool.Update), tc tool.Context) (tool.Result, error) {
	diffArgs := json.RawMessage(`{}`)
	if base != "" {
		diffArgs = tool.Structured(map[string]string{"base": base})
	}
	steps := []reviewStep{
		{"git_diff", diffArgs},
		{"run_checks", json.RawMessage(`{}`)},
		{"failing_tests", json.RawMessage(`{}`)},
	}
	outcomes := make([]tool.Outcome, len(steps))
	for i, s := range steps {
		if err := context.Cause(ctx); err != nil {
			return tool.Result{}, err // stopped: nothing further runs
		}
		onUpdate(tool.Update{Progress: float64(i), Total: float64(len(steps)),
			Message: fmt.Sprintf("%d/%d %s", i+1, len(steps), s.name)})
		outcomes[i] = tc.ExecuteTool(ctx, s.name, s.arguments)
	}
	if err := context.Cause(ctx); err != nil {
		return tool.Result{}, err
	}
	out := buildReview(base, outcomes[0], outcomes[1], outcomes[2])
	onUpdate(tool.Update{Progress: float64(len(steps)), Total: float64(len(steps)),
		Message: "Review done: " + out.Verdict})
	return success(reviewText(out), out), nil
}

// buildReview folds the three nested outcomes into a review. A failed outcome's structuredContent
// is used when it has one (failing_tests' timeout keeps the failures so far), but the review is
// then incomplete.
func buildReview(base string, diff, checks, tests tool.Outcome) ReviewOutput {
	out := ReviewOutput{
		Base:   base,
		Files:  []ReviewFile{},
		Checks: ReviewChecks{Findings: []ReviewFinding{}},
		Tests:  ReviewTests{Failures: []ReviewTestFailure{}},
		Notes:  []string{},
	}
	if out.Base == "" {
		out.Base = "HEAD"
	}
	incomplete := false
	failed := func(name string, o tool.Outcome) string {
		incomplete = true
		text := callErrorText(name, o)
		out.Notes = append(out.Notes, fmt.Sprintf("%s did not complete: %s", name, firstLine(text)))
		return text
	}
	unreadable := func(name string, err error) {
		incomplete = true
		out.Notes = append(out.Notes, fmt.Sprintf("%s returned a result that cannot be read: %v", name, err))
	}

	var d GitDiffOutput
	if diff.IsError {
		failed("git_diff", diff)
	} else if err := json.Unmarshal(diff.Result.StructuredContent, &d); err != nil {
		unreadable("git_diff", err)
	} else {
		if d.Base != "" {
			out.Base = d.Base
		}
		for _, f := range d.Files {
			out.Files = append(out.Files, ReviewFile{Path: f.Path, Additions: f.Additions, Deletions: f.Deletions})
		}
		if len(d.Files) == 0 {
			out.Notes = append(out.Notes, "No changes against "+out.Base+".")
		}
		if d.Truncated {
			out.Notes = append(out.Notes, "The diff was truncated: some files or patches were left out.")
		}
	}

	var c RunChecksOutput
	if checks.IsError {
		out.Checks.Error = failed("run_checks", checks)
	} else if err := json.Unmarshal(checks.Result.StructuredContent, &c); err != nil {
		unreadable("run_checks", err)
		out.Checks.Error = err.Error()
	} else {
		out.Checks.Passed = c.Passed
		left := 0
		for _, r := range c.Checks {
			if r.Status == "pass" {
				continue
			}
			findings := make([]ReviewFinding, 0, len(r.Messages))
			for _, m := range r.Messages {
				findings = append(findings, ReviewFinding{Check: r.Name, File: m.File, Line: m.Line, Column: m.Column, Text: m.Text})
			}
			if len(findings) == 0 {
				text := fmt.Sprintf("%s (exit status %d)", r.Status, r.ExitCode)
				if r.Status == "error" {
					text = "the check could not run"
				}
				findings = append(findings, ReviewFinding{Check: r.Name, Text: text})
			}
			for _, f := range findings {
				if len(out.Checks.Findings) == MaxReviewFindings {
					left++
					continue
				}
				out.Checks.Findings = append(out.Checks.Findings, f)
			}
			if r.Truncated {
				out.Notes = append(out.Notes, fmt.Sprintf("Check %s reported more than its messages here.", r.Name))
			}
		}
		if left > 0 {
			out.Notes = append(out.Notes, fmt.Sprintf("%d more findings were left out.", left))
		}
	}

	var ft FailingTestsOutput
	if tests.IsError {
		out.Tests.Error = failed("failing_tests", tests)
	}
	if len(tests.Result.StructuredContent) > 0 {
		if err := json.Unmarshal(tests.Result.StructuredContent, &ft); err != nil {
			if !tests.IsError {
				unreadable("failing_tests", err)
				out.Tests.Error = err.Error()
			}
		} else {
			out.Tests.Passed, out.Tests.Failed = ft.Passed, ft.Failed
			for i, f := range ft.Failures {
				if i == MaxReviewFailures {
					out.Notes = append(out.Notes, fmt.Sprintf("%d more test failures were left out.", len(ft.Failures)-i))
					break
				}
				out.Tests.Failures = append(out.Tests.Failures, ReviewTestFailure{Package: f.Package, Test: f.Test})
			}
		}
	} else if !tests.IsError {
		unreadable("failing_tests", fmt.Errorf("no structuredContent"))
		out.Tests.Error = "no structuredContent"
	}

	switch {
	case incomplete:
		out.Verdict = VerdictIncomplete
	case !out.Checks.Passed || out.Tests.Failed > 0:
		out.Verdict = VerdictNeedsAttention
	default:
		out.Verdict = VerdictClean
	}
	return out
}

// reviewText is review_diff's short summary for the model.
func reviewText(out ReviewOutput) string {
	var b strings.Builder
	adds, dels := 0, 0
	for _, f := range out.Files {
		adds += f.Additions
		dels += f.Deletions
	}
	fmt.Fprintf(&b, "Review against %s: %s. Verdict: %s.\n", out.Base, plural(len(out.Files), "file"), out.Verdict)
	if len(out.Files) > 0 {
		fmt.Fprintf(&b, "Changes: +%d −%d in %s.\n", adds, dels, plural(len(out.Files), "file"))
	}
	switch {
	case out.Checks.Error != "":
		b.WriteString("Checks: did not complete.\n")
	case out.Checks.Passed:
		b.WriteString("Checks: passed.\n")
	default:
		fmt.Fprintf(&b, "Checks: failed (%s).\n", plural(len(out.Checks.Findings), "finding"))
		for i, f := range out.Checks.Findings {
			if i == maxSummaryLines {
				fmt.Fprintf(&b, "  … and %d more\n", len(out.Checks.Findings)-i)
				break
			}
			where := ""
			if f.File != "" {
				where = f.File
				if f.Line > 0 {
					where += fmt.Sprintf(":%d", f.Line)
				}
				where += ": "
			}
			fmt.Fprintf(&b, "  [%s] %s%s\n", f.Check, where, firstLine(f.Text))
		}
	}
	if out.Tests.Error != "" && out.Tests.Passed+out.Tests.Failed == 0 {
		b.WriteString("Tests: did not complete.\n")
	} else {
		fmt.Fprintf(&b, "Tests: %d passed, %d failed.\n", out.Tests.Passed, out.Tests.Failed)
		for i, f := range out.Tests.Failures {
			if i == maxSummaryLines {
				fmt.Fprintf(&b, "  … and %d more\n", len(out.Tests.Failures)-i)
				break
			}
			name := f.Test
			if name == "" {
				name = "(package)"
			}
			fmt.Fprintf(&b, "  FAIL %s %s\n", f.Package, name)
		}
	}
	for _, n := range out.Notes {
		b.WriteString("Note: " + n + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// plural is "1 file", "2 files".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
