package tools_test

// Nested calls through the real call pipeline (SPEC §4): a Runner over a real SQLite store, the
// faux model, and the built-in tools, with review_diff and codemode calling other tools through
// ExecuteTool.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/store/sqlite"
	"countersign/internal/testkit"
	"countersign/internal/tool"
	"countersign/internal/tools"
)

// pipeline is a Runner over a real store with the built-in tools (plus extra ones), the faux
// model replaying one script, and a spy tool_call handler.
type pipeline struct {
	t      *testing.T
	env    *testkit.Env
	db     *sqlite.DB
	runner *agent.Runner
	reg    *tool.Registry
	sess   agent.Session
	events *agent.Subscription
	spy    *callSpy
}

// callSpy is a tool_call handler that records what it sees and lets every call through.
type callSpy struct {
	mu   sync.Mutex
	seen []gate.CallEvent
}

func (s *callSpy) handle(_ context.Context, ev gate.CallEvent) (gate.Verdict, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, ev)
	return gate.Verdict{}, nil
}

// calls lists the calls the spy saw as "name id parent".
func (s *callSpy) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.seen))
	for i, ev := range s.seen {
		out[i] = fmt.Sprintf("%s %s %q", ev.ToolName, ev.ToolCallID, ev.ParentToolCallID)
	}
	return out
}

type fauxStep struct {
	id, name string
	args     any
	text     string
}

