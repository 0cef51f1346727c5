package agent_test

// Issue 18 (SPEC §17), the agent's side: instructions, usage, reasoning, tool calls streaming,
// retries and the context budget, driven by a test model whose every request is recorded.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// windowed is a testkit.Steps that says its context window (agent.ContextWindow).
type windowed struct {
	*testkit.Steps
	window int
}

func (w windowed) ContextWindow() int { return w.window }

func newModelHarness(t *testing.T, m agent.Model, cfg agent.Config, tools ...*tool.Tool) *harness {
	t.Helper()
	return newHarnessModels(t, func(ms *testkit.Scripts) { ms.Put("test:model", m) }, "test:model", cfg, nil, tools...)
}

// bigTool is a read-only tool whose result is size bytes of text, each call's its own letter
// run so results can be told apart.
func bigTool(name string, size int) *tool.Tool {
	var n atomic.Int32
	return &tool.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			c := 'a' + n.Add(1)%26
			return tool.Result{Content: []tool.Content{tool.Text(strings.Repeat(string(c), size))}}, nil
		}}
}

// run sends text and returns the run's agent_end.
func (h *harness) run(text string) agent.Event {
	h.t.Helper()
	if err := h.runner.Send(context.Background(), h.sess.ID, text); err != nil {
		h.t.Fatal(err)
	}
	return h.await(agent.AgentEnd)
}

