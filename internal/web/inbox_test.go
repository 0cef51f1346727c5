package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/web"
)

// hostileCall is oneCall with markup in its arguments: the inbox shows them escaped.
const hostileCall = `{"steps":[
  {"content":[{"type":"toolCall","id":"c1","name":"shell","arguments":{"command":"<img src=x onerror=alert(1)>"}}],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"Done."}],"stopReason":"stop"}]}`

// parked creates a session titled title on script model and sends a message; it returns the
// session and the approval its one call is parked on.
func parked(t *testing.T, ts *testServer, title, model string) (agent.Session, string) {
	t.Helper()
	var sess agent.Session
	if st := ts.call(t, "POST", "/api/sessions", map[string]string{"title": title, "model": model}, &sess); st != 201 {
		t.Fatalf("create = %d", st)
	}
	c := ts.events(t, sess.ID)
	next(t, c, "snapshot")
	if st := ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil); st != 202 {
		t.Fatalf("send = %d", st)
	}
	aid := next(t, c, "approval_requested")["approval"].(map[string]any)["id"].(string)
	c.CloseNow()
	return sess, aid
}

// dialOwner opens one of the owner's sockets (path) with the bearer token.
func dialOwner(t *testing.T, ts *testServer, path string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+path,
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// readUntil reads messages from c until one contains every one of want, and returns it.
func readUntil(t *testing.T, c *websocket.Conn, want ...string) string {
	t.Helper()
	for {
		m := readMessage(t, c)
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(m, w)
		}
		if ok {
			return m
		}
	}
}

var cardOrder = regexp.MustCompile(`<article id="inbox-([A-Z0-9]+)"`)

