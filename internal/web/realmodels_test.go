package web_test

// Issue 18 (SPEC §17) on the page and the API: instructions, token usage, reasoning, retries,
// tool calls streaming into their cards, and results shortened for the model's context window.

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"strings"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

// newModelServer is a test server whose models also offer m as "test:model", its runner
// configured by cfg.
func newModelServer(t *testing.T, m agent.Model, cfg func(*agent.Config), extra ...*tool.Tool) *testServer {
	t.Helper()
	ts := newTestServerAgent(t, map[string]string{"one": oneCall}, nil, cfg, extra...)
	ts.env.Scripts.Put("test:model", m)
	return ts
}

func (ts *testServer) createSession(t *testing.T, body map[string]any) agent.Session {
	t.Helper()
	var sess agent.Session
	if st := ts.call(t, "POST", "/api/sessions", body, &sess); st != 201 {
		t.Fatalf("create = %d", st)
	}
	return sess
}

// runToEnd sends text and waits for the run's agent_end.
func (ts *testServer) runToEnd(t *testing.T, sessionID, text string) map[string]any {
	t.Helper()
	c := ts.events(t, sessionID)
	c.SetReadLimit(1 << 24) // tool results may be large here
	next(t, c, "snapshot")
	if st := ts.call(t, "POST", "/api/sessions/"+sessionID+"/messages", map[string]string{"text": text}, nil); st != 202 {
		t.Fatalf("send = %d", st)
	}
	return next(t, c, "agent_end")
}

const sayHi = `{"steps":[{"content":[{"type":"text","text":"Hi."}],"stopReason":"stop"}]}`

func TestAPISessionInstructions(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall, "hi": sayHi})
	type apiErr struct {
		Error struct{ Code, Message string }
	}
	t.Run("absent: the built-in default, naming the workspace", func(t *testing.T) {
		var sess map[string]any
		ts.call(t, "POST", "/api/sessions", map[string]string{"title": "d", "model": "faux:one"}, &sess)
		if got := sess["instructions"].(string); !strings.Contains(got, "Your workspace is the folder "+ts.workDir+".") {
			t.Errorf("instructions %q do not name the workspace", got)
		}
		if u, ok := sess["usage"].(map[string]any); !ok || u["input"] != 0.0 || u["output"] != 0.0 {
			t.Errorf("usage %v, want zero totals", sess["usage"])
		}
	})
	t.Run("given, edited before the first message, fixed after it", func(t *testing.T) {
		sess := ts.createSession(t, map[string]any{"title": "i", "model": "faux:hi", "instructions": "Be brief in {{workspace}}."})
		if want := "Be brief in " + ts.workDir + "."; sess.Instructions != want {
			t.Fatalf("instructions %q, want %q", sess.Instructions, want)
		}
		var patched agent.Session
		if st := ts.call(t, "PATCH", "/api/sessions/"+sess.ID, map[string]string{"instructions": "Answer like a pirate."}, &patched); st != 200 || patched.Instructions != "Answer like a pirate." {
			t.Fatalf("PATCH = %d %q", st, patched.Instructions)
		}
		var e apiErr
		if st := ts.call(t, "PATCH", "/api/sessions/"+sess.ID, map[string]any{"title": "", "instructions": "lost"}, &e); st != 400 {
			t.Fatalf("PATCH with an empty title = %d, want 400", st)
		}
		ts.runToEnd(t, sess.ID, "go")
		if st := ts.call(t, "PATCH", "/api/sessions/"+sess.ID, map[string]string{"instructions": "too late"}, &e); st != 409 ||
			e.Error.Code != "conflict" || !strings.HasPrefix(e.Error.Message, "The instructions can no longer change") {
			t.Fatalf("PATCH after the first message = %d %+v, want 409 saying why", st, e)
		}
		var got agent.Session
		ts.call(t, "GET", "/api/sessions/"+sess.ID, nil, &got)
		if got.Instructions != "Answer like a pirate." {
			t.Errorf("instructions %q, want the edit before the first message and nothing after", got.Instructions)
		}
	})
	t.Run("too long", func(t *testing.T) {
		var e apiErr
		st := ts.call(t, "POST", "/api/sessions", map[string]any{"title": "l", "model": "faux:one", "instructions": strings.Repeat("x", agent.MaxInstructions+1)}, &e)
		if st != 400 || e.Error.Message != "The instructions are too long: 64 KB; at most 64 KB." {
			t.Errorf("create = %d %+v", st, e)
		}
	})
}

