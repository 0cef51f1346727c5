package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a-h/templ"
	"github.com/coder/websocket"

	"countersign/internal/agent"
)

// countingConn counts the writes that reach the network.
type countingConn struct {
	net.Conn
	writes atomic.Int32
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// batchServer serves one socket that sends msgs with writeBatch and reports how many writes
// reached the network.
func batchServer(t *testing.T, msgs [][]byte) (url string, writes <-chan int32) {
	t.Helper()
	out := make(chan int32, 1)
	url = socketServer(t, func(c *socket, r *http.Request) {
		cc := &countingConn{Conn: c.out.Conn}
		c.out.Conn = cc // before any write: nothing else uses it yet
		ctx := c.CloseRead(r.Context())
		if err := c.writeBatch(ctx, msgs); err != nil {
			t.Error(err)
		}
		out <- cc.writes.Load()
		<-ctx.Done()
	})
	return url, out
}

// socketServer serves each WebSocket it accepts with serve (the socket is closed after) and
// returns its ws:// URL.
func socketServer(t *testing.T, serve func(c *socket, r *http.Request)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := acceptSocket(w, r)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.CloseNow()
		serve(c, r)
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// readAll reads n messages and checks that they are msgs, one each, in order.
func readAll(t *testing.T, url string, msgs [][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	for i, want := range msgs {
		typ, got, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if typ != websocket.MessageText || !bytes.Equal(got, want) {
			t.Fatalf("message %d: got %v %.80q, want text %.80q", i, typ, got, want)
		}
	}
}

// TestWriteBatchIsOneWriteOfOneMessageEach: the events queued for a viewer that is behind reach
// the network in one write, and the viewer still reads one message per event, in order.
func TestWriteBatchIsOneWriteOfOneMessageEach(t *testing.T) {
	var msgs [][]byte
	for i := range 50 {
		msgs = append(msgs, fmt.Appendf(nil, `{"type":"tool_execution_start","toolCallId":"c%d"}`, i))
	}
	url, writes := batchServer(t, msgs)
	readAll(t, url, msgs)
	if n := <-writes; n != 1 {
		t.Errorf("%d writes reached the network, want 1", n)
	}
}

// TestWriteBatchBeyondTheLimit: a batch larger than batchLimit, with a message larger than the
// limit by itself, is written in a few writes and still read whole and in order.
func TestWriteBatchBeyondTheLimit(t *testing.T) {
	msgs := [][]byte{
		[]byte(`{"n":0}`),
		bytes.Repeat([]byte("a"), batchLimit/2),
		bytes.Repeat([]byte("b"), batchLimit/2),
		bytes.Repeat([]byte("c"), 2*batchLimit),
		[]byte(`{"n":4}`),
	}
	url, writes := batchServer(t, msgs)
	readAll(t, url, msgs)
	if n := <-writes; n < 2 || n > 5 {
		t.Errorf("%d writes reached the network, want a few", n)
	}
}

func TestCoalesceKeepsOrderAndTheLastUpdate(t *testing.T) {
	ev := func(typ agent.EventType, msg, call, delta string) *agent.Event {
		return &agent.Event{Type: typ, SessionID: "s", MessageID: msg, ToolCallID: call, Delta: delta}
	}
	queue := make(chan *agent.Event, 10)
	for _, e := range []*agent.Event{
		ev(agent.MessageUpdate, "m1", "", "b"),
		ev(agent.ToolExecutionUpdate, "m1", "c1", "1"),
		ev(agent.MessageUpdate, "m1", "", "c"),
		ev(agent.ToolExecutionStart, "m1", "c2", ""),
		ev(agent.ToolExecutionUpdate, "m1", "c2", "1"),
		ev(agent.ToolExecutionUpdate, "m1", "c1", "2"),
	} {
		queue <- e
	}
	got := coalesce(nil, ev(agent.MessageStart, "m1", "", "a"), queue)
	var names []string
	for _, e := range got {
		names = append(names, fmt.Sprintf("%s/%s/%s", e.Type, e.ToolCallID, e.Delta))
	}
	want := "message_start//a message_update//c tool_execution_start/c2/ tool_execution_update/c2/1 tool_execution_update/c1/2"
	if s := strings.Join(names, " "); s != want {
		t.Errorf("coalesce:\n got %s\nwant %s", s, want)
	}
	if len(queue) != 0 {
		t.Errorf("%d events left in the queue", len(queue))
	}
	if got := coalesce(got, ev(agent.AgentEnd, "", "", ""), queue); len(got) != 1 || got[0].Type != agent.AgentEnd {
		t.Errorf("alone: got %v", got)
	}
}

// TestWriteBatchToAClientThatStopsReadingTimesOut: writes that the client does not take fail
// within writeTimeout instead of blocking the socket's writer forever.
func TestWriteBatchToAClientThatStopsReadingTimesOut(t *testing.T) {
	t.Parallel()
	done := make(chan error, 1)
	url := socketServer(t, func(c *socket, r *http.Request) {
		msg := bytes.Repeat([]byte("x"), 1<<20)
		for {
			if err := c.writeBatch(r.Context(), [][]byte{msg, msg}); err != nil {
				done <- err
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	start := time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("write failed with %v, want a deadline exceeded", err)
		}
		if d := time.Since(start); d > writeTimeout+2*time.Second {
			t.Errorf("the write failed after %v, want within writeTimeout (%v)", d, writeTimeout)
		}
	case <-ctx.Done():
		t.Fatal("the writer was still blocked after 10s")
	}
}

// TestBatchConnCloseSendsWhatIsHeld: bytes held by a batch in progress (such as the library's
// answer to a close frame) are written before the connection closes.
func TestBatchConnCloseSendsWhatIsHeld(t *testing.T) {
	server, client := net.Pipe()
	b := &batchConn{Conn: server}
	b.hold()
	if _, err := b.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		all, _ := io.ReadAll(client)
		got <- all
	}()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if s := string(<-got); s != "held" {
		t.Errorf("the peer read %q, want %q", s, "held")
	}
	if err := b.release(); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("release after Close: %v", err)
	}
}

// TestRenderFragmentForAViewerWhoLeftLogsNothing: a live socket whose viewer disconnects
// mid-run used to log an ERROR "render fragment … context canceled" per queued event (about
// 125 lines per socket; found by a new-user review). A render that fails because the viewer's
// context ended is dropped quietly; any other failure is still logged.
func TestRenderFragmentForAViewerWhoLeftLogsNothing(t *testing.T) {
	var logged bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logged, nil))}
	frag := templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("broken template")
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if msgs := s.renderFragment(ctx, nil, frag); len(msgs) != 0 || logged.Len() != 0 {
		t.Errorf("after the viewer left: %d messages, log %q; want none", len(msgs), logged.String())
	}
	if msgs := s.renderFragment(context.Background(), nil, frag); len(msgs) != 0 || !strings.Contains(logged.String(), "broken template") {
		t.Errorf("a real render failure: %d messages, log %q; want it logged", len(msgs), logged.String())
	}
}
