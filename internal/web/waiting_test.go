package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// TestAWaitingSessionSaysSoLiveOnThePageInTheListAndTheAPI: a run parked on a person is
// "waiting for approval" (issue 16, item 3) in the live run state, the page's first render, the
// session list (first, with a badge, though older) and the JSON API; the prompt carries its
// deadline, createdAt plus the approval timeout; once decided the session is no longer waiting.
func TestAWaitingSessionSaysSoLiveOnThePageInTheListAndTheAPI(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var waiting, idle agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "parked on a person", "model": "faux:one"}, &waiting)
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "newer and idle", "model": "faux:one"}, &idle)
	live := ts.ownerLive(t, waiting.ID)
	readMessage(t, live) // the resync
	ts.call(t, "POST", "/api/sessions/"+waiting.ID+"/messages", map[string]string{"text": "go"}, nil)
	const waitingBadge = `<span id="run-state" class="state state-waiting state-approval">waiting for approval</span>`
	for frag := readMessage(t, live); !strings.Contains(frag, waitingBadge); frag = readMessage(t, live) {
	}

	var pending struct{ Approvals []gate.Approval }
	ts.call(t, "GET", "/api/sessions/"+waiting.ID+"/approvals?status=pending", nil, &pending)
	if len(pending.Approvals) != 1 {
		t.Fatalf("%d pending approvals, want 1", len(pending.Approvals))
	}
	deadline := pending.Approvals[0].CreatedAt.Add(time.Minute).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	_, page := ts.do(t, "GET", "/sessions/"+waiting.ID, "", "", nil)
	for _, want := range []string{waitingBadge, `<time class="countdown" datetime="` + deadline + `" data-countdown`, "times out in "} {
		if !strings.Contains(page, want) {
			t.Errorf("the session page lacks %q", want)
		}
	}

	_, list := ts.do(t, "GET", "/", "", "", nil)
	at, after := strings.Index(list, "parked on a person"), strings.Index(list, "newer and idle")
	if at < 0 || after < 0 || at > after {
		t.Errorf("the list shows the waiting session at %d and the newer idle one at %d: want the waiting one first", at, after)
	}
	if row := list[at:after]; !strings.Contains(row, ">1 waiting</span>") || !strings.Contains(row, "waiting for approval") {
		t.Errorf("the waiting session's row has no badge or state:\n%s", row)
	}

	var got agent.Session
	ts.call(t, "GET", "/api/sessions/"+waiting.ID, nil, &got)
	if got.State != agent.Waiting || got.PendingApprovals != 1 {
		t.Errorf("API session state %q with %d pending, want waiting with 1", got.State, got.PendingApprovals)
	}

	ts.call(t, "POST", "/api/approvals/"+pending.Approvals[0].ID+"/decision", map[string]string{"decision": "deny"}, nil)
	for frag := readMessage(t, live); !strings.Contains(frag, `id="run-state"`) || strings.Contains(frag, "waiting for approval"); frag = readMessage(t, live) {
	}
}

// TestAnInterruptedCallSaysWhatHappenedAndHowLongItRan: a call a restart interrupted reads as
// such on the page (issue 16, item 5), with how long it ran; the model's text stays visible as
// what it was told.
func TestAnInterruptedCallSaysWhatHappenedAndHowLongItRan(t *testing.T) {
	ts := newTestServer(t, nil)
	ctx := context.Background()
	sess := agent.Session{ID: "cut", Title: "cut", Model: "faux:one", Workspace: ts.workDir}
	if err := ts.db.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	started := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	res := tool.ErrorResult("%s", agent.InterruptedText)
	res.Interrupted = &tool.Interruption{StartedAt: &started, At: started.Add(4200 * time.Millisecond)}
	res.DurationMs = 4200
	// A nested call rebuilt from the audit by recovery: whether it finished is not known.
	res.NestedCalls = &tool.NestedCalls{Calls: []tool.NestedCall{{ID: "c1/1", Name: "git_diff", Arguments: json.RawMessage(`{}`), Status: "unfinished"}}}
	for _, m := range []agent.Message{
		{ID: "u", Role: agent.User, Content: []agent.Block{{Type: "text", Text: "go"}}},
		{ID: "a", Role: agent.Assistant, StopReason: agent.ToolUse, Content: []agent.Block{
			{Type: "toolCall", ID: "c1", Name: "shell", Arguments: json.RawMessage(`{"command":"sleep 60"}`)}}},
		{ID: "r", Role: agent.ToolResult, ToolCallID: "c1", ToolName: "shell", Result: &res},
	} {
		if _, err := ts.db.AppendEntry(ctx, sess.ID, m); err != nil {
			t.Fatal(err)
		}
	}
	st, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	if st != http.StatusOK {
		t.Fatalf("page = %d", st)
	}
	for _, want := range []string{
		"The server restarted while shell was running; it was not re-run. It ran for 4.2 s (from its start to the restart).",
		"The model was told: " + agent.InterruptedText,
		"⚠ interrupted",
		"⚠ outcome unknown: the server restarted while its parent ran",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// A second review saw such a nested call as "⚠ interrupted 0 ms": it claimed a run time.
	if strings.Contains(page, ">0 ms<") {
		t.Errorf("a nested call whose run time is unknown shows 0 ms")
	}
}