func TestNewSessionFormCarriesInstructions(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	_, page := ts.do(t, "GET", "/", "", "", nil)
	if !strings.Contains(page, `<label for="instructions">Instructions</label>`) || !strings.Contains(page, `<textarea id="instructions" name="instructions"`) {
		t.Fatalf("the New-session form has no Instructions textbox:\n%s", page)
	}
	if !strings.Contains(page, html.EscapeString("Your workspace is the folder {{workspace}}.")) {
		t.Error("the Instructions textbox is not pre-filled with the default")
	}
	form := url.Values{"title": {"f"}, "model": {"faux:one"}, "workspace": {ts.workDir},
		"instructions": {"Line one.\r\nMarker 7f3a in {{workspace}}."}}
	// (The client follows the 303 to the new session's page.)
	if st, body := ts.do(t, "POST", "/sessions", "application/x-www-form-urlencoded", form.Encode(), nil); st != 200 || !strings.Contains(body, "Marker 7f3a in") {
		t.Fatalf("create = %d %s", st, body)
	}
	var list struct{ Sessions []agent.Session }
	ts.call(t, "GET", "/api/sessions", nil, &list)
	if want := "Line one.\nMarker 7f3a in " + ts.workDir + "."; len(list.Sessions) != 1 || list.Sessions[0].Instructions != want {
		t.Fatalf("sessions %+v, want one with %q", list.Sessions, want)
	}
	form.Set("instructions", "keep me "+strings.Repeat("x", agent.MaxInstructions))
	st, body := ts.do(t, "POST", "/sessions", "application/x-www-form-urlencoded", form.Encode(), nil)
	if st != 400 || !strings.Contains(body, "The instructions are too long") || !strings.Contains(body, ">keep me xxx") {
		t.Errorf("too long = %d; want 400 with the reason and what was typed kept", st)
	}
}

func TestTheSessionPageEditsInstructionsUntilTheFirstMessage(t *testing.T) {
	ts := newTestServer(t, map[string]string{"hi": sayHi})
	sess := ts.createSession(t, map[string]any{"title": "p", "model": "faux:hi", "instructions": "First."})
	_, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	for _, want := range []string{`<details id="instructions" class="instructions" data-testid="instructions"><summary>Instructions</summary>`,
		`hx-post="/sessions/` + sess.ID + `/instructions"`, `>First.</textarea>`} {
		if !strings.Contains(page, want) {
			t.Fatalf("the session page lacks %q", want)
		}
	}
	form := url.Values{"instructions": {"Second,\r\non two lines."}}.Encode()
	st, body := ts.do(t, "POST", "/sessions/"+sess.ID+"/instructions", "application/x-www-form-urlencoded", form, nil)
	if st != 200 || !strings.Contains(body, ">Second,\non two lines.</textarea>") || !strings.Contains(body, "Saved.") {
		t.Fatalf("edit = %d %s", st, body)
	}
	live := ts.ownerLive(t, sess.ID)
	readMessage(t, live) // the resync
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	for {
		msg := readMessage(t, live)
		if strings.Contains(msg, `id="instructions-body"`) {
			if strings.Contains(msg, "<textarea") || !strings.Contains(msg, `<pre class="instructions-text">Second,`) {
				t.Fatalf("after the first message the instructions are pushed %s, want them read-only", msg)
			}
			break
		}
	}
	_, page = ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	if strings.Contains(page, `id="instructions-box"`) || !strings.Contains(page, `<pre class="instructions-text">Second,`) {
		t.Error("the reloaded page still offers the editor after the first message")
	}
	// The environment block every request adds after the instructions is shown too (SPEC §17,
	// issue 34): the typed instructions do not hide the workspace the model is told of.
	env := `data-testid="instructions-environment">` + html.EscapeString(agent.Environment(sess.Workspace)) + `</pre>`
	if sess.Workspace == "" || !strings.Contains(page, env) {
		t.Errorf("the page does not show the environment block naming the workspace %q", sess.Workspace)
	}
	st, body = ts.do(t, "POST", "/sessions/"+sess.ID+"/instructions", "application/x-www-form-urlencoded", url.Values{"instructions": {"third"}}.Encode(), nil)
	if st != 409 || !strings.Contains(body, "The instructions can no longer change") || !strings.Contains(body, "Second,") {
		t.Errorf("edit after the first message = %d %s", st, body)
	}
}

