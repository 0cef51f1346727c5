package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/rules"
	"countersign/internal/tool"
)

// commandTwice is a script whose two turns call run_command with the same command line.
const commandTwice = `{"steps":[
  {"content":[{"type":"toolCall","id":"c1","name":"run_command","arguments":{"command":"echo hi && ls -1"}}],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"First done."}],"stopReason":"stop"},
  {"content":[{"type":"toolCall","id":"c2","name":"run_command","arguments":{"command":"echo hi && ls -1"}}],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"Done."}],"stopReason":"stop"}]}`

// "Always allow…" covers the call it was clicked on (issue 28, acceptance 5): on `echo hi &&
// ls -1` the prompt offers one rule box per simple command (run_command(echo hi:*) and
// run_command(ls:*)); saving the form as shown approves the call, saves both rules, and the
// identical call in the next turn runs without a prompt. The JSON API takes the same as
// {"text": …, "texts": [...]}; a refused second text saves nothing.
func TestRememberSavesEveryRuleTheSuggestionNeeds(t *testing.T) {
	var runs atomic.Int32
	runCommand := &tool.Tool{Name: "run_command",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`),
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			runs.Add(1)
			return tool.Result{Content: []tool.Content{tool.Text("hi")}}, nil
		}}
	ts := newTestServerAgent(t, map[string]string{"lines": commandTwice}, nil, func(c *agent.Config) {
		c.CompileRules, c.ParseRule, c.SuggestRule = rules.Compiler, rules.Parse, rules.Suggest
	}, runCommand)
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "lines", "model": "faux:lines"}, &sess)
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	id := next(t, events, "approval_requested")["approval"].(map[string]any)["id"].(string)

	_, page := get(t, ts, nil, "/sessions/"+sess.ID)
	i := strings.Index(page, `id="remember-`+id+`"`)
	if i < 0 {
		t.Fatalf("no Always allow… form for %s", id)
	}
	form := page[i : i+strings.Index(page[i:], "</form>")]
	boxes := regexp.MustCompile(`name="rule" value="([^"]*)"`).FindAllStringSubmatch(form, -1)
	var texts []string
	for _, b := range boxes {
		texts = append(texts, strings.ReplaceAll(b[1], "&#34;", `"`))
	}
	if strings.Join(texts, " | ") != "run_command(echo hi:*) | run_command(ls:*)" || !strings.Contains(form, "Rule 2") {
		t.Fatalf("the form's rule boxes: %q\n%s", texts, form)
	}

	// A second text the parser refuses: nothing is saved, the call still waits.
	var e errBody
	if st := ts.call(t, "POST", "/api/approvals/"+id+"/decision", map[string]any{"decision": "remember",
		"rule": map[string]any{"text": texts[0], "texts": []string{"run_command(ls:*"}, "scope": "session"}}, &e); st != 400 ||
		!strings.Contains(e.Error.Message, "run_command(ls:*: ") {
		t.Fatalf("a refused second rule = %d %+v", st, e)
	}
	var list struct{ Rules []listedRule }
	ts.call(t, "GET", "/api/rules", nil, &list)
	if len(list.Rules) != 0 {
		t.Fatalf("a refused remember saved %+v", list.Rules)
	}

	if st, body := ownerForm(t, ts, sess.ID, id, url.Values{"decision": {"remember"}, "rule": texts, "scope": {"session"}}); st != http.StatusOK {
		t.Fatalf("remember = %d: %.300s", st, body)
	}
	next(t, events, "agent_end")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "again"}, nil)
	next(t, events, "agent_end")
	if runs.Load() != 2 {
		t.Fatalf("run_command ran %d times, want 2 (the second without a prompt)", runs.Load())
	}
	ts.call(t, "GET", "/api/rules", nil, &list)
	if len(list.Rules) != 2 || list.Rules[0].Text != "run_command(echo hi:*)" || list.Rules[1].Text != "run_command(ls:*)" {
		t.Fatalf("rules = %+v", list.Rules)
	}
}
