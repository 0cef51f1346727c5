package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"countersign/internal/connections"
	"countersign/internal/gate"
	"countersign/internal/rules"
	"countersign/internal/testkit"
	"countersign/internal/web"
)

// The hooks case (issue 30, acceptance 7): Door 1, `POST /hooks/{kind}`, on the real server (web.New
// with its connections, on loopback) and the real SQLite store in a temporary folder, with one
// policy rule `allow Bash(git status)` compiled by internal/rules, so every call is decided by the
// rule (an automatic approval row, its outside call and the call's message in the agent session).
// Three measurements, one line each:
//   - one_at_a_time: n recorded Claude Code PreToolUse bodies (internal/hooks/testdata,
//     tool_input.command "git status", a fresh tool_use_id per call) posted to
//     /hooks/claude-code one after the other on one kept-alive connection, after a warm-up;
//     p50/p99/max of the round trip at the client (server_* is the handler alone, timed around
//     ServeHTTP). Every answer must be the exact allow (goal: p99 ≤ 2 ms).
//   - agents: 50 simulated Claude Code agents, each its own agent session, each posting a call on
//     its own ticker (10 calls/s) for the given time, open loop (a call is sent on its tick
//     whether the previous one was answered or not); latency p50/p99/max, calls sent, answered
//     with the exact allow, lost, and the audit records of those calls counted in the store
//     after the run (goal: p99 ≤ 10 ms, none lost, audited_calls = calls).
//   - client: cmd/countersign-hook built as make build does, `countersign-hook hook --agent codex
//     --url <server>` with a recorded Codex PreToolUse on stdin, against curl POSTing the same
//     body, alternating, n runs each (a fresh tool_use_id per run); p50 wall time of each
//     process and the ratio of the p50s (goal ≤ 1.5).

// hooksOptions sizes the hooks case.
type hooksOptions struct {
	n, warmup   int           // one_at_a_time: measured calls, unreported calls before them
	agents      int           // agents: simulated agents
	rate        int           // agents: calls per second per agent
	duration    time.Duration // agents: how long they post
	clientRuns  int           // client: runs of each command
	clientWarm  int           // client: unreported runs of each command first
	hookBinPath string        // client: a built countersign-hook; empty: build it
}

// hooksRule is the rule that decides every call of the case.
const hooksRule = "Bash(git status)"

// hookAllowClaude is the exact answer to a Claude Code PreToolUse the rule allows.
const hookAllowClaude = `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"rule Bash(git status) allows git status"}}`

// hookEnv is a server with Door 1: its base URL, the owner's API client, and the handler's
// timings of /hooks/ requests while timing is on.
type hookEnv struct {
	e      *testkit.Bench
	base   string
	owner  *api
	timing atomic.Bool
	mu     sync.Mutex
	server []float64 // µs, each /hooks/ request's ServeHTTP while timing
	stop   func()
}

func newHookEnv(ctx context.Context) (*hookEnv, error) {
	e, cleanup, err := newEnv(ctx, testkit.BenchOptions{
		Rules: []gate.Rule{{ID: "policy:hooks", Effect: gate.Allow, Tool: hooksRule, Scope: gate.ScopeServer,
			Source: gate.SourcePolicyFile, CreatedBy: "bench"}},
		CompileRules: rules.Compiler,
	})
	if err != nil {
		return nil, err
	}
	srv := web.New(web.Config{Runner: e.Runner, Store: e.DB, Broker: e.Broker, Models: e.Models,
		Connections: connections.NewService(e.DB),
		OwnerToken:  benchToken, Workspace: e.Dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanup()
		return nil, err
	}
	h := &hookEnv{e: e, base: "http://" + ln.Addr().String()}
	inner := srv.Handler()
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.timing.Load() || !strings.HasPrefix(r.URL.Path, "/hooks/") {
			inner.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		inner.ServeHTTP(w, r)
		d := time.Since(start)
		h.mu.Lock()
		h.server = append(h.server, float64(d.Nanoseconds())/1e3)
		h.mu.Unlock()
	})}
	go hs.Serve(ln)
	h.owner = newAPI(h.base, benchToken)
	h.stop = func() { hs.Close(); cleanup() }
	return h, nil
}

// startTiming empties the handler's timings and starts recording them; stopTiming stops and
// returns them.
func (h *hookEnv) startTiming() {
	h.mu.Lock()
	h.server = h.server[:0]
	h.mu.Unlock()
	h.timing.Store(true)
}

func (h *hookEnv) stopTiming() []float64 {
	h.timing.Store(false)
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]float64(nil), h.server...)
}

