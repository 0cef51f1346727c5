package web

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/agent"
)

// socket is a server-side WebSocket whose messages can be sent in batches: the messages written
// between hold and release are framed as usual (one WebSocket message each, in order) but reach
// the network together, in one write system call (a few when they exceed batchLimit).
//
// Why: coder/websocket flushes its buffer at the end of every message, so a viewer that is
// behind by n events costs n system calls on the server and about as many reads in the viewer.
// With 1,000 viewers on two CPUs those calls were most of the fan-out's cost (bench/RESULTS.md).
type socket struct {
	*websocket.Conn
	out *batchConn
}

// acceptSocket accepts a WebSocket handshake as websocket.Accept does (same options: the Origin
// must be this host), on a connection that can batch its writes. On error Accept has answered.
func acceptSocket(w http.ResponseWriter, r *http.Request) (*socket, error) {
	hw := &hijackWriter{ResponseWriter: w}
	c, err := websocket.Accept(hw, r, nil)
	if err != nil {
		return nil, err
	}
	if hw.conn == nil {
		c.CloseNow()
		return nil, errors.New("websocket.Accept did not hijack through the wrapper")
	}
	return &socket{Conn: c, out: hw.conn}, nil
}

// writeBatch sends each of msgs as one text message, in order, with one write to the network
// (more when they exceed batchLimit), each bounded by writeTimeout. The bytes of msgs are not
// modified (a server does not mask its frames), so they may be shared between sockets.
func (s *socket) writeBatch(ctx context.Context, msgs [][]byte) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.out.hold()
	for _, m := range msgs {
		// Framed into memory, and every write to the network has a deadline (batchConn), so
		// the library need not watch a context: for a cancellable one it registers and
		// removes a context.AfterFunc per message. Framing waits only while a control frame
		// is written and fails at once on a closed connection.
		if err := s.Write(context.Background(), websocket.MessageText, m); err != nil {
			s.out.release()
			return err
		}
	}
	return s.out.release()
}

// hijackWriter is a ResponseWriter whose Hijack hands websocket.Accept a batchConn around the
// real connection. Unwrap lets http.ResponseController reach the writer beneath.
type hijackWriter struct {
	http.ResponseWriter
	conn *batchConn
}

func (h *hijackWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// Hijack hijacks the underlying connection. The buffered writer it returns (net/http's own,
// empty after a hijack) is pointed at the batchConn, so that every byte the library writes
// passes through it.
func (h *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		nc.Close()
		return nil, nil, err
	}
	h.conn = &batchConn{Conn: nc}
	brw.Writer.Reset(h.conn)
	return h.conn, brw, nil
}

// batchLimit bounds how many bytes a held batchConn keeps before writing them out.
const batchLimit = 64 << 10

// batchPool recycles batch buffers: a viewer holds one only while it sends a batch, so 1,000
// mostly idle viewers do not each keep one.
var batchPool = sync.Pool{New: func() any { return new([]byte) }}

// batchConn is a net.Conn whose writes can be held in memory and written out at once. Writes
// come from the socket's writer goroutine and from the library's read loop (pongs, the close
// handshake); mu keeps the bytes of one whole write together and in order.
//
// Every write to the network is bounded by writeTimeout through the connection's write
// deadline. Moving a deadline re-arms a runtime timer, which was a tenth of the cost of a
// batch, so the deadline is moved only once it is less than writeTimeout/2 away: a write may
// take between writeTimeout/2 and writeTimeout before it fails.
type batchConn struct {
	net.Conn
	mu       sync.Mutex
	holding  bool
	buf      *[]byte
	deadline time.Time
}

// hold makes writes go to memory until release.
func (b *batchConn) hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holding = true
}

// release writes out what was held and makes writes go to the network again.
func (b *batchConn) release() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holding = false
	err := b.flushLocked()
	if b.buf != nil {
		*b.buf = (*b.buf)[:0]
		batchPool.Put(b.buf)
		b.buf = nil
	}
	return err
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.holding {
		return b.writeLocked(p)
	}
	if b.buf == nil {
		b.buf = batchPool.Get().(*[]byte)
	}
	if len(*b.buf)+len(p) > batchLimit {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) >= batchLimit {
			return b.writeLocked(p)
		}
	}
	*b.buf = append(*b.buf, p...)
	return len(p), nil
}

// Close writes out what is held, then closes the connection. The library closes the connection
// itself after answering a close frame from its read loop, and that answer may have been held
// by a batch in progress: it must still be sent.
func (b *batchConn) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holding = false
	_ = b.flushLocked() // best effort: the connection is going away either way
	return b.Conn.Close()
}

// flushLocked writes the held bytes to the network; b.mu is held.
func (b *batchConn) flushLocked() error {
	if b.buf == nil || len(*b.buf) == 0 {
		return nil
	}
	_, err := b.writeLocked(*b.buf)
	*b.buf = (*b.buf)[:0]
	return err
}

// writeLocked writes p to the network within the write deadline; b.mu is held.
func (b *batchConn) writeLocked(p []byte) (int, error) {
	if now := time.Now(); b.deadline.Sub(now) < writeTimeout/2 {
		b.deadline = now.Add(writeTimeout)
		if err := b.Conn.SetWriteDeadline(b.deadline); err != nil {
			return 0, err
		}
	}
	return b.Conn.Write(p)
}

