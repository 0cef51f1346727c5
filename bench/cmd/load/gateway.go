package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"countersign/internal/connections"
	"countersign/internal/gate"
	"countersign/internal/mcp"
	"countersign/internal/rules"
	"countersign/internal/testkit"
	"countersign/internal/web"
)

// The gateway case (issue 31, acceptance 7): Door 2, /mcp, on the real server (web.New on
// loopback) and the real SQLite store, in front of an in-process upstream MCP server (the go-sdk's,
// Streamable HTTP on loopback, reached through the real mcp.Manager), with one policy rule
// `allow up__touch`, so every call is decided by the rule (an automatic approval row, its outside
// call, the call's message and its outcome in the agent session), then run upstream. Two lines:
//   - one_at_a_time: n tools/call of touch from one go-sdk client straight to the upstream, then
//     n through /mcp, one after the other, after a warm-up each; p50/p99 of each and what the
//     gateway adds (goal: ≤ 1 ms at p99).
//   - clients: 100 go-sdk clients, each its own MCP session (so its own agent session), each
//     making calls one after the other for the given time; calls, errors (goal: none), p50/p99.

// gatewayRule is the rule that decides every call of the case.
const gatewayRule = "up__touch"

type gatewayEnv struct {
	base, upstream string
	token          string
	e              *testkit.Bench
	stop           func()
}

// recorded waits for the records queued after the answers (agent.Runner.QueueAgentCall) and
// counts the outside calls stored with their outcome, in every session: each call the gateway
// answered must have one.
func (g *gatewayEnv) recorded(ctx context.Context) (int, error) {
	g.e.Runner.FlushAgentRecords()
	ss, err := g.e.DB.Sessions(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range ss {
		cs, err := g.e.DB.OutsideCalls(ctx, s.ID)
		if err != nil {
			return 0, err
		}
		for _, c := range cs {
			if c.Outcome != nil {
				n++
			}
		}
	}
	return n, nil
}

func newGatewayEnv(ctx context.Context) (*gatewayEnv, error) {
	// The upstream: one tool, touch, with no annotations (it would ask without the rule).
	up := sdk.NewServer(&sdk.Implementation{Name: "bench-upstream", Version: "1"}, nil)
	up.AddTool(&sdk.Tool{Name: "touch", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "touched"}}}, nil
		})
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	uhs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return up }, nil)}
	go uhs.Serve(uln)
	upURL := "http://" + uln.Addr().String()
	cfg, err := mcp.ParseConfig("bench.json", []byte(`{"mcpServers":{"up":{"url":"`+upURL+`","trusted":true}}}`))
	if err != nil {
		uhs.Close()
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := mcp.NewManager(cfg, quiet)
	mctx, cancel := context.WithCancel(ctx)
	m.Start(mctx)
	tools := m.Tools()
	if len(tools) != 1 {
		cancel()
		m.Close()
		uhs.Close()
		return nil, fmt.Errorf("upstream: %d tools listed, want 1 (%v)", len(tools), m.Servers())
	}
	e, cleanup, err := newEnv(ctx, testkit.BenchOptions{
		Rules: []gate.Rule{{ID: "policy:gateway", Effect: gate.Allow, Tool: gatewayRule, Scope: gate.ScopeServer,
			Source: gate.SourcePolicyFile, CreatedBy: "bench"}},
		CompileRules: rules.Compiler,
		Tools:        tools,
	})
	if err != nil {
		cancel()
		m.Close()
		uhs.Close()
		return nil, err
	}
	conns := connections.NewService(e.DB)
	srv := web.New(web.Config{Runner: e.Runner, Store: e.DB, Broker: e.Broker, Models: e.Models, Connections: conns,
		OwnerToken: benchToken, Workspace: e.Dir, Logger: quiet, GatewayTools: m.Tools})
	_, token, err := conns.Create(ctx, "bench gateway", connections.MCP)
	if err != nil {
		cleanup()
		cancel()
		m.Close()
		uhs.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanup()
		cancel()
		m.Close()
		uhs.Close()
		return nil, err
	}
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: srv.Handler()}
	go hs.Serve(ln)
	return &gatewayEnv{base: "http://" + ln.Addr().String(), upstream: upURL, token: token, e: e,
		stop: func() { hs.Close(); cancel(); m.Close(); uhs.Close(); cleanup() }}, nil
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connectMCP connects a go-sdk client to endpoint (with token, when set), speaking revision
// 2025-11-25 (sessions), as the direct calls to the upstream do: the same protocol on both sides.
func connectMCP(ctx context.Context, endpoint, token, name string) (*sdk.ClientSession, error) {
	tr := &sdk.StreamableClientTransport{Endpoint: endpoint}
	if token != "" {
		tr.HTTPClient = &http.Client{Transport: bearerRT{token}}
	}
	return sdk.NewClient(&sdk.Implementation{Name: name, Version: "1"}, nil).Connect(ctx, tr,
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
}

// touch calls tool name and checks the answer is the upstream's.
func touch(ctx context.Context, cs *sdk.ClientSession, name string, i int) error {
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: map[string]any{"path": fmt.Sprintf("f%d", i)}})
	if err != nil {
		return err
	}
	if res.IsError || len(res.Content) != 1 {
		return fmt.Errorf("answered isError %v %+v", res.IsError, res.Content)
	}
	if tc, ok := res.Content[0].(*sdk.TextContent); !ok || tc.Text != "touched" {
		return fmt.Errorf("answered %+v, want the upstream's \"touched\"", res.Content[0])
	}
	return nil
}