// fauxScript renders steps as a faux model script (SPEC §5).
func fauxScript(t *testing.T, steps ...fauxStep) string {
	t.Helper()
	type block struct {
		Type      string `json:"type"`
		Text      string `json:"text,omitempty"`
		ID        string `json:"id,omitempty"`
		Name      string `json:"name,omitempty"`
		Arguments any    `json:"arguments,omitempty"`
	}
	type step struct {
		Content    []block `json:"content"`
		StopReason string  `json:"stopReason"`
	}
	var sc struct {
		Steps []step `json:"steps"`
	}
	for _, s := range steps {
		if s.name != "" {
			sc.Steps = append(sc.Steps, step{Content: []block{{Type: "toolCall", ID: s.id, Name: s.name, Arguments: s.args}}, StopReason: "toolUse"})
		} else {
			sc.Steps = append(sc.Steps, step{Content: []block{{Type: "text", Text: s.text}}, StopReason: "stop"})
		}
	}
	b, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newPipeline(t *testing.T, script, workspace string, cfg tools.Config, extra ...*tool.Tool) *pipeline {
	t.Helper()
	spy := &callSpy{}
	env := testkit.New(t, testkit.Options{Tools: append(tools.Builtin(cfg), extra...), Scripts: map[string]string{"test": script},
		Agent: func(c *agent.Config) { c.CallHandlers = gate.Handlers{spy.handle} }})
	sess, err := env.Runner.CreateSession(context.Background(), "test", "faux:test", workspace)
	if err != nil {
		t.Fatal(err)
	}
	return &pipeline{t: t, env: env, db: env.DB, runner: env.Runner, reg: env.Tools, sess: sess, events: env.Broker.Subscribe(sess.ID), spy: spy}
}

// send starts a run with a user message.
func (p *pipeline) send() {
	p.t.Helper()
	if err := p.runner.Send(context.Background(), p.sess.ID, "go"); err != nil {
		p.t.Fatal(err)
	}
}

// await returns the next event of type typ, failing the test after 20 s; seen, when not nil,
// receives every event read on the way.
func (p *pipeline) await(typ agent.EventType, seen *[]agent.Event) agent.Event {
	p.t.Helper()
	return testkit.Await(p.t, p.events, typ, 20*time.Second, seen)
}

func (p *pipeline) entries() []agent.Entry {
	p.t.Helper()
	return p.env.Entries(p.sess.ID)
}

func (p *pipeline) toolResults() []agent.Message {
	p.t.Helper()
	return p.env.ToolResults(p.sess.ID)
}

// approvalsOf lists the session's approvals (prompts and automatic decisions) of tool name.
func (p *pipeline) approvalsOf(name string) []gate.Approval {
	p.t.Helper()
	as, err := p.db.Approvals(context.Background(), p.sess.ID, "")
	if err != nil {
		p.t.Fatal(err)
	}
	var out []gate.Approval
	for _, a := range as {
		if a.ToolName == name {
			out = append(out, a)
		}
	}
	return out
}

// nestedSummary lists a nestedCalls record as "id name status".
func nestedSummary(nc *tool.NestedCalls) []string {
	if nc == nil {
		return nil
	}
	out := make([]string, len(nc.Calls))
	for i, c := range nc.Calls {
		out[i] = c.ID + " " + c.Name + " " + string(c.Status)
	}
	return out
}

// gitRun runs git in dir for a test.
func gitRun(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Test", "-c", "user.email=test@example.com",
		"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// testStream is a stand-in test command: it prints a `go test -json` stream with one passing and
// one failing test, whatever package patterns are appended (":" swallows them).
const testStream = `printf '%s\n' ` +
	`'{"Action":"pass","Package":"example.com/m","Test":"TestOK"}' ` +
	`'{"Action":"output","Package":"example.com/m","Test":"TestBad","Output":"want 2\n"}' ` +
	`'{"Action":"fail","Package":"example.com/m","Test":"TestBad"}' ` +
	`'{"Action":"fail","Package":"example.com/m"}'; :`

// TestReviewDiffThroughThePipeline is SPEC §4's canonical example: the model calls review_diff
// only; review_diff calls git_diff, run_checks and failing_tests through ExecuteTool; the gate's
// handlers observe all four calls; the transcript holds one tool result, for review_diff, whose
// nestedCalls record lists the three.
func TestReviewDiffThroughThePipeline(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	ws := t.TempDir()
	gitRun(t, ws, "init", "-q")
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, ws, "add", "a.txt")
	gitRun(t, ws, "commit", "-q", "-m", "first")
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "b.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := tools.Config{Checks: []tools.Check{{Name: "vet", Command: "true"}}, TestCommand: testStream}
	p := newPipeline(t, fauxScript(t,
		fauxStep{id: "r1", name: "review_diff", args: map[string]any{}},
		fauxStep{text: "Verdict: {{lastResult.verdict}}"},
	), ws, cfg)
	p.send()
	// run_checks and failing_tests run workspace code, so they ask inside review_diff (issue 15,
	// item 9); git_diff and review_diff itself do not.
	var asked []string
	seen := p.runDeciding(func(a gate.Approval) gate.Answer {
		asked = append(asked, fmt.Sprintf("%s %s %q by %s", a.ToolName, a.ToolCallID, a.ParentToolCallID, a.RequestedBy))
		return gate.Answer{Decision: "approve", By: gate.Owner()}
	})
	if want := []string{`run_checks r1/2 "r1" by review_diff`, `failing_tests r1/3 "r1" by review_diff`}; !reflect.DeepEqual(asked, want) {
		t.Errorf("prompts %q, want %q", asked, want)
	}

	wantSeen := []string{`review_diff r1 ""`, `git_diff r1/1 "r1"`, `run_checks r1/2 "r1"`, `failing_tests r1/3 "r1"`}
	if got := p.spy.calls(); !reflect.DeepEqual(got, wantSeen) {
		t.Errorf("tool_call handler saw %q, want %q", got, wantSeen)
	}

	rs := p.toolResults()
	if len(rs) != 1 || rs[0].ToolCallID != "r1" || rs[0].ToolName != "review_diff" {
		t.Fatalf("transcript tool results %+v, want exactly one, for review_diff r1", rs)
	}
	res := rs[0].Result
	if res.IsError {
		t.Fatalf("review_diff failed: %s", res.TextOf())
	}
	if got, want := nestedSummary(res.NestedCalls), []string{"r1/1 git_diff ok", "r1/2 run_checks ok", "r1/3 failing_tests ok"}; !reflect.DeepEqual(got, want) {
		t.Errorf("nestedCalls %q, want %q", got, want)
	}
	if !res.NestedCalls.Complete {
		t.Error("nestedCalls not complete")
	}
	var review tools.ReviewOutput
	if err := json.Unmarshal(res.StructuredContent, &review); err != nil {
		t.Fatal(err)
	}
	want := tools.ReviewOutput{Base: "HEAD",
		Files:   []tools.ReviewFile{{Path: "a.txt", Additions: 1, Deletions: 1}, {Path: "b.txt", Additions: 1}},
		Checks:  tools.ReviewChecks{Passed: true, Findings: []tools.ReviewFinding{}},
		Tests:   tools.ReviewTests{Passed: 1, Failed: 1, Failures: []tools.ReviewTestFailure{{Package: "example.com/m", Test: "TestBad"}}},
		Verdict: tools.VerdictNeedsAttention, Notes: []string{}}
	if !reflect.DeepEqual(review, want) {
		t.Errorf("review\n got  %+v\n want %+v", review, want)
	}
	if got, want := p.entries()[len(p.entries())-1].Message.Text(), "Verdict: needs_attention"; got != want {
		t.Errorf("final text %q, want %q", got, want)
	}

	// Nested progress is streamed under the parent; nested ends carry parentToolCallId.
	var nestedEnds []string
	for _, ev := range seen {
		if ev.Type == agent.ToolExecutionEnd && ev.ParentToolCallID != "" {
			nestedEnds = append(nestedEnds, ev.ToolCallID+"<"+ev.ParentToolCallID)
		}
	}
	if got, want := nestedEnds, []string{"r1/1<r1", "r1/2<r1", "r1/3<r1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("nested tool_execution_end events %q, want %q", got, want)
	}
	var lastUpdate string
	for _, ev := range seen {
		if ev.Type == agent.ToolExecutionUpdate && ev.ToolCallID == "r1" {
			lastUpdate = ev.Update.Message
		}
	}
	if got, want := lastUpdate, "Review done: needs_attention"; got != want {
		t.Errorf("review_diff's last progress %q, want %q", got, want)
	}
}

// runDeciding reads the run's events until agent_end, answering each approval_requested with
// decide's decision, and returns every event read. It fails the test on a run error or when
// nothing arrives for 60 s (a go test run in the workspace may take a while on a busy machine).
func (p *pipeline) runDeciding(decide func(gate.Approval) gate.Answer) []agent.Event {
	p.t.Helper()
	var seen []agent.Event
	for {
		select {
		case ev, ok := <-p.events.C:
			if !ok {
				p.t.Fatal("the subscription was dropped")
			}
			seen = append(seen, *ev)
			switch ev.Type {
			case agent.ApprovalRequested:
				if _, err := p.runner.Gate().Decide(context.Background(), p.sess.ID, ev.Approval.ID, decide(*ev.Approval)); err != nil {
					p.t.Fatal(err)
				}
			case agent.AgentEnd:
				if ev.Error != "" {
					p.t.Fatalf("run error %q", ev.Error)
				}
				return seen
			}
		case <-time.After(60 * time.Second):
			p.t.Fatal("no event within 60s")
		}
	}
}

// goModule writes a Go module into dir whose test file's init() writes marker (an absolute path
// outside the workspace): the workspace code that `go test` runs.
func goModule(t *testing.T, dir, marker string) {
	t.Helper()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n",
		"m.go":   "package m\n\nfunc Two() int { return 2 }\n",
		"m_test.go": "package m\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\n" +
			"func init() { _ = os.WriteFile(" + strconv.Quote(marker) + ", []byte(\"ran\"), 0o644) }\n\n" +
			"func TestTwo(t *testing.T) {\n\tif Two() != 2 {\n\t\tt.Fatal(\"no\")\n\t}\n}\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWorkspaceCodeRunsOnlyAfterApproval (issue 15, item 9): the workspace holds a Go module whose
// test file's init() writes a marker outside the workspace. The model calls review_diff, with the
// default checks (go vet) and test command (go test -json): run_checks and failing_tests each
// ask, as nested prompts of review_diff, before anything runs; the marker is not written while
// they wait, nor when they are denied, and is written once failing_tests is approved.
func TestWorkspaceCodeRunsOnlyAfterApproval(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go not installed")
	}
	for _, approve := range []bool{false, true} {
		name := "denied"
		if approve {
			name = "approved"
		}
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			ws, marker := filepath.Join(base, "ws"), filepath.Join(base, "outside-marker")
			if err := os.Mkdir(ws, 0o755); err != nil {
				t.Fatal(err)
			}
			goModule(t, ws, marker)
			p := newPipeline(t, fauxScript(t,
				fauxStep{id: "r1", name: "review_diff", args: map[string]any{}},
				fauxStep{text: "Verdict: {{lastResult.verdict}}"},
			), ws, tools.Config{})
			p.send()
			var asked []string
			p.runDeciding(func(a gate.Approval) gate.Answer {
				asked = append(asked, a.ToolName+" "+a.ToolCallID+" requested by "+a.RequestedBy)
				if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("while %s waits for approval, the marker exists (%v): workspace code ran unapproved", a.ToolName, err)
				}
				if !approve {
					return gate.Answer{Decision: "deny", Reason: "not this code", By: gate.Owner()}
				}
				return gate.Answer{Decision: "approve", By: gate.Owner()}
			})
			if want := []string{"run_checks r1/2 requested by review_diff", "failing_tests r1/3 requested by review_diff"}; !reflect.DeepEqual(asked, want) {
				t.Errorf("prompts %q, want %q", asked, want)
			}
			_, err := os.Stat(marker)
			switch {
			case !approve && !errors.Is(err, os.ErrNotExist):
				t.Errorf("denied, yet the marker exists (%v): workspace code ran", err)
			case approve && err != nil:
				t.Errorf("approved, yet no marker (%v): the test setup does not run workspace code", err)
			}
			res := p.toolResults()[0].Result
			var review tools.ReviewOutput
			if err := json.Unmarshal(res.StructuredContent, &review); err != nil {
				t.Fatalf("review_diff result %q: %v", res.TextOf(), err)
			}
			wantStatus := "denied"
			if approve {
				wantStatus = "ok"
			}
			if got, want := nestedSummary(res.NestedCalls)[1:], []string{"r1/2 run_checks " + wantStatus, "r1/3 failing_tests " + wantStatus}; !reflect.DeepEqual(got, want) {
				t.Errorf("nestedCalls %q, want %q", got, want)
			}
			if !approve && (review.Verdict != tools.VerdictIncomplete || review.Tests.Error != "Denied by owner: not this code") {
				t.Errorf("review %+v, want incomplete with the denial", review)
			}
		})
	}
}

