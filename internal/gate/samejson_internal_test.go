package gate

import "testing"

// TestSameJSONComparesByMemberAndExactNumber: the same tool_use_id asked again with another input
// is another call (DecideOutside); inputs are the same when their members are, in any order and
// spelling, and their numbers as written — 9007199254740993 and …992 are two inputs.
func TestSameJSONComparesByMemberAndExactNumber(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"command":"ls","n":1}`, `{ "n": 1, "command": "ls" }`, true},
		{`{"id":9007199254740993}`, `{"id":9007199254740992}`, false},
		{`{"a":1}`, `{"a":2}`, false},
		{`{"a":1}`, `{"a":1} {"b":2}`, false},
		{`{`, `{`, false},
	} {
		if got := sameJSON([]byte(c.a), []byte(c.b)); got != c.same {
			t.Errorf("sameJSON(%s, %s) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}
