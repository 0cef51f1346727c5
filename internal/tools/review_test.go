package tools

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"countersign/internal/tool"
)

// okResult is a successful nested result with v as structuredContent.
func okResult(v any) tool.Result {
	return tool.Result{Content: []tool.Content{tool.Text("ok")}, StructuredContent: tool.Structured(v)}
}

var (
	twoFiles = GitDiffOutput{Base: "HEAD", Files: []DiffFile{
		{Path: "a.go", Status: "modified", Additions: 3, Deletions: 1, Patch: "…"},
		{Path: "b.go", Status: "added", Additions: 10, Patch: "…", Untracked: true},
	}}
	checksPass = RunChecksOutput{Passed: true, Checks: []CheckResult{{Name: "vet", Command: "go vet ./...", Status: "pass", Messages: []CheckMessage{}}}}
	testsPass  = FailingTestsOutput{Failures: []TestFailure{}, Passed: 4, Packages: 2}
)

func TestReviewDiff(t *testing.T) {
	tests := []struct {
		name    string
		base    string
		results map[string]tool.Result // by tool name
		// wantDiffArgs are the arguments git_diff gets.
		wantDiffArgs string
		want         ReviewOutput
		wantText     []string
	}{
		{
			name:    "clean",
			results: map[string]tool.Result{"git_diff": okResult(twoFiles), "run_checks": okResult(checksPass), "failing_tests": okResult(testsPass)},
			want: ReviewOutput{Base: "HEAD",
				Files:   []ReviewFile{{Path: "a.go", Additions: 3, Deletions: 1}, {Path: "b.go", Additions: 10}},
				Checks:  ReviewChecks{Passed: true, Findings: []ReviewFinding{}},
				Tests:   ReviewTests{Passed: 4, Failures: []ReviewTestFailure{}},
				Verdict: VerdictClean, Notes: []string{}},
			wantDiffArgs: `{}`,
			wantText:     []string{"Review against HEAD: 2 files. Verdict: clean.", "+13 −1", "Checks: passed.", "Tests: 4 passed, 0 failed."},
		},
		{
			name: "needs attention",
			base: "main",
			results: map[string]tool.Result{
				"git_diff": okResult(GitDiffOutput{Base: "main", Files: []DiffFile{{Path: "a.go", Additions: 1, Patch: ""}}, Truncated: true}),
				"run_checks": okResult(RunChecksOutput{Checks: []CheckResult{
					{Name: "vet", Status: "fail", ExitCode: 1, Messages: []CheckMessage{{File: "a.go", Line: 7, Column: 2, Text: "self-assignment"}}},
					{Name: "fmt", Status: "fail", ExitCode: 2, Messages: []CheckMessage{}},
					{Name: "lint", Status: "error", ExitCode: 127, Messages: []CheckMessage{}},
					{Name: "ok", Status: "pass", Messages: []CheckMessage{{Text: "fine"}}},
				}}),
				"failing_tests": okResult(FailingTestsOutput{Passed: 3, Failed: 2, Packages: 2, Failures: []TestFailure{
					{Package: "m/calc", Test: "TestSub", Output: "want 2"}, {Package: "m/greet", Output: "build failed"},
				}}),
			},
			wantDiffArgs: `{"base":"main"}`,
			want: ReviewOutput{Base: "main",
				Files: []ReviewFile{{Path: "a.go", Additions: 1}},
				Checks: ReviewChecks{Findings: []ReviewFinding{
					{Check: "vet", File: "a.go", Line: 7, Column: 2, Text: "self-assignment"},
					{Check: "fmt", Text: "fail (exit status 2)"},
					{Check: "lint", Text: "the check could not run"},
				}},
				Tests:   ReviewTests{Passed: 3, Failed: 2, Failures: []ReviewTestFailure{{Package: "m/calc", Test: "TestSub"}, {Package: "m/greet"}}},
				Verdict: VerdictNeedsAttention,
				Notes:   []string{"The diff was truncated: some files or patches were left out."}},
			wantText: []string{"Verdict: needs_attention", "Checks: failed (3 findings).", "[vet] a.go:7: self-assignment",
				"Tests: 3 passed, 2 failed.", "FAIL m/calc TestSub", "FAIL m/greet (package)", "Note: The diff was truncated"},
		},
		{
			name: "a denied step makes it incomplete, not failed",
			results: map[string]tool.Result{
				"git_diff":      okResult(GitDiffOutput{Base: "HEAD", Files: []DiffFile{}}),
				"run_checks":    tool.ErrorResult("Denied by owner: no"),
				"failing_tests": okResult(testsPass),
			},
			wantDiffArgs: `{}`,
			want: ReviewOutput{Base: "HEAD", Files: []ReviewFile{},
				Checks:  ReviewChecks{Findings: []ReviewFinding{}, Error: "Denied by owner: no"},
				Tests:   ReviewTests{Passed: 4, Failures: []ReviewTestFailure{}},
				Verdict: VerdictIncomplete,
				Notes:   []string{"No changes against HEAD.", "run_checks did not complete: Denied by owner: no"}},
			wantText: []string{"Verdict: incomplete", "Checks: did not complete.", "Note: run_checks did not complete: Denied by owner: no"},
		},
		{
			name: "every step failed",
			results: map[string]tool.Result{
				"git_diff":      tool.ErrorResult("the workspace /w is not a git repository (exit status 128)"),
				"run_checks":    tool.ErrorResult("guarded by policy"),
				"failing_tests": tool.NotFound("failing_tests"),
			},
			wantDiffArgs: `{}`,
			want: ReviewOutput{Base: "HEAD", Files: []ReviewFile{},
				Checks:  ReviewChecks{Findings: []ReviewFinding{}, Error: "guarded by policy"},
				Tests:   ReviewTests{Failures: []ReviewTestFailure{}, Error: `Tool "failing_tests" not found`},
				Verdict: VerdictIncomplete,
				Notes: []string{"git_diff did not complete: the workspace /w is not a git repository (exit status 128)",
					"run_checks did not complete: guarded by policy", `failing_tests did not complete: Tool "failing_tests" not found`}},
			wantText: []string{"Review against HEAD: 0 files. Verdict: incomplete.", "Tests: did not complete."},
		},
		{
			name: "a timed-out test run keeps its data",
			results: map[string]tool.Result{
				"git_diff":   okResult(twoFiles),
				"run_checks": okResult(checksPass),
				"failing_tests": {IsError: true, Content: []tool.Content{tool.Text("Tests timed out after 10m0s.\n\n1 passed")},
					StructuredContent: tool.Structured(FailingTestsOutput{Passed: 1, Failed: 1, Failures: []TestFailure{{Package: "m", Test: "TestSlow"}}})},
			},
			wantDiffArgs: `{}`,
			want: ReviewOutput{Base: "HEAD",
				Files:   []ReviewFile{{Path: "a.go", Additions: 3, Deletions: 1}, {Path: "b.go", Additions: 10}},
				Checks:  ReviewChecks{Passed: true, Findings: []ReviewFinding{}},
				Tests:   ReviewTests{Passed: 1, Failed: 1, Failures: []ReviewTestFailure{{Package: "m", Test: "TestSlow"}}, Error: "Tests timed out after 10m0s.\n\n1 passed"},
				Verdict: VerdictIncomplete,
				Notes:   []string{"failing_tests did not complete: Tests timed out after 10m0s. …"}},
			wantText: []string{"Tests: 1 passed, 1 failed.", "FAIL m TestSlow"},
		},
	}
	rd := mustTools(t, Config{})["review_diff"]
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &nestedFake{handle: func(_ context.Context, name string, _ json.RawMessage) tool.Result {
				return tt.results[name]
			}}
			var mu sync.Mutex
			var updates []string
			args := map[string]any{}
			if tt.base != "" {
				args["base"] = tt.base
			}
			raw, _ := json.Marshal(args)
			if v := rd.ValidateInput(raw); len(v) > 0 {
				t.Fatal(v)
			}
			res, err := rd.Execute(context.Background(), raw, func(u tool.Update) {
				mu.Lock()
				updates = append(updates, u.Message)
				mu.Unlock()
			}, fake)
			if err != nil || res.IsError {
				t.Fatalf("review failed: %v %s; a failed nested call must not fail the review", err, res.TextOf())
			}
			got := mustStructured[ReviewOutput](t, map[string]*tool.Tool{"review_diff": rd}, "review_diff", res)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("review\n got  %+v\n want %+v", got, tt.want)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(res.TextOf(), s) {
					t.Errorf("text %q does not contain %q", res.TextOf(), s)
				}
			}
			var names []string
			for _, c := range fake.calls() {
				names = append(names, c.Name)
			}
			if got, want := strings.Join(names, ","), "git_diff,run_checks,failing_tests"; got != want {
				t.Errorf("calls %s, want %s", got, want)
			}
			if got := string(fake.calls()[0].Arguments); got != tt.wantDiffArgs {
				t.Errorf("git_diff arguments %s, want %s", got, tt.wantDiffArgs)
			}
			wantUpdates := []string{"1/3 git_diff", "2/3 run_checks", "3/3 failing_tests", "Review done: " + tt.want.Verdict}
			if !reflect.DeepEqual(updates, wantUpdates) {
				t.Errorf("updates %q, want %q", updates, wantUpdates)
			}
		})
	}
}

func TestReviewDiffStopped(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("Run stopped by owner")
	fake := &nestedFake{handle: func(_ context.Context, name string, _ json.RawMessage) tool.Result {
		cancel(stop) // Stop arrives while git_diff runs
		return tool.ErrorResult("%s", stop)
	}}
	_, err := mustTools(t, Config{})["review_diff"].Execute(ctx, json.RawMessage(`{}`), nil, fake)
	if !errors.Is(err, stop) {
		t.Errorf("err = %v, want the stop's cause", err)
	}
	if n := len(fake.calls()); n != 1 {
		t.Errorf("%d nested calls, want 1: nothing further runs after a stop", n)
	}
}
