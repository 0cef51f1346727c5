package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/testkit"
	"countersign/internal/web"
	"countersign/web/templates"
)

// inboxCase is the inbox (issue 20, acceptance 7; SPEC §15): n sessions, each parked on one
// pending approval of the gated tool. Two measures, both on the server's side of an in-process
// handler (no network: ServeHTTP with a recorder, on the owner's bearer token):
//   - page (page_p50_ms, page_p99_ms): GET /inbox, loads times after one warm-up: the oldest
//     templates.InboxPageSize approvals, each card with its prompt, and the count of all (goal:
//     under 50 ms); all_pages_ms is the whole list once, page by page to the last;
//   - round trip (rt_p50_us, rt_p99_us): the decision form's POST from the inbox (Approve), one
//     approval at a time, oldest first, from the POST's start to the gated tool's first line
//     (testkit stamps it; the call's end is waited for on the session's events before the
//     next POST) (goal: p99 under 2 ms). rt_post is the POST alone (the handler answering,
//     which includes the decision's durable commit).
func inboxCase(ctx context.Context, n, loads int) (line, error) {
	e, cleanup, err := newEnv(ctx, testkit.BenchOptions{ApprovalTimeout: time.Hour})
	if err != nil {
		return nil, err
	}
	defer cleanup()
	h := web.New(web.Config{Runner: e.Runner, Store: e.DB, Broker: e.Broker, Models: e.Models,
		OwnerToken: benchToken, Workspace: e.Dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()

	// Park n sessions, and wait (on every session's approval events) until each one asks.
	asked := e.Broker.SubscribeApprovals()
	defer e.Broker.Unsubscribe(asked)
	t0 := time.Now()
	for i := range n {
		sess, err := e.NewSession(ctx, fmt.Sprintf("inbox-%d", i), testkit.GatedScript())
		if err != nil {
			return nil, err
		}
		if err := e.Runner.Send(ctx, sess.ID, "go"); err != nil {
			return nil, err
		}
	}
	for got := 0; got < n; {
		select {
		case ev, ok := <-asked.C:
			if !ok {
				return nil, fmt.Errorf("the approvals subscription was dropped after %d of %d", got, n)
			}
			if ev.Type == agent.ApprovalRequested {
				got++
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	park := time.Since(t0)

	// The page (its first page: the oldest templates.InboxPageSize approvals), then once the whole
	// list, page by page, as a person who pressed "Show the next" to the end would load it.
	get := func(path string) (*httptest.ResponseRecorder, time.Duration, error) {
		req := httptest.NewRequestWithContext(ctx, "GET", path, nil)
		req.Header.Set("Authorization", "Bearer "+benchToken)
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		d := time.Since(start)
		if rec.Code != http.StatusOK {
			return nil, 0, fmt.Errorf("GET %s = %d: %.300s", path, rec.Code, rec.Body.String())
		}
		return rec, d, nil
	}
	var page []float64
	bytes := 0
	for i := range loads + 1 {
		rec, d, err := get("/inbox")
		if err != nil {
			return nil, err
		}
		if i == 0 {
			if cards := strings.Count(rec.Body.String(), `class="inbox-card"`); cards != min(n, templates.InboxPageSize) {
				return nil, fmt.Errorf("GET /inbox shows %d cards, want %d", cards, min(n, templates.InboxPageSize))
			}
			bytes = rec.Body.Len()
			continue // warm-up
		}
		page = append(page, float64(d.Microseconds())/1e3)
	}
	var all time.Duration
	cards, next := 0, "/inbox"
	for next != "" {
		rec, d, err := get(next)
		if err != nil {
			return nil, err
		}
		all += d
		body := rec.Body.String()
		cards += strings.Count(body, `class="inbox-card"`)
		next = ""
		if m := moreURL.FindStringSubmatch(body); m != nil {
			next = html.UnescapeString(m[1])
		}
	}
	if cards != n {
		return nil, fmt.Errorf("the inbox's pages show %d cards, want %d", cards, n)
	}

	// The round trips, oldest first, as the inbox lists them.
	items, err := e.DB.Inbox(ctx, agent.InboxQuery{})
	if err != nil {
		return nil, err
	}
	var rt, post []float64
	form := url.Values{"decision": {"approve"}}.Encode()
	for _, it := range items {
		a := it.Approval
		sub := e.Broker.Subscribe(a.SessionID)
		req := httptest.NewRequestWithContext(ctx, "POST", "/sessions/"+a.SessionID+"/approvals/"+a.ID+"/decision", strings.NewReader(form))
		req.Header.Set("Authorization", "Bearer "+benchToken)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		answered := time.Since(start)
		if rec.Code != http.StatusOK {
			e.Broker.Unsubscribe(sub)
			return nil, fmt.Errorf("decision %s = %d: %.300s", a.ID, rec.Code, rec.Body.String())
		}
		if err := waitRan(ctx, sub, a); err != nil {
			e.Broker.Unsubscribe(sub)
			return nil, err
		}
		e.Broker.Unsubscribe(sub)
		v, ok := e.Gated.Load(a.ToolCallID)
		if !ok {
			return nil, fmt.Errorf("approval %s: the gated call %s did not start", a.ID, a.ToolCallID)
		}
		rt = append(rt, float64(v.(time.Time).Sub(start).Microseconds()))
		post = append(post, float64(answered.Microseconds()))
	}
	return line{}.add("peer", "countersign").add("case", "inbox").add("n", n).add("loads", loads).
		add("page_p50_ms", round2(percentile(page, 50))).add("page_p99_ms", round2(percentile(page, 99))).
		add("page_kb", bytes/1024).add("all_pages_ms", ms(all)).
		add("rt_p50_us", percentile(rt, 50)).add("rt_p99_us", percentile(rt, 99)).add("rt_max_us", percentile(rt, 100)).
		add("rt_post_p50_us", percentile(post, 50)).add("rt_post_p99_us", percentile(post, 99)).
		add("park_ms", ms(park)), nil
}

// moreURL finds the inbox's "Show the next" button's address in a page.
var moreURL = regexp.MustCompile(`id="inbox-more"[^>]*>\s*<button[^>]*hx-get="([^"]+)"`)

// waitRan waits on sub (a's session's events) for the tool_execution_end of a's call: its
// tool_execution_start is published before the tool runs, and so before testkit stamps it.
func waitRan(ctx context.Context, sub *agent.Subscription, a gate.Approval) error {
	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				return fmt.Errorf("approval %s: the session's subscription was dropped", a.ID)
			}
			if ev.Type == agent.ToolExecutionEnd && ev.ToolCallID == a.ToolCallID {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
