package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/agent"
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
			if !strings.Contains(frag, "&#34;touch x&#34;\n}</code></pre></details></div><form") {
				t.Fatalf("the prompt does not show the arguments:\n%s", frag)
			}
			return
		}
	}
}