func TestInboxListsEveryPendingApprovalOldestFirstWithItsSessionAndPrompt(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall, "hostile": hostileCall})
	_, empty := get(t, ts, nil, "/inbox")
	if cardOrder.MatchString(empty) || !strings.Contains(empty, "Nothing waits for you.") || !strings.Contains(empty, "<title>Inbox · Countersign</title>") {
		t.Errorf("empty inbox: want no card, the empty state and no count in the title:\n%.3000s", empty)
	}
	a, aid := parked(t, ts, `first <script>alert("t")</script>`, "faux:hostile")
	b, bid := parked(t, ts, "second", "faux:one")
	st, html := get(t, ts, nil, "/inbox")
	if st != 200 {
		t.Fatalf("GET /inbox = %d", st)
	}
	var order []string
	for _, m := range cardOrder.FindAllStringSubmatch(html, -1) {
		order = append(order, m[1])
	}
	if strings.Join(order, ",") != aid+","+bid {
		t.Errorf("cards %q, want oldest first %q", order, []string{aid, bid})
	}
	for _, want := range []string{
		`<title>(2) Inbox · Countersign</title>`,
		`data-testid="inbox-badge" data-count="2">Inbox <span class="inbox-count">(2)</span>`,
		// The session, linked at the call's prompt; the title escaped.
		`href="/sessions/` + a.ID + `#tc-`, `first &lt;script&gt;alert(&#34;t&#34;)&lt;/script&gt;`,
		`href="/sessions/` + b.ID + `#tc-`,
		// The session page's prompt with the owner's form, arguments escaped.
		`role="group" aria-label="Approval required: shell" data-approval-id="` + aid + `"`,
		`hx-post="/sessions/` + a.ID + `/approvals/` + aid + `/decision"`,
		`hx-post="/sessions/` + b.ID + `/approvals/` + bid + `/decision"`,
		`&lt;img src=x onerror=alert(1)&gt;`, `Always allow…`, `requested by the model`,
		`class="inbox-waited" data-waited-ms=`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("inbox lacks %q", want)
		}
	}
	for _, bad := range []string{`<script>alert("t")`, `<img src=x`} {
		if strings.Contains(html, bad) {
			t.Errorf("inbox has unescaped %q", bad)
		}
	}
	// Every owner page's header has the count; the pages without a socket get the badge's.
	for _, tc := range []struct{ name, path, socket string }{
		{"the session list", "/", `ws-connect="/inbox/badge"`},
		{"the rules page", "/rules", `ws-connect="/inbox/badge"`},
		{"the audit page", "/sessions/" + a.ID + "/audit", `ws-connect="/inbox/badge"`},
		{"a session page (its own socket carries it)", "/sessions/" + b.ID, `ws-connect="/sessions/` + b.ID + `/live"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, page := get(t, ts, nil, tc.path)
			if !strings.Contains(page, `<title>(2) `) || !strings.Contains(page, `data-count="2">Inbox <span class="inbox-count">(2)</span>`) ||
				!strings.Contains(page, tc.socket) || strings.Count(page, "ws-connect=") != 1 {
				t.Errorf("%s: want the count in title and badge and one socket %s:\n%.2500s", tc.path, tc.socket, page)
			}
		})
	}
	// Decided: gone from the inbox.
	if st := ts.call(t, "POST", "/api/approvals/"+aid+"/decision", map[string]string{"decision": "deny"}, nil); st != 200 {
		t.Fatalf("deny = %d", st)
	}
	_, html = get(t, ts, nil, "/inbox")
	if strings.Contains(html, aid) || !strings.Contains(html, bid) || !strings.Contains(html, "<title>(1) Inbox") {
		t.Errorf("after the denial: want only %s and (1):\n%.3000s", bid, html)
	}
}

// TestAnApproverLinksInboxIsItsOwnSessions: a share link's inbox lists only its session's
// approvals, with the link's decision forms; another session's title and approval never show,
// on the page or on its socket.
func TestAnApproverLinksInboxIsItsOwnSessions(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	mine, aid := parked(t, ts, "mine", "faux:one")
	_, otherID := parked(t, ts, "someone else's secret", "faux:one")
	approver := createLink(t, ts, mine.ID, map[string]any{"role": "approver", "label": "a"})
	viewer := createLink(t, ts, mine.ID, map[string]any{"role": "viewer", "label": "v"})
	ac := reviewer(t, ts, approver.URL, "Ada")
	vc := reviewer(t, ts, viewer.URL, "Val")
	au, _ := url.Parse(approver.URL)
	vu, _ := url.Parse(viewer.URL)

	st, html := get(t, ts, ac, ts.URL+au.Path+"/inbox")
	if st != 200 {
		t.Fatalf("approver inbox = %d", st)
	}
	for _, want := range []string{`id="inbox-` + aid + `"`, `hx-post="` + au.Path + `/approvals/` + aid + `/decision"`,
		`href="` + au.Path + `#tc-`, `ws-connect="` + au.Path + `/inbox/live"`} {
		if !strings.Contains(html, want) {
			t.Errorf("approver inbox lacks %q:\n%.3000s", want, html)
		}
	}
	for _, bad := range []string{otherID, "someone else", `/sessions/`, `inbox-badge`} {
		if strings.Contains(html, bad) {
			t.Errorf("approver inbox shows %q", bad)
		}
	}
	_, vhtml := get(t, ts, vc, ts.URL+vu.Path+"/inbox")
	if !strings.Contains(vhtml, `id="inbox-`+aid+`"`) || strings.Contains(vhtml, "hx-post=") || strings.Contains(vhtml, otherID) {
		t.Errorf("viewer inbox: want the card without a form, and nothing of the other session:\n%.3000s", vhtml)
	}
	// Before the name: to the link's page, which asks for it.
	nc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := nc.Get(ts.URL + au.Path + "/inbox")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != au.Path {
		t.Errorf("inbox before the name = %d %s, want 303 to %s", res.StatusCode, res.Header.Get("Location"), au.Path)
	}

	// The link's socket: its session's events only.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+au.Path+"/inbox/live",
		&websocket.DialOptions{HTTPClient: ac})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	first := readMessage(t, c)
	if !strings.Contains(first, `id="inbox-`+aid+`"`) || strings.Contains(first, otherID) {
		t.Errorf("first message: want the link's session's card only:\n%.2000s", first)
	}
	// Another session's decision, then this one's: only this one's comes.
	if st := ts.call(t, "POST", "/api/approvals/"+otherID+"/decision", map[string]string{"decision": "approve"}, nil); st != 200 {
		t.Fatalf("decide = %d", st)
	}
	if st := ts.call(t, "POST", "/api/approvals/"+aid+"/decision", map[string]string{"decision": "deny", "reason": "no"}, nil); st != 200 {
		t.Fatalf("decide = %d", st)
	}
	m := readUntil(t, c, `id="inbox-`+aid+`"`, `denied by owner<span data-elsewhere> in another window</span>: no`)
	if strings.Contains(m, otherID) {
		t.Errorf("the link's socket sent another session's approval: %.1000s", m)
	}
}

