package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// TestSharedGaugesAreNamedSoAndLeftOutWhileTheStoreIsDown (issue 33): the database's counts are
// named _shared (one value on every replica: max(), not sum()); while the store does not answer
// they are absent, never -1, and store_up says 0; leases are this replica's own.
func TestSharedGaugesAreNamedSoAndLeftOutWhileTheStoreIsDown(t *testing.T) {
	var down atomic.Bool
	read := func(n int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) {
			if down.Load() {
				return 0, errors.New("connection refused")
			}
			return n, nil
		}
	}
	m := metrics.New(metrics.Sources{PendingApprovals: read(3), OutboxPending: read(2), LeasesHeld: read(1)})
	text := scrape(t, m)
	for _, want := range []string{"countersign_pending_approvals_shared 3", "countersign_webhook_outbox_pending_shared 2",
		"countersign_session_leases_held 1", "countersign_store_up 1"} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	down.Store(true)
	text = scrape(t, m)
	if !strings.Contains(text, "countersign_store_up 0\n") {
		t.Errorf("/metrics lacks store_up 0 while the store is down")
	}
	for _, gone := range []string{"countersign_pending_approvals_shared ", "countersign_webhook_outbox_pending_shared ", "countersign_session_leases_held ", " -1\n"} {
		if strings.Contains(text, gone) {
			t.Errorf("/metrics has %q while the store is down", gone)
		}
	}
	// Without the sources (a SQLite file has no leases), the series are absent and the store up.
	if text := scrape(t, metrics.New(metrics.Sources{})); strings.Contains(text, "countersign_session_leases_held ") || !strings.Contains(text, "countersign_store_up 1\n") {
		t.Errorf("without sources:\n%s", text)
	}
}