// codemodeSession is a pipeline over an empty workspace whose model calls codemode (activated)
// once with code as call m1.
func codemodeSession(t *testing.T, code string) (*pipeline, string) {
	t.Helper()
	ws := t.TempDir()
	p := newPipeline(t, fauxScript(t,
		fauxStep{id: "m1", name: "codemode", args: map[string]any{"code": code}},
		fauxStep{text: "done"},
	), ws, tools.Config{})
	if _, _, err := p.runner.SetActiveTools(context.Background(), p.sess.ID, append(p.reg.DefaultActive(), "codemode")); err != nil {
		t.Fatal(err)
	}
	return p, ws
}

// awaitApproval waits for the next approval prompt and checks who asked: codemode's call m1.
func (p *pipeline) awaitApproval(wantID string) gate.Approval {
	p.t.Helper()
	a := *p.await(agent.ApprovalRequested, nil).Approval
	if a.ToolName != "write_file" || a.ToolCallID != wantID || a.ParentToolCallID != "m1" || a.RequestedBy != "codemode" {
		p.t.Fatalf("approval %s %s parent %q requested by %q; want write_file %s, parent m1, requested by codemode",
			a.ToolName, a.ToolCallID, a.ParentToolCallID, a.RequestedBy, wantID)
	}
	return a
}

