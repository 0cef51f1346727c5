// Command report puts Countersign's benchmark lines (bench/cmd/load) and the peers' (pi and the
// Vercel AI SDK, ../shared/peers/run.sh) side by side: it prints a table with the ratios
// Countersign/peer and the issue-9 targets, and can rewrite the generated part of
// bench/RESULTS.md and save the raw lines.
//
//	go run ./bench/cmd/report -countersign cs.jsonl -peers peers.jsonl [-results bench/RESULTS.md] [-raw bench/runs/DATE.jsonl]
//
// Median lines ({"stat":"median",...}) are used when a file has them, else the single run's lines.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	csPath := fs.String("countersign", "", "Countersign's JSON lines (bench/cmd/load)")
	peersPath := fs.String("peers", "", "the peers' JSON lines (run.sh); optional")
	results := fs.String("results", "", "RESULTS.md whose generated block to rewrite; optional")
	raw := fs.String("raw", "", "file to save both inputs' raw lines to; optional")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *csPath == "" {
		return fmt.Errorf("-countersign is required")
	}
	cs, csRaw, err := readLines(*csPath)
	if err != nil {
		return err
	}
	var peers, peersRaw []obj
	if *peersPath != "" {
		if peers, peersRaw, err = readLines(*peersPath); err != nil {
			return err
		}
	}
	md := render(cs, csRaw, peers, peersRaw)
	fmt.Fprint(stdout, md)
	if *raw != "" {
		if err := os.MkdirAll(filepath.Dir(*raw), 0o755); err != nil {
			return err
		}
		var b strings.Builder
		for _, o := range append(append([]obj(nil), peersRaw...), csRaw...) {
			b.WriteString(o.line + "\n")
		}
		if err := os.WriteFile(*raw, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	if *results != "" {
		return rewrite(*results, md)
	}
	return nil
}

// obj is one JSON line, decoded, with its text.
type obj struct {
	m    map[string]any
	line string
}

func (o obj) str(k string) string {
	if v, ok := o.m[k]; ok && v != nil {
		return fmt.Sprint(v)
	}
	return ""
}

func (o obj) num(k string) (float64, bool) {
	v, ok := o.m[k].(float64)
	return v, ok
}

// readLines returns the measurement lines to use (medians when there are any) and every line.
func readLines(path string) (use, all []obj, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var singles, medians []obj
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			return nil, nil, fmt.Errorf("%s: %v", path, err)
		}
		o := obj{m, l}
		all = append(all, o)
		switch {
		case o.str("stat") == "median":
			medians = append(medians, o)
		case o.str("peer") != "meta":
			singles = append(singles, o)
		}
	}
	if len(medians) > 0 {
		return medians, all, sc.Err()
	}
	return singles, all, sc.Err()
}

// find returns the line of peer and case whose other fields match want ("" matches absent).
func find(lines []obj, peer, kase string, want map[string]string) (obj, bool) {
	for _, o := range lines {
		if o.str("peer") != peer || o.str("case") != kase {
			continue
		}
		ok := true
		for k, v := range want {
			if o.str(k) != v {
				ok = false
			}
		}
		if ok {
			return o, true
		}
	}
	return obj{}, false
}

