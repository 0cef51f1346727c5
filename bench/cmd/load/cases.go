package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/models"
	"countersign/internal/rules"
	"countersign/internal/testkit"
	"countersign/internal/tool"
	"countersign/internal/tools"
)

// newEnv is a testkit environment in a fresh temporary folder; cleanup closes and removes it.
func newEnv(ctx context.Context, opt testkit.BenchOptions) (*testkit.Bench, func(), error) {
	dir, err := os.MkdirTemp("", "countersign-bench-")
	if err != nil {
		return nil, nil, err
	}
	e, err := testkit.NewBench(ctx, dir, opt)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return e, func() { e.Close(); os.RemoveAll(dir) }, nil
}

// nested: one model call to review_diff, which runs run_checks and failing_tests n times each
// through ExecuteTool. No viewer is connected (pi-bench.mjs has none either).
func nested(ctx context.Context, n int) (line, error) {
	l, _, err := nestedRun(ctx, n, testkit.BenchOptions{})
	return l, err
}

// nestedRun is the nested case with opt (the rules case loads rules through it). Besides the
// line it returns the loop's time per call and how many nested calls' audit rows name a rule
// as what decided them.
func nestedRun(ctx context.Context, n int, opt testkit.BenchOptions) (line, nestedStats, error) {
	e, cleanup, err := newEnv(ctx, opt)
	if err != nil {
		return nil, nestedStats{}, err
	}
	defer cleanup()
	sess, err := e.NewSession(ctx, "nested", testkit.NestedScript(n))
	if err != nil {
		return nil, nestedStats{}, err
	}
	c0, t0 := testkit.CPU(), time.Now()
	if err := e.Runner.Send(ctx, sess.ID, "go"); err != nil {
		return nil, nestedStats{}, err
	}
	e.Runner.Wait()
	total, cpu := time.Since(t0), testkit.CPU()-c0

	entries, err := e.DB.Entries(ctx, sess.ID)
	if err != nil {
		return nil, nestedStats{}, err
	}
	var rd *agent.Message
	toolResults, nestedEntries := 0, 0
	for i := range entries {
		m := &entries[i].Message
		switch m.Role {
		case agent.ToolResult:
			toolResults++
			if m.ToolName == "review_diff" {
				rd = m
			} else {
				nestedEntries++
			}
		case agent.Assistant:
			for _, c := range m.ToolCalls() {
				if c.Name != "review_diff" {
					nestedEntries++
				}
			}
		}
	}
	if rd == nil || rd.Result == nil {
		return nil, nestedStats{}, fmt.Errorf("no review_diff result in the transcript")
	}
	var d testkit.NestedDetails
	if err := json.Unmarshal(rd.Result.Details, &d); err != nil {
		return nil, nestedStats{}, fmt.Errorf("review_diff details: %v (result %s)", err, rd.Result.TextOf())
	}
	// Every nested call is audited (SPEC §3), committed before the parent's result; the allowed
	// ones are grouped (issue 19): a row counts the calls it stands for.
	approvals, err := e.DB.Approvals(ctx, sess.ID, "")
	if err != nil {
		return nil, nestedStats{}, err
	}
	audited, rows, byRule := 0, 0, 0
	for _, a := range approvals {
		if a.ParentToolCallID == "rd" && a.Automatic && a.Status == gate.Approved {
			audited += a.Calls()
			rows++
			if a.DecisionSource == gate.FromRule && a.RuleText != "" {
				byRule += a.Calls()
			}
		}
	}
	calls := 2 * n
	kept, complete := 0, false
	if nc := rd.Result.NestedCalls; nc != nil {
		kept, complete = len(nc.Calls), nc.Complete
	}
	if e.GateNested.Load() != int64(calls) || d.OK != calls || nestedEntries != 0 || toolResults != 1 || audited != calls {
		return nil, nestedStats{}, fmt.Errorf("nested n=%d: gate saw %d, ok %d, nested entries %d, tool results %d, audited %d",
			n, e.GateNested.Load(), d.OK, nestedEntries, toolResults, audited)
	}
	loop := time.Duration(d.LoopNs)
	return line{}.add("peer", "countersign").add("case", "nested").add("n", n).add("calls", calls).
			add("us_per_call", round2(float64(loop.Nanoseconds())/1e3/float64(calls))).
			add("loop_ms", ms(loop)).add("loop_cpu_ms", ms(time.Duration(d.LoopCPUNs))).
			add("total_ms", ms(total)).add("cpu_ms", ms(cpu)).
			add("us_per_call_total", round2(float64(total.Nanoseconds())/1e3/float64(calls))).
			add("gate_saw", e.GateNested.Load()).
			add("handler_saw_all_nested", e.GateNested.Load() == int64(calls)).
			add("all_nested_ok", d.OK == calls).
			add("transcript_nested_entries", nestedEntries).add("transcript_tool_results", toolResults).
			add("nested_calls_record_kept", kept).add("nested_calls_record_complete", complete).
			add("audit_rows", rows).add("audited_calls", audited), nestedStats{perCall: loop / time.Duration(calls),
			cpuPerCall: time.Duration(d.LoopCPUNs) / time.Duration(calls), byRule: byRule}, nil
}

