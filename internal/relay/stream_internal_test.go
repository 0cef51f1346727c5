package relay

import (
	"math"
	"testing"

	"countersign/internal/agent"
)

// TestRebuildRefusesAPatchWhoseLengthsOverflow: a patch is only as good as its lengths; one
// whose block length makes the running offset overflow (a forged or corrupt notification) is
// refused, never sliced with (a panic would take the replica's listener down).
func TestRebuildRefusesAPatchWhoseLengthsOverflow(t *testing.T) {
	r := &Relay{streams: map[string]streamed{"m1": {text: "ab"}}}
	ev := agent.Event{Type: agent.MessageUpdate, MessageID: "m1", Delta: "c",
		Message: &agent.Message{Content: []agent.Block{{Type: "text"}, {Type: "text"}}}}
	p := patch{Lens: []int{1, math.MaxInt}, Text: 3}
	defer func() {
		if v := recover(); v != nil {
			t.Fatalf("rebuild panicked on an overflowing length: %v", v)
		}
	}()
	if r.rebuild(&ev, p) {
		t.Fatalf("rebuild took a patch whose lengths overflow: %+v", ev.Message)
	}
}