func (h *harness) session() agent.Session {
	h.t.Helper()
	s, err := h.db.Session(context.Background(), h.sess.ID)
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func TestTheBuiltinInstructionsNameTheWorkspaceAndTheRulesOfConsent(t *testing.T) {
	h := newModelHarness(t, testkit.Model(), agent.Config{})
	got := h.sess.Instructions
	if !strings.Contains(got, "Your workspace is the folder "+h.sess.Workspace+".") {
		t.Errorf("the default instructions do not name the workspace %s:\n%s", h.sess.Workspace, got)
	}
	for _, want := range []string{"listed in this request", "wait until a person approves them", "deny the call with a reason", "do not make the same call again"} {
		if !strings.Contains(got, want) {
			t.Errorf("the default instructions lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, agent.WorkspaceVar) {
		t.Errorf("the placeholder was not replaced:\n%s", got)
	}
	if h.runner.DefaultInstructions() != agent.BuiltinInstructions {
		t.Error("DefaultInstructions is not the built-in text")
	}
}

func TestCreateSessionInstructions(t *testing.T) {
	h := newModelHarness(t, testkit.Model(), agent.Config{Instructions: "Work in {{workspace}}. Marker 7f3a."})
	ctx := context.Background()
	str := func(s string) *string { return &s }
	tests := []struct {
		name         string
		instructions *string
		want         string // {{ws}} is the workspace
		wantErr      apperr.Code
	}{
		{name: "absent: the server's default, its placeholder filled", want: "Work in {{ws}}. Marker 7f3a."},
		{name: "given: as given, its placeholder filled", instructions: str("Be terse in {{workspace}}."), want: "Be terse in {{ws}}."},
		{name: "empty: none", instructions: str(""), want: ""},
		{name: "too long: refused", instructions: str(strings.Repeat("x", agent.MaxInstructions+1)), wantErr: apperr.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := t.TempDir()
			s, err := h.runner.CreateSessionWith(ctx, agent.NewSession{Title: "i", Model: "test:model", Workspace: ws, Instructions: tt.instructions})
			if apperr.CodeOf(err) != tt.wantErr {
				t.Fatalf("err %v, want code %q", err, tt.wantErr)
			}
			if err != nil {
				if !strings.Contains(apperr.MessageOf(err), "The instructions are too long: 64 KB; at most 64 KB.") {
					t.Errorf("message %q does not say how long they may be", apperr.MessageOf(err))
				}
				return
			}
			want := strings.ReplaceAll(tt.want, "{{ws}}", ws)
			if s.Instructions != want {
				t.Errorf("instructions %q, want %q", s.Instructions, want)
			}
			if stored, _ := h.db.Session(ctx, s.ID); stored.Instructions != want {
				t.Errorf("stored instructions %q, want %q", stored.Instructions, want)
			}
		})
	}
}

func TestInstructionsAreTheSystemPromptOfEveryRequest(t *testing.T) {
	m := testkit.Model(testkit.CallTool("c1", "peek", `{}`), testkit.Say("done", nil))
	var runs atomic.Int32
	h := newModelHarness(t, m, agent.Config{Instructions: "Work in {{workspace}}. Marker 7f3a."}, readOnlyTool("peek", &runs))
	if end := h.run("go"); end.Error != "" {
		t.Fatal(end.Error)
	}
	reqs := m.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if want := "Work in " + h.sess.Workspace + ". Marker 7f3a.\n\n" + agent.Environment(h.sess.Workspace); r.System != want {
			t.Errorf("request %d: System %q, want %q", i+1, r.System, want)
		}
	}
}

func TestInstructionsChangeUntilTheFirstMessageOnly(t *testing.T) {
	m := testkit.Model(testkit.Say("hi", nil))
	h := newModelHarness(t, m, agent.Config{})
	ctx := context.Background()
	s, err := h.runner.SetInstructions(ctx, h.sess.ID, "Answer like a pirate in {{workspace}}.")
	if err != nil {
		t.Fatal(err)
	}
	want := "Answer like a pirate in " + h.sess.Workspace + "."
	if s.Instructions != want {
		t.Fatalf("instructions %q, want %q", s.Instructions, want)
	}
	if _, err := h.runner.SetInstructions(ctx, h.sess.ID, strings.Repeat("x", agent.MaxInstructions+1)); apperr.CodeOf(err) != apperr.Invalid {
		t.Fatalf("too long: %v, want invalid", err)
	}
	if end := h.run("ahoy"); end.Error != "" {
		t.Fatal(end.Error)
	}
	if got := m.Requests()[0].System; got != want+"\n\n"+agent.Environment(h.sess.Workspace) {
		t.Errorf("the request's System %q, want the edited %q", got, want)
	}
	_, err = h.runner.SetInstructions(ctx, h.sess.ID, "changed")
	if apperr.CodeOf(err) != apperr.Conflict || !strings.Contains(apperr.MessageOf(err), "The instructions can no longer change: the session has messages") {
		t.Fatalf("after the first message: %v, want a conflict saying why", err)
	}
	if got := h.session().Instructions; got != want {
		t.Errorf("a refused change changed the instructions to %q", got)
	}
}

func TestUsageIsStoredWithItsMessageAndSummedPerSession(t *testing.T) {
	u1 := &agent.Usage{Input: 1200, Output: 34, CacheRead: 800}
	u2 := &agent.Usage{Input: 40, Output: 22, CacheWrite: 5}
	m := testkit.Model(testkit.Say("one", u1), testkit.Say("two", u2))
	h := newModelHarness(t, m, agent.Config{})
	h.run("first")
	var end agent.Event
	if err := h.runner.Send(context.Background(), h.sess.ID, "second"); err != nil {
		t.Fatal(err)
	}
	for end.Message == nil || end.Message.Role != agent.Assistant {
		end = h.await(agent.MessageEnd)
	}
	if end.Message.Usage == nil || *end.Message.Usage != *u2 {
		t.Errorf("message_end usage %+v, want %+v", end.Message.Usage, u2)
	}
	h.await(agent.AgentEnd)
	var got []agent.Usage
	for _, e := range h.entries() {
		if e.Message.Role == agent.Assistant && e.Message.Usage != nil {
			got = append(got, *e.Message.Usage)
		}
	}
	if len(got) != 2 || got[0] != *u1 || got[1] != *u2 {
		t.Errorf("stored usage %+v, want %+v and %+v", got, *u1, *u2)
	}
	if total, want := h.session().Usage, (agent.Usage{Input: 1240, Output: 56, CacheRead: 800, CacheWrite: 5}); total != want {
		t.Errorf("session usage %+v, want %+v", total, want)
	}
}

func TestThinkingIsKeptApartFromTheAnswer(t *testing.T) {
	thinking := agent.Block{Type: "thinking", Thinking: "The user wants a greeting.", Signature: "sig-1"}
	m := testkit.Model(func(_ context.Context, _ agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
		onDelta(agent.Delta{Thinking: "The user wants "})
		onDelta(agent.Delta{Thinking: "a greeting."})
		onDelta(agent.Delta{Text: "Hello."})
		return agent.Message{Content: []agent.Block{thinking, {Type: "text", Text: "Hello."}}, StopReason: agent.Stop}, nil
	})
	h := newModelHarness(t, m, agent.Config{})
	if err := h.runner.Send(context.Background(), h.sess.ID, "hi"); err != nil {
		t.Fatal(err)
	}
	var streamedThinking, streamedText string
	for {
		ev := h.await(agent.MessageUpdate)
		streamedThinking += ev.Thinking
		streamedText += ev.Delta
		if ev.Message.Thinking() == "The user wants a greeting." && ev.Message.Text() == "Hello." {
			break
		}
	}
	if streamedThinking != "The user wants a greeting." || streamedText != "Hello." {
		t.Errorf("streamed thinking %q and text %q, want them apart", streamedThinking, streamedText)
	}
	h.await(agent.AgentEnd)
	last := h.entries()[1].Message
	if last.Text() != "Hello." {
		t.Errorf("answer text %q holds more than the answer", last.Text())
	}
	if len(last.Content) != 2 || last.Content[0].Thinking != thinking.Thinking || last.Content[0].Signature != "sig-1" {
		t.Errorf("stored content %+v, want the signed thinking block kept before the answer", last.Content)
	}
}

// blockingStep streams first, then waits for release (or the run's Stop) before finishing with
// then.
func blockingStep(first []agent.Delta, release <-chan struct{}, then testkit.Step) testkit.Step {
	return func(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
		for _, d := range first {
			onDelta(d)
		}
		select {
		case <-release:
		case <-ctx.Done():
			return agent.Message{}, ctx.Err()
		}
		return then(ctx, req, onDelta)
	}
}

func TestToolCallsStreamIntoTheirCardButAreGatedOnlyWhenComplete(t *testing.T) {
	release := make(chan struct{})
	partial := []agent.Delta{
		{Partial: &agent.PartialCall{Index: 0, ID: "c1", Name: "shell", Arguments: `{"comm`}},
		{Partial: &agent.PartialCall{Index: 0, ID: "c1", Name: "shell", Arguments: `{"command": "touch`}},
	}
	m := testkit.Model(blockingStep(partial, release, testkit.CallTool("c1", "shell", `{"command": "touch x"}`)), testkit.Say("done", nil))
	var runs atomic.Int32
	h := newModelHarness(t, m, agent.Config{}, riskyTool("shell", &runs))
	if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
		t.Fatal(err)
	}
	for {
		ev := h.awaitAny(agent.MessageUpdate, agent.ApprovalRequested)
		if ev.Type == agent.ApprovalRequested {
			t.Fatal("a call was gated while its arguments were still streaming")
		}
		if len(ev.PartialCalls) == 1 && ev.PartialCalls[0].Arguments == `{"command": "touch` {
			break
		}
	}
	live := h.runner.Live(h.sess.ID)
	if len(live.Partial) != 1 || live.Partial[0].ID != "c1" || len(live.Streaming.ToolCalls()) != 0 {
		t.Fatalf("live state %+v, want the call streaming and not yet a tool call", live)
	}
	close(release)
	for {
		ev := h.awaitAny(agent.MessageUpdate, agent.ApprovalRequested)
		if ev.Type == agent.ApprovalRequested {
			t.Fatal("approval requested before the message ended")
		}
		if len(ev.Message.ToolCalls()) == 1 {
			if len(ev.PartialCalls) != 0 {
				t.Fatalf("the complete call is still listed as streaming: %+v", ev.PartialCalls)
			}
			break
		}
	}
	a := h.await(agent.ApprovalRequested)
	if runs.Load() != 0 || string(a.Approval.Arguments) != `{"command": "touch x"}` {
		t.Fatalf("approval for %s (runs %d), want the complete arguments and nothing run yet", a.Approval.Arguments, runs.Load())
	}
	if _, err := h.runner.Gate().Decide(context.Background(), h.sess.ID, a.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
		t.Fatal(err)
	}
	if end := h.await(agent.AgentEnd); end.Error != "" || runs.Load() != 1 {
		t.Fatalf("run ended %q with %d runs, want success and one run", end.Error, runs.Load())
	}
}

