package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"html"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/testkit"
)

// goalFanoutHTMLP99Ms is issue 19's goal 4: the p99 delivery delay of the session pages' live
// fragments to 1,000 viewers on 10 sessions, paced, at most 50 ms.
const goalFanoutHTMLP99Ms = 50

// fanoutHTML (issue 19, goal 4): viewersPer session pages' live WebSockets (GET
// /sessions/{id}/live with the owner's login cookie: the htmx fragments a browser's session page
// gets, internal/web/live.go) on each of sessions sessions, every session streaming the fan-out
// case's script at once (10 turns of ~300 bytes of text in word-sized chunks chunkDelay apart,
// and an echo call each).
//
// The viewers run in a child process (this program with -html-viewers), so this process holds
// only the server (web.New over testkit's Runner, its sockets spread over servers by
// serveShards) and cpu_ms is the server's CPU time, and -cpuprofile profiles the server alone;
// viewer_cpu_ms is the child's.
//
// Delivery delay (p50_ms, p99_ms, max_ms): a fragment carries no timestamp and this case changes
// nothing a browser receives, so each fragment is matched to the event it was rendered from
// (htmlKey: which kind of fragment, for which message or call, the text's length for a text
// update, and how many fragments of that key came before it) and its arrival, stamped by the
// viewer as the whole message has been read, is compared with the event's publication time
// (agent.Event.PublishedAt, stamped once by Broker.Publish), which an in-process subscriber per
// session records under the same key. Both are wall-clock readings of the one machine's clock, in
// two processes. Events that render nothing (agent_start, turn_start, turn_end) are not
// counted; an update a viewer never received because a newer one superseded it while it was
// behind (live.go coalesces them) is not counted either, and the newer one is. A fragment that
// matches no event is counted in unmatched.
//
// text_p50_ms / text_p99_ms, text updates only: from the moment the model handed over the newest
// text in the update (testkit's OnText) to its arrival; it includes the wait for the next update
// (at most one per 50 ms per message).
//
// frames_differing: of the events matched, how many reached viewers as different bytes (a
// fragment rendered per viewer from state read at render time can differ between viewers of
// the same rights; issue 19 wants one rendering sent to all). store_reads: the servers' reads
// of the store (web.Reader, counted) from the start of the runs to the last viewer's end, and
// per fragment received: issue 19 wants no store read per event per viewer.
func fanoutHTML(ctx context.Context, sessions, viewersPer int, chunkDelay time.Duration) (line, error) {
	type textKey struct {
		session         string
		turn, textBytes int
	}
	type textRaw struct {
		message string
		visible int
	}
	var mu sync.Mutex
	handed := map[textKey]time.Time{}
	published := map[pubKey]time.Time{}
	turnOf := map[string]int{}       // assistant message id → its turn (1-based, as OnText's)
	rawLen := map[textRaw]int{}      // a text update's visible length → its text's length in bytes
	sessionOf := map[string]string{} // message id → session
	e, cleanup, err := newEnv(ctx, testkit.BenchOptions{})
	if err != nil {
		return nil, err
	}
	defer cleanup()
	e.Models.ChunkDelay = chunkDelay
	e.Models.OnText = func(sessionID string, turn, textLen int, at time.Time) {
		mu.Lock()
		handed[textKey{sessionID, turn, textLen}] = at
		mu.Unlock()
	}
	viewers := sessions * viewersPer
	store := &countingReader{Reader: e.DB}
	shards, stop, err := serveShardsOn(e, store, viewers)
	if err != nil {
		return nil, err
	}
	defer stop()
	cookies := make([]string, len(shards))
	for i, s := range shards {
		if cookies[i], err = s.login(ctx); err != nil {
			return nil, err
		}
	}
	const turns, textBytes = 10, 300
	ids := make([]string, sessions)
	var probes sync.WaitGroup
	var events atomic.Int64 // every event published to the sessions
	probeErrs := make(chan error, sessions)
	for s := range ids {
		name := fmt.Sprintf("stream-%d", s)
		e.Models.Add(name, testkit.StreamScript(turns, textBytes))
		if ids[s], err = shards[0].createSession(ctx, name, "faux:"+name); err != nil {
			return nil, err
		}
		sub := e.Broker.Subscribe(ids[s])
		defer e.Broker.Unsubscribe(sub)
		probes.Add(1)
		go func() {
			defer probes.Done()
			seen := map[htmlKey]int{}
			turn := 0
			for ev := range sub.C {
				events.Add(1)
				k, ok := eventKey(ev)
				if ok {
					n := seen[k]
					seen[k] = n + 1
					mu.Lock()
					published[pubKey{ev.SessionID, k, n}] = ev.PublishedAt()
					switch {
					case ev.Type == agent.MessageStart && ev.Message != nil && ev.Message.Role == agent.Assistant:
						turn++
						turnOf[ev.MessageID] = turn
						sessionOf[ev.MessageID] = ev.SessionID
					case ev.Type == agent.MessageUpdate:
						rawLen[textRaw{ev.MessageID, k.textLen}] = len(ev.Message.Text())
					}
					mu.Unlock()
				}
				if ev.Type == agent.AgentEnd {
					if ev.Error != "" {
						probeErrs <- fmt.Errorf("session %s: run failed: %s", ev.SessionID, ev.Error)
					}
					return
				}
			}
		}()
	}
	specs := make([]viewerSpec, viewers)
	for i := range specs {
		sh := i % len(shards)
		specs[i] = viewerSpec{Session: ids[i%sessions], URL: "ws" + strings.TrimPrefix(shards[sh].base, "http") +
			"/sessions/" + ids[i%sessions] + "/live", Cookie: cookies[sh]}
	}
	child, err := startViewers(ctx, specs)
	if err != nil {
		return nil, err
	}
	defer child.kill()
	// As the fan-out case: settle the collection that connecting the sockets set off.
	runtime.GC()
	c0, t0, r0 := testkit.CPU(), time.Now(), store.reads.Load()
	errs := make(chan error, sessions)
	for _, id := range ids {
		go func() { errs <- shards[0].send(ctx, id, "go") }()
	}
	for range ids {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	probes.Wait()
	close(probeErrs)
	if err := <-probeErrs; err != nil {
		return nil, err
	}
	// Every viewer stops at its session's agent_end fragment; one that never gets it is stopped
	// after a grace period and counted in unfinished.
	res, err := child.wait(ctx, 30*time.Second)
	if err != nil {
		return nil, err
	}
	total, cpu, reads := time.Since(t0), testkit.CPU()-c0, store.reads.Load()-r0

	var delays, textDelays []float64
	frames, framesBytes, dropped, unfinished, unmatched := 0, 0, 0, 0, 0
	hashes := map[pubKey]uint64{}
	differing := map[pubKey]bool{}
	seen := map[htmlKey]int{}
	for _, v := range res.viewers {
		if v.Err != "" {
			return nil, fmt.Errorf("viewer %d: %s", v.Viewer, v.Err)
		}
		if v.Dropped {
			dropped++
		}
		if v.Unfinished {
			unfinished++
		}
		frames += len(v.At)
		framesBytes += v.Bytes
		sess := specs[v.Viewer].Session
		clear(seen)
		for i, at := range v.At {
			k := htmlKey{kind: v.Kinds[i], id: v.IDs[i], textLen: v.Lens[i]}
			n := seen[k]
			seen[k] = n + 1
			pk := pubKey{sess, k, n}
			p, ok := published[pk]
			if !ok {
				unmatched++
				continue
			}
			arrived := time.Unix(0, at)
			delays = append(delays, float64(arrived.Sub(p).Microseconds())/1e3)
			if h, ok := hashes[pk]; !ok {
				hashes[pk] = v.Hashes[i]
			} else if h != v.Hashes[i] {
				differing[pk] = true
			}
			if k.kind == kindText {
				msg := k.id
				if h, ok := handed[textKey{sessionOf[msg], turnOf[msg], rawLen[textRaw{msg, k.textLen}]}]; ok {
					textDelays = append(textDelays, float64(arrived.Sub(h).Microseconds())/1e3)
				}
			}
		}
	}
	p99 := round2(percentile(delays, 99))
	perViewer := func(x int) float64 { return round1(float64(x) / float64(max(len(res.viewers), 1))) }
	return line{}.add("peer", "countersign").add("case", "fanout_html").add("mode", "paced").add("n", viewers).
		add("chunk_delay_ms", ms(chunkDelay)).add("sessions", sessions).add("viewers", viewers).
		add("servers", len(shards)).
		add("events_published", events.Load()).add("events_with_fragment", len(published)).add("text_deltas", len(handed)).
		add("frames_received", frames).add("events_matched", len(delays)).
		add("frames_per_viewer", perViewer(frames)).add("bytes_per_viewer", perViewer(framesBytes)).
		add("p50_ms", round2(percentile(delays, 50))).add("p99_ms", p99).
		add("max_ms", round2(percentile(delays, 100))).
		add("text_p50_ms", round2(percentile(textDelays, 50))).add("text_p99_ms", round2(percentile(textDelays, 99))).
		add("frames_differing", len(differing)).
		add("store_reads", reads).add("store_reads_per_frame", round2(float64(reads)/float64(max(frames, 1)))).
		add("dropped_viewers", dropped).add("unfinished_viewers", unfinished).add("unmatched", unmatched).
		add("total_ms", ms(total)).add("cpu_ms", ms(cpu)).add("viewer_cpu_ms", ms(res.cpu)).
		add("goal_p99_ms", goalFanoutHTMLP99Ms).add("under_goal", p99 <= goalFanoutHTMLP99Ms && dropped == 0 && unfinished == 0), nil
}

// htmlKey names a live fragment by what it shows, so that a fragment a viewer receives can be
// matched to the event it was rendered from (eventKey and classifyFrame agree on it).
type htmlKey struct {
	kind    byte   // kindStart, kindEnd, kindText, kindCard, kindRunState or kindOther
	id      string // the message's id (start, end, text) or the tool call's (card)
	textLen int    // text: bytes of the text that are not white space
}

// pubKey is one published event by its fragment's key: the nth event of session with key k.
type pubKey struct {
	session string
	k       htmlKey
	nth     int
}

// The kinds of live fragment (internal/web/live.go's fragment).
const (
	kindStart    byte = 's' // message_start: the message appended to the transcript, streaming
	kindEnd      byte = 'e' // message_end: the message again, finished
	kindText     byte = 't' // message_update: the message's text, replaced
	kindCard     byte = 'c' // a tool call's card appended to its message (execution, approval)
	kindRunState byte = 'r' // session_updated, agent_end: the run state and Stop first
	kindOther    byte = 'o' // anything else
)

// eventKey is the key of the fragment an event renders to; ok is false for an event that renders
// none (agent_start, turn_start, turn_end) or one this case does not match (a progress update
// redraws a card's body, which names no call; the script has none).
func eventKey(ev *agent.Event) (k htmlKey, ok bool) {
	switch ev.Type {
	case agent.MessageStart:
		return htmlKey{kind: kindStart, id: ev.MessageID}, ev.Message != nil
	case agent.MessageEnd:
		return htmlKey{kind: kindEnd, id: ev.MessageID}, ev.Message != nil
	case agent.MessageUpdate:
		if ev.Message == nil {
			return htmlKey{}, false
		}
		return htmlKey{kind: kindText, id: ev.MessageID, textLen: visibleBytes([]byte(ev.Message.Text()))}, true
	case agent.ToolExecutionStart, agent.ToolExecutionEnd, agent.ApprovalRequested, agent.ApprovalResolved:
		return htmlKey{kind: kindCard, id: ev.ToolCallID}, true
	case agent.SessionUpdated, agent.AgentEnd:
		return htmlKey{kind: kindRunState}, true
	}
	return htmlKey{}, false
}

// The fixed starts of the fragments classifyFrame tells apart, as internal/web renders them
// (appendTo's out-of-band wrapper, templates.Message, MessageText and RunState).
var (
	transcriptAppend = []byte(`<div hx-swap-oob="beforeend:#transcript"><div id="m-`)
	elementAppend    = []byte(`<div hx-swap-oob="beforeend:#`)
	messageText      = []byte(`<div id="m-`)
	runStateSpan     = []byte(`<span id="run-state"`)
	toolCallIDAttr   = []byte(`data-tool-call-id="`)
	classAttr        = []byte(` class="`)
	sessionTitleID   = []byte(`id="session-title"`)
	stateIdle        = []byte(`state-idle`)
)

// classifyFrame reads a live fragment's key from its first element. end reports the fragment of
// agent_end: the run state idle, without the session's title (which session_updated carries).
func classifyFrame(b []byte) (k htmlKey, end bool) {
	switch {
	case bytes.HasPrefix(b, transcriptAppend):
		id, rest, ok := cutQuoted(b[len(transcriptAppend):])
		if !ok {
			break
		}
		cls := frameBytes(rest, classAttr)
		if bytes.Contains(append([]byte(" "), append(cls, ' ')...), []byte(" streaming ")) {
			return htmlKey{kind: kindStart, id: string(id)}, false
		}
		return htmlKey{kind: kindEnd, id: string(id)}, false
	case bytes.HasPrefix(b, elementAppend):
		if id := frameBytes(b, toolCallIDAttr); id != nil {
			return htmlKey{kind: kindCard, id: string(id)}, false
		}
	case bytes.HasPrefix(b, messageText):
		id, rest, ok := cutQuoted(b[len(messageText):])
		msg, isText := bytes.CutSuffix(id, []byte("-text"))
		if !ok || !isText {
			break
		}
		if i := bytes.IndexByte(rest, '>'); i >= 0 {
			// The text element only: the same fragment may go on with the message's other slots
			// (its reasoning, its status, the cards of calls that stream, issue 18).
			return htmlKey{kind: kindText, id: string(msg), textLen: visibleBytes(stripTags(divContent(rest[i+1:])))}, false
		}
	case bytes.HasPrefix(b, runStateSpan):
		end := bytes.Contains(b[:bytes.IndexByte(b, '>')+1], stateIdle) && !bytes.Contains(b, sessionTitleID)
		return htmlKey{kind: kindRunState}, end
	}
	return htmlKey{kind: kindOther}, false
}

// divContent is b, which starts inside a <div>, up to the </div> that closes it (all of b when
// none does).
func divContent(b []byte) []byte {
	depth := 1
	for i := 0; i < len(b); i++ {
		switch {
		case bytes.HasPrefix(b[i:], []byte("<div")):
			depth++
		case bytes.HasPrefix(b[i:], []byte("</div>")):
			if depth--; depth == 0 {
				return b[:i]
			}
		}
	}
	return b
}

// cutQuoted splits b, which starts inside a quoted attribute value, at its closing quote.
func cutQuoted(b []byte) (value, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '"')
	if i < 0 {
		return nil, nil, false
	}
	return b[:i], b[i+1:], true
}

