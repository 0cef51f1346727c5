package web

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
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
