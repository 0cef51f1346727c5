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
	"runtime"
	"sync"
	"time"

	"countersign/internal/aap"
	"countersign/internal/connections"
	"countersign/internal/gate"
	"countersign/internal/testkit"
	"countersign/internal/web"
)

// The aap case (issue 32, acceptance 6): Door 3, the Agent Approval Protocol v1, on the real
// server (web.New with its connections and aap.Service, on loopback) and the real SQLite store in
// a temporary folder. Two measurements, one line each:
//   - round_trip: n times, after a warm-up: POST /aap/v1/requests (201 pending), a long poll
//     GET ?wait=30s held, the owner's approval through the gate (gate.Service.Decide, as the
//     inbox's Approve does), and the long poll's answer, approved with an expires_at; p50/p99/max
//     of the round trip (the POST's time plus the time from the decision to the poll's answer:
//     create + decide + wake, goal p99 ≤ 5 ms; the harness's own wait until the poll is held is
//     left out), of the create alone and of the wake alone (the decision stored to the poll's
//     answer).
//   - held_polls: 200 requests, each with a long poll held at once (wait=30s), then all decided;
//     the process's VmRSS before, with all 200 held, and the growth (goal < 20 MB). The client's
//     200 connections are in the same process: the growth is an upper bound of the server's.

type aapEnv struct {
	e     *testkit.Bench
	base  string
	token string
	stop  func()
	hc    *http.Client
}

func newAAPEnv(ctx context.Context, conns int) (*aapEnv, error) {
	e, cleanup, err := newEnv(ctx, testkit.BenchOptions{})
	if err != nil {
		return nil, err
	}
	conn := connections.NewService(e.DB)
	srv := web.New(web.Config{Runner: e.Runner, Store: e.DB, Broker: e.Broker, Models: e.Models, Connections: conn,
		AAP: aap.NewService(e.Runner.Gate(), e.DB, nil), OwnerToken: benchToken, Workspace: e.Dir,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanup()
		return nil, err
	}
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: srv.Handler()}
	go hs.Serve(ln)
	_, token, err := conn.Create(ctx, "bench aap", connections.Kind("api"))
	if err != nil {
		hs.Close()
		cleanup()
		return nil, err
	}
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}
	return &aapEnv{e: e, base: "http://" + ln.Addr().String() + "/aap", token: token, hc: &http.Client{Transport: tr, Timeout: time.Minute},
		stop: func() { hs.Close(); cleanup() }}, nil
}

// call sends one AAP request and decodes the answer into out, requiring status want.
func (a *aapEnv) call(ctx context.Context, method, path string, body []byte, key string, want int, out any) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != want {
		return fmt.Errorf("%s %s: %d %.300s, want %d", method, path, res.StatusCode, b, want)
	}
	return json.Unmarshal(b, out)
}

type aapAnswer struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Decision *struct {
		ExpiresAt string `json:"expires_at"`
	} `json:"decision"`
}

// createOnly makes request i (POST, 201 pending) and returns its id.
func (a *aapEnv) createOnly(ctx context.Context, i int) (string, error) {
	body := fmt.Appendf(nil, `{"tool":"deploy","arguments":{"service":"billing","n":%d},"timeout":"30m"}`, i)
	var r aapAnswer
	if err := a.call(ctx, "POST", "/v1/requests", body, fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), http.StatusCreated, &r); err != nil {
		return "", err
	}
	if r.Status != "pending" {
		return "", fmt.Errorf("request %d: %s, want pending", i, r.Status)
	}
	return r.ID, nil
}

// create makes request i and returns its id and its approval's id.
func (a *aapEnv) create(ctx context.Context, i int) (id, approvalID string, err error) {
	body := fmt.Appendf(nil, `{"tool":"deploy","arguments":{"service":"billing","n":%d},"timeout":"30m"}`, i)
	var r aapAnswer
	if err := a.call(ctx, "POST", "/v1/requests", body, fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), http.StatusCreated, &r); err != nil {
		return "", "", err
	}
	if r.Status != "pending" {
		return "", "", fmt.Errorf("request %d: %s, want pending", i, r.Status)
	}
	stored, err := a.e.DB.AAPRequest(ctx, r.ID)
	return r.ID, stored.ApprovalID, err
}

