package main

import (
	"context"
	"hash/maphash"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/testkit"
)

// The median line of a case takes a verdict (under_goal) from most runs, not from the first: five
// rules runs where only the first missed the goal are under it.
func TestMedianVerdictIsTheMajority(t *testing.T) {
	p := &printer{w: io.Discard}
	for i, added := range []float64{2.47, 1.6, 1.63, -0.12, -0.04} {
		p.emit(line{}.add("peer", "countersign").add("case", "rules").add("n", 5000).add("run", i).
			add("us_added_per_call", added).add("under_goal", added < 2))
	}
	ms := p.medians()
	if len(ms) != 1 {
		t.Fatalf("%d median lines, want 1", len(ms))
	}
	if v, _ := ms[0].get("us_added_per_call"); v != 1.6 {
		t.Errorf("median us_added_per_call %v, want 1.6", v)
	}
	if v, _ := ms[0].get("under_goal"); v != true {
		t.Errorf("median under_goal %v, want true (four of five runs were under the goal)", v)
	}
}

// Each kind of live fragment (as internal/web renders them) is told apart by its first element,
// and only agent_end's run state (idle, no title) ends a viewer's run.
func TestClassifyFrameReadsTheFragmentsKey(t *testing.T) {
	tests := []struct {
		name  string
		frame string
		want  htmlKey
		end   bool
	}{
		{"message start (streaming)", `<div hx-swap-oob="beforeend:#transcript"><div id="m-zarp3xp2" class="message message-assistant streaming" data-upsert><div class="message-role">Assistant</div></div></div>`,
			htmlKey{kind: kindStart, id: "zarp3xp2"}, false},
		{"message end", `<div hx-swap-oob="beforeend:#transcript"><div id="m-zarp3xp2" class="message message-assistant" data-upsert><div class="message-role">Assistant</div><article id="tc-3a4e" class="tool-card tool-ok" data-tool-call-id="call-0" data-upsert></article></div></div>`,
			htmlKey{kind: kindEnd, id: "zarp3xp2"}, false},
		{"user message end", `<div hx-swap-oob="beforeend:#transcript"><div id="m-oduc3lo6" class="message message-user" data-upsert><div id="m-oduc3lo6-text" class="message-text">go</div></div></div>`,
			htmlKey{kind: kindEnd, id: "oduc3lo6"}, false},
		{"text update", "<div id=\"m-zarp3xp2-text\" class=\"message-text markdown\"><p>Streaming words to every viewer. S</p>\n</div>",
			htmlKey{kind: kindText, id: "zarp3xp2", textLen: 29}, false},
		{"text update with a character reference", `<div id="m-a-text" class="message-text markdown"><p>a &amp; b</p></div>`,
			htmlKey{kind: kindText, id: "a", textLen: 3}, false},
		{"text update with the message's other slots and a card", `<div id="m-a-text" class="message-text markdown"><div class="x"><p>ab</p></div></div>` +
			`<div id="m-a-thinking-text" class="thinking-text">hmm</div><div id="m-a-status" class="message-status"></div>` +
			`<div hx-swap-oob="beforeend:#m-a"><article data-tool-call-id="c1">shell</article></div>`,
			htmlKey{kind: kindText, id: "a", textLen: 2}, false},
		{"tool card", `<div hx-swap-oob="beforeend:#m-zarp3xp2"><article id="tc-3a4e" class="tool-card tool-running" role="article" aria-label="Tool call echo" data-tool-call-id="call-0" data-upsert></article></div>`,
			htmlKey{kind: kindCard, id: "call-0"}, false},
		{"nested card", `<div hx-swap-oob="beforeend:#tc-3a4e-nested"><article id="tc-99" class="tool-card tool-ok nested" data-tool-call-id="n-1" data-upsert></article></div>`,
			htmlKey{kind: kindCard, id: "n-1"}, false},
		{"session_updated while running", `<span id="run-state" class="state state-running">running</span><span id="stop-slot"></span><h1 id="session-title">t</h1>`,
			htmlKey{kind: kindRunState}, false},
		{"session_updated at the end", `<span id="run-state" class="state state-idle">idle</span><span id="stop-slot"></span><h1 id="session-title">t</h1>`,
			htmlKey{kind: kindRunState}, false},
		{"agent_end", `<span id="run-state" class="state state-idle">idle</span><span id="stop-slot"></span>`,
			htmlKey{kind: kindRunState}, true},
		{"a card's body (progress)", `<div id="tc-3a4e-body" class="tool-body" data-is-error="false"></div>`,
			htmlKey{kind: kindOther}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, end := classifyFrame([]byte(tt.frame))
			if got != tt.want || end != tt.end {
				t.Errorf("classifyFrame = %+v, end %v; want %+v, end %v", got, end, tt.want, tt.end)
			}
		})
	}
}

