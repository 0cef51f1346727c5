package pgtest

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy between a test's client and the test server, so that a test can make the
// database go down, hang and come back without touching the server other tests share (issue
// 21 acceptance 6: /readyz follows the database). It starts up: each connection accepted is
// dialed through to the server and copied both ways.
type Proxy struct {
	t        testing.TB
	ln       net.Listener
	upstream string // the server's host:port
	url      string

	mu    sync.Mutex
	state proxyState
	conns map[net.Conn]bool // the proxied connections, both ends
	held  map[net.Conn]bool // connections accepted while hanging, never dialed through
	// flowing is closed while bytes flow; Hang replaces it with an open channel.
	flowing chan struct{}
	wg      sync.WaitGroup
}

type proxyState int

const (
	proxyUp proxyState = iota
	proxyDown
	proxyHanging
)

// NewProxy starts a proxy on a free local port in front of the server of dbURL (a postgres://
// URL, as Database returns); URL is dbURL through it. It stops when t ends.
func NewProxy(t testing.TB, dbURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: %s is not a URL: %v", redact(dbURL), err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, ln: ln, upstream: u.Host, conns: map[net.Conn]bool{}, held: map[net.Conn]bool{}, flowing: make(chan struct{})}
	close(p.flowing)
	u.Host = ln.Addr().String()
	p.url = u.String()
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		p.state = proxyDown
		p.closeAll()
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// URL is the database's URL through the proxy.
func (p *Proxy) URL() string { return p.url }

// Down makes the database unreachable: every proxied connection is closed and new ones are
// closed as soon as they are accepted, until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = proxyDown
	p.closeAll()
}

// Hang makes the database stop answering without closing anything: bytes stop flowing on the
// proxied connections (what is sent is held, not lost) and new connections are accepted but
// never answered, until Up or Down.
func (p *Proxy) Hang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == proxyHanging {
		return
	}
	p.state = proxyHanging
	p.flowing = make(chan struct{})
}

// Up makes the database reachable again: held bytes flow on, connections held while hanging
// are closed (their clients reconnect), and new connections are proxied.
func (p *Proxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resume()
	p.state = proxyUp
}

// resume lets bytes flow and closes the connections held while hanging. Under mu.
func (p *Proxy) resume() {
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
	for c := range p.held {
		c.Close()
	}
	clear(p.held)
}

// closeAll closes every connection, proxied or held, and lets blocked copies end. Under mu.
func (p *Proxy) closeAll() {
	p.resume()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed at the test's end
		}
		p.mu.Lock()
		switch p.state {
		case proxyDown:
			c.Close()
		case proxyHanging:
			p.held[c] = true
		default:
			p.wg.Add(1)
			go p.serve(c)
		}
		p.mu.Unlock()
	}
}

// serve dials c through to the server and copies both ways until either side ends or the
// proxy closes them.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	up, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.state != proxyUp {
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	end := func() {
		c.Close()
		up.Close()
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, up)
		p.mu.Unlock()
	}
	var once sync.Once
	p.wg.Add(2)
	go func() { defer p.wg.Done(); p.copy(up, c); once.Do(end) }()
	go func() { defer p.wg.Done(); p.copy(c, up); once.Do(end) }()
}

// copy copies src to dst, holding each chunk while the proxy hangs.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			flowing := p.flowing
			p.mu.Unlock()
			<-flowing
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or closed by the other direction or by Down
		}
	}
}
