package main

import (
	"io"
	"testing"
)

// The median line of a case takes a verdict (under_goal) from most runs, not from the first: five
// rules runs where only the first missed the goal are under it.
func TestMedianVerdictIsTheMajority(t *testing.T) {
	p := &printer{w: io.Discard}
	for i, added := range []float64{2.47, 1.6, 1.63, -0.12, -0.04} {
		p.emit(line{}.add("peer", "countersign").add("case", "rules").add("n", 5000).add("run", i).
			add("us_added_per_call", added).add("under_goal", added < 2))
	}
	ms := p.medians()
	if len(ms) != 1 {
		t.Fatalf("%d median lines, want 1", len(ms))
	}
	if v, _ := ms[0].get("us_added_per_call"); v != 1.6 {
		t.Errorf("median us_added_per_call %v, want 1.6", v)
	}
	if v, _ := ms[0].get("under_goal"); v != true {
		t.Errorf("median under_goal %v, want true (four of five runs were under the goal)", v)
	}
}