// nestedStats is what the rules case needs of a nested run besides its line.
type nestedStats struct {
	perCall    time.Duration // the loop's time per nested call
	cpuPerCall time.Duration // the process's CPU time during the loop, per nested call
	byRule     int           // nested calls whose audit row names the rule that allowed them
}

// rulesCase (issue 17, acceptance 7): the nested loop (n run_checks and n failing_tests calls)
// with 1,000 policy rules loaded through the real compiler (testkit.RealRulesOn: ten on
// run_checks, one of which allows it), against the same loop with no rules. The runs alternate,
// pairs times, to spread a shared machine's noise over both; the medians are compared, of the
// loop's wall time per call and of the process's CPU time per call (every thread: the audit
// writer too), which other tenants of a shared machine disturb less. The goal is under 2 µs
// added per call.
func rulesCase(ctx context.Context, n, pairs int) (line, error) {
	const ruleCount, goalUs = 1000, 2.0
	opt := testkit.BenchOptions{Rules: testkit.RealRulesOn("run_checks", ruleCount), CompileRules: rules.Compiler}
	var none, with, cpuNone, cpuWith []float64
	byRule := 0
	for range pairs {
		runtime.GC()
		_, s0, err := nestedRun(ctx, n, testkit.BenchOptions{})
		if err != nil {
			return nil, fmt.Errorf("no rules: %w", err)
		}
		if s0.byRule != 0 {
			return nil, fmt.Errorf("no rules: %d calls decided by a rule", s0.byRule)
		}
		runtime.GC()
		_, s1, err := nestedRun(ctx, n, opt)
		if err != nil {
			return nil, fmt.Errorf("%d rules: %w", ruleCount, err)
		}
		// The allow rule on run_checks decides each of its calls; failing_tests has no rule.
		if s1.byRule != n {
			return nil, fmt.Errorf("%d rules: %d calls decided by a rule, want the %d run_checks calls", ruleCount, s1.byRule, n)
		}
		byRule = s1.byRule
		none = append(none, float64(s0.perCall.Nanoseconds())/1e3)
		with = append(with, float64(s1.perCall.Nanoseconds())/1e3)
		cpuNone = append(cpuNone, float64(s0.cpuPerCall.Nanoseconds())/1e3)
		cpuWith = append(cpuWith, float64(s1.cpuPerCall.Nanoseconds())/1e3)
	}
	m0, m1 := median(none), median(with)
	c0, c1 := median(cpuNone), median(cpuWith)
	return line{}.add("peer", "countersign").add("case", "rules").add("n", n).add("calls", 2*n).
		add("rules", ruleCount).add("rules_on_tool", 10).add("pairs", pairs).
		add("us_per_call_no_rules", round2(m0)).add("us_per_call_rules", round2(m1)).
		add("us_added_per_call", round2(m1-m0)).
		add("cpu_us_per_call_no_rules", round2(c0)).add("cpu_us_per_call_rules", round2(c1)).
		add("cpu_us_added_per_call", round2(c1-c0)).add("goal_us_added", goalUs).
		add("under_goal", m1-m0 < goalUs).add("calls_decided_by_rule", byRule), nil
}