func f(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

// render is the generated Markdown: the run's context, the comparison, the targets.
func render(cs, csRaw, peers, peersRaw []obj) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Side by side: the latest `make bench-peers`\n\n")
	w("Written by bench/peers.sh (bench/cmd/report); the raw lines are in bench/runs/.\n\n### Run\n\n")
	for _, o := range csRaw {
		if o.str("peer") == "meta" {
			w("- Countersign run %s: %s, %s, %s × %s, load average %s, Go %s\n", o.str("run"), o.str("date"),
				o.str("countersign"), o.str("cpus"), o.str("cpu"), o.str("loadavg"), o.str("go"))
		}
	}
	for _, o := range peersRaw {
		if o.str("peer") == "meta" {
			w("- Peers run %s: %s, Node %s, pi %s, ai %s, %s × %s, load average %s\n", o.str("run"), o.str("date"),
				o.str("node"), o.str("pi"), o.str("ai"), o.str("cpus"), o.str("cpu"), o.str("loadavg"))
		}
	}
	runs := "1 run"
	if len(cs) > 0 && cs[0].str("stat") == "median" {
		runs = "median of " + cs[0].str("runs") + " runs"
	}
	w("\nCountersign: %s. Ratio = Countersign ÷ peer (below 1: Countersign is faster or smaller); ", runs)
	w("speed-up = peer ÷ Countersign.\n\n")

	w("| case | n | Countersign | peer | peer value | ratio | speed-up |\n|---|---|---|---|---|---|---|\n")
	row := func(kase, n, csVal, peer string, pv float64, c float64) {
		if pv == 0 || c == 0 {
			w("| %s | %s | %s | %s | — | — | — |\n", kase, n, csVal, peer)
			return
		}
		w("| %s | %s | %s | %s | %s | %.3f | %.1f× |\n", kase, n, csVal, peer, f(pv), c/pv, pv/c)
	}
	num := func(o obj, k string) float64 { v, _ := o.num(k); return v }
	for _, n := range []string{"1000", "10000"} {
		c, ok := find(cs, "countersign", "nested", map[string]string{"n": n})
		if !ok {
			continue
		}
		cv := num(c, "us_per_call")
		p, _ := find(peers, "pi", "nested", map[string]string{"n": n})
		row("nested µs/call (2n calls, in the loop)", n, f(cv), "pi", num(p, "us_per_call"), cv)
	}
	for _, n := range []string{"200", "1000"} {
		c, ok := find(cs, "countersign", "direct", map[string]string{"n": n})
		if !ok {
			continue
		}
		cv := num(c, "us_per_call")
		for _, pk := range []struct{ peer, kase, model, label string }{
			{"pi", "direct", "faux", "pi faux"}, {"pi", "direct", "bare", "pi bare"},
			{"ai-sdk", "direct", "", "AI SDK"}, {"ai-sdk", "direct_gate", "", "AI SDK + gate"},
		} {
			p, _ := find(peers, pk.peer, pk.kase, map[string]string{"n": n, "model": pk.model})
			row("direct µs/call", n, f(cv), pk.label, num(p, "us_per_call"), cv)
		}
		for _, k := range []string{"turn_us_first50", "turn_us_last50"} {
			cv := num(c, k)
			p, _ := find(peers, "pi", "direct", map[string]string{"n": n, "model": "faux"})
			row("direct "+strings.TrimPrefix(k, "turn_us_")+" turn µs", n, f(cv), "pi faux", num(p, k), cv)
		}
	}
	if c, ok := find(cs, "countersign", "rss", nil); ok {
		cv := num(c, "max_rss_mb")
		for _, peer := range []string{"pi", "ai-sdk"} {
			p, _ := find(peers, peer, "rss", nil)
			row("peak RSS MB (whole process)", c.str("n"), f(cv), peer, num(p, "max_rss_mb"), cv)
		}
	}

	w("\n### Targets (issues 9, 17, 19, 20 and 21)\n\n| target | measured | |\n|---|---|---|\n")
	target := func(name, measured string, ok, known bool) {
		verdict := "—"
		if known {
			verdict = "met"
			if !ok {
				verdict = "**missed**"
			}
		}
		w("| %s | %s | %s |\n", name, measured, verdict)
	}
	for _, n := range []string{"1000", "10000"} {
		c, ok1 := find(cs, "countersign", "nested", map[string]string{"n": n})
		p, ok2 := find(peers, "pi", "nested", map[string]string{"n": n})
		if ok1 && ok2 {
			s := num(p, "us_per_call") / num(c, "us_per_call")
			target("nested n="+n+": ≥ 20× faster per call than pi", fmt.Sprintf("%.1f× (%s vs %s µs)", s, f(num(c, "us_per_call")), f(num(p, "us_per_call"))), s >= 20, true)
		}
	}
	if c, ok := find(cs, "countersign", "direct", map[string]string{"n": "200"}); ok {
		if p, ok := find(peers, "pi", "direct", map[string]string{"n": "200", "model": "faux"}); ok {
			s := num(p, "us_per_call") / num(c, "us_per_call")
			target("direct K=200: ≥ 5× faster per call than pi (faux)", fmt.Sprintf("%.1f× (%s vs %s µs)", s, f(num(c, "us_per_call")), f(num(p, "us_per_call"))), s >= 5, true)
		}
	}
	// Issue 19, goal 1: nested with the rules case's 1,000 rules loaded. The nested case runs
	// without rules; the rules case measures what they add per nested call (alternating pairs in
	// one process), so the figure is the nested case's plus that (never less than the nested one).
	if r, ok := find(cs, "countersign", "rules", nil); ok {
		added := max(num(r, "us_added_per_call"), 0)
		for _, n := range []string{"1000", "10000"} {
			c, ok1 := find(cs, "countersign", "nested", map[string]string{"n": n})
			p, ok2 := find(peers, "pi", "nested", map[string]string{"n": n})
			if ok1 && ok2 {
				with := num(c, "us_per_call") + added
				s := num(p, "us_per_call") / with
				target("nested n="+n+" with 1,000 rules loaded (issue 19): ≥ 20× faster per call than pi",
					fmt.Sprintf("%.1f× (%s + %s µs the rules add = %s vs %s µs)", s, f(num(c, "us_per_call")), f(added), f(with), f(num(p, "us_per_call"))), s >= 20, true)
			}
		}
	}
	// Issue 19, goal 2: a direct turn persisted and broadcast against the AI SDK's in-memory one.
	for _, n := range []string{"200", "1000"} {
		c, ok1 := find(cs, "countersign", "direct", map[string]string{"n": n})
		p, ok2 := find(peers, "ai-sdk", "direct", map[string]string{"n": n})
		if ok1 && ok2 {
			r := num(c, "us_per_call") / num(p, "us_per_call")
			target("direct K="+n+" (issue 19): ≤ 1.0 × the AI SDK's in-memory turn", fmt.Sprintf("%.2f× (%s vs %s µs)", r, f(num(c, "us_per_call")), f(num(p, "us_per_call"))), r <= 1.0, true)
		}
	}
	for _, n := range []string{"200", "1000", "5000"} {
		// The ratio of each run, then their median: a median line takes each field's median
		// separately, so its first-50 and last-50 can come from different runs.
		var ratios []string
		var rs []float64
		for _, o := range csRaw {
			if o.str("peer") == "countersign" && o.str("case") == "direct" && o.str("n") == n && o.str("stat") == "" {
				r := num(o, "turn_us_last50") / num(o, "turn_us_first50")
				rs = append(rs, r)
				ratios = append(ratios, fmt.Sprintf("%.2f", r))
			}
		}
		if len(rs) > 0 {
			r := median(rs)
			measured := fmt.Sprintf("%.2f× (median of the runs' ratios %s)", r, strings.Join(ratios, ", "))
			if n != "5000" {
				target("direct K="+n+": last-50 turn ≤ 1.5× first-50", measured, r <= 1.5, true)
			}
			if n != "200" {
				target("direct K="+n+" (issue 19): last-50 turn ≤ 1.2× first-50", measured, r <= 1.2, true)
			}
		}
	}
	if c, ok := find(cs, "countersign", "rss", nil); ok {
		target("rss after K=1000: ≤ 40 MB (peak, whole process)", fmt.Sprintf("%s MB peak; %s MB anonymous, %s MB file-backed (mostly the binary) at the end",
			f(num(c, "max_rss_mb")), f(num(c, "rss_anon_mb")), f(num(c, "rss_file_mb"))), num(c, "max_rss_mb") <= 40, true)
	}
	if c, ok := find(cs, "countersign", "rules", nil); ok {
		target("rules (issue 17): 1,000 rules loaded, 10 on the called tool: < 2 µs added per nested call",
			fmt.Sprintf("+%s µs wall (%s vs %s µs per call), +%s µs CPU (%s vs %s), medians of %s alternating pairs",
				f(num(c, "us_added_per_call")), f(num(c, "us_per_call_rules")), f(num(c, "us_per_call_no_rules")),
				f(num(c, "cpu_us_added_per_call")), f(num(c, "cpu_us_per_call_rules")), f(num(c, "cpu_us_per_call_no_rules")), c.str("pairs")),
			num(c, "us_added_per_call") < 2, true)
	}
	if c, ok := find(cs, "countersign", "exec_checks", nil); ok {
		target("exec_checks (issue 28): run_command's check of one started program, 1,000 rules loaded: < 50 µs",
			fmt.Sprintf("%s µs per check (a started program costs %s µs in all: checked, forked and waited for)",
				f(num(c, "us_per_check")), f(num(c, "us_per_program_run"))),
			num(c, "us_per_check") < 50, true)
	}
	for _, mode := range []string{"one_at_a_time", "burst"} {
		if c, ok := find(cs, "countersign", "approval_round_trip", map[string]string{"mode": mode}); ok {
			target("approval round trip p99 ≤ 2 ms ("+mode+")", fmt.Sprintf("p50 %s µs, p99 %s µs", f(num(c, "p50_us")), f(num(c, "p99_us"))), num(c, "p99_us") <= 2000, true)
		}
	}
	if c, ok := find(cs, "countersign", "inbox", nil); ok {
		target("inbox (issue 20): GET /inbox with 1,000 pending approvals < 50 ms (p99 of the loads)",
			fmt.Sprintf("p50 %s ms, p99 %s ms, %s KB", f(num(c, "page_p50_ms")), f(num(c, "page_p99_ms")), f(num(c, "page_kb"))),
			num(c, "page_p99_ms") < 50, true)
		target("inbox (issue 20): decision round trip from the inbox p99 < 2 ms (one at a time)",
			fmt.Sprintf("p50 %s µs, p99 %s µs (the POST alone p50 %s µs, p99 %s µs)", f(num(c, "rt_p50_us")), f(num(c, "rt_p99_us")),
				f(num(c, "rt_post_p50_us")), f(num(c, "rt_post_p99_us"))),
			num(c, "rt_p99_us") < 2000, true)
	}
	for _, mode := range []string{"paced", "burst"} {
		if c, ok := find(cs, "countersign", "fanout", map[string]string{"mode": mode}); ok {
			target("fan-out p99 ≤ 50 ms ("+mode+")", fmt.Sprintf("delivery p50 %s ms, p99 %s ms; text p99 %s ms", f(num(c, "p50_ms")), f(num(c, "p99_ms")), f(num(c, "text_p99_ms"))), num(c, "p99_ms") <= 50, true)
		}
	}

	if c, ok := find(cs, "countersign", "sessions", map[string]string{"mode": "binary"}); ok {
		target("sessions (issue 19): RSS after 100 sessions × 100 turns ≤ 80 MB (one server)",
			fmt.Sprintf("%s MB (%s MB anonymous, %s MB file-backed; %s MB at start); peak %s MB; database %s MB + WAL %s MB; %s ms",
				f(num(c, "rss_mb")), f(num(c, "rss_anon_mb")), f(num(c, "rss_file_mb")), f(num(c, "rss_after_start_mb")),
				f(num(c, "max_rss_mb")), f(num(c, "db_mb")), f(num(c, "wal_mb")), f(num(c, "total_ms"))),
			num(c, "rss_mb") <= 80, true)
	}
	if c, ok := find(cs, "countersign", "fanout_html", map[string]string{"mode": "paced"}); ok {
		target("fanout_html (issue 19): 1,000 page sockets on 10 sessions, p99 ≤ 50 ms (paced)",
			fmt.Sprintf("delivery p50 %s ms, p99 %s ms, max %s ms; %s frames, %s bytes per viewer; server CPU %s ms; dropped %s, unfinished %s",
				f(num(c, "p50_ms")), f(num(c, "p99_ms")), f(num(c, "max_ms")), f(num(c, "frames_per_viewer")),
				f(num(c, "bytes_per_viewer")), f(num(c, "cpu_ms")), c.str("dropped_viewers"), c.str("unfinished_viewers")),
			num(c, "p99_ms") <= 50 && num(c, "dropped_viewers") == 0 && num(c, "unfinished_viewers") == 0, true)
	}
	// Issue 21, acceptance 7: two replicas on one PostgreSQL database (skipped without one).
	if c, ok := find(cs, "countersign", "replicas", map[string]string{"mode": "round_trip"}); ok {
		target("replicas (issue 21): approval round trip across two replicas (the call waits on A, B decides) p99 < 20 ms",
			fmt.Sprintf("p50 %s µs, p99 %s µs (p99s: B's decision %s µs, relay to A %s µs, waking the call %s µs)",
				f(num(c, "p50_us")), f(num(c, "p99_us")), f(num(c, "decide_p99_us")), f(num(c, "relay_p99_us")), f(num(c, "wake_p99_us"))),
			num(c, "p99_us") < 20000, true)
	}
	for _, mode := range []string{"paced", "burst"} {
		if c, ok := find(cs, "countersign", "replicas", map[string]string{"mode": "fanout_" + mode}); ok {
			target("replicas (issue 21): one session to 1,000 viewers, 500 on each replica, p99 < 100 ms ("+mode+")",
				fmt.Sprintf("p50 %s ms, p99 %s ms (on A p99 %s ms, on B p99 %s ms); dropped %s",
					f(num(c, "p50_ms")), f(num(c, "p99_ms")), f(num(c, "a_p99_ms")), f(num(c, "b_p99_ms")), c.str("dropped_viewers")),
				num(c, "p99_ms") < 100 && num(c, "dropped_viewers") == 0, true)
		}
	}
	if c, ok := find(cs, "countersign", "replicas", map[string]string{"mode": "skipped"}); ok {
		target("replicas (issue 21): round trip p99 < 20 ms, fan-out p99 < 100 ms", "skipped: "+c.str("skipped"), false, false)
	}

	w("\n### Countersign's lines\n\n```\n")
	for _, o := range cs {
		w("%s\n", o.line)
	}
	w("```\n")
	if len(peers) > 0 {
		w("\n### The peers' lines\n\n```\n")
		for _, o := range peers {
			w("%s\n", o.line)
		}
		w("```\n")
	}
	return b.String()
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

const (
	begin = "<!-- generated by bench/peers.sh: begin -->"
	end   = "<!-- generated by bench/peers.sh: end -->"
)

// rewrite replaces the generated block of the results file (appending one if there is none).
func rewrite(path, md string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	block := begin + "\n" + md + end
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i >= 0 && j > i {
		s = s[:i] + block + s[j+len(end):]
	} else {
		s = strings.TrimRight(s, "\n") + "\n\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
