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
)

// TestBothSocketKindsCloseTheSameWayOnASlowReader: the JSON events socket and a page's live
// socket share one pump (issue 19), so a client that does not read while events pile up past
// the broker's buffer is treated alike: it gets what was sent, in order, then a close with
// StatusTryAgainLater, and reconnects.
func TestBothSocketKindsCloseTheSameWayOnASlowReader(t *testing.T) {
	for _, kind := range []struct{ name, path string }{
		{"JSON events", "/api/sessions/%s/events"},
		{"HTML live", "/sessions/%s/live"},
	} {
		t.Run(kind.name, func(t *testing.T) {
			ts := newTestServer(t, map[string]string{"one": oneCall})
			var sess struct{ ID string }
			ts.call(t, "POST", "/api/sessions", map[string]string{"title": "slow", "model": "faux:one"}, &sess)
			// Generous: under -race on a busy machine each HTML card takes tens of milliseconds to
			// render, and the client reads everything queued before the close.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+fmt.Sprintf(kind.path, sess.ID),
				&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			c.SetReadLimit(1 << 20)
			if _, _, err := c.Read(ctx); err != nil { // the snapshot, the resync
				t.Fatal(err)
			}
			// 4 KiB of arguments each, 12 MB in all: more than the loopback sockets' buffers and
			// the broker's 1,024 events; each call's card or event names its call.
			args, _ := json.Marshal(map[string]string{"command": strings.Repeat("x", 4<<10)})
			const n = 3000
			for i := range n {
				ts.broker.Publish(agent.Event{Type: agent.ToolExecutionStart, SessionID: sess.ID, MessageID: "m",
					ToolCallID: fmt.Sprintf("call-%d", i), ToolName: "shell", Arguments: args})
			}
			got := 0
			for {
				_, data, err := c.Read(ctx)
				if err != nil {
					if st := websocket.CloseStatus(err); st != websocket.StatusTryAgainLater {
						t.Fatalf("after %d messages: %v (close status %v), want StatusTryAgainLater", got, err, st)
					}
					break
				}
				if want := fmt.Sprintf("call-%d", got); !strings.Contains(string(data), `"`+want+`"`) {
					t.Fatalf("message %d does not name %s: %.200s", got, want, data)
				}
				got++
			}
			if got == 0 || got >= n {
				t.Errorf("read %d messages before the close, want some but not all %d", got, n)
			}
		})
	}
}