// TestInboxSocketForwardsEveryApprovalEventOfEverySession: one socket for the inbox page hears
// every session's approvals: a new one's card is appended with the badge naming it (for a
// notification), any other approval event (approval_updated, which several approvers add)
// redraws the card, a decision made elsewhere replaces it with its outcome, marked as made in
// another window, and the badge counts down. The badge's small socket and a session page's own
// socket carry the badge for every session too.
func TestInboxSocketForwardsEveryApprovalEventOfEverySession(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var idle agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "idle", "model": "faux:one"}, &idle)
	inbox := dialOwner(t, ts, "/inbox/live")
	badge := dialOwner(t, ts, "/inbox/badge")
	page := dialOwner(t, ts, "/sessions/"+idle.ID+"/live")
	if m := readMessage(t, inbox); !strings.Contains(m, `id="inbox-list"`) || !strings.Contains(m, `data-count="0"`) {
		t.Errorf("inbox socket's first message: want the list and the badge at 0: %.1000s", m)
	}
	if m := readMessage(t, badge); !strings.Contains(m, `id="inbox-badge"`) || !strings.Contains(m, `hx-swap-oob="true"`) {
		t.Errorf("badge socket's first message: %.1000s", m)
	}
	readUntil(t, page, `id="inbox-badge"`, `data-count="0"`)

	sess, aid := parked(t, ts, "elsewhere", "faux:one")
	m := readUntil(t, inbox, `id="inbox-`+aid+`"`)
	if !strings.Contains(m, `hx-swap-oob="beforeend:#inbox-list"`) || !strings.Contains(m, `aria-label="Approval required: shell"`) {
		t.Errorf("a new approval: want its card appended with its prompt: %.2000s", m)
	}
	for name, c := range map[string]*websocket.Conn{"inbox": inbox, "badge": badge, "another session's page": page} {
		m := readUntil(t, c, `id="inbox-badge"`, `data-count="1"`)
		if !strings.Contains(m, `data-new-approval="`+aid+`"`) || !strings.Contains(m, `data-new-session="elsewhere"`) ||
			!strings.Contains(m, `data-new-tool="shell"`) {
			t.Errorf("%s: the badge does not name the new approval: %.1000s", name, m)
		}
	}

	// An approval event of a type added later (approval_updated: a vote counted) redraws the card.
	a, err := ts.db.Approval(context.Background(), aid)
	if err != nil {
		t.Fatal(err)
	}
	ts.broker.Publish(agent.Event{Type: agent.EventType("approval_updated"), SessionID: sess.ID, MessageID: a.MessageID,
		ToolCallID: a.ToolCallID, ToolName: a.ToolName, Approval: &a})
	m = readUntil(t, inbox, `id="inbox-`+aid+`"`)
	if !strings.Contains(m, `hx-swap-oob="true"`) || !strings.Contains(m, `aria-label="Approval required: shell"`) {
		t.Errorf("approval_updated: want the card redrawn in place with its prompt: %.2000s", m)
	}

	// Decided in another window: the card's outcome, and the badge at 0 everywhere.
	if st := ts.call(t, "POST", "/api/approvals/"+aid+"/decision", map[string]string{"decision": "approve"}, nil); st != 200 {
		t.Fatalf("approve = %d", st)
	}
	m = readUntil(t, inbox, `id="inbox-`+aid+`"`, "approved by owner")
	if !strings.Contains(m, `<span data-elsewhere> in another window</span>`) || strings.Contains(m, "Approval required") ||
		!strings.Contains(m, `hx-swap-oob="true"`) {
		t.Errorf("decided elsewhere: want the card replaced by its outcome: %.2000s", m)
	}
	for _, c := range []*websocket.Conn{inbox, badge, page} {
		readUntil(t, c, `id="inbox-badge"`, `data-count="0"`)
	}
}

// TestInboxTimeoutSaysSo: an approval that times out turns its card into "timed out", with no
// "in another window" (nobody decided it).
func TestInboxTimeoutSaysSo(t *testing.T) {
	ts := newTestServerAgent(t, map[string]string{"one": oneCall}, nil, func(c *agent.Config) { c.ApprovalTimeout = 300 * time.Millisecond })
	inbox := dialOwner(t, ts, "/inbox/live")
	readMessage(t, inbox)
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "slow person", "model": "faux:one"}, &sess)
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	m := readUntil(t, inbox, "timed out")
	if strings.Contains(m, "in another window") || !strings.Contains(m, "outcome-"+string(gate.TimedOut)) {
		t.Errorf("timeout card: %.1500s", m)
	}
}

