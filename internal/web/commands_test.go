package web_test

import (
	"html"
	"strings"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/tool"
	"countersign/internal/tools"
)

// TestRunChecksAndFailingTestsPromptsShowTheirCommands (issue 34): a waiting run_checks or
// failing_tests call shows the commands it will run — the workspace's configured checks, the test
// command with its packages — stored with its approval, not `Arguments {}`.
func TestRunChecksAndFailingTestsPromptsShowTheirCommands(t *testing.T) {
	var extra []*tool.Tool
	for _, tl := range tools.Builtin(tools.Config{Checks: []tools.Check{{Name: "vet", Command: "go vet ./..."}, {Name: "lint", Command: "staticcheck ./..."}}}) {
		if tl.Name == "run_checks" || tl.Name == "failing_tests" {
			extra = append(extra, tl)
		}
	}
	ts := newTestServer(t, map[string]string{"checks": `{"steps":[
	  {"content":[{"type":"toolCall","id":"k1","name":"run_checks","arguments":{}},
	    {"type":"toolCall","id":"k2","name":"failing_tests","arguments":{"packages":["./internal/..."]}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`}, extra...)
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "checks", "model": "faux:checks"}, &sess)
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	for range 2 {
		next(t, events, "approval_requested")
	}
	_, page := get(t, ts, nil, "/sessions/"+sess.ID)
	page = html.UnescapeString(page)
	for id, want := range map[string][]string{
		"k1": {"$ go vet ./...", "$ staticcheck ./..."},
		"k2": {"$ go test -json './internal/...'"},
	} {
		i := strings.Index(page, `data-tool-call-id="`+id+`"`)
		if i < 0 {
			t.Fatalf("no card for %s", id)
		}
		card := page[i:]
		if j := strings.Index(card[1:], "data-tool-call-id="); j > 0 {
			card = card[:j]
		}
		for _, w := range want {
			if !strings.Contains(card, w) {
				t.Errorf("%s's card lacks %q:\n%.3000s", id, w, card)
			}
		}
		if strings.Contains(card, "<summary>Arguments</summary>") && id == "k1" {
			t.Errorf("%s's card shows its empty arguments", id)
		}
	}
}