// connect makes a connection of kind through the API (POST /api/connections) and returns its id
// and token.
func (h *hookEnv) connect(ctx context.Context, kind string) (id, token string, err error) {
	var out struct {
		Connection struct{ ID string }
		Token      string
	}
	if err := h.owner.do(ctx, "POST", "/api/connections", map[string]string{"label": "bench " + kind, "kind": kind}, &out, http.StatusCreated); err != nil {
		return "", "", err
	}
	if out.Token == "" || out.Connection.ID == "" {
		return "", "", fmt.Errorf("POST /api/connections: no token or id in the answer")
	}
	return out.Connection.ID, out.Token, nil
}

// audited counts the audit records of the rule-allowed outside calls of agent session sid of
// connection connID: the calls they stand for (a grouped record counts several) and the rows.
func (h *hookEnv) audited(ctx context.Context, connID, sid string) (calls, rows int, err error) {
	s, err := h.e.DB.AgentSession(ctx, connID, sid)
	if err != nil {
		return 0, 0, fmt.Errorf("agent session %s: %w", sid, err)
	}
	as, err := h.e.DB.Approvals(ctx, s.ID, "")
	if err != nil {
		return 0, 0, err
	}
	for _, a := range as {
		if a.RequestedBy == gate.RequestedByAgent && a.Automatic && a.Status == gate.Approved &&
			a.DecisionSource == gate.FromRule && a.RuleText != "" {
			calls += a.Calls()
			rows++
		}
	}
	return calls, rows, nil
}

// hookBody is a recorded PreToolUse body of kind ("claude-code", "codex") with its session_id
// set to sid and tool_input.command to "git status", its tool_use_id replaced by a placeholder
// that withToolUse fills.
func hookBody(kind, file, sid string) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(moduleRoot(), "internal", "hooks", "testdata", kind, file))
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	in, ok := m["tool_input"].(map[string]any)
	if !ok || m["hook_event_name"] != "PreToolUse" || m["tool_name"] != "Bash" {
		return nil, fmt.Errorf("%s/%s is not a Bash PreToolUse", kind, file)
	}
	in["command"] = "git status"
	if _, ok := in["description"]; ok {
		in["description"] = "Show the working tree status"
	}
	m["session_id"] = sid
	m["tool_use_id"] = toolUsePlaceholder
	return json.Marshal(m)
}

const toolUsePlaceholder = "TOOL-USE-ID-PLACEHOLDER"

// withToolUse is body with its tool_use_id set to id.
func withToolUse(body []byte, id string) []byte {
	return bytes.Replace(body, []byte(toolUsePlaceholder), []byte(id), 1)
}

// moduleRoot is the module's folder (go.mod's): the load program runs from it under make bench,
// its tests from bench/cmd/load.
func moduleRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

// hookPoster posts hook bodies with a connection's token.
type hookPoster struct {
	url, token string
	client     *http.Client
}

func newHookPoster(url, token string, conns int) *hookPoster {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute}
	return &hookPoster{url: url, token: token, client: &http.Client{Transport: tr, Timeout: time.Minute}}
}

// post sends body and returns the answer's status and body.
func (p *hookPoster) post(ctx context.Context, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", p.url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// hooksOneAtATime is the one_at_a_time measurement.
func hooksOneAtATime(ctx context.Context, o hooksOptions) (line, error) {
	h, err := newHookEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	connID, token, err := h.connect(ctx, "claude-code")
	if err != nil {
		return nil, err
	}
	const sid = "bench-one-at-a-time"
	body, err := hookBody("claude-code", "http-PreToolUse.body.json", sid)
	if err != nil {
		return nil, err
	}
	p := newHookPoster(h.base+"/hooks/claude-code", token, 1)
	var rt []float64
	var server []float64
	c0 := testkit.CPU()
	var t0 time.Time
	for i := range o.warmup + o.n {
		if i == o.warmup {
			h.startTiming()
			c0, t0 = testkit.CPU(), time.Now()
		}
		b := withToolUse(body, fmt.Sprintf("toolu_bench_%06d", i))
		start := time.Now()
		status, ans, err := p.post(ctx, b)
		d := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("call %d: %w", i, err)
		}
		if status != http.StatusOK || ans != hookAllowClaude {
			return nil, fmt.Errorf("call %d: answered %d %.300s, want 200 %s", i, status, ans, hookAllowClaude)
		}
		if i >= o.warmup {
			rt = append(rt, float64(d.Nanoseconds())/1e3)
		}
	}
	total, cpu := time.Since(t0), testkit.CPU()-c0
	server = h.stopTiming()
	audited, rows, err := h.audited(ctx, connID, sid)
	if err != nil {
		return nil, err
	}
	if audited != o.warmup+o.n {
		return nil, fmt.Errorf("%d calls audited, want %d", audited, o.warmup+o.n)
	}
	p99 := percentile(rt, 99)
	return line{}.add("peer", "countersign").add("case", "hooks").add("mode", "one_at_a_time").add("n", o.n).
		add("warmup", o.warmup).add("rule", hooksRule).
		add("p50_us", round1(percentile(rt, 50))).add("p99_us", round1(p99)).add("max_us", round1(percentile(rt, 100))).
		add("server_p50_us", round1(percentile(server, 50))).add("server_p99_us", round1(percentile(server, 99))).
		add("server_max_us", round1(percentile(server, 100))).
		add("total_ms", ms(total)).add("cpu_us_per_call", round1(float64(cpu.Nanoseconds())/1e3/float64(o.n))).
		add("all_allowed", true).add("audited_calls", audited).add("audit_rows", rows).
		add("under_goal", p99 <= 2000), nil
}

