package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func objs(t *testing.T, lines ...string) []obj {
	t.Helper()
	var out []obj
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, obj{m, l})
	}
	return out
}

// The goals table shows each run's figure under its load, a verdict over the runs, and every
// goal, measured or not (issue 35, acceptance 5: no goal quietly dropped).
func TestGoalsTableShowsEachRunAndEveryGoal(t *testing.T) {
	cs := objs(t,
		`{"peer":"meta","side":"countersign","run":1,"loadavg":[0.4,1,1]}`,
		`{"peer":"countersign","case":"hooks","mode":"one_at_a_time","server_p99_us":1500,"p99_us":1900}`,
		`{"peer":"countersign","case":"gateway","mode":"one_at_a_time","added_p50_us":600,"added_p99_us":900,"gateway_p99_us":1200,"direct_p99_us":300}`,
		`{"peer":"countersign","case":"nested","n":1000,"us_per_call":2}`,
		`{"peer":"meta","side":"countersign","run":2,"loadavg":[3.5,1,1]}`,
		`{"peer":"countersign","case":"hooks","mode":"one_at_a_time","server_p99_us":2500,"p99_us":2900}`,
		`{"peer":"countersign","case":"gateway","mode":"one_at_a_time","added_p50_us":700,"added_p99_us":1100,"gateway_p99_us":1400,"direct_p99_us":300}`,
		`{"peer":"countersign","case":"nested","n":1000,"us_per_call":3}`,
		`{"stat":"median","runs":2,"peer":"countersign","case":"nested","n":1000,"us_per_call":2.5}`,
	)
	peers := objs(t,
		`{"peer":"meta","run":1,"loadavg":[0.5,1,1]}`,
		`{"peer":"pi","case":"nested","n":1000,"us_per_call":50}`,
		`{"peer":"meta","run":2,"loadavg":[0.5,1,1]}`,
		`{"peer":"pi","case":"nested","n":1000,"us_per_call":30}`,
	)
	var b strings.Builder
	writeGoals(&b, cs, peers)
	out := b.String()
	row := func(prefix string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, prefix) {
				return l
			}
		}
		t.Fatalf("no row %q in\n%s", prefix, out)
		return ""
	}
	if !strings.Contains(out, "run 1 (load 0.4)") || !strings.Contains(out, "run 2 (load 3.5)") {
		t.Errorf("runs and their loads missing:\n%s", out)
	}
	if r := row("hooks: a rule-decided hook one at a time"); !strings.Contains(r, "✓ server p99 "+f(1500)+" µs") ||
		!strings.Contains(r, "✗ server p99") || !strings.HasSuffix(r, "| met in 1 of 2 runs |") {
		t.Errorf("hooks row: %s", r)
	}
	if r := row("gateway: a rule-allowed tools/call"); !strings.HasSuffix(r, "| met in 1 of 2 runs |") {
		t.Errorf("gateway row: %s", r)
	}
	// Each run is paired with the peers' run of the same number: 25× then 10×.
	if r := row("nested n=1000: ≥ 20×"); !strings.Contains(r, "✓ 25.0×") || !strings.Contains(r, "✗ 10.0×") {
		t.Errorf("nested row: %s", r)
	}
	if r := row("aap: 200 held long polls"); !strings.HasSuffix(r, "| — | — | not measured |") {
		t.Errorf("a goal no run measured: %s", r)
	}
	if n := strings.Count(out, "\n| "); n != len(goals())+1 {
		t.Errorf("%d rows, want every goal (%d) and the header", n, len(goals()))
	}
}