// messageHTML returns the element of message id in page, its <div> to the matching </div> (""
// if there is none).
func messageHTML(page, id string) string {
	at := strings.Index(page, `<div id="m-`+id+`"`)
	if at < 0 {
		return ""
	}
	depth := 0
	for i := at; i < len(page); i++ {
		switch {
		case strings.HasPrefix(page[i:], "<div"):
			depth++
		case strings.HasPrefix(page[i:], "</div>"):
			depth--
			if depth == 0 {
				return page[at : i+len("</div>")]
			}
		}
	}
	return ""
}

func TestUsageAndThinkingAreShownApartFromTheAnswer(t *testing.T) {
	thinking := agent.Block{Type: "thinking", Thinking: "SECRET-PLAN: greet them.", Signature: "sig"}
	m := testkit.Model(func(_ context.Context, _ agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
		onDelta(agent.Delta{Thinking: thinking.Thinking})
		onDelta(agent.Delta{Text: "Hello **there**."})
		return agent.Message{Content: []agent.Block{thinking, {Type: "text", Text: "Hello **there**."}}, StopReason: agent.Stop,
			Usage: &agent.Usage{Input: 1234, Output: 56, CacheRead: 800}}, nil
	}, func(context.Context, agent.Request, func(agent.Delta)) (agent.Message, error) {
		return agent.Message{Content: []agent.Block{{Type: "text", Text: "Again."}}, StopReason: agent.Stop,
			Usage: &agent.Usage{Input: 2000, Output: 10}}, nil
	})
	ts := newModelServer(t, m, nil)
	sess := ts.createSession(t, map[string]any{"title": "u", "model": "test:model"})
	live := ts.ownerLive(t, sess.ID)
	readMessage(t, live)
	ts.runToEnd(t, sess.ID, "hi")
	var liveEnd, liveTotal string
	streamedThinking := false
	for liveTotal == "" {
		msg := readMessage(t, live)
		if strings.HasPrefix(msg, `<div id="m-`) && strings.Contains(msg, `-thinking-text" class="thinking-text">SECRET-PLAN: greet them.</div>`) {
			// A message_update: the reasoning in its own slot, the answer's slot without it.
			text, _, _ := strings.Cut(msg, `-thinking-text"`)
			streamedThinking = !strings.Contains(text, "SECRET-PLAN")
		}
		if strings.Contains(msg, `data-testid="message-usage"`) {
			liveEnd = msg
		}
		if strings.Contains(msg, `id="session-usage"`) {
			liveTotal = msg
		}
	}
	if !streamedThinking {
		t.Error("no message_update showed the reasoning streaming in its own slot")
	}
	if !strings.Contains(liveTotal, "1,234 in · 56 out · 800 cache read") {
		t.Errorf("the session total pushed at message_end: %s", liveTotal)
	}
	ts.runToEnd(t, sess.ID, "again")
	_, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	var full struct {
		Entries []agent.Entry `json:"entries"`
	}
	ts.call(t, "GET", "/api/sessions/"+sess.ID, nil, &full)
	first := full.Entries[1].Message
	mh := messageHTML(page, first.ID)
	if !strings.Contains(mh, `<p class="message-usage"><span data-testid="message-usage">1,234 in · 56 out · 800 cache read tokens</span></p>`) {
		t.Errorf("message usage not shown:\n%s", mh)
	}
	if !strings.Contains(page, `data-testid="session-usage">3,234 in · 66 out · 800 cache read</span>`) {
		t.Error("the session header does not show the total of both messages")
	}
	if !strings.Contains(mh, `data-testid="thinking"><summary>Thinking</summary><div id="m-`+first.ID+`-thinking-text" class="thinking-text">SECRET-PLAN: greet them.</div></details>`) {
		t.Errorf("the reasoning is not folded under Thinking:\n%s", mh)
	}
	_, text, _ := strings.Cut(mh, `class="message-text markdown">`)
	if strings.Contains(text, "SECRET-PLAN") || !strings.Contains(text, "Hello <strong>there</strong>.") {
		t.Errorf("the answer text holds the reasoning or lost the answer:\n%s", text)
	}
	// Live and reloaded, the same component draws the same message.
	if got := messageHTML(liveEnd, first.ID); got != mh {
		t.Errorf("the message pushed at message_end differs from the reloaded one:\nlive %s\nreload %s", liveEnd, mh)
	}
}