func TestARetryIsShownUntilTheNextDeltaAndStopCancelsItsWait(t *testing.T) {
	retry := agent.Delta{Retry: &agent.Retry{Attempt: 1, Status: 429, Wait: 2 * time.Second, Reason: "rate limited"}}
	for _, stop := range []bool{false, true} {
		t.Run(map[bool]string{false: "the next delta ends the status", true: "Stop ends the wait"}[stop], func(t *testing.T) {
			release := make(chan struct{})
			m := testkit.Model(blockingStep([]agent.Delta{retry}, release, testkit.Say("after the wait", nil)))
			h := newModelHarness(t, m, agent.Config{})
			if err := h.runner.Send(context.Background(), h.sess.ID, "go"); err != nil {
				t.Fatal(err)
			}
			ev := h.await(agent.MessageUpdate)
			if ev.Retry == nil || ev.Retry.Status != 429 || ev.Retry.Wait != 2*time.Second {
				t.Fatalf("message_update retry %+v, want the 429's 2 s wait", ev.Retry)
			}
			if live := h.runner.Live(h.sess.ID); live.Retry == nil || live.Retry.Status != 429 {
				t.Fatalf("a page reloaded now would not show the retry: live %+v", live)
			}
			if stop {
				if err := h.runner.Stop(context.Background(), h.sess.ID, "owner"); err != nil {
					t.Fatal(err)
				}
				if end := h.await(agent.AgentEnd); end.Error != "Run stopped by owner" {
					t.Fatalf("agent_end %q, want stopped by owner", end.Error)
				}
				return
			}
			close(release)
			ev = h.await(agent.MessageUpdate)
			if ev.Retry != nil || ev.Delta != "after the wait" {
				t.Fatalf("next message_update retry %+v delta %q, want no retry and the text", ev.Retry, ev.Delta)
			}
			if end := h.await(agent.AgentEnd); end.Error != "" {
				t.Fatal(end.Error)
			}
		})
	}
}

