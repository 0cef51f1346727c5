package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a-h/templ"
	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/web"
)

// countingStore counts the web server's reads of a session.
type countingStore struct {
	web.Reader
	sessions atomic.Int64
}

func (c *countingStore) Session(ctx context.Context, id string) (agent.Session, error) {
	c.sessions.Add(1)
	return c.Reader.Session(ctx, id)
}

// TestLiveFragmentIsRenderedOncePerEventAndRights is issue 19's goal 4 for the HTML live path:
// an event is rendered once per class of rights and the session read from the store once per
// event, whatever the number of viewers; viewers with the same rights get the same bytes, and a
// reviewer never gets the owner's controls (Stop, the owner's decision form) nor another link's.
// A second viewer that caused a second render or store read fails it.
func TestLiveFragmentIsRenderedOncePerEventAndRights(t *testing.T) {
	store := &countingStore{}
	var renders atomic.Int64 // the shell card's call view, drawn once per render of its card
	ts := newTestServerConfig(t, map[string]string{"one": oneCall}, func(c *web.Config, _ *http.Server) {
		store.Reader = c.Store
		c.Store = store
		c.Renderers = map[string]web.Renderer{"shell": {Call: func(web.CallInfo) (templ.Component, error) {
			renders.Add(1)
			return templ.Raw(`<p class="counted-call"></p>`), nil
		}}}
	})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "once", "model": "faux:one"}, &sess)
	sid := sess.ID
	viewLink := createLink(t, ts, sid, map[string]any{"role": "viewer"})
	approveLink := createLink(t, ts, sid, map[string]any{"role": "approver"})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base := "ws" + strings.TrimPrefix(ts.URL, "http")
	dial := func(path string, opts *websocket.DialOptions) *websocket.Conn {
		t.Helper()
		c, _, err := websocket.Dial(ctx, base+path, opts)
		if err != nil {
			t.Fatalf("dial %s: %v", path, err)
		}
		t.Cleanup(func() { c.CloseNow() })
		if _, _, err := c.Read(ctx); err != nil { // the resync
			t.Fatal(err)
		}
		return c
	}
	owner := &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}}
	linkPath := func(l sharedLink) string {
		u, _ := url.Parse(l.URL)
		return u.Path
	}
	viewers := map[string][]*websocket.Conn{
		"owner": {dial("/sessions/"+sid+"/live", owner), dial("/sessions/"+sid+"/live", owner)},
		"viewer link": {
			dial(linkPath(viewLink)+"/live", &websocket.DialOptions{HTTPClient: reviewer(t, ts, viewLink.URL, "Vic")}),
			dial(linkPath(viewLink)+"/live", &websocket.DialOptions{HTTPClient: reviewer(t, ts, viewLink.URL, "Val")}),
		},
		"approver link": {
			dial(linkPath(approveLink)+"/live", &websocket.DialOptions{HTTPClient: reviewer(t, ts, approveLink.URL, "Ann")}),
			dial(linkPath(approveLink)+"/live", &websocket.DialOptions{HTTPClient: reviewer(t, ts, approveLink.URL, "Abe")}),
		},
	}
	// publish sends ev to the session's viewers and returns the one fragment each class of
	// viewers got, after checking that every viewer of the class got the same bytes.
	publish := func(ev agent.Event) map[string]string {
		t.Helper()
		ts.broker.Publish(ev)
		got := map[string]string{}
		for class, conns := range viewers {
			for i, c := range conns {
				_, data, err := c.Read(ctx)
				// An owner's page socket also carries the inbox badge, from a second subscription
				// (every session's approval events): its frame comes before or after the event's
				// own, in either order. It is not this test's subject (inbox_test.go's is).
				for err == nil && strings.HasPrefix(string(data), `<a id="inbox-badge"`) {
					_, data, err = c.Read(ctx)
				}
				if err != nil {
					t.Fatalf("%s %d: no fragment for %s: %v", class, i, ev.Type, err)
				}
				if i == 0 {
					got[class] = string(data)
				} else if string(data) != got[class] {
					t.Errorf("%s: two viewers with the same rights got different bytes for %s:\n%s\n%s", class, ev.Type, got[class], data)
				}
			}
		}
		return got
	}
	args := json.RawMessage(`{"command":"touch x"}`)

	reads, drawn := store.sessions.Load(), renders.Load()
	publish(agent.Event{Type: agent.ToolExecutionStart, SessionID: sid, MessageID: "m1", ToolCallID: "c1", ToolName: "shell", Arguments: args})
	if n := renders.Load() - drawn; n != 3 {
		t.Errorf("tool_execution_start to 6 viewers in 3 classes of rights: %d renders, want 3 (one per class)", n)
	}
	if n := store.sessions.Load() - reads; n != 0 {
		t.Errorf("tool_execution_start: %d reads of the session, want none", n)
	}

	reads, drawn = store.sessions.Load(), renders.Load()
	pending := gate.Approval{ID: "a1", SessionID: sid, MessageID: "m1", ToolCallID: "c1", ToolName: "shell",
		Arguments: args, Status: gate.Pending, CreatedAt: time.Now()}
	got := publish(agent.Event{Type: agent.ApprovalRequested, SessionID: sid, MessageID: "m1", ToolCallID: "c1",
		ToolName: "shell", Arguments: args, Approval: &pending})
	if n := renders.Load() - drawn; n != 3 {
		t.Errorf("approval_requested to 6 viewers in 3 classes of rights: %d renders, want 3 (one per class)", n)
	}
	if n := store.sessions.Load() - reads; n != 1 {
		t.Errorf("approval_requested to 6 viewers: %d reads of the session, want 1", n)
	}
	ownerForm := `/sessions/` + sid + `/approvals/a1/decision`
	linkForm := linkPath(approveLink) + `/approvals/a1/decision`
	if !strings.Contains(got["owner"], ownerForm) || !strings.Contains(got["owner"], `id="stop-slot"`) {
		t.Errorf("the owner's prompt lacks their decision form or Stop:\n%s", got["owner"])
	}
	for _, class := range []string{"viewer link", "approver link"} {
		if strings.Contains(got[class], "/sessions/"+sid) || strings.Contains(got[class], `id="stop-slot"`) {
			t.Errorf("the %s reviewer got the owner's controls:\n%s", class, got[class])
		}
	}
	if strings.Contains(got["viewer link"], "/decision") {
		t.Errorf("the viewer link's reviewer got a decision form:\n%s", got["viewer link"])
	}
	if !strings.Contains(got["approver link"], linkForm) {
		t.Errorf("the approver's prompt lacks their link's decision form %s:\n%s", linkForm, got["approver link"])
	}

	reads = store.sessions.Load()
	publish(agent.Event{Type: agent.AgentEnd, SessionID: sid})
	if n := store.sessions.Load() - reads; n != 1 {
		t.Errorf("agent_end to 6 viewers: %d reads of the session, want 1", n)
	}
}
