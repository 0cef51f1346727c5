package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"countersign/internal/metrics"
	"countersign/internal/relay"
)

// scrape is m's /metrics text.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// TestAnInventedToolNameIsCountedAsOther (issue 33): calls of names no tool is registered under —
// a model's inventions, however many — are one series, tool="other"; registered tools keep
// their names.
func TestAnInventedToolNameIsCountedAsOther(t *testing.T) {
	m := metrics.New(metrics.Sources{})
	m.SetTools(func(name string) bool { return name == "read_file" })
	m.ToolCall("read_file", "ok")
	for _, invented := range []string{"rm_rf_everything", "x\nfake_series 1", strings.Repeat("n", 5000)} {
		m.ToolCall(invented, "blocked")
	}
	text := scrape(t, m)
	for _, want := range []string{`countersign_tool_calls_total{outcome="ok",tool="read_file"} 1`, `countersign_tool_calls_total{outcome="blocked",tool="other"} 3`} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, "rm_rf") || strings.Count(text, "countersign_tool_calls_total{") != 2 {
		t.Errorf("an invented name made a series:\n%s", text)
	}
}

// TestRejectedNotificationsAreCountedByReason (issue 33): the relay's rejections are one counter
// with the reason as its label.
func TestRejectedNotificationsAreCountedByReason(t *testing.T) {
	m := metrics.New(metrics.Sources{})
	m.RelayRejected(relay.RejectUnsigned)
	m.RelayRejected(relay.RejectUnsigned)
	m.RelayRejected(relay.RejectReplay)
	text := scrape(t, m)
	for _, want := range []string{`countersign_relay_rejected_total{reason="unsigned"} 2`, `countersign_relay_rejected_total{reason="replay"} 1`} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