// TestInboxSocketRefusesAnotherOrigin: the inbox's sockets are the owner's; a cross-site page
// cannot open them, even with the owner's credentials (SPEC §7: WebSockets check the Origin).
func TestInboxSocketRefusesAnotherOrigin(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	for _, path := range []string{"/inbox/live", "/inbox/badge"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+path, &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + token}, "Origin": {"https://evil.example"}}})
		cancel()
		if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
			t.Errorf("%s from another origin: %v, want 403", path, err)
		}
	}
}

// TestInboxShowsAPageAtATime: the inbox shows the oldest page of approvals and a button for the
// next, which brings the rest, oldest first; the socket's first message is the same first page.
func TestInboxShowsAPageAtATime(t *testing.T) {
	ts := newTestServerConfig(t, map[string]string{"one": oneCall}, func(c *web.Config, _ *http.Server) { c.InboxPageSize = 2 })
	var ids []string
	for _, title := range []string{"p1", "p2", "p3"} {
		_, aid := parked(t, ts, title, "faux:one")
		ids = append(ids, aid)
	}
	_, html := get(t, ts, nil, "/inbox")
	var order []string
	for _, m := range cardOrder.FindAllStringSubmatch(html, -1) {
		order = append(order, m[1])
	}
	if strings.Join(order, ",") != ids[0]+","+ids[1] || !strings.Contains(html, "<title>(3) Inbox") ||
		!strings.Contains(html, `hx-get="/inbox/more?after=`+ids[1]+`"`) || !strings.Contains(html, "Show the next 1 (1 more waiting)") {
		t.Fatalf("first page: want %s and %s, the count 3 and the next page's button:\n%.4000s", ids[0], ids[1], html)
	}
	st, more := get(t, ts, nil, "/inbox/more?after="+ids[1])
	if st != 200 || !strings.Contains(more, `id="inbox-`+ids[2]+`"`) || strings.Contains(more, ids[0]) || strings.Contains(more, "inbox-more") {
		t.Errorf("next page = %d: want only %s and no further button:\n%.3000s", st, ids[2], more)
	}
	if st, _ := get(t, ts, nil, "/inbox/more"); st != http.StatusBadRequest {
		t.Errorf("/inbox/more without ?after= = %d, want 400", st)
	}
	c := dialOwner(t, ts, "/inbox/live")
	m := readMessage(t, c)
	if !strings.Contains(m, ids[1]) || strings.Contains(m, `id="inbox-`+ids[2]+`"`) || !strings.Contains(m, `id="inbox-more"`) {
		t.Errorf("socket's first message: want the first page with its button: %.3000s", m)
	}
}

// TestTheOwnersInboxLeavesOutCallsWhoseReviewersAreOthers (issue 34; SPEC §15: the inbox lists
// what the viewer may decide): a call whose rule names reviewers alice and bob waits, yet the
// owner's inbox neither lists nor counts it (page, badge, tab title); the store still counts it
// among the pending ones.
func TestTheOwnersInboxLeavesOutCallsWhoseReviewersAreOthers(t *testing.T) {
	ts, sid := shareServer(t)
	if st := ts.call(t, "POST", "/api/rules", map[string]any{"text": "shell approvers=2 reviewers=alice,bob", "effect": "ask", "scope": "server"}, nil); st != 201 {
		t.Fatalf("the rule = %d", st)
	}
	events := ts.events(t, sid)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sid+"/messages", map[string]string{"text": "go"}, nil)
	id := next(t, events, "approval_requested")["approval"].(map[string]any)["id"].(string)
	if n, err := ts.db.PendingCount(context.Background(), ""); err != nil || n != 1 {
		t.Fatalf("pending %d, %v; want the call waiting", n, err)
	}
	_, inbox := get(t, ts, nil, "/inbox")
	if strings.Contains(inbox, id) {
		t.Errorf("the owner's inbox lists %s, whose reviewers are alice and bob", id)
	}
	if strings.Contains(inbox, "<title>(1)") {
		t.Errorf("the owner's inbox counts it in its title")
	}
	if _, home := get(t, ts, nil, "/"); strings.Contains(home, "<title>(1)") {
		t.Errorf("the owner's pages count it in the badge")
	}
	if n, err := ts.db.PendingCountFor(context.Background(), "", "owner"); err != nil || n != 0 {
		t.Errorf("PendingCountFor(owner) = %d, %v; want 0", n, err)
	}
	if n, err := ts.db.PendingCountFor(context.Background(), "", "Alice"); err != nil || n != 1 {
		t.Errorf("PendingCountFor(Alice) = %d, %v; want 1", n, err)
	}
}
