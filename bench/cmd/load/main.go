// Command load runs Countersign's benchmark cases (issue 9) on the real code paths — SQLite on
// disk in a temporary folder, the real HTTP server with its JSON API and event WebSockets on
// loopback, the faux model with no chunk delay — and prints one JSON line per measurement, with
// the same case names and field names as the peer benchmark (../shared/peers: pi-bench.mjs,
// ai-bench.mjs), so bench/cmd/report can put them side by side.
//
//	go run ./bench/cmd/load [-runs 3] [-cases nested,rules,direct,rss,approval,fanout,sessions,fanout_html,inbox,hooks,gateway,aap,replicas]
//	go run ./bench/cmd/load -cases hooks -hooks-seconds 5
//	go run ./bench/cmd/load -cases sessions -sessions-inprocess -cpuprofile cpu.out -memprofile heap.out
//
// Cases:
//   - nested: one model call to review_diff, which calls run_checks and failing_tests n times
//     each through ExecuteTool (2n calls through the whole pipeline, one allowing tool_call
//     handler); us_per_call is measured inside review_diff around the loop, as pi's is.
//   - rules: the nested loop (n = 5,000: 10,000 calls) with 1,000 policy rules compiled by
//     internal/rules, ten of them on run_checks (testkit.RealRulesOn), against the same loop
//     with no rules, alternating five times; us_added_per_call is the difference of the medians
//     of the loop's time per call, cpu_us_added_per_call of the process's CPU time per call
//     (issue 17: under 2 µs).
//   - direct: K model turns of one read-only echo call each, then a text turn, driven through the
//     JSON API with one events WebSocket connected; us_per_call is the whole run (POST message
//     to agent_end on the socket) divided by K; turn_us_first50/last50 are the mean gaps between
//     consecutive echo executions over the first and the last 50 turns.
//   - rss: the server binary (cmd/web, built as make build does into a temporary folder) as its
//     own process, driven over the JSON API through a K = 1,000 session; VmRSS and VmHWM from
//     /proc/<pid>/status.
//   - approval: 100 sessions, each parked on a pending approval, one events WebSocket client per
//     session that approves over HTTP as soon as it sees approval_requested; the time from the
//     approval's createdAt to the tool's first line, both stamped in the server process.
//   - fanout: 1,000 WebSocket viewers on 10 sessions streaming text and tool calls; the delay
//     from publishing each text delta (stamped in the server process as the model hands it
//     over) to its arrival at each viewer (same process, same clock).
//   - sessions (issue 19, goal 3): the server binary, as rss starts it, through 100 sessions of
//     100 read_file turns each, 10 at a time; VmRSS with RssAnon and RssFile, VmHWM, the database's
//     size, the server's CPU time and the time taken; under_goal is RSS ≤ 80 MB. See sessionsCase.
//   - fanout_html (issue 19, goal 4): 1,000 session pages' live sockets (the HTML fragments) on 10
//     sessions streaming as fanout's paced mode, the viewers in a child process; the delay from
//     each event's publication to each viewer's receipt of its fragment, frames and bytes per
//     viewer, the server's CPU time; under_goal is p99 ≤ 50 ms. See fanoutHTML.
//   - inbox (issue 20): 1,000 parked sessions; GET /inbox and the decision round trip from it.
//     See inboxCase.
//   - hooks (issue 30, acceptance 7): Door 1, POST /hooks/{kind}, with a connection and the rule
//     allow Bash(git status): rule-decided Claude Code PreToolUse round trips one at a time (p99
//     goal 2 ms), 50 agents at 10 calls/s each for -hooks-seconds (p99 goal 10 ms, none lost,
//     every call audited), and countersign-hook's wall time against curl's (goal ≤ 1.5×). See
//     hooksOneAtATime, hooksAgents and hooksClient.
//   - replicas (issue 21, acceptance 7): two replicas in this process on one fresh PostgreSQL
//     database (COUNTERSIGN_TEST_POSTGRES; without it a line says the case was skipped): the
//     approval round trip across them (the call waits on A, B decides; p99 goal 20 ms) and the
//     fan-out of one session to 1,000 subscribers, 500 on each (p99 goal 100 ms). See
//     replicasRoundTrip and replicasFanout.
//
// With -runs N > 1 it also prints one median line per measurement (as ../shared/peers/median.mjs
// does: the median of every numeric field). Progress goes to stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// buildRelease builds cmd/web into dir as `make build` does (the Makefile's BUILD_ENV and
// BUILD_FLAGS: no cgo, trimmed paths, no symbol table), so the rss case measures the binary
// users run; keep the two in step. It returns the binary's path.
func buildRelease(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "countersign")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s", "-o", bin, "./cmd/web")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return bin, cmd.Run()
}