func TestRetryStatusAndStreamingCardsAreShownLiveAndOnReload(t *testing.T) {
	retried, streamed, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	m := testkit.Model(func(ctx context.Context, _ agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
		onDelta(agent.Delta{Retry: &agent.Retry{Attempt: 1, Status: 429, Wait: 2 * time.Second}})
		select {
		case <-retried:
		case <-ctx.Done():
			return agent.Message{}, ctx.Err()
		}
		onDelta(agent.Delta{Partial: &agent.PartialCall{Index: 0, ID: "c1", Name: "shell", Arguments: `{"command": "touch <b>`}})
		select {
		case <-streamed:
		case <-ctx.Done():
			return agent.Message{}, ctx.Err()
		}
		b := agent.Block{Type: "toolCall", ID: "c1", Name: "shell", Arguments: json.RawMessage(`{"command": "touch <b>"}`)}
		onDelta(agent.Delta{ToolCall: &b})
		<-done
		return agent.Message{Content: []agent.Block{b}, StopReason: agent.ToolUse}, nil
	})
	ts := newModelServer(t, m, nil)
	sess := ts.createSession(t, map[string]any{"title": "r", "model": "test:model"})
	live := ts.ownerLive(t, sess.ID)
	readMessage(t, live)
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	// The JSON socket carries them too (SPEC §12): the retry's status, then the call streaming.
	apiUpdate := func(field string) map[string]any {
		t.Helper()
		for {
			if ev := next(t, events, "message_update"); ev[field] != nil {
				return ev
			}
		}
	}
	if r := apiUpdate("retry")["retry"].(map[string]any); r["status"] != 429.0 || r["waitNs"] != 2e9 || r["attempt"] != 1.0 {
		t.Errorf("the API's message_update retry %v", r)
	}
	await := func(want string) string {
		t.Helper()
		for {
			if msg := readMessage(t, live); strings.Contains(msg, want) {
				return msg
			}
		}
	}
	const retry = `<span class="retry-status" role="status" data-testid="retry-status">retrying (429) in 2 s</span>`
	await(retry)
	if _, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil); !strings.Contains(page, retry) {
		t.Error("a page reloaded during the retry's wait does not show it")
	}
	close(retried)
	partial := apiUpdate("partialCalls")
	if pc := partial["partialCalls"].([]any)[0].(map[string]any); pc["id"] != "c1" || pc["name"] != "shell" || pc["arguments"] != `{"command": "touch <b>` || partial["retry"] != nil {
		t.Errorf("the API's message_update partialCalls %v (retry %v)", pc, partial["retry"])
	}
	frag := await(`data-state="streaming"`)
	if strings.Contains(frag, "retry-status") {
		t.Error("the retry status outlived the next delta")
	}
	card := cardHTML(frag, "c1")
	if !strings.Contains(card, `aria-label="Tool call shell"`) || !strings.Contains(card, `<details class="tool-args" open><summary>Arguments</summary><pre><code>{&#34;command&#34;: &#34;touch &lt;b&gt;</code></pre></details>`) {
		t.Errorf("the streaming card does not show the partial arguments, escaped:\n%s", card)
	}
	if strings.Contains(card, "Approval required") {
		t.Error("a streaming call shows a prompt")
	}
	_, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	if reloaded := cardHTML(page, "c1"); reloaded != card {
		t.Errorf("the reloaded streaming card differs from the live one:\nlive   %s\nreload %s", card, reloaded)
	}
	close(streamed)
	frag = await(`data-state="waiting"`)
	if c := cardHTML(frag, "c1"); !strings.Contains(c, `id="`+cardHTMLID(card)+`"`) {
		t.Errorf("the complete call did not take over the streaming card's place:\n%s", c)
	}
	close(done)
	await("Approval required: shell")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/stop", nil, nil)
}

// cardHTMLID is the id attribute of a card's <article>.
func cardHTMLID(card string) string {
	_, rest, _ := strings.Cut(card, `id="`)
	id, _, _ := strings.Cut(rest, `"`)
	return id
}

