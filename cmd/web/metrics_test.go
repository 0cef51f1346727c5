package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"countersign/internal/testkit"
)

// TestMetricsAreScrapedAndParsed (SPEC §16, issue 21 acceptance 6): after a run whose
// run_command the owner approved, GET /metrics (owner token) parses with the Prometheus text
// parser and carries §16's series with the values the run implies; without the token it is
// 401; -metrics-addr serves the same without login.
func TestMetricsAreScrapedAndParsed(t *testing.T) {
	scripts := t.TempDir()
	one := `{"steps":[
  {"content":[{"type":"toolCall","id":"c1","name":"run_command","arguments":{"command":"true"}}],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"Done."}],"stopReason":"stop"}]}`
	if err := os.WriteFile(filepath.Join(scripts, "one.json"), []byte(one), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := l.Addr().String()
	l.Close()
	login := startServer(t, []string{"-token", testToken, "-scripts", scripts, "-faux-delay", "0s", "-metrics-addr", metricsAddr}, nil)
	base := login[:strings.Index(login, "/login")]
	api := func(method, path, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if out != nil {
			json.NewDecoder(res.Body).Decode(out)
		}
		return res.StatusCode
	}
	var sess struct{ ID string }
	api("POST", "/api/sessions", `{"title": "m", "model": "faux:one"}`, &sess)
	api("POST", "/api/sessions/"+sess.ID+"/messages", `{"text": "go"}`, nil)
	var pending struct{ Approvals []struct{ ID string } }
	testkit.Eventually(t, "the run_command approval", func() bool {
		api("GET", "/api/sessions/"+sess.ID+"/approvals?status=pending", "", &pending)
		return len(pending.Approvals) == 1
	})
	scrape := func(url string, auth bool) (int, map[string]*dto.MetricFamily) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer "+testToken)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != 200 {
			io.Copy(io.Discard, res.Body)
			return res.StatusCode, nil
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(res.Body)
		if err != nil {
			t.Fatalf("the scrape does not parse: %v", err)
		}
		return 200, fams
	}
	value := func(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
		f := fams[name]
		if f == nil {
			return 0, false
		}
	metric:
		for _, m := range f.Metric {
			for _, lp := range m.Label {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue metric
				}
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
		return 0, false
	}
	_, fams := scrape(base+"/metrics", true)
	if v, ok := value(fams, "countersign_pending_approvals_shared", nil); !ok || v != 1 {
		t.Errorf("pending_approvals = %v (%v), want 1 while the prompt waits", v, ok)
	}
	if v, ok := value(fams, "countersign_runs_active", nil); !ok || v != 1 {
		t.Errorf("runs_active = %v (%v), want 1 (parked)", v, ok)
	}
	api("POST", "/api/approvals/"+pending.Approvals[0].ID+"/decision", `{"decision": "approve"}`, nil)
	testkit.Eventually(t, "the run to end", func() bool {
		var s struct{ State string }
		api("GET", "/api/sessions/"+sess.ID, "", &s)
		return s.State == "idle"
	})
	if st, _ := scrape(base+"/metrics", false); st != http.StatusUnauthorized {
		t.Errorf("/metrics without the token = %d, want 401", st)
	}
	for _, url := range []string{base + "/metrics", "http://" + metricsAddr + "/metrics"} {
		_, fams := scrape(url, url == base+"/metrics")
		for _, tt := range []struct {
			name   string
			labels map[string]string
			want   func(float64) bool
			says   string
		}{
			{"countersign_pending_approvals_shared", nil, func(v float64) bool { return v == 0 }, "0 after the decision"},
			{"countersign_tool_calls_total", map[string]string{"tool": "run_command", "outcome": "ok"}, func(v float64) bool { return v == 1 }, "1 ok run_command"},
			{"countersign_decision_wait_seconds", nil, func(v float64) bool { return v == 1 }, "one decision observed"},
			{"countersign_approval_round_trip_seconds", nil, func(v float64) bool { return v == 1 }, "one approved call started"},
			{"countersign_runs_started_total", nil, func(v float64) bool { return v == 1 }, "one run"},
			{"countersign_runs_active", nil, func(v float64) bool { return v == 0 }, "0 after the run"},
			{"countersign_live_sockets", nil, func(v float64) bool { return v == 0 }, "0 (no page open)"},
			{"countersign_store_up", nil, func(v float64) bool { return v == 1 }, "1 (the store answers)"},
			{"countersign_webhook_outbox_pending_shared", nil, func(v float64) bool { return v == 0 }, "0 (no receivers)"},
			{"countersign_store_commit_seconds", nil, func(v float64) bool { return v > 0 }, "commits observed"},
			{"go_goroutines", nil, func(v float64) bool { return v > 0 }, "the Go collector"},
		} {
			if v, ok := value(fams, tt.name, tt.labels); !ok || !tt.want(v) {
				t.Errorf("%s: %s%v = %v (present %v), want %s", url, tt.name, tt.labels, v, ok, tt.says)
			}
		}
	}
}