// hooksAgents is the agents measurement.
func hooksAgents(ctx context.Context, o hooksOptions) (line, error) {
	h, err := newHookEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	connID, token, err := h.connect(ctx, "claude-code")
	if err != nil {
		return nil, err
	}
	p := newHookPoster(h.base+"/hooks/claude-code", token, 2*o.agents)
	sids := make([]string, o.agents)
	bodies := make([][]byte, o.agents)
	for i := range sids {
		sids[i] = fmt.Sprintf("bench-agent-%03d", i)
		if bodies[i], err = hookBody("claude-code", "http-PreToolUse.body.json", sids[i]); err != nil {
			return nil, err
		}
		// Each agent's first call, unreported: its agent session exists before the run, as an
		// agent's would after its first prompt.
		if status, ans, err := p.post(ctx, withToolUse(bodies[i], fmt.Sprintf("toolu_agent%03d_first", i))); err != nil || status != 200 || ans != hookAllowClaude {
			return nil, fmt.Errorf("agent %d's first call: %d %.200s %v", i, status, ans, err)
		}
	}

	var (
		mu                    sync.Mutex
		lat                   []float64
		sent, answered, wrong atomic.Int64
		firstErr              atomic.Value
		calls                 sync.WaitGroup
	)
	interval := time.Second / time.Duration(o.rate)
	perAgent := int(o.duration / interval)
	h.startTiming()
	c0, t0 := testkit.CPU(), time.Now()
	var agents sync.WaitGroup
	for i := range o.agents {
		agents.Add(1)
		go func() {
			defer agents.Done()
			// The agents' ticks are spread evenly over the interval.
			select {
			case <-time.After(interval * time.Duration(i) / time.Duration(o.agents)):
			case <-ctx.Done():
				return
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for k := range perAgent {
				if k > 0 {
					select {
					case <-tick.C:
					case <-ctx.Done():
						return
					}
				}
				sent.Add(1)
				calls.Add(1)
				go func() {
					defer calls.Done()
					b := withToolUse(bodies[i], fmt.Sprintf("toolu_agent%03d_%06d", i, k))
					start := time.Now()
					status, ans, err := p.post(ctx, b)
					d := time.Since(start)
					switch {
					case err != nil:
						firstErr.CompareAndSwap(nil, fmt.Sprintf("agent %d call %d: %v", i, k, err))
						return
					case status != http.StatusOK || ans != hookAllowClaude:
						wrong.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("agent %d call %d: %d %.200s", i, k, status, ans))
						return
					}
					answered.Add(1)
					mu.Lock()
					lat = append(lat, float64(d.Nanoseconds())/1e3)
					mu.Unlock()
				}()
			}
		}()
	}
	agents.Wait()
	calls.Wait()
	took, cpu := time.Since(t0), testkit.CPU()-c0
	server := h.stopTiming()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	audited, rows := 0, 0
	for _, sid := range sids {
		c, r, err := h.audited(ctx, connID, sid)
		if err != nil {
			return nil, err
		}
		audited += c - 1 // less the agent's first call
		rows += r - 1
	}
	n := sent.Load()
	l := line{}.add("peer", "countersign").add("case", "hooks").add("mode", "agents").add("n", o.agents*perAgent).
		add("agents", o.agents).add("calls_per_s_per_agent", o.rate).add("seconds", round1(o.duration.Seconds())).
		add("p50_us", round1(percentile(lat, 50))).add("p99_us", round1(percentile(lat, 99))).add("max_us", round1(percentile(lat, 100))).
		add("server_p50_us", round1(percentile(server, 50))).add("server_p99_us", round1(percentile(server, 99))).
		add("calls", n).add("answered", answered.Load()).add("wrong_answers", wrong.Load()).add("lost", n-answered.Load()).
		add("audited_calls", audited).add("audit_rows", rows).
		add("took_ms", ms(took)).add("cpu_ms", ms(cpu)).
		add("under_goal", percentile(lat, 99) <= 10000 && answered.Load() == n && int64(audited) == n)
	if v := firstErr.Load(); v != nil {
		return nil, fmt.Errorf("%d of %d calls not answered with the allow, the first: %s (line so far: %s)", n-answered.Load(), n, v, string(mustJSON(l)))
	}
	if int64(audited) != n || answered.Load() != n || n != int64(o.agents*perAgent) {
		return nil, fmt.Errorf("sent %d of %d, answered %d, audited %d (line: %s)", n, o.agents*perAgent, answered.Load(), audited, string(mustJSON(l)))
	}
	return l, nil
}

