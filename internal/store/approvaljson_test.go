package store

import (
	"encoding/json"
	"testing"

	"countersign/internal/tool"
)

// TestAnnotationsJSONIsWhatMarshalWrites: the batch path writes annotations by hand; for every
// combination of absent, false and true hints it is json.Marshal's text.
func TestAnnotationsJSONIsWhatMarshalWrites(t *testing.T) {
	yes, no := true, false
	states := []*bool{nil, &no, &yes}
	for i := range 81 {
		a := tool.Annotations{ReadOnlyHint: states[i%3], DestructiveHint: states[i/3%3],
			IdempotentHint: states[i/9%3], OpenWorldHint: states[i/27%3]}
		want, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendAnnotationsJSON(nil, a, false); string(got) != string(want) {
			t.Fatalf("%s, want %s", got, want)
		}
		quoted, err := json.Marshal(string(want))
		if err != nil {
			t.Fatal(err)
		}
		if got := `"` + string(appendAnnotationsJSON(nil, a, true)) + `"`; got != string(quoted) {
			t.Fatalf("quoted %s, want %s", got, quoted)
		}
	}
}