// awaitAny returns the next event of one of the types, failing the test after 10 s.
func (h *harness) awaitAny(types ...agent.EventType) agent.Event {
	h.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-h.events.C:
			for _, typ := range types {
				if ev.Type == typ {
					return *ev
				}
			}
		case <-timeout:
			h.t.Fatalf("no %v event within 10s", types)
		}
	}
}

// stubs counts the shortened tool results in a request and says whether the newest one (the
// last message) is whole.
func stubs(req agent.Request) (n int, newestWhole bool) {
	for _, m := range req.Messages {
		if m.Role == agent.ToolResult && strings.HasPrefix(m.Result.TextOf(), "[result shortened for the model: ") {
			n++
		}
	}
	last := req.Messages[len(req.Messages)-1]
	newestWhole = last.Role != agent.ToolResult || !strings.HasPrefix(last.Result.TextOf(), "[result shortened")
	return n, newestWhole
}

// TestALongRunKeepsRunningWithinItsContextBudget is acceptance 4 of issue 18 on the agent's side:
// a run whose transcript grows well past a 2,000-token context keeps going to its end, each
// request shortened to fit (oldest results first, the newest whole), every result whole in the
// store, and the messages say how many were shortened for them.
func TestALongRunKeepsRunningWithinItsContextBudget(t *testing.T) {
	const turns, size = 8, 3000 // 24,000 bytes of results: about 6,000 tokens
	for _, tt := range []struct {
		name  string
		cfg   agent.Config
		model func(*testkit.Steps) agent.Model
	}{
		{name: "-context-tokens 2000", cfg: agent.Config{ContextTokens: 2000}, model: func(m *testkit.Steps) agent.Model { return m }},
		{name: "the model's own window of 2000", model: func(m *testkit.Steps) agent.Model { return windowed{m, 2000} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var steps []testkit.Step
			for i := range turns {
				steps = append(steps, testkit.CallTool(fmt.Sprintf("c%d", i), "big", `{}`))
			}
			m := testkit.Model(append(steps, testkit.Say("all read", nil))...)
			h := newModelHarness(t, tt.model(m), tt.cfg, bigTool("big", size))
			if end := h.run("read everything"); end.Error != "" {
				t.Fatalf("the run ended with %q", end.Error)
			}
			reqs := m.Requests()
			if len(reqs) != turns+1 {
				t.Fatalf("%d requests, want %d", len(reqs), turns+1)
			}
			budget := 2000 - 250 // a 2,000-token window keeps an eighth for the answer
			for i, r := range reqs {
				n, newestWhole := stubs(r)
				if !newestWhole {
					t.Errorf("request %d: the newest result was shortened", i+1)
				}
				whole := 0
				for _, msg := range r.Messages {
					if msg.Role == agent.ToolResult {
						whole += len(msg.Result.TextOf())
					}
				}
				if whole/4 > budget {
					t.Errorf("request %d sends %d bytes of results (%d shortened): over the budget of %d tokens", i+1, whole, n, budget)
				}
			}
			last, _ := stubs(reqs[turns])
			if last < turns-2 {
				t.Errorf("the last request shortened %d results, want at least %d", last, turns-2)
			}
			var results, shortened int
			for _, e := range h.entries() {
				msg := e.Message
				if msg.Role == agent.ToolResult {
					results++
					if len(msg.Result.TextOf()) != size {
						t.Errorf("stored result %s is %d bytes, want %d: the store must keep it whole", msg.ToolCallID, len(msg.Result.TextOf()), size)
					}
				}
				if msg.Role == agent.Assistant {
					shortened = msg.ShortenedResults
				}
			}
			if results != turns || shortened != last {
				t.Errorf("%d results stored, the last message says %d shortened; want %d and %d", results, shortened, turns, last)
			}
		})
	}
}