// buildHookClient builds cmd/countersign-hook into dir as make build does.
func buildHookClient(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "countersign-hook")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s", "-o", bin, "./cmd/countersign-hook")
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return bin, cmd.Run()
}

// hooksClient is the client measurement: countersign-hook against curl, alternating.
func hooksClient(ctx context.Context, o hooksOptions) (line, error) {
	l := line{}.add("peer", "countersign").add("case", "hooks").add("mode", "client").add("n", o.clientRuns)
	curl, curlErr := exec.LookPath("curl")
	h, err := newHookEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	connID, token, err := h.connect(ctx, "codex")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "countersign-bench-hook-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := o.hookBinPath
	if bin == "" {
		if bin, err = buildHookClient(ctx, dir); err != nil {
			return nil, fmt.Errorf("building cmd/countersign-hook: %w", err)
		}
	}
	const sid = "bench-codex"
	body, err := hookBody("codex", "command-PreToolUse.stdin.json", sid)
	if err != nil {
		return nil, err
	}
	// One body file per run (a fresh tool_use_id: every run is a call the rule decides anew).
	runs := o.clientWarm + o.clientRuns
	file := func(side string, i int) string { return filepath.Join(dir, fmt.Sprintf("%s-%03d.json", side, i)) }
	for i := range runs {
		for _, side := range []string{"hook", "curl"} {
			if err := os.WriteFile(file(side, i), withToolUse(body, fmt.Sprintf("call_bench_%s_%03d", side, i)), 0o600); err != nil {
				return nil, err
			}
		}
	}
	// run times one process from its start to its end (reaped), with stdin from in; it must
	// exit 0 with nothing on stdout: a Codex PreToolUse the rule allows is answered with no
	// verdict (hooks.AllowApproves: Codex's PreToolUse has no allow).
	run := func(name string, args []string, env []string, in string) (time.Duration, error) {
		f, err := os.Open(in)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = f, &out, &errb, env
		start := time.Now()
		err = cmd.Run()
		d := time.Since(start)
		if err != nil || out.Len() != 0 || errb.Len() != 0 {
			return 0, fmt.Errorf("%s: %v, stdout %.200q, stderr %.200q", filepath.Base(name), err, out.String(), errb.String())
		}
		return d, nil
	}
	hookEnv := append(os.Environ(), "COUNTERSIGN_AGENT_TOKEN="+token)
	hookArgs := []string{"hook", "--agent", "codex", "--url", h.base}
	var hookT, curlT []float64
	for i := range runs {
		d, err := run(bin, hookArgs, hookEnv, file("hook", i))
		if err != nil {
			return nil, err
		}
		if i >= o.clientWarm {
			hookT = append(hookT, float64(d.Nanoseconds())/1e3)
		}
		if curlErr != nil {
			continue
		}
		d, err = run(curl, []string{"-s", "-S", "-f", "--noproxy", "*", "-X", "POST", "-H", "Authorization: Bearer " + token,
			"-H", "Content-Type: application/json", "--data-binary", "@" + file("curl", i), h.base + "/hooks/codex"}, os.Environ(), os.DevNull)
		if err != nil {
			return nil, err
		}
		if i >= o.clientWarm {
			curlT = append(curlT, float64(d.Nanoseconds())/1e3)
		}
	}
	audited, _, err := h.audited(ctx, connID, sid)
	if err != nil {
		return nil, err
	}
	want := runs
	if curlErr == nil {
		want = 2 * runs
	}
	if audited != want {
		return nil, fmt.Errorf("%d calls audited, want %d", audited, want)
	}
	hook50 := percentile(hookT, 50)
	l = l.add("warmup", o.clientWarm).add("hook_p50_us", round1(hook50)).add("hook_min_us", round1(percentile(hookT, 0.0001))).
		add("hook_max_us", round1(percentile(hookT, 100)))
	if curlErr != nil {
		return l.add("curl", "missing: the comparison was skipped").add("audited_calls", audited), nil
	}
	curl50 := percentile(curlT, 50)
	ratio := hook50 / curl50
	return l.add("curl_p50_us", round1(curl50)).add("curl_min_us", round1(percentile(curlT, 0.0001))).
		add("curl_max_us", round1(percentile(curlT, 100))).
		add("ratio", round2(ratio)).add("audited_calls", audited).add("under_goal", ratio <= 1.5), nil
}