// timed makes warmup+n calls and returns the n measured round trips, µs.
func timed(ctx context.Context, cs *sdk.ClientSession, name string, warmup, n int) ([]float64, error) {
	var rt []float64
	for i := range warmup + n {
		start := time.Now()
		if err := touch(ctx, cs, name, i); err != nil {
			return nil, fmt.Errorf("%s call %d: %w", name, i, err)
		}
		if i >= warmup {
			rt = append(rt, float64(time.Since(start).Nanoseconds())/1e3)
		}
	}
	return rt, nil
}

// gatewayOneAtATime is the one_at_a_time measurement.
func gatewayOneAtATime(ctx context.Context, n, warmup int) (line, error) {
	g, err := newGatewayEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer g.stop()
	direct, err := connectMCP(ctx, g.upstream, "", "bench-direct")
	if err != nil {
		return nil, err
	}
	defer direct.Close()
	via, err := connectMCP(ctx, g.base+"/mcp", g.token, "bench-gateway")
	if err != nil {
		return nil, err
	}
	defer via.Close()
	a0 := allocated()
	d, err := timed(ctx, direct, "touch", warmup, n)
	if err != nil {
		return nil, err
	}
	a1 := allocated()
	c0 := testkit.CPU()
	gw, err := timed(ctx, via, "up__touch", warmup, n)
	if err != nil {
		return nil, err
	}
	cpu := testkit.CPU() - c0
	a2 := allocated()
	perCall := func(b uint64) float64 { return round1(float64(b) / 1024 / float64(warmup+n)) }
	added := percentile(gw, 99) - percentile(d, 99)
	stored, err := g.recorded(ctx)
	if err != nil {
		return nil, err
	}
	if stored != warmup+n {
		return nil, fmt.Errorf("%d calls through the gateway, %d stored with their outcome", warmup+n, stored)
	}
	return line{}.add("peer", "countersign").add("case", "gateway").add("mode", "one_at_a_time").add("n", n).
		add("warmup", warmup).add("rule", gatewayRule).
		add("direct_p50_us", round1(percentile(d, 50))).add("direct_p99_us", round1(percentile(d, 99))).
		add("gateway_p50_us", round1(percentile(gw, 50))).add("gateway_p99_us", round1(percentile(gw, 99))).
		add("added_p50_us", round1(percentile(gw, 50)-percentile(d, 50))).add("added_p99_us", round1(added)).
		add("cpu_us_per_call", round1(float64(cpu.Nanoseconds())/1e3/float64(warmup+n))).
		add("direct_alloc_kib_per_call", perCall(a1-a0)).add("gateway_alloc_kib_per_call", perCall(a2-a1)).
		add("recorded", stored).add("under_goal", added <= 1000), nil
}

// allocated is the bytes this process has allocated so far (the client's, the gateway's and the
// upstream's: all three run here), for the bytes per call of each side.
func allocated() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// gatewayClients is the clients measurement.
func gatewayClients(ctx context.Context, clients int, d time.Duration) (line, error) {
	g, err := newGatewayEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer g.stop()
	sessions := make([]*sdk.ClientSession, clients)
	for i := range sessions {
		if sessions[i], err = connectMCP(ctx, g.base+"/mcp", g.token, fmt.Sprintf("bench-client-%03d", i)); err != nil {
			return nil, fmt.Errorf("client %d: %w", i, err)
		}
		defer sessions[i].Close()
		// Each client's first call, unreported: its agent session exists before the run.
		if err := touch(ctx, sessions[i], "up__touch", -1); err != nil {
			return nil, fmt.Errorf("client %d's first call: %w", i, err)
		}
	}
	var (
		mu       sync.Mutex
		lat      []float64
		calls    atomic.Int64
		errs     atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	end := time.Now().Add(d)
	start := time.Now()
	for i, cs := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			for k := 0; time.Now().Before(end); k++ {
				t0 := time.Now()
				err := touch(ctx, cs, "up__touch", i*1_000_000+k)
				calls.Add(1)
				if err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					continue
				}
				mine = append(mine, float64(time.Since(t0).Nanoseconds())/1e3)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	total := time.Since(start)
	stored, err := g.recorded(ctx)
	if err != nil {
		return nil, err
	}
	// Every answered call (and each client's first) is stored with its outcome; errors are none.
	if ok := calls.Load() - errs.Load() + int64(clients); int64(stored) != ok {
		return nil, fmt.Errorf("%d calls answered, %d stored with their outcome", ok, stored)
	}
	l := line{}.add("peer", "countersign").add("case", "gateway").add("mode", "clients").add("clients", clients).
		add("seconds", round1(d.Seconds())).add("calls", calls.Load()).add("errors", errs.Load()).
		add("calls_per_s", round1(float64(calls.Load())/total.Seconds())).
		add("p50_us", round1(percentile(lat, 50))).add("p99_us", round1(percentile(lat, 99))).add("max_us", round1(percentile(lat, 100))).
		add("recorded", stored).add("under_goal", errs.Load() == 0)
	if e, ok := firstErr.Load().(string); ok {
		l = l.add("first_error", e)
	}
	return l, nil
}
