package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/hooks"
)

// An agent session's page (SPEC §18, issue 30): its pending card counts down to when the agent
// stops waiting, and it shows none of the panels that only mean something for Countersign's own
// sessions.

var countdownRe = regexp.MustCompile(`<time class="countdown" datetime="([^"]+)" data-countdown([^>]*)>([^<]*)</time>`)

// TestAnOutsideCallsCardCountsDownToWhenTheAgentStopsWaiting: a call held with ?timeout=60 says
// "the agent stops waiting in 0:55", its datetime the hook's deadline (now + 60 s − 5 s), on the
// session page and in the inbox; never the approval's own 15-minute "times out in".
func TestAnOutsideCallsCardCountsDownToWhenTheAgentStopsWaiting(t *testing.T) {
	hs := newHookServer(t)
	kind := hooks.ClaudeCode
	body, _ := payload(t, kind, "http-PreToolUse.body.json")
	posted := time.Now()
	done := make(chan hookAnswer, 1)
	go func() { done <- hs.post(t, kind, "?timeout=60", hs.tokens[kind], body) }()
	a := hs.pending(t, kind, sessionOf(t, body))
	want := posted.Add(55 * time.Second)
	for _, path := range []string{"/sessions/" + a.SessionID, "/inbox"} {
		page := hs.page(t, path)
		m := countdownRe.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("%s has no countdown", path)
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatal(err)
		}
		if d := at.Sub(want); d < -3*time.Second || d > 3*time.Second {
			t.Errorf("%s: the countdown's datetime %v is %v off now+55s", path, at, d)
		}
		if !strings.HasPrefix(m[3], "the agent stops waiting in 0:5") || !strings.Contains(m[2], `data-countdown-prefix="the agent stops waiting in "`) {
			t.Errorf("%s: the countdown says %q (attributes %s), want the agent's deadline", path, m[3], m[2])
		}
		if strings.Contains(page, "times out in") {
			t.Errorf("%s says the call times out (the gate's timeout), not when the agent stops waiting", path)
		}
	}
	if st := hs.call(t, http.MethodPost, "/api/approvals/"+a.ID+"/decision", map[string]any{"decision": "deny"}, nil); st != http.StatusOK {
		t.Fatalf("deny: %d", st)
	}
	<-done
}

// TestAnAgentSessionsPageHasNoToolsInstructionsOrRunRows: no Tools panel (Countersign's own
// tools), no Instructions and no Model / Run / Tokens rows on an agent session's page; the
// Workspace and Mode rows, the share links and grants stay. Countersign's own sessions keep
// them all.
func TestAnAgentSessionsPageHasNoToolsInstructionsOrRunRows(t *testing.T) {
	hs := newHookServer(t, "allow Bash(touch:*)")
	kind := hooks.ClaudeCode
	body, _ := payload(t, kind, "http-PreToolUse.body.json")
	if got := hs.post(t, kind, "", hs.tokens[kind], body); got.status != 200 {
		t.Fatalf("PreToolUse: %+v", got)
	}
	sess, err := hs.db.AgentSession(context.Background(), hs.ids[kind], sessionOf(t, body))
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var own agent.Session
	if st := ts.call(t, http.MethodPost, "/api/sessions", map[string]string{"title": "own", "model": "faux:one"}, &own); st != http.StatusCreated {
		t.Fatalf("create a session: %d", st)
	}
	_, ownPage := ts.do(t, http.MethodGet, "/sessions/"+own.ID, "", "", nil)

	panels := []string{`id="tools-panel"`, `id="instructions"`, "<dt>Model</dt>", "<dt>Run</dt>", `id="run-state"`, "<dt>Tokens</dt>"}
	kept := []string{"<dt>Workspace</dt>", "<dt>Mode</dt>", `id="shares-panel"`, `id="grants-panel"`, "/audit"}
	agentPage := hs.page(t, "/sessions/"+sess.ID)
	for _, p := range panels {
		if strings.Contains(agentPage, p) {
			t.Errorf("the agent session's page has %s", p)
		}
		if !strings.Contains(ownPage, p) {
			t.Errorf("Countersign's own session's page lacks %s", p)
		}
	}
	for _, p := range kept {
		if !strings.Contains(agentPage, p) {
			t.Errorf("the agent session's page lacks %s", p)
		}
		if !strings.Contains(ownPage, p) {
			t.Errorf("Countersign's own session's page lacks %s", p)
		}
	}
}

// TestAnOutsideCallAskedAgainCountsDownToTheNewDeadline: once the agent stopped waiting, the card
// says so and counts down to the approval's own timeout again; when the agent asks again about
// the call (Claude Code's PermissionRequest after a PreToolUse that got no verdict) it counts
// down to that event's deadline.
func TestAnOutsideCallAskedAgainCountsDownToTheNewDeadline(t *testing.T) {
	hs := newHookServer(t)
	kind := hooks.ClaudeCode
	pre, _ := payload(t, kind, "http-PreToolUse.body.json")
	sid := sessionOf(t, pre)
	var m map[string]any
	raw, _ := os.ReadFile(filepath.Join("..", "hooks", "testdata", "claude-code", "http-PermissionRequest.body.json"))
	_ = json.Unmarshal(raw, &m)
	perm := withSession(t, m, sid)

	if got := hs.post(t, kind, "?timeout=1", hs.tokens[kind], pre); got.body != "{}" {
		t.Fatalf("at the deadline: %+v, want no verdict", got)
	}
	a := hs.pending(t, kind, sid)
	page := hs.page(t, "/sessions/"+a.SessionID)
	if !strings.Contains(page, "The agent stopped waiting") || !strings.Contains(page, "times out in") || strings.Contains(page, "the agent stops waiting in") {
		t.Errorf("after the agent stopped waiting the card does not say so with the approval's own countdown")
	}

	posted := time.Now()
	done := make(chan hookAnswer, 1)
	go func() { done <- hs.post(t, kind, "?timeout=60", hs.tokens[kind], perm) }()
	for range 200 {
		if oc, err := hs.db.OutsideCall(context.Background(), a.ID); err == nil && oc.StoppedWaitingAt == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	page = hs.page(t, "/sessions/"+a.SessionID)
	m2 := countdownRe.FindStringSubmatch(page)
	if m2 == nil {
		t.Fatalf("no countdown once asked again")
	}
	at, err := time.Parse(time.RFC3339Nano, m2[1])
	if err != nil {
		t.Fatal(err)
	}
	if d := at.Sub(posted.Add(55 * time.Second)); d < -3*time.Second || d > 3*time.Second {
		t.Errorf("asked again: the countdown's datetime %v is %v off now+55s", at, d)
	}
	if !strings.HasPrefix(m2[3], "the agent stops waiting in ") || strings.Contains(page, "The agent stopped waiting") {
		t.Errorf("asked again: the countdown says %q", m2[3])
	}
	if st := hs.call(t, http.MethodPost, "/api/approvals/"+a.ID+"/decision", map[string]any{"decision": "deny"}, nil); st != http.StatusOK {
		t.Fatalf("deny: %d", st)
	}
	<-done
}