// direct: K model turns of one echo call each, then text, through the JSON API with one events
// WebSocket connected.
func direct(ctx context.Context, k int) (line, error) {
	e, cleanup, err := newEnv(ctx, testkit.BenchOptions{})
	if err != nil {
		return nil, err
	}
	defer cleanup()
	a, stop, err := serve(e)
	if err != nil {
		return nil, err
	}
	defer stop()
	name := fmt.Sprintf("direct-%d", k)
	e.Models.Add(name, testkit.DirectScript(k))
	id, err := a.createSession(ctx, name, "faux:"+name)
	if err != nil {
		return nil, err
	}
	done, closeEvents, err := a.readToEnd(ctx, id)
	if err != nil {
		return nil, err
	}
	defer closeEvents()
	c0, t0 := testkit.CPU(), time.Now()
	if err := a.send(ctx, id, "go"); err != nil {
		return nil, err
	}
	r := <-done
	total, cpu := time.Since(t0), testkit.CPU()-c0
	if r.err != nil {
		return nil, r.err
	}
	ts := e.Echo.Times()
	entries, err := e.DB.Entries(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(ts) != k || len(entries) != 2*k+2 {
		return nil, fmt.Errorf("direct K=%d: echo ran %d times, %d entries", k, len(ts), len(entries))
	}
	first, last := testkit.TurnSpread(ts)
	return line{}.add("peer", "countersign").add("case", "direct").add("model", "faux").add("n", k).
		add("total_ms", ms(total)).add("cpu_ms", ms(cpu)).
		add("us_per_call", round2(float64(total.Nanoseconds())/1e3/float64(k))).
		add("turn_us_first50", first).add("turn_us_last50", last).
		add("turn_ratio", round2(float64(last)/float64(max(first, 1)))).
		add("events", r.n).add("entries", len(entries)), nil
}

// rss: the server binary as its own process, through a K-turn session over the JSON API. The
// binary has no echo tool: each turn calls read_file on a one-line file (read-only, no prompt).
func rss(ctx context.Context, bin string, k int) (line, error) {
	dir, err := os.MkdirTemp("", "countersign-bench-rss-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ws, scripts := filepath.Join(dir, "workspace"), filepath.Join(dir, "scripts")
	name := fmt.Sprintf("rss-%d", k)
	if err := writeReadFileScript(ws, scripts, name, k); err != nil {
		return nil, err
	}
	p, err := startServer(ctx, bin, "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "data", "cs.db"),
		"-workspace", ws, "-scripts", scripts, "-faux-delay", "0")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	pid := p.cmd.Process.Pid
	// The first request makes sure the server serves before its start RSS is read.
	id, err := p.api.createSession(ctx, name, "faux:"+name)
	if err != nil {
		return nil, err
	}
	started, err := memory(pid)
	if err != nil {
		return nil, err
	}
	done, closeEvents, err := p.api.readToEnd(ctx, id)
	if err != nil {
		return nil, err
	}
	defer closeEvents()
	t0 := time.Now()
	if err := p.api.send(ctx, id, "go"); err != nil {
		return nil, err
	}
	r := <-done
	total := time.Since(t0)
	if r.err != nil {
		return nil, r.err
	}
	ended, err := memory(pid)
	if err != nil {
		return nil, err
	}
	var sess struct{ Entries []json.RawMessage }
	if err := p.api.do(ctx, "GET", "/api/sessions/"+id, nil, &sess, 200); err != nil {
		return nil, err
	}
	if len(sess.Entries) != 2*k+2 {
		return nil, fmt.Errorf("rss K=%d: %d entries", k, len(sess.Entries))
	}
	mb := func(b int64) float64 { return round1(float64(b) / (1 << 20)) }
	return line{}.add("peer", "countersign").add("case", "rss").add("n", k).
		add("rss_after_start_mb", mb(started.rss)).add("rss_mb", mb(ended.rss)).add("max_rss_mb", mb(ended.hwm)).
		add("rss_anon_mb", mb(ended.anon)).add("rss_file_mb", mb(ended.file)).
		add("total_ms", ms(total)).add("us_per_call", round2(float64(total.Nanoseconds())/1e3/float64(k))).
		add("events", r.n).add("entries", len(sess.Entries)), nil
}

// approvals: n sessions, each parked on a pending approval, one events WebSocket client per
// session that approves over HTTP as soon as it sees approval_requested. The sockets are spread
// over web.Servers sharing one Runner (serveShards: the owner's socket cap is 64 per server). Mode one_at_a_time
// starts a session when the previous one has ended; burst starts all n at once, so n prompts and
// n decisions are in flight together.
func approvals(ctx context.Context, n int, mode string) (line, error) {
	e, cleanup, err := newEnv(ctx, testkit.BenchOptions{ApprovalTimeout: 5 * time.Minute})
	if err != nil {
		return nil, err
	}
	defer cleanup()
	shards, stop, err := serveShards(e, n)
	if err != nil {
		return nil, err
	}
	defer stop()
	a := shards[0]
	type client struct {
		id             string
		asked, started time.Time // frame arrivals at the client
		created        time.Time // the approval's createdAt: when its call was decided, before the assistant message was stored
		approvalID     string
		decided        time.Time // its decidedAt, stamped just before the decision is stored
		callID         string
		decideErr      error
		done           chan error
	}
	clients := make([]*client, n)
	for i := range clients {
		name := fmt.Sprintf("gated-%d", i)
		e.Models.Add(name, testkit.GatedScript())
		id, err := a.createSession(ctx, name, "faux:"+name)
		if err != nil {
			return nil, err
		}
		cl := &client{id: id, done: make(chan error, 1)}
		clients[i] = cl
		c, err := shards[i%len(shards)].events(ctx, id)
		if err != nil {
			return nil, err
		}
		defer c.CloseNow()
		go func() {
			_, err := readUntilEnd(ctx, c, nil, func(ev *event, _ []byte, at time.Time) {
				switch ev.Type {
				case "approval_requested":
					cl.asked, cl.callID = at, ev.ToolCallID
					cl.created, cl.approvalID = ev.Approval.CreatedAt, ev.Approval.ID
					cl.decideErr = a.approve(ctx, ev.Approval.ID)
				case "approval_resolved":
					if ev.Approval != nil && ev.Approval.DecidedAt != nil {
						cl.decided = *ev.Approval.DecidedAt
					}
				case "tool_execution_start":
					if ev.ToolCallID == cl.callID {
						cl.started = at
					}
				}
			})
			if err == nil {
				err = cl.decideErr
			}
			cl.done <- err
		}()
	}
	t0 := time.Now()
	switch mode {
	case "one_at_a_time":
		for _, cl := range clients {
			if err := a.send(ctx, cl.id, "go"); err != nil {
				return nil, err
			}
			if err := <-cl.done; err != nil {
				return nil, err
			}
		}
	case "burst":
		errs := make(chan error, n)
		for _, cl := range clients {
			go func() { errs <- a.send(ctx, cl.id, "go") }()
		}
		for range clients {
			if err := <-errs; err != nil {
				return nil, err
			}
		}
		for _, cl := range clients {
			if err := <-cl.done; err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	total := time.Since(t0)
	// server (the target): stored (the approval's insert committed, stamped by testkit as the
	// store returns) → the tool's first line; insert: createdAt (the call decided, before its
	// assistant message's commit) → stored, and from_created the whole trip from createdAt;
	// shown: stored → the prompt's arrival at the client; answered: arrival → decidedAt (the
	// client's POST, the handler, its reads); resumed: decidedAt → the tool's first line (the
	// decision's commit, waking the call).
	var server, fromCreated, insert, seen, shown, answered, resumed []float64
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
	for _, cl := range clients {
		v, ok := e.Gated.Load(cl.callID)
		if !ok || cl.started.IsZero() || cl.decided.IsZero() {
			return nil, fmt.Errorf("session %s: the gated call did not start (gated %v, started %v, decided %v, call %q, approval %q, decideErr %v)", cl.id, ok, cl.started, cl.decided, cl.callID, cl.approvalID, cl.decideErr)
		}
		sv, ok := e.Stored.Load(cl.approvalID)
		if !ok {
			return nil, fmt.Errorf("session %s: approval %s was not stamped as stored", cl.id, cl.approvalID)
		}
		started, stored := v.(time.Time), sv.(time.Time)
		server = append(server, us(started.Sub(stored)))
		fromCreated = append(fromCreated, us(started.Sub(cl.created)))
		insert = append(insert, us(stored.Sub(cl.created)))
		seen = append(seen, us(cl.started.Sub(cl.asked)))
		shown = append(shown, us(cl.asked.Sub(stored)))
		answered = append(answered, us(cl.decided.Sub(cl.asked)))
		resumed = append(resumed, us(started.Sub(cl.decided)))
	}
	return line{}.add("peer", "countersign").add("case", "approval_round_trip").add("mode", mode).add("n", n).
		add("p50_us", percentile(server, 50)).add("p99_us", percentile(server, 99)).add("max_us", percentile(server, 100)).
		add("from_created_p50_us", percentile(fromCreated, 50)).add("from_created_p99_us", percentile(fromCreated, 99)).
		add("insert_p50_us", percentile(insert, 50)).add("insert_p99_us", percentile(insert, 99)).
		add("client_p50_us", percentile(seen, 50)).add("client_p99_us", percentile(seen, 99)).
		add("shown_p50_us", percentile(shown, 50)).add("shown_p99_us", percentile(shown, 99)).
		add("answered_p50_us", percentile(answered, 50)).add("answered_p99_us", percentile(answered, 99)).
		add("resumed_p50_us", percentile(resumed, 50)).add("resumed_p99_us", percentile(resumed, 99)).
		add("total_ms", ms(total)), nil
}

// fanout: viewersPer events WebSockets on each of sessions sessions, every session streaming text
// (word-sized deltas, chunkDelay apart) and tool calls at once. The sockets are spread over
// web.Servers sharing one Runner, Store and Broker (serveShards: the owner's cap is 64 sockets
// per server). Two delays per event a viewer
// receives, both stamped in this process on one clock:
//   - delivery (p50_ms, p99_ms): from the event's publication to its arrival at the viewer. The
//     publication time is the one Broker.Publish stamps (agent.Event.PublishedAt), read by an
//     in-process subscriber of the session (a probe, as a viewer with no socket) that maps each
//     event's key to it; every event type is counted but tool_execution_update (none here);
//   - text (text_p50_ms, text_p99_ms), message_update only: from the moment the model handed
//     over the newest text in the update to its arrival; it includes the wait for the next
//     message_update (at most one per 50ms per message, see agent.updateInterval).
//
// A viewer that receives a coalesced update (newer text superseding updates it had not been
// sent yet) counts the newest one.
func fanout(ctx context.Context, sessions, viewersPer int, chunkDelay time.Duration) (line, error) {
	type textKey struct {
		session         string
		turn, textBytes int
	}
	// evKey names one event of a session: its type, ids, text length (message_update) and how
	// many events with the same name came before it.
	type evKey struct {
		session, typ, messageID, toolCallID string
		textBytes, nth                      int
	}
	var mu sync.Mutex
	handed := map[textKey]time.Time{}
	published := map[evKey]time.Time{}
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
	shards, stop, err := serveShards(e, sessions*viewersPer)
	if err != nil {
		return nil, err
	}
	defer stop()
	a := shards[0]
	const turns, textBytes = 10, 300
	ids := make([]string, sessions)
	var probes sync.WaitGroup
	for s := range ids {
		name := fmt.Sprintf("stream-%d", s)
		e.Models.Add(name, testkit.StreamScript(turns, textBytes))
		if ids[s], err = a.createSession(ctx, name, "faux:"+name); err != nil {
			return nil, err
		}
		sub := e.Broker.Subscribe(ids[s])
		defer e.Broker.Unsubscribe(sub)
		probes.Add(1)
		go func() {
			defer probes.Done()
			seen := map[evKey]int{}
			for ev := range sub.C {
				at := ev.PublishedAt()
				k := evKey{session: ev.SessionID, typ: string(ev.Type), messageID: ev.MessageID, toolCallID: ev.ToolCallID}
				if ev.Type == agent.MessageUpdate && ev.Message != nil {
					k.textBytes = len(ev.Message.Text())
				}
				n := seen[k] // k.nth is 0 here: seen counts by the key without nth
				seen[k] = n + 1
				k.nth = n
				mu.Lock()
				published[k] = at
				mu.Unlock()
				if ev.Type == agent.AgentEnd {
					return
				}
			}
		}()
	}
	// arrival is one event a viewer received. The viewer only records it (the viewers share the
	// server's CPUs); its evKey's nth and its text key are worked out after the run.
	type arrival struct {
		ev   evKey
		turn int // assistant messages started so far (message_update)
		at   time.Time
	}
	type viewer struct {
		arrivals []arrival
		frames   int
		err      error
	}
	viewers := make([]*viewer, sessions*viewersPer)
	var wg sync.WaitGroup
	start := make(chan struct{})
	ready := make(chan error, len(viewers))
	sem := make(chan struct{}, 32) // dial at most 32 at a time
	for i := range viewers {
		v := &viewer{}
		viewers[i] = v
		sid := ids[i%sessions]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			c, err := shards[i%len(shards)].events(ctx, sid)
			<-sem
			ready <- err
			if err != nil {
				return
			}
			defer c.CloseNow()
			<-start
			turn := 0
			var ids idCache
			v.frames, v.err = readUntilEnd(ctx, c, fanoutDecoded, func(ev *event, frame []byte, at time.Time) {
				k := evKey{session: sid, typ: ev.Type, messageID: ids.get(frameBytes(frame, messageIDKey)),
					toolCallID: ids.get(frameBytes(frame, toolCallIDKey))}
				switch ev.Type {
				case "message_start":
					if ev.Message != nil && ev.Message.Role == "assistant" {
						turn++
					}
				case "message_update":
					k.textBytes = ev.textLen()
				case "tool_execution_update":
					return // coalesced away unevenly: not matched
				}
				v.arrivals = append(v.arrivals, arrival{ev: k, turn: turn, at: at})
			})
		}()
	}
	for range viewers {
		if err := <-ready; err != nil {
			close(start)
			return nil, fmt.Errorf("connecting viewers: %w", err)
		}
	}
	// Connecting 1,000 viewers grows the heap by ~250 MB at once (each subscription's buffer
	// holds 1,024 events); the collection that growth starts would otherwise run during the
	// first second of the streams (~0.8 s of CPU). Settle it first, as testing.B does before a
	// benchmark; collections caused by the streaming itself still count.
	runtime.GC()
	close(start)
	c0, t0 := testkit.CPU(), time.Now()
	errs := make(chan error, sessions)
	for _, id := range ids {
		go func() { errs <- a.send(ctx, id, "go") }()
	}
	for range ids {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	wg.Wait()
	total, cpu := time.Since(t0), testkit.CPU()-c0
	probes.Wait()
	var delays, textDelays []float64
	frames, dropped, unmatched := 0, 0, 0
	msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	seen := map[evKey]int{}
	for _, v := range viewers {
		clear(seen)
		frames += v.frames
		if v.err == errDropped {
			dropped++
		} else if v.err != nil {
			return nil, v.err
		}
		for _, ar := range v.arrivals {
			n := seen[ar.ev] // ar.ev.nth is 0 here: seen counts by the key without nth
			seen[ar.ev] = n + 1
			ar.ev.nth = n
			if p, ok := published[ar.ev]; ok {
				delays = append(delays, msOf(ar.at.Sub(p)))
			} else if ar.ev.typ != "message_update" {
				unmatched++ // a coalesced update shifts nothing; anything else should match
			}
			if ar.ev.typ == "message_update" {
				if h, ok := handed[textKey{ar.ev.session, ar.turn, ar.ev.textBytes}]; ok {
					textDelays = append(textDelays, msOf(ar.at.Sub(h)))
				}
			}
		}
	}
	mode := "paced"
	if chunkDelay == 0 {
		mode = "burst"
	}
	updates := 0
	for k := range published {
		if k.typ == string(agent.MessageUpdate) {
			updates++
		}
	}
	return line{}.add("peer", "countersign").add("case", "fanout").add("mode", mode).add("n", len(viewers)).
		add("chunk_delay_ms", ms(chunkDelay)).add("sessions", sessions).add("viewers", len(viewers)).
		add("events_published", len(published)).add("text_deltas", len(handed)).add("updates_published", updates).
		add("frames_received", frames).add("events_matched", len(delays)).
		add("p50_ms", round2(percentile(delays, 50))).add("p99_ms", round2(percentile(delays, 99))).
		add("max_ms", round2(percentile(delays, 100))).
		add("text_p50_ms", round2(percentile(textDelays, 50))).add("text_p99_ms", round2(percentile(textDelays, 99))).
		add("dropped_viewers", dropped).add("unmatched", unmatched).
		add("total_ms", ms(total)).add("cpu_ms", ms(cpu)), nil
}

// execChecksCase (issue 28, acceptance 7): the cost of run_command's exec-time check of one
// started program (SPEC §14 "Checked where it happens"). A tool makes n checks of `ls -d .`
// through tool.Context.Authorize, as the shell's exec handler does before each program it
// starts, under 1,000 policy rules compiled by the real compiler, one of which
// (run_command(ls:*)) allows it: the loop's time per check, inside the tool. For scale, the same
// run then runs a rule-allowed run_command that starts `ls -d .` m times (each start checked,
// forked and waited for): its duration per program. The goal is under 50 µs per check.
func execChecksCase(ctx context.Context, n, m int) (line, error) {
	const goalUs = 50.0
	rs := append(testkit.RealRulesOn("run_checks", 999), gate.Rule{ID: "policy:ls", Effect: gate.Allow,
		Tool: "run_command", Specifier: "ls:*", Scope: gate.ScopeServer, Source: gate.SourcePolicyFile, CreatedBy: "bench"})
	var perCheck time.Duration
	loop := &tool.Tool{Name: "exec_checks", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true)},
		Execute: func(ctx context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
			args := map[string]string{"command": "ls -d ."}
			t0 := time.Now()
			for range n {
				if a := tc.Authorize(ctx, "run_command", args, ""); !a.Allowed {
					return tool.Result{}, fmt.Errorf("the check refused ls -d .: %s", a.Reason)
				}
			}
			perCheck = time.Since(t0) / time.Duration(n)
			return tool.Result{Content: []tool.Content{tool.Text("ok")}}, nil
		}}
	builtin := tools.Builtin(tools.Config{})
	var runCommand *tool.Tool
	for _, t := range builtin {
		if t.Name == "run_command" {
			runCommand = t
		}
	}
	e, cleanup, err := newEnv(ctx, testkit.BenchOptions{Rules: rs, CompileRules: rules.Compiler, Tools: []*tool.Tool{loop, runCommand}})
	if err != nil {
		return nil, err
	}
	defer cleanup()
	command := strings.TrimSuffix(strings.Repeat("ls -d . >/dev/null; ", m), "; ")
	src := mustJSON(map[string]any{"steps": []any{
		map[string]any{"content": []any{map[string]any{"type": "toolCall", "id": "loop", "name": "exec_checks", "arguments": map[string]any{}}}, "stopReason": "toolUse"},
		map[string]any{"content": []any{map[string]any{"type": "toolCall", "id": "run", "name": "run_command", "arguments": map[string]string{"command": command}}}, "stopReason": "toolUse"},
		map[string]any{"content": []any{map[string]any{"type": "text", "text": "done"}}, "stopReason": "stop"},
	}})
	script, err := models.ParseScript("exec-checks.json", src)
	if err != nil {
		return nil, err
	}
	sess, err := e.NewSession(ctx, "exec-checks", script)
	if err != nil {
		return nil, err
	}
	if err := e.Runner.Send(ctx, sess.ID, "go"); err != nil {
		return nil, err
	}
	e.Runner.Wait()
	entries, err := e.DB.Entries(ctx, sess.ID)
	if err != nil {
		return nil, err
	}
	var runMs int64 = -1
	for _, en := range entries {
		if r := en.Message.Result; en.Message.ToolCallID == "run" && r != nil {
			if r.IsError {
				return nil, fmt.Errorf("the rule-allowed run_command failed: %s", r.TextOf())
			}
			runMs = r.DurationMs
		}
	}
	if perCheck == 0 || runMs < 0 {
		return nil, fmt.Errorf("the run did not reach both calls (%d entries)", len(entries))
	}
	us := float64(perCheck.Nanoseconds()) / 1e3
	return line{}.add("peer", "countersign").add("case", "exec_checks").add("n", n).add("rules", len(rs)).
		add("us_per_check", round2(us)).add("goal_us", goalUs).add("under_goal", us < goalUs).
		add("programs", m).add("us_per_program_run", round2(float64(runMs)*1e3/float64(m))), nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