// stripTags returns the text of an HTML fragment: its tags removed, its character references
// decoded.
func stripTags(b []byte) []byte {
	var out []byte
	in := false
	for _, c := range b {
		switch {
		case c == '<':
			in = true
		case c == '>':
			in = false
		case !in:
			out = append(out, c)
		}
	}
	if bytes.IndexByte(out, '&') >= 0 {
		return []byte(html.UnescapeString(string(out)))
	}
	return out
}

// visibleBytes counts the bytes of b that are not ASCII white space: what a text's Markdown
// rendering keeps of it when the text has no Markdown syntax (the script's has none), whatever
// it does with spaces and line breaks.
func visibleBytes(b []byte) int {
	n := 0
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r', '\f', '\v':
		default:
			n++
		}
	}
	return n
}

// viewerSpec is one page socket the child process opens.
type viewerSpec struct {
	Session string `json:"session"`
	URL     string `json:"url"`
	Cookie  string `json:"cookie"` // the Cookie header: the owner's login on the socket's server
}

// viewerResult is what the child process reports of one viewer: every fragment it received
// after the first (the page's resync), in order, by key (Kinds, IDs, Lens), arrival (Unix ns) and
// a hash of its bytes; Bytes counts all their bytes.
type viewerResult struct {
	Viewer     int      `json:"viewer"`
	Kinds      []byte   `json:"kinds"`
	IDs        []string `json:"ids"`
	Lens       []int    `json:"lens"`
	At         []int64  `json:"at"`
	Hashes     []uint64 `json:"hashes"`
	Bytes      int      `json:"bytes"`
	Dropped    bool     `json:"dropped,omitempty"`    // the server closed the socket (viewer behind)
	Unfinished bool     `json:"unfinished,omitempty"` // stopped before its agent_end fragment
	Err        string   `json:"err,omitempty"`
}

