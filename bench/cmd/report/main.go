// Command report puts Countersign's benchmark lines (bench/cmd/load) and the peers' (pi and the
// Vercel AI SDK, ../shared/peers/run.sh) side by side: it prints a table with the ratios
// Countersign/peer and every issue's goals with each run's figure (goals.go), and can rewrite the generated part of
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

	writeGoals(&b, csRaw, peersRaw)

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