// A text update's key counts the same bytes on both sides: the event's raw text (trailing space
// and all) and the fragment's rendered Markdown.
func TestTextUpdateKeyIsTheSameForTheEventAndItsFragment(t *testing.T) {
	text := "Streaming words to every viewer. Streaming "
	ev := &agent.Event{Type: agent.MessageUpdate, MessageID: "m1",
		Message: &agent.Message{ID: "m1", Role: agent.Assistant, Content: []agent.Block{{Type: "text", Text: text}}}}
	fromEvent, ok := eventKey(ev)
	if !ok {
		t.Fatal("eventKey: not ok for a message_update")
	}
	fromFrame, _ := classifyFrame([]byte("<div id=\"m-m1-text\" class=\"message-text markdown\"><p>Streaming words to every viewer. Streaming</p>\n</div>"))
	if fromEvent != fromFrame {
		t.Errorf("event key %+v, fragment key %+v", fromEvent, fromFrame)
	}
}

// utime and stime are fields 14 and 15, counted after the command name, which may hold spaces
// and parentheses.
func TestParseProcStatCPU(t *testing.T) {
	stat := "4242 (count ) (er) S 1 4242 4242 0 -1 4194560 1200 0 0 0 250 31 0 0 20 0 9 0 1000 800000000 5000 18446744073709551615\n"
	got, err := parseProcStatCPU(stat, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2810 * time.Millisecond; got != want {
		t.Errorf("parseProcStatCPU = %v, want %v", got, want)
	}
	if _, err := parseProcStatCPU("4242 (short) S 1 2", 100); err == nil {
		t.Error("parseProcStatCPU of a short line: no error")
	}
}

// Against the real server: every fragment a session page's live socket receives through a run
// of the fanout_html script is matched to a published event by its key (so a change to the
// fragments that the case cannot read shows here, not as "unmatched" in a benchmark run), and
// the last one is agent_end's.
func TestLiveFragmentsMatchTheirEvents(t *testing.T) {
	ctx := context.Background()
	e, err := testkit.NewBench(ctx, t.TempDir(), testkit.BenchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	a, stop, err := serve(e)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cookie, err := a.login(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.Models.Add("stream", testkit.StreamScript(2, 100))
	id, err := a.createSession(ctx, "stream", "faux:stream")
	if err != nil {
		t.Fatal(err)
	}
	sub := e.Broker.Subscribe(id)
	defer e.Broker.Unsubscribe(sub)
	published := map[pubKey]bool{}
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		seen := map[htmlKey]int{}
		for ev := range sub.C {
			if k, ok := eventKey(ev); ok {
				published[pubKey{id, k, seen[k]}] = true
				seen[k]++
			}
			if ev.Type == agent.AgentEnd {
				return
			}
		}
	}()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.base, "http")+"/sessions/"+id+"/live",
		&websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {cookie}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(ctx); err != nil { // the resync
		t.Fatal(err)
	}
	if err := a.send(ctx, id, "go"); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v := readFragments(rctx, c, maphash.MakeSeed())
	<-probed
	if v.Err != "" || v.Dropped || v.Unfinished {
		t.Fatalf("viewer: err %q, dropped %v, unfinished %v", v.Err, v.Dropped, v.Unfinished)
	}
	seen := map[htmlKey]int{}
	for i, kind := range v.Kinds {
		k := htmlKey{kind: kind, id: v.IDs[i], textLen: v.Lens[i]}
		if !published[pubKey{id, k, seen[k]}] {
			t.Errorf("fragment %d (%+v, #%d) matches no published event", i, k, seen[k])
		}
		seen[k]++
	}
	if n := len(v.Kinds); n < 10 || v.Kinds[n-1] != kindRunState {
		t.Errorf("%d fragments, the last of kind %q; want at least 10, ending with agent_end's run state", n, v.Kinds[n-1:])
	}
}