// eventSocket is what one kind of event socket brings to the pump both kinds share (pumpEvents):
// the JSON API's events socket (api.go) and a session page's live socket (live.go).
type eventSocket struct {
	// limit is the cap the socket counts under; past it the socket is closed at once with the
	// limit's reason (1008).
	limit socketLimit
	// end, once ended, closes the socket with 1008 and its reason; nil never ends.
	end *socketEnd
	// first makes the socket's first messages (the snapshot, the resync), after it subscribed
	// (so nothing published in between is lost); false ends the socket without a word.
	first func(ctx context.Context) ([][]byte, bool)
	// message appends ev's message to msgs (nothing for an event it does not show). The bytes
	// may be shared with other sockets: nobody modifies them.
	message func(ctx context.Context, msgs [][]byte, ev *agent.Event) [][]byte
	// behind is the reason of the close (1013, try again later) of a socket dropped by the
	// broker for falling behind: the client reconnects and starts again from first.
	behind string
	// After session_deleted the socket closes with deletedStatus and deletedReason; when
	// sendDeleted is set, the batch that held the event is sent first (else it is dropped).
	deletedStatus websocket.StatusCode
	deletedReason string
	sendDeleted   bool
	// what names the socket in the debug log of a failed write.
	what string
	// subscribe subscribes the socket to its events; nil means session id's (Broker.Subscribe).
	// The inbox's socket hears every session's approval events (Broker.SubscribeApprovals).
	subscribe func() *agent.Subscription
	// badge, when set, is the owner's inbox badge (SPEC §15) for an approval event of any
	// session, heard on a second subscription (Broker.SubscribeApprovals): a session page's
	// socket carries the header's count so the page needs no second socket.
	badge func(ctx context.Context, msgs [][]byte, ev *agent.Event) [][]byte
}

// pumpEvents serves session id's events on a WebSocket as k says, until the client leaves, k.end
// is ended, the session is deleted or the broker drops the socket for falling behind. The client
// sends nothing (a message over 1 KiB cuts it off); the events queued while a batch was being
// written are coalesced (coalesce) and sent as the next batch, one message each, with one write
// (socket.writeBatch, each write bounded by writeTimeout: a client slower than that is cut off).
func (s *Server) pumpEvents(w http.ResponseWriter, r *http.Request, id string, k eventSocket) {
	// Accept checks that the Origin is this host (SPEC §7).
	c, err := acceptSocket(w, r)
	if err != nil {
		return // Accept has answered
	}
	defer c.CloseNow()
	release, ok := s.liveSockets.acquire(k.limit)
	if !ok {
		c.Close(websocket.StatusPolicyViolation, k.limit.reason)
		return
	}
	defer release()
	c.SetReadLimit(1 << 10)
	ctx := c.CloseRead(r.Context())

	var sub *agent.Subscription
	if k.subscribe != nil {
		sub = k.subscribe()
	} else {
		sub = s.cfg.Broker.Subscribe(id)
	}
	defer s.cfg.Broker.Unsubscribe(sub)
	// A nil channel never receives: without a badge the loop waits on the one subscription.
	var badges <-chan *agent.Event
	if k.badge != nil {
		bs := s.cfg.Broker.SubscribeApprovals()
		defer s.cfg.Broker.Unsubscribe(bs)
		badges = bs.C
	}
	first, ok := k.first(ctx)
	if !ok {
		return
	}
	if err := s.writeBatch(ctx, c, first, k.what); err != nil {
		return
	}
	var (
		evs  []*agent.Event
		msgs [][]byte
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.end.Done():
			c.Close(websocket.StatusPolicyViolation, k.end.reason)
			return
		case ev, ok := <-badges:
			if !ok {
				c.Close(websocket.StatusTryAgainLater, k.behind)
				return
			}
			// The badge reads the count when it is rendered: the latest event's is current.
			msgs = k.badge(ctx, msgs[:0], ev)
			err := s.writeBatch(ctx, c, msgs, k.what)
			clear(msgs)
			if err != nil {
				return
			}
		case ev, ok := <-sub.C:
			if !ok {
				c.Close(websocket.StatusTryAgainLater, k.behind)
				return
			}
			evs, msgs = coalesce(evs, ev, sub.C), msgs[:0]
			deleted := false
			for _, ev := range evs {
				if ctx.Err() != nil { // the client left: make nothing more for it
					return
				}
				deleted = deleted || ev.Type == agent.SessionDeleted
				msgs = k.message(ctx, msgs, ev)
			}
			clear(evs) // keep no event alive while waiting for the next
			if deleted && !k.sendDeleted {
				clear(msgs)
				c.Close(k.deletedStatus, k.deletedReason)
				return
			}
			err := s.writeBatch(ctx, c, msgs, k.what)
			clear(msgs)
			if err != nil {
				return
			}
			if deleted {
				// The session_deleted event was the last: nothing more will come.
				c.Close(k.deletedStatus, k.deletedReason)
				return
			}
		}
	}
}

// writeBatch sends msgs, one message each, in one batch; a failure other than the client having
// gone is logged (debug) under what.
func (s *Server) writeBatch(ctx context.Context, c *socket, msgs [][]byte, what string) error {
	err := c.writeBatch(ctx, msgs)
	if err != nil && !errors.Is(err, context.Canceled) && websocket.CloseStatus(err) == -1 &&
		!strings.Contains(err.Error(), "closed") {
		s.log.Debug(what+" write", "err", err)
	}
	return err
}