type options struct {
	runs  int
	cases map[string]bool
	bin   string // server binary for rss and sessions; empty: build cmd/web
	// sessionsInprocess runs the sessions case's server in this process (for profiles).
	sessionsInprocess bool
	memprofile        string // the sessions case's heap profile (with sessionsInprocess)
}

// defaultCases are the cases run when -cases is not given (make bench, bench/peers.sh).
const defaultCases = "nested,rules,exec_checks,direct,rss,approval,fanout,sessions,fanout_html,inbox,hooks,gateway,aap,replicas"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runs := fs.Int("runs", 1, "how many times to run every case (medians are printed when more than 1)")
	cases := fs.String("cases", defaultCases, "comma-separated cases to run")
	bin := fs.String("bin", "", "server binary for the rss and sessions cases (default: go build ./cmd/web into a temporary folder)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the measured runs (not the warm-up) to this file")
	sessionsInprocess := fs.Bool("sessions-inprocess", false, "run the sessions case's server in this process (testkit and web.New), to profile it; its memory figures are then this process's")
	memprofile := fs.String("memprofile", "", "with -sessions-inprocess: write a heap profile of the server after the sessions to this file")
	hooksSeconds := fs.Float64("hooks-seconds", 30, "the hooks case's agents measurement: how long the 50 agents post, in seconds (shorter while developing)")
	htmlViewers := fs.Bool("html-viewers", false, "internal: be the fanout_html case's child process holding the page sockets (specs on stdin)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *htmlViewers {
		return runHTMLViewers(ctx, os.Stdin, stdout)
	}
	opt := options{runs: *runs, cases: map[string]bool{}, bin: *bin, sessionsInprocess: *sessionsInprocess, memprofile: *memprofile}
	if opt.memprofile != "" {
		if !opt.sessionsInprocess {
			return fmt.Errorf("-memprofile needs -sessions-inprocess (the binary's heap cannot be profiled from here)")
		}
		// The server's live heap after the sessions is a few MB: the default sampling (one
		// sample per 512 KiB allocated) would see only a handful of its objects.
		runtime.MemProfileRate = 4096
	}
	known := map[string]bool{}
	for _, c := range strings.Split(defaultCases, ",") {
		known[c] = true
	}
	for _, c := range strings.Split(*cases, ",") {
		c = strings.TrimSpace(c)
		if !known[c] {
			return fmt.Errorf("unknown case %q (cases: %s)", c, defaultCases)
		}
		opt.cases[c] = true
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "load: "+format+"\n", a...) }
	out := &printer{w: stdout}

	if (opt.cases["rss"] || opt.cases["sessions"] && !opt.sessionsInprocess) && opt.bin == "" {
		dir, err := os.MkdirTemp("", "countersign-bench-bin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		logf("building cmd/web as make build does")
		if opt.bin, err = buildRelease(ctx, dir); err != nil {
			return err
		}
	}

	// Warm-up, unreported, as the peers do (module init, first SQLite file, first sockets).
	if opt.cases["nested"] || opt.cases["rules"] {
		if _, err := nested(ctx, 1000); err != nil {
			return err
		}
	}
	if opt.cases["direct"] {
		if _, err := direct(ctx, 200); err != nil {
			return err
		}
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for r := 1; r <= opt.runs; r++ {
		out.emit(meta(r))
		type step struct {
			name string
			f    func() (line, error)
		}
		var steps []step
		if opt.cases["nested"] {
			for _, n := range []int{1000, 10000} {
				steps = append(steps, step{fmt.Sprintf("nested n=%d", n), func() (line, error) { return nested(ctx, n) }})
			}
		}
		if opt.cases["rules"] {
			steps = append(steps, step{"rules n=5000", func() (line, error) { return rulesCase(ctx, 5000, 5) }})
		}
		if opt.cases["exec_checks"] {
			steps = append(steps, step{"exec_checks n=20000", func() (line, error) { return execChecksCase(ctx, 20000, 200) }})
		}
		if opt.cases["direct"] {
			// 5000: issue 19's flatness goal (last-50 ÷ first-50 turns); the peers stop at 1000.
			for _, k := range []int{200, 1000, 5000} {
				steps = append(steps, step{fmt.Sprintf("direct K=%d", k), func() (line, error) { return direct(ctx, k) }})
			}
		}
		if opt.cases["rss"] {
			steps = append(steps, step{"rss K=1000", func() (line, error) { return rss(ctx, opt.bin, 1000) }})
		}
		if opt.cases["approval"] {
			for _, mode := range []string{"one_at_a_time", "burst"} {
				steps = append(steps, step{"approval " + mode, func() (line, error) { return approvals(ctx, 100, mode) }})
			}
		}
		if opt.cases["fanout"] {
			// paced: the faux model's default pause between text chunks (cmd/web -faux-delay,
			// 15ms), about a real model's streaming rate; burst: no pause at all.
			for _, d := range []time.Duration{15 * time.Millisecond, 0} {
				steps = append(steps, step{fmt.Sprintf("fanout chunk delay %v", d), func() (line, error) { return fanout(ctx, 10, 100, d) }})
			}
		}
		if opt.cases["sessions"] {
			o := sessionsOptions{sessions: 100, turns: 100, parallel: 10, bin: opt.bin,
				inprocess: opt.sessionsInprocess, memprofile: opt.memprofile}
			steps = append(steps, step{"sessions 100×100", func() (line, error) { return sessionsCase(ctx, o) }})
		}
		if opt.cases["fanout_html"] {
			// paced as fanout's paced mode (15 ms between text chunks)
			steps = append(steps, step{"fanout_html chunk delay 15ms", func() (line, error) { return fanoutHTML(ctx, 10, 100, 15*time.Millisecond) }})
		}
		if opt.cases["inbox"] {
			steps = append(steps, step{"inbox n=1000", func() (line, error) { return inboxCase(ctx, 1000, 20) }})
		}
		if opt.cases["hooks"] {
			o := hooksOptions{n: 1000, warmup: 200, agents: 50, rate: 10,
				duration: time.Duration(*hooksSeconds * float64(time.Second)), clientRuns: 50, clientWarm: 3}
			steps = append(steps,
				step{"hooks one at a time n=1000", func() (line, error) { return hooksOneAtATime(ctx, o) }},
				step{fmt.Sprintf("hooks 50 agents × 10/s for %v", o.duration), func() (line, error) { return hooksAgents(ctx, o) }},
				step{"hooks countersign-hook vs curl n=50", func() (line, error) { return hooksClient(ctx, o) }})
		}
		if opt.cases["gateway"] {
			steps = append(steps,
				step{"gateway one at a time n=1000", func() (line, error) { return gatewayOneAtATime(ctx, 1000, 200) }},
				step{"gateway 100 clients for 10s", func() (line, error) { return gatewayClients(ctx, 100, 10*time.Second) }})
		}
		if opt.cases["aap"] {
			steps = append(steps,
				step{"aap round trip n=1000", func() (line, error) { return aapRoundTrip(ctx, 1000, 100) }},
				step{"aap 200 held long polls", func() (line, error) { return aapHeldPolls(ctx, 200) }})
		}
		if opt.cases["replicas"] {
			if server := os.Getenv(replicaEnvURL); server == "" {
				steps = append(steps, step{"replicas (skipped)", replicasSkipped})
			} else {
				// 200 approvals after 10 unreported ones; 1,000 viewers, 500 on each replica, paced
				// as fanout's paced mode, then with no pause between chunks.
				steps = append(steps, step{"replicas round trip n=200", func() (line, error) { return replicasRoundTrip(ctx, server, 200, 10) }})
				for _, d := range []time.Duration{15 * time.Millisecond, 0} {
					steps = append(steps, step{fmt.Sprintf("replicas fan-out chunk delay %v", d), func() (line, error) { return replicasFanout(ctx, server, 1000, d) }})
				}
			}
		}
		for _, s := range steps {
			if err := ctx.Err(); err != nil {
				return err
			}
			logf("run %d: %s", r, s.name)
			runtime.GC()
			l, err := s.f()
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			out.emit(l)
		}
	}
	if opt.runs > 1 {
		for _, l := range out.medians() {
			out.print(l)
		}
	}
	return nil
}

// meta is the run's context line: machine, load and versions (as run.sh's meta line).
func meta(r int) line {
	l := line{}.
		add("peer", "meta").add("side", "countersign").add("run", r).
		add("go", runtime.Version()).add("countersign", gitDescribe()).
		add("date", time.Now().UTC().Format(time.RFC3339)).
		add("cpus", runtime.NumCPU()).add("cpu", cpuModel()).add("loadavg", loadavg())
	return l
}

// line is one JSON output line whose fields keep their order.
type line []field

type field struct {
	k string
	v any
}

func (l line) add(k string, v any) line { return append(l, field{k, v}) }

func (l line) get(k string) (any, bool) {
	for _, f := range l {
		if f.k == k {
			return f.v, true
		}
	}
	return nil, false
}

// MarshalJSON writes the fields in order.
func (l line) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.k)
		v, err := json.Marshal(f.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

type printer struct {
	w     io.Writer
	lines []line
}

func (p *printer) emit(l line) {
	p.lines = append(p.lines, l)
	p.print(l)
}

func (p *printer) print(l line) {
	b, _ := json.Marshal(l)
	fmt.Fprintln(p.w, string(b))
}

// medians groups the measurement lines by (case, model, mode, n) and returns one line per group
// with the median of every numeric field ("n" kept), as median.mjs does; a boolean field is true
// when it is true in most of the group's lines.
func (p *printer) medians() []line {
	var order []string
	groups := map[string][]line{}
	for _, l := range p.lines {
		if v, _ := l.get("peer"); v == "meta" {
			continue
		}
		var key []string
		for _, k := range []string{"case", "model", "mode", "n"} {
			v, _ := l.get(k)
			key = append(key, fmt.Sprint(v))
		}
		ks := strings.Join(key, "|")
		if groups[ks] == nil {
			order = append(order, ks)
		}
		groups[ks] = append(groups[ks], l)
	}
	var out []line
	for _, ks := range order {
		rows := groups[ks]
		m := line{}.add("stat", "median").add("runs", len(rows))
		for _, f := range rows[0] {
			if x, ok := number(f.v); ok && f.k != "n" {
				var xs []float64
				for _, r := range rows {
					if v, ok := r.get(f.k); ok {
						if y, ok := number(v); ok {
							xs = append(xs, y)
						}
					}
				}
				_ = x
				m = m.add(f.k, median(xs))
				continue
			}
			if _, ok := f.v.(bool); ok {
				// A verdict such as under_goal: true when most runs say so (for an odd number of
				// runs, the same as comparing the median with the goal).
				yes := 0
				for _, r := range rows {
					if v, _ := r.get(f.k); v == true {
						yes++
					}
				}
				m = m.add(f.k, 2*yes > len(rows))
				continue
			}
			m = m.add(f.k, f.v)
		}
		out = append(out, m)
	}
	return out
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// percentile returns the p-th percentile (0 < p ≤ 100, nearest rank) of xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func round1(x float64) float64   { return float64(int64(x*10+0.5)) / 10 }
func round2(x float64) float64   { return float64(int64(x*100+0.5)) / 100 }
func ms(d time.Duration) float64 { return round1(float64(d.Microseconds()) / 1e3) }
