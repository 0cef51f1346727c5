package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/tool"
)

// TestLiveApprovalFragmentShowsWhatTheCallDoes: the prompt pushed live carries the call's
// arguments (the page renders nothing of its own).
func TestLiveApprovalFragmentShowsWhatTheCallDoes(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "frag", "model": "faux:one"}, &sess)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/sessions/"+sess.ID+"/live",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("no approval fragment: %v", err)
		}
		frag := string(data)
		if strings.Contains(frag, "Approval required: shell") {
			// In the prompt's own arguments view, not only in the Edit box's data.
			// Issue 34: what the call does comes first, right after the title line.
			if !strings.Contains(frag, "<div class=\"call-preview\" data-testid=\"prompt-what\"><details class=\"tool-args\" open><summary>Arguments</summary><pre><code>{\n  &#34;command&#34;: &#34;touch x&#34;\n}</code></pre></details></div>") {
				t.Fatalf("the prompt does not show the arguments:\n%s", frag)
			}
			return
		}
	}
}

// cardHTML returns the <article> of the card with data-tool-call-id id in html ("" if none). A
// nested card holds no other card, so it ends at the first </article>.
func cardHTML(html, id string) string {
	at := strings.Index(html, `data-tool-call-id="`+id+`"`)
	if at < 0 {
		return ""
	}
	start := strings.LastIndex(html[:at], "<article ")
	end := strings.Index(html[at:], "</article>")
	if start < 0 || end < 0 {
		return ""
	}
	return html[start : at+end+len("</article>")]
}

// TestNestedCardLiveIsTheReloadedCard: a finished nested call's card pushed live is, byte for
// byte, the card a reload renders: both drawn from its entry in the parent's nestedCalls record,
// its result text kept to 4 KiB and marked as shortened (issue 16, item 4).
func TestNestedCardLiveIsTheReloadedCard(t *testing.T) {
	obj := json.RawMessage(`{"type":"object"}`)
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	loud := &tool.Tool{Name: "loud", InputSchema: obj, Annotations: ro,
		Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
			return tool.Result{Content: []tool.Content{tool.Text("BEGIN" + strings.Repeat("x", 10_000) + "END")}}, nil
		}}
	parent := &tool.Tool{Name: "parent", InputSchema: obj, Annotations: ro,
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			tc.ExecuteTool(ctx, "loud", nil)
			return tool.Result{Content: []tool.Content{tool.Text("done")}}, nil
		}}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"p","name":"parent","arguments":{}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	ts := newTestServer(t, map[string]string{"nest": script}, loud, parent)
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "nest", "model": "faux:nest"}, &sess)
	live, events := ts.ownerLive(t, sess.ID), ts.events(t, sess.ID)
	readMessage(t, live) // the first render
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	var pushed string
	for pushed == "" || !strings.Contains(pushed, "tool-ok") {
		pushed = cardHTML(readMessage(t, live), "p/1")
	}
	next(t, events, "agent_end")
	st, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	if st != http.StatusOK {
		t.Fatalf("session page %d", st)
	}
	reloaded := cardHTML(page, "p/1")
	if reloaded != pushed {
		t.Errorf("the nested card differs live and reloaded:\nlive:     %s\nreloaded: %s", pushed, reloaded)
	}
	if !strings.Contains(reloaded, "BEGINxxx") || strings.Contains(reloaded, "xEND") || !strings.Contains(reloaded, "Shortened") {
		t.Errorf("the nested card does not show its result cut to 4 KiB and marked:\n%.300s", reloaded)
	}
	if strings.Contains(page, "Some nested calls were not recorded") {
		t.Error("a record with every call kept says calls were not recorded")
	}
}

// TestAStoppedCallsCardSaysCancelled: a call running when its run is stopped ends with the error
// "Run stopped by owner", and its card says cancelled, not failed, live and reloaded alike (the
// result's Stopped fact, not its text).
func TestAStoppedCallsCardSaysCancelled(t *testing.T) {
	obj := json.RawMessage(`{"type":"object"}`)
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	started := make(chan struct{})
	wait := &tool.Tool{Name: "wait", InputSchema: obj, Annotations: ro,
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
			close(started)
			<-ctx.Done()
			return tool.Result{}, ctx.Err()
		}}
	script := `{"steps":[{"content":[{"type":"toolCall","id":"w","name":"wait","arguments":{}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	ts := newTestServer(t, map[string]string{"wait": script}, wait)
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "stop", "model": "faux:wait"}, &sess)
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot") // subscribed: the events from here on reach this socket
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	<-started
	if st := ts.call(t, "POST", "/api/sessions/"+sess.ID+"/stop", nil, nil); st >= 300 {
		t.Fatalf("stop = %d", st)
	}
	end := next(t, events, "tool_execution_end")
	if res := end["result"].(map[string]any); res["stopped"] != true || !strings.Contains(fmt.Sprint(res["content"]), "Run stopped by owner") {
		t.Errorf("the stopped call's result %v, want stopped and its text", res)
	}
	next(t, events, "agent_end")
	st, page := ts.do(t, "GET", "/sessions/"+sess.ID, "", "", nil)
	if st != http.StatusOK {
		t.Fatalf("session page %d", st)
	}
	if card := cardHTML(page, "w"); !strings.Contains(card, `data-state="cancelled"`) {
		t.Errorf("the stopped call's card is not cancelled:\n%.400s", card)
	}
}