// TestALongRunShowsItsShortenedResultsAndKeepsThemWhole is acceptance 4 of issue 18: a session
// run with a 2,000-token context whose transcript grows well past it keeps running to its end;
// the transcript says "N earlier tool results shortened for the model" (live and after a
// reload), and the page and the store still hold every result whole.
func TestALongRunShowsItsShortenedResultsAndKeepsThemWhole(t *testing.T) {
	const turns, size = 6, 3000
	var steps []string
	for i := range turns {
		steps = append(steps, fmt.Sprintf(`{"content":[{"type":"toolCall","id":"c%d","name":"big","arguments":{}}],"stopReason":"toolUse"}`, i))
	}
	script := `{"steps":[` + strings.Join(steps, ",") + `,{"content":[{"type":"text","text":"All read."}],"stopReason":"stop"}]}`
	n := 0
	big := &tool.Tool{Name: "big", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			n++
			return tool.Result{Content: []tool.Content{tool.Text(fmt.Sprintf("RESULT-%d:", n) + strings.Repeat("z", size))}}, nil
		}}
	ts := newTestServerAgent(t, map[string]string{"long": script}, nil, func(c *agent.Config) { c.ContextTokens = 2000 }, big)
	sess := ts.createSession(t, map[string]any{"title": "long", "model": "faux:long"})
	live := ts.ownerLive(t, sess.ID)
	readMessage(t, live)
	if end := ts.runToEnd(t, sess.ID, "read it all"); end["error"] != nil {
		t.Fatalf("the run ended with %v", end["error"])
	}
	sawLive := false
	for !sawLive {
		sawLive = strings.Contains(readMessage(t, live), `data-testid="shortened-note">`)
	}
	var full struct {
		Entries []agent.Entry `json:"entries"`
	}
	ts.call(t, "GET", "/api/sessions/"+sess.ID, nil, &full)
	last := full.Entries[len(full.Entries)-1].Message
	if last.Text() != "All read." || last.ShortenedResults < turns-2 {
		t.Fatalf("last message %q with %d shortened, want the final answer with at least %d", last.Text(), last.ShortenedResults, turns-2)
	}
	_, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	note := fmt.Sprintf(`<div class="shortened-note" data-testid="shortened-note">%d earlier tool results shortened for the model</div>`, last.ShortenedResults)
	if !strings.Contains(messageHTML(page, last.ID), note) {
		t.Errorf("the final message does not say %q", note)
	}
	for i := 1; i <= turns; i++ {
		whole := fmt.Sprintf("RESULT-%d:", i) + strings.Repeat("z", size)
		if !strings.Contains(page, whole) {
			t.Errorf("the page does not show result %d whole", i)
		}
	}
	results := 0
	for _, e := range full.Entries {
		if e.Message.Role == agent.ToolResult {
			results++
			if len(e.Message.Result.TextOf()) < size {
				t.Errorf("stored result %s is %d bytes: shortened in the store", e.Message.ToolCallID, len(e.Message.Result.TextOf()))
			}
		}
	}
	if results != turns {
		t.Errorf("%d results stored, want %d", results, turns)
	}
}

func TestANotSentErrorIsShownAsItIs(t *testing.T) {
	m := testkit.Model(func(context.Context, agent.Request, func(agent.Delta)) (agent.Message, error) {
		b := agent.Block{Type: "toolCall", ID: "c1", Name: "huge", Arguments: json.RawMessage(`{}`)}
		return agent.Message{Content: []agent.Block{b}, StopReason: agent.ToolUse}, nil
	})
	huge := &tool.Tool{Name: "huge", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{Content: []tool.Content{tool.Text(strings.Repeat("h", 40_000))}}, nil
		}}
	ts := newModelServer(t, m, func(c *agent.Config) { c.ContextTokens = 2000 }, huge)
	sess := ts.createSession(t, map[string]any{"title": "n", "model": "test:model"})
	ts.runToEnd(t, sess.ID, "go")
	_, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	if !strings.Contains(page, `<p class="message-error" role="status">Not sent to the model: the conversation does not fit the model&#39;s context window: about `) {
		t.Errorf("the page does not show the context error as it is")
	}
	if strings.Contains(page, "The model failed: Not sent") {
		t.Error("a request never sent is shown as a failure of the model")
	}
}
