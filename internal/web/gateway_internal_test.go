package web

import "testing"

// TestCompactJSONKeepsNumbersAsWritten: the gateway calls the upstream with the compacted
// arguments, so compacting sorts members and drops spaces but never changes a value — an
// integer past float64's 2^53 stays itself (it was rounded: 9007199254740993 became …992).
func TestCompactJSONKeepsNumbersAsWritten(t *testing.T) {
	for in, want := range map[string]string{
		`{"id": 9007199254740993, "a": 1}`: `{"a":1,"id":9007199254740993}`,
		`{"x": 1.50, "y": [1e3, -0]}`:      `{"x":1.50,"y":[1e3,-0]}`,
		`{"html": "<b>&</b>"}`:             `{"html":"<b>&</b>"}`,
		`{"a":1} {"b":2}`:                  `{"a":1} {"b":2}`, // not one value: as it came
	} {
		if got := string(compactJSON([]byte(in))); got != want {
			t.Errorf("compactJSON(%s) = %s, want %s", in, got, want)
		}
	}
}