func TestARequestThatCannotFitIsNeverSent(t *testing.T) {
	m := testkit.Model(testkit.CallTool("c1", "huge", `{}`), testkit.Say("never", nil))
	h := newModelHarness(t, m, agent.Config{ContextTokens: 2000}, bigTool("huge", 20_000))
	end := h.run("read the huge file")
	if !strings.HasPrefix(end.Error, "Not sent to the model: the conversation does not fit the model's context window: about ") ||
		!strings.Contains(end.Error, "budget 1,750 (2,000 minus 250 kept for the answer)") {
		t.Fatalf("agent_end error %q, want the clear context error", end.Error)
	}
	if n := len(m.Requests()); n != 1 {
		t.Fatalf("the model got %d requests, want 1: the one that does not fit is never sent", n)
	}
	es := h.entries()
	last := es[len(es)-1].Message
	if last.Role != agent.Assistant || last.StopReason != agent.Error || last.ErrorMessage != end.Error || len(last.Content) != 0 {
		t.Errorf("last entry %+v, want an error message with the context error and no content", last)
	}
}

func TestAProviderContextLengthErrorShortensHarderOnce(t *testing.T) {
	refusal := fmt.Errorf("test: 400 Bad Request: prompt is too long: %w", agent.ErrContextLength)
	tests := []struct {
		name      string
		final     []testkit.Step // the steps after the refusal
		wantReqs  int
		wantError string
	}{
		{name: "the harder-shortened request is answered", final: []testkit.Step{testkit.Say("fits now", nil)}, wantReqs: 4},
		{name: "refused again: the run ends with a clear error", final: []testkit.Step{testkit.Fail(refusal)}, wantReqs: 4,
			wantError: "test: 400 Bad Request: prompt is too long: the request does not fit the model's context window — the request was too long for the model's context window even when tried again with "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testkit.Model(append([]testkit.Step{testkit.CallTool("c1", "big", `{}`), testkit.CallTool("c2", "big", `{}`), testkit.Fail(refusal)}, tt.final...)...)
			h := newModelHarness(t, m, agent.Config{}, bigTool("big", 4000))
			end := h.run("go")
			if !strings.HasPrefix(end.Error, tt.wantError) || (tt.wantError == "") != (end.Error == "") {
				t.Fatalf("agent_end error %q, want %q", end.Error, tt.wantError)
			}
			reqs := m.Requests()
			if len(reqs) != tt.wantReqs {
				t.Fatalf("%d requests, want %d (one retry, no more)", len(reqs), tt.wantReqs)
			}
			first, _ := stubs(reqs[2])
			again, newestWhole := stubs(reqs[3])
			if first != 0 || again != 1 || !newestWhole {
				t.Errorf("shortened %d then %d (newest whole: %v), want 0, then the older result only", first, again, newestWhole)
			}
			es := h.entries()
			if last := es[len(es)-1].Message; last.ShortenedResults != 1 {
				t.Errorf("the message says %d shortened, want 1", last.ShortenedResults)
			}
		})
	}
}