// viewersResult is the child's whole report.
type viewersResult struct {
	viewers []viewerResult
	cpu     time.Duration
}

// viewerProcess is the child process that holds the page sockets.
type viewerProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, line by line, closed at its end
}

// startViewers starts this program with -html-viewers, hands it specs and waits until every
// socket is open and has read its first fragment.
func startViewers(ctx context.Context, specs []viewerSpec) (*viewerProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-html-viewers")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &viewerProcess{cmd: cmd, stdin: stdin, lines: make(chan string, 64)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	if err := json.NewEncoder(stdin).Encode(specs); err != nil {
		p.kill()
		return nil, err
	}
	select {
	case l, ok := <-p.lines:
		if !ok || l != "ready" {
			p.kill()
			return nil, fmt.Errorf("viewers: %q instead of ready", l)
		}
		return p, nil
	case <-time.After(2 * time.Minute):
		p.kill()
		return nil, errors.New("viewers: not connected within 2 minutes")
	}
}

// wait reads the child's report. A child still running after grace has its viewers stopped (its
// stdin is closed), which it reports as unfinished.
func (p *viewerProcess) wait(ctx context.Context, grace time.Duration) (viewersResult, error) {
	var res viewersResult
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				if err := p.cmd.Wait(); err != nil {
					return res, fmt.Errorf("viewers: %w", err)
				}
				return res, nil
			}
			if cpu, ok := strings.CutPrefix(l, "cpu "); ok {
				d, err := time.ParseDuration(cpu)
				if err != nil {
					return res, err
				}
				res.cpu = d
				continue
			}
			var v viewerResult
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				return res, fmt.Errorf("viewers: %v in %.100q", err, l)
			}
			res.viewers = append(res.viewers, v)
		case <-timer.C:
			p.stdin.Close()
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
}