// TestCodemodeApprovalsThroughThePipeline: each write_file a script makes is gated and prompted
// for; the owner approves the first and denies the second, which the script catches. The script
// runs in a worker process with its own limits, which waits for the server's answers.
func TestCodemodeApprovalsThroughThePipeline(t *testing.T) {
	p, ws := codemodeSession(t, `
	  const first = await tools.write_file({path: "one.txt", content: "1"});
	  let denied = null;
	  try { await tools.write_file({path: "two.txt", content: "2"}) } catch (e) { denied = e.message }
	  return {created: first.created, denied}`)
	ctx := context.Background()
	p.send()
	a1 := p.awaitApproval("m1/1")
	workers := tools.CodemodeWorkers(t)
	if len(workers) != 1 {
		t.Fatalf("codemode workers %v while the script waits for a call, want one", workers)
	}
	if cpu, as := tools.WorkerLimits(t, workers[0]); cpu == "" || as == "" || strings.Contains(cpu+as, "unlimited") {
		t.Errorf("the worker's limits are %q and %q, want a CPU time and an address space limit", cpu, as)
	}
	if _, err := p.runner.Gate().Decide(ctx, p.sess.ID, a1.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	a2 := p.awaitApproval("m1/2")
	if _, err := p.runner.Gate().Decide(ctx, p.sess.ID, a2.ID, gate.Answer{Decision: "deny", Reason: "no", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	if end := p.await(agent.AgentEnd, nil); end.Error != "" {
		t.Fatalf("run error %q", end.Error)
	}

	if b, err := os.ReadFile(filepath.Join(ws, "one.txt")); err != nil || string(b) != "1" {
		t.Errorf("one.txt = %q, %v; want the approved write", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "two.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("two.txt: %v; want no file (denied)", err)
	}
	rs := p.toolResults()
	if len(rs) != 1 || rs[0].ToolCallID != "m1" {
		t.Fatalf("tool results %+v, want one, for codemode m1", rs)
	}
	res := rs[0].Result
	if res.IsError {
		t.Fatalf("codemode failed: %s", res.TextOf())
	}
	var out tools.CodemodeOutput
	if err := json.Unmarshal(res.StructuredContent, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := string(out.Result), `{"created":true,"denied":"Denied by owner: no"}`; got != want {
		t.Errorf("script result %s, want %s", got, want)
	}
	wantCalls := []tools.CodemodeCall{
		{ID: "m1/1", Name: "write_file", Status: "ok"},
		{ID: "m1/2", Name: "write_file", Status: "error", Error: "Denied by owner: no"},
	}
	if !reflect.DeepEqual(out.Calls, wantCalls) {
		t.Errorf("codemode calls %+v, want %+v", out.Calls, wantCalls)
	}
	if got, want := nestedSummary(res.NestedCalls), []string{"m1/1 write_file ok", "m1/2 write_file denied"}; !reflect.DeepEqual(got, want) {
		t.Errorf("nestedCalls %q, want %q", got, want)
	}
	if got := p.spy.calls(); len(got) != 3 {
		t.Errorf("tool_call handler saw %q, want codemode and two write_file calls", got)
	}
	if pids := tools.CodemodeWorkers(t); len(pids) > 0 {
		t.Errorf("codemode workers %v outlive the call", pids)
	}
}

// TestStopDuringNestedApproval: Stop cancels the pending nested approval; the parent's result is
// "Run stopped by owner" and nothing further runs.
func TestStopDuringNestedApproval(t *testing.T) {
	p, ws := codemodeSession(t, `
	  await tools.write_file({path: "one.txt", content: "1"});
	  await tools.write_file({path: "two.txt", content: "2"});
	  return "finished"`)
	ctx := context.Background()
	p.send()
	a := p.awaitApproval("m1/1")
	if err := p.runner.Stop(ctx, p.sess.ID, "owner"); err != nil {
		t.Fatal(err)
	}
	p.await(agent.AgentEnd, nil)

	got, err := p.db.Approval(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != gate.Cancelled || got.Reason != "Run stopped by owner" {
		t.Errorf("approval after Stop: %s %q, want cancelled %q", got.Status, got.Reason, "Run stopped by owner")
	}
	if n := len(p.approvalsOf("write_file")); n != 1 {
		t.Errorf("%d write_file approvals, want 1: nothing runs after the stop", n)
	}
	var roles []string
	for _, e := range p.entries() {
		roles = append(roles, string(e.Message.Role))
	}
	if got, want := strings.Join(roles, ","), "user,assistant,toolResult"; got != want {
		t.Errorf("transcript roles %s, want %s (the model is not asked again)", got, want)
	}
	res := p.toolResults()[0].Result
	if !res.IsError || res.TextOf() != "Run stopped by owner" {
		t.Errorf("codemode result %q (isError %v), want %q", res.TextOf(), res.IsError, "Run stopped by owner")
	}
	if got, want := nestedSummary(res.NestedCalls), []string{"m1/1 write_file unfinished"}; !reflect.DeepEqual(got, want) {
		t.Errorf("nestedCalls %q, want %q", got, want)
	}
	for _, name := range []string{"one.txt", "two.txt"} {
		if _, err := os.Stat(filepath.Join(ws, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v; want no file", name, err)
		}
	}
}

// TestNestedCallsRecordIsBounded: a tool making 300 nested calls gets a record of 256, marked
// incomplete (SPEC §4).
func TestNestedCallsRecordIsBounded(t *testing.T) {
	const n = 300
	object := json.RawMessage(`{"type":"object"}`)
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true), OpenWorldHint: tool.Bool(false)}
	noop := &tool.Tool{Name: "noop", InputSchema: object, Annotations: ro,
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{Content: []tool.Content{tool.Text("ok")}}, nil
		}}
	fanout := &tool.Tool{Name: "fanout", InputSchema: object, Annotations: ro,
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			failed := 0
			for i := 0; i < n; i++ {
				if tc.ExecuteTool(ctx, "noop", map[string]any{"i": i}).IsError {
					failed++
				}
			}
			return tool.Result{Content: []tool.Content{tool.Text(fmt.Sprintf("%d calls, %d failed", n, failed))}}, nil
		}}
	p := newPipeline(t, fauxScript(t, fauxStep{id: "f1", name: "fanout", args: map[string]any{}}, fauxStep{text: "done"}),
		t.TempDir(), tools.Config{}, noop, fanout)
	p.send()
	if end := p.await(agent.AgentEnd, nil); end.Error != "" {
		t.Fatalf("run error %q", end.Error)
	}
	rs := p.toolResults()
	if len(rs) != 1 {
		t.Fatalf("%d tool results, want 1", len(rs))
	}
	res := rs[0].Result
	if got, want := res.TextOf(), "300 calls, 0 failed"; got != want {
		t.Errorf("fanout %q, want %q", got, want)
	}
	nc := res.NestedCalls
	if nc == nil || len(nc.Calls) != 256 || nc.Complete {
		t.Fatalf("nestedCalls: %d calls, complete %v; want 256, incomplete", len(nc.Calls), nc.Complete)
	}
	if first, last := nc.Calls[0], nc.Calls[255]; first.ID != "f1/1" || last.ID != "f1/256" || last.Status != "ok" {
		t.Errorf("record runs %s..%s (%s), want f1/1..f1/256 ok", first.ID, last.ID, last.Status)
	}
}

// TestFileToolPathOutsideTheWorkspaceStopsBeforeTheGate: a model-issued write_file whose path
// resolves outside the workspace fails at argument validation (SPEC §3 step 2): an error result
// naming the path problem, with the received arguments; no tool_call handler sees it, no
// approval is stored or shown, nothing is written. A path inside still asks as before.
func TestFileToolPathOutsideTheWorkspaceStopsBeforeTheGate(t *testing.T) {
	base := t.TempDir()
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := newPipeline(t, fauxScript(t,
		fauxStep{id: "w1", name: "write_file", args: map[string]any{"path": "../outside/new.txt", "content": "x"}},
		fauxStep{id: "w2", name: "write_file", args: map[string]any{"path": "inside.txt", "content": "y"}},
		fauxStep{text: "done"},
	), ws, tools.Config{})
	ctx := context.Background()
	p.send()
	a := *p.await(agent.ApprovalRequested, nil).Approval
	if a.ToolCallID != "w2" {
		t.Fatalf("approval asked for %s (%s), want only w2: the path outside is refused before the gate", a.ToolCallID, a.Arguments)
	}
	if _, err := p.runner.Gate().Decide(ctx, p.sess.ID, a.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	if end := p.await(agent.AgentEnd, nil); end.Error != "" {
		t.Fatalf("run error %q", end.Error)
	}

	rs := p.toolResults()
	if len(rs) != 2 || rs[0].ToolCallID != "w1" || rs[1].ToolCallID != "w2" {
		t.Fatalf("tool results %+v, want w1 and w2", rs)
	}
	w1 := rs[0].Result
	for _, want := range []string{`Invalid arguments for tool "write_file"`, `/path: path "../outside/new.txt" is outside the workspace`,
		`Received arguments: {"content":"x","path":"../outside/new.txt"}`} {
		if !w1.IsError || !strings.Contains(w1.TextOf(), want) {
			t.Errorf("w1 result (isError %v) %q does not contain %q", w1.IsError, w1.TextOf(), want)
		}
	}
	if w2 := rs[1].Result; w2.IsError {
		t.Errorf("w2 failed: %s", w2.TextOf())
	}
	var ids []string
	for _, a := range p.approvalsOf("write_file") {
		ids = append(ids, a.ToolCallID)
	}
	if !reflect.DeepEqual(ids, []string{"w2"}) {
		t.Errorf("write_file approvals for %q, want only w2", ids)
	}
	if got, want := p.spy.calls(), []string{`write_file w2 ""`}; !reflect.DeepEqual(got, want) {
		t.Errorf("tool_call handler saw %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("outside/new.txt: %v; want no file", err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "inside.txt")); err != nil || string(b) != "y" {
		t.Errorf("inside.txt = %q, %v; want the approved write", b, err)
	}
}

// TestNestedFileToolPathOutsideTheWorkspaceStopsBeforeTheGate: the same refusal for a nested
// call, which passes the same pipeline: codemode's write_file outside the workspace fails
// without a prompt, and the script sees why.
func TestNestedFileToolPathOutsideTheWorkspaceStopsBeforeTheGate(t *testing.T) {
	p, ws := codemodeSession(t, `
	  try { await tools.write_file({path: "../escape.txt", content: "x"}) } catch (e) { return e.message }
	  return "written"`)
	p.send()
	for end := false; !end; {
		select {
		case ev, ok := <-p.events.C:
			if !ok {
				t.Fatal("the subscription was dropped")
			}
			switch ev.Type {
			case agent.ApprovalRequested:
				t.Fatalf("approval asked for %s %s (%s)", ev.Approval.ToolName, ev.Approval.ToolCallID, ev.Approval.Arguments)
			case agent.AgentEnd:
				if ev.Error != "" {
					t.Fatalf("run error %q", ev.Error)
				}
				end = true
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no agent_end event within 20s")
		}
	}
	if as := p.approvalsOf("write_file"); len(as) != 0 {
		t.Errorf("%d write_file approvals, want none", len(as))
	}
	var out tools.CodemodeOutput
	if err := json.Unmarshal(p.toolResults()[0].Result.StructuredContent, &out); err != nil {
		t.Fatal(err)
	}
	if want := `is outside the workspace`; !strings.Contains(string(out.Result), want) {
		t.Errorf("script result %s, want the error naming the path problem (%q)", out.Result, want)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(ws), "escape.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("escape.txt: %v; want no file", err)
	}
}

// regexpSession is a pipeline whose model calls codemode (activated) as m1 with a script that
// lists files (m1/1), then tests a regular expression that backtracks for ever: goja hands a
// backreference to regexp2, which never looks at the interpreter's interrupt. The model's next
// two steps answer in text ("after", then "again").
func regexpSession(t *testing.T, cfg tools.Config) *pipeline {
	t.Helper()
	p := newPipeline(t, fauxScript(t,
		fauxStep{id: "m1", name: "codemode", args: map[string]any{
			"code": `await tools.list_files({}); return /^(\w+\s?)*\1$/.test("a".repeat(40) + "!")`}},
		fauxStep{text: "after"},
		fauxStep{text: "again"},
	), t.TempDir(), cfg)
	if _, _, err := p.runner.SetActiveTools(context.Background(), p.sess.ID, append(p.reg.DefaultActive(), "codemode")); err != nil {
		t.Fatal(err)
	}
	return p
}

// awaitEnd returns the tool_execution_end event of call id, failing the test after 20 s.
func (p *pipeline) awaitEnd(id string) agent.Event {
	p.t.Helper()
	for {
		if ev := p.await(agent.ToolExecutionEnd, nil); ev.ToolCallID == id {
			return ev
		}
	}
}

// sendAgain sends another message, which a session whose run has ended takes (no 409), and
// waits for that run to end with the model's text want.
func (p *pipeline) sendAgain(want string) {
	p.t.Helper()
	if err := p.runner.Send(context.Background(), p.sess.ID, "and now?"); err != nil {
		p.t.Fatalf("the session does not take a new message: %v", err)
	}
	if end := p.await(agent.AgentEnd, nil); end.Error != "" {
		p.t.Fatalf("run error %q", end.Error)
	}
	es := p.entries()
	if got := es[len(es)-1].Message.Text(); got != want {
		p.t.Errorf("final text %q, want %q", got, want)
	}
}

// TestStopEndsCodemodeStuckInARegexp: Stop ends a codemode call spinning in a native call within
// 1 s, its worker killed and reaped, and the session takes a new message right after (issue 15,
// acceptance 3).
func TestStopEndsCodemodeStuckInARegexp(t *testing.T) {
	p := regexpSession(t, tools.Config{CodemodeTimeout: time.Minute})
	p.send()
	p.awaitEnd("m1/1")
	tools.AwaitSpinning(t, 300*time.Millisecond)
	stop := time.Now()
	if err := p.runner.Stop(context.Background(), p.sess.ID, "owner"); err != nil {
		t.Fatal(err)
	}
	end := p.awaitEnd("m1")
	if d := time.Since(stop); d >= time.Second {
		t.Errorf("Stop took %s to end the codemode call, want less than 1s", d)
	}
	if pids := tools.CodemodeWorkers(t); len(pids) > 0 {
		t.Errorf("codemode workers %v outlive the call", pids)
	}
	if res := end.Result; res == nil || !res.IsError || res.TextOf() != "Run stopped by owner" {
		t.Errorf("codemode result %+v, want the error %q", res, "Run stopped by owner")
	}
	p.await(agent.AgentEnd, nil)
	p.sendAgain("after")
}

// TestTimeLimitEndsCodemodeStuckInARegexp: the time limit ends the same call (within the limit
// plus 1 s), the run goes on, and the session takes a new message after it.
func TestTimeLimitEndsCodemodeStuckInARegexp(t *testing.T) {
	const limit = 2 * time.Second
	p := regexpSession(t, tools.Config{CodemodeTimeout: limit})
	p.send()
	p.awaitEnd("m1/1")
	start := time.Now()
	end := p.awaitEnd("m1")
	if d := time.Since(start); d >= limit+time.Second {
		t.Errorf("the time limit of %s took %s to end the codemode call", limit, d)
	}
	if pids := tools.CodemodeWorkers(t); len(pids) > 0 {
		t.Errorf("codemode workers %v outlive the call", pids)
	}
	if res := end.Result; res == nil || !res.IsError || !strings.HasPrefix(res.TextOf(), "Script stopped: time limit of 2s exceeded") {
		t.Errorf("codemode result %+v, want the time limit", res)
	}
	if end := p.await(agent.AgentEnd, nil); end.Error != "" {
		t.Fatalf("run error %q", end.Error)
	}
	p.sendAgain("again")
}