func TestAfterARefusalTheRestOfTheRunIsFittedToWhatTheProviderTook(t *testing.T) {
	refusal := fmt.Errorf("test: too long: %w", agent.ErrContextLength)
	m := testkit.Model(testkit.CallTool("c1", "big", `{}`), testkit.CallTool("c2", "big", `{}`), testkit.Fail(refusal),
		testkit.CallTool("c3", "big", `{}`), testkit.Say("done", nil))
	h := newModelHarness(t, m, agent.Config{}, bigTool("big", 4000))
	if end := h.run("go"); end.Error != "" {
		t.Fatalf("the run ended with %q", end.Error)
	}
	reqs := m.Requests()
	if len(reqs) != 5 {
		t.Fatalf("%d requests, want 5", len(reqs))
	}
	// No budget is configured and the model says no window: only what the refusal taught
	// shortens the request after it.
	if n, newestWhole := stubs(reqs[4]); n < 2 || !newestWhole {
		t.Errorf("the request after the refused one shortened %d (newest whole: %v), want the older two", n, newestWhole)
	}
}

func TestAContextLengthErrorWithNothingLeftToShortenEndsTheRun(t *testing.T) {
	refusal := fmt.Errorf("test: too long: %w", agent.ErrContextLength)
	m := testkit.Model(testkit.Fail(refusal), testkit.Say("never", nil))
	h := newModelHarness(t, m, agent.Config{})
	end := h.run("go")
	if !strings.HasPrefix(end.Error, "test: too long: ") || !strings.Contains(end.Error, "even when tried again with 0 older tool results shortened") {
		t.Fatalf("agent_end error %q", end.Error)
	}
	if n := len(m.Requests()); n != 1 {
		t.Fatalf("%d requests, want 1: with nothing to shorten there is nothing to try again", n)
	}
}