// kill ends the child if it is still running.
func (p *viewerProcess) kill() {
	p.stdin.Close()
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// runHTMLViewers is the child process of fanout_html: it reads the viewers' specs (JSON, one line)
// from stdin, opens every socket (32 at a time) and reads its first fragment, prints "ready",
// then reads each socket until its agent_end fragment (or until stdin ends), and prints one JSON
// line per viewer (viewerResult) and its own CPU time ("cpu 1.5s").
func runHTMLViewers(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReader(stdin)
	var specs []viewerSpec
	if err := json.NewDecoder(in).Decode(&specs); err != nil {
		return err
	}
	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		io.Copy(io.Discard, in) // the parent closes stdin to stop the viewers
		stop()
	}()
	tr := &http.Transport{MaxIdleConns: 1000, MaxIdleConnsPerHost: 1000, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	conns := make([]*websocket.Conn, len(specs))
	sem := make(chan struct{}, 32)
	errs := make(chan error, len(specs))
	for i, s := range specs {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c, _, err := websocket.Dial(ctx, s.URL, &websocket.DialOptions{HTTPClient: client,
				HTTPHeader: http.Header{"Cookie": {s.Cookie}}})
			if err != nil {
				errs <- fmt.Errorf("viewer %d: %w", i, err)
				return
			}
			c.SetReadLimit(64 << 20)
			_, b, err := c.Read(ctx)
			if err == nil && !bytes.HasPrefix(b, []byte(`<div id="transcript"`)) {
				err = fmt.Errorf("first fragment is not the transcript: %.200s", b)
			}
			if err != nil {
				c.CloseNow()
				errs <- fmt.Errorf("viewer %d: %w", i, err)
				return
			}
			conns[i] = c
			errs <- nil
		}()
	}
	var first error
	for range specs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		for _, c := range conns {
			if c != nil {
				c.CloseNow()
			}
		}
		return first
	}
	fmt.Fprintln(stdout, "ready")

	results := make([]viewerResult, len(specs))
	seed := maphash.MakeSeed()
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = readFragments(stopCtx, c, seed)
			results[i].Viewer = i
		}()
	}
	wg.Wait()
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	for i := range results {
		if err := enc.Encode(&results[i]); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "cpu %v\n", testkit.CPU())
	return w.Flush()
}

// readFragments reads one page socket's fragments until agent_end's, recording each; ctx's end
// stops it (unfinished).
func readFragments(ctx context.Context, c *websocket.Conn, seed maphash.Seed) viewerResult {
	var v viewerResult
	defer c.CloseNow()
	stopRead := context.AfterFunc(ctx, func() { c.CloseNow() })
	defer stopRead()
	var buf bytes.Buffer
	for {
		buf.Reset()
		_, r, err := c.Reader(context.Background())
		if err == nil {
			_, err = buf.ReadFrom(r)
		}
		at := time.Now()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				v.Unfinished = true
			case websocket.CloseStatus(err) == websocket.StatusTryAgainLater:
				v.Dropped = true
			default:
				v.Err = err.Error()
			}
			return v
		}
		b := buf.Bytes()
		k, end := classifyFrame(b)
		v.Kinds = append(v.Kinds, k.kind)
		v.IDs = append(v.IDs, k.id)
		v.Lens = append(v.Lens, k.textLen)
		v.At = append(v.At, at.UnixNano())
		v.Hashes = append(v.Hashes, maphash.Bytes(seed, b))
		v.Bytes += len(b)
		if end {
			return v
		}
	}
}