// poll starts a long poll on request id; its answer (approved with expires_at, or an error)
// arrives on the channel.
func (a *aapEnv) poll(ctx context.Context, id string) <-chan error {
	done := make(chan error, 1)
	go func() {
		var r aapAnswer
		err := a.call(ctx, "GET", "/v1/requests/"+id+"?wait=30s", nil, "", http.StatusOK, &r)
		if err == nil && (r.Status != "approved" || r.Decision == nil || r.Decision.ExpiresAt == "") {
			err = fmt.Errorf("request %s: %s, want approved with expires_at", id, r.Status)
		}
		done <- err
	}()
	return done
}

// held waits until a long poll watches approvalID in the server.
func (a *aapEnv) held(approvalID string) error {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if a.e.Runner.Gate().Watching(approvalID) {
			return nil
		}
		time.Sleep(20 * time.Microsecond)
	}
	return fmt.Errorf("no long poll holds approval %s", approvalID)
}

func (a *aapEnv) approve(ctx context.Context, approvalID string) error {
	_, err := a.e.Runner.Gate().Decide(ctx, gate.AnySession, approvalID, gate.Answer{Decision: "approve", By: gate.Owner()})
	return err
}

// aapRoundTrip is the round_trip measurement.
func aapRoundTrip(ctx context.Context, n, warmup int) (line, error) {
	a, err := newAAPEnv(ctx, 4)
	if err != nil {
		return nil, err
	}
	defer a.stop()
	var whole, wake, held []float64
	for i := range warmup + n {
		// Timed: the POST (create), then from the decision to the long poll's answer (decide +
		// wake). Not timed: the harness finding the approval and waiting until the poll is held.
		start := time.Now()
		id, err := a.createOnly(ctx, i)
		if err != nil {
			return nil, err
		}
		created := time.Since(start)
		stored, err := a.e.DB.AAPRequest(ctx, id)
		if err != nil {
			return nil, err
		}
		done := a.poll(ctx, id)
		if err := a.held(stored.ApprovalID); err != nil {
			return nil, err
		}
		decideAt := time.Now()
		if err := a.approve(ctx, stored.ApprovalID); err != nil {
			return nil, err
		}
		decided := time.Now()
		if err := <-done; err != nil {
			return nil, err
		}
		end := time.Now()
		if i >= warmup {
			whole = append(whole, float64((created+end.Sub(decideAt)).Nanoseconds())/1e3)
			wake = append(wake, float64(end.Sub(decided).Nanoseconds())/1e3)
			held = append(held, float64(created.Nanoseconds())/1e3)
		}
	}
	p99 := percentile(whole, 99)
	return line{}.add("peer", "countersign").add("case", "aap").add("mode", "round_trip").add("n", n).add("warmup", warmup).
		add("p50_us", round1(percentile(whole, 50))).add("p99_us", round1(p99)).add("max_us", round1(percentile(whole, 100))).
		add("create_p50_us", round1(percentile(held, 50))).add("create_p99_us", round1(percentile(held, 99))).
		add("wake_p50_us", round1(percentile(wake, 50))).add("wake_p99_us", round1(percentile(wake, 99))).
		add("under_goal", p99 <= 5000), nil
}

// aapHeldPolls is the held_polls measurement.
func aapHeldPolls(ctx context.Context, polls int) (line, error) {
	a, err := newAAPEnv(ctx, polls+8)
	if err != nil {
		return nil, err
	}
	defer a.stop()
	ids := make([]string, polls)
	aids := make([]string, polls)
	for i := range polls {
		if ids[i], aids[i], err = a.create(ctx, i); err != nil {
			return nil, err
		}
	}
	runtime.GC()
	before, err := memory(os.Getpid())
	if err != nil {
		return nil, err
	}
	dones := make([]<-chan error, polls)
	for i := range polls {
		dones[i] = a.poll(ctx, ids[i])
	}
	for _, aid := range aids {
		if err := a.held(aid); err != nil {
			return nil, err
		}
	}
	time.Sleep(200 * time.Millisecond)
	during, err := memory(os.Getpid())
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, polls)
	for _, aid := range aids {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- a.approve(ctx, aid) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	for _, d := range dones {
		if err := <-d; err != nil {
			return nil, err
		}
	}
	growth := during.rss - before.rss
	return line{}.add("peer", "countersign").add("case", "aap").add("mode", "held_polls").add("polls", polls).
		add("rss_before_mb", round1(float64(before.rss)/(1<<20))).add("rss_held_mb", round1(float64(during.rss)/(1<<20))).
		add("rss_growth_mb", round1(float64(growth)/(1<<20))).add("all_woken_ms", ms(time.Since(start))).
		add("under_goal", growth < 20<<20), nil
}
