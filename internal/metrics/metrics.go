// Package metrics exposes Countersign's operational series in the Prometheus text format
// (SPEC §16: GET /metrics with the owner token, or -metrics-addr on a separate listener), through
// github.com/prometheus/client_golang. It implements agent.Observer for what the agent counts on
// the calls' path and reads the rest (pending approvals, runs, live sockets) when scraped.
//
// Series (all prefixed countersign_):
//
// A series marked "shared" is the database's one value, the same on every replica that shares
// it: aggregate it with max(), never sum(). The others are each replica's own: sum() them.
//
//	pending_approvals_shared          gauge      approvals waiting for a person, every session
//	                                             (shared; absent while the store does not answer)
//	webhook_outbox_pending_shared     gauge      webhook deliveries not yet delivered nor given
//	                                             up (shared; absent likewise)
//	session_leases_held               gauge      sessions whose run this replica drives, by the
//	                                             leases it holds (PostgreSQL replicas)
//	store_up                          gauge      1 when this replica's last scrape read the
//	                                             store, 0 when it did not answer (/readyz says why)
//	decision_wait_seconds             histogram  a prompt's creation to a person's decision
//	approval_round_trip_seconds       histogram  a person's approval to the call's start
//	tool_calls_total{tool,outcome}    counter    calls ended: ok, error, denied, blocked,
//	                                             timed_out, cancelled, interrupted; tool is a
//	                                             registered tool's name, else "other" (SetTools)
//	runs_started_total                counter    runs started (messages sent, runs resumed)
//	runs_active                       gauge      sessions with a run (streaming, executing, parked)
//	live_sockets                      gauge      open live WebSockets (pages and the JSON API)
//	store_commit_seconds              histogram  one commit of a group of writes
//	store_commit_writes               histogram  writes per commit
//	replica_event_lag_seconds         histogram  an event's publication on one replica to its
//	                                             notification's arrival on another (PostgreSQL)
//	replica_event_rereads_total       counter    reads of stored events that a lost
//	                                             notification or a LISTEN reconnect cost
//	relay_rejected_total{reason}      counter    notifications on the replicas' channel dropped
//	                                             unheard: unsigned, bad_mac, stale, replay,
//	                                             malformed, not_stored (issue 33)
//
// Plus the Go runtime's and the process's collectors (go_*, process_*).
package metrics

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Sources are what the scrape reads: each returns the current value (nil: the series is 0, or
// for the store's series, absent).
type Sources struct {
	// PendingApprovals and OutboxPending are the database's counts (shared by the replicas);
	// LeasesHeld this replica's leases. An error leaves the series out of the scrape (a stale
	// value is better read as missing than as -1) and sets store_up to 0.
	PendingApprovals func(context.Context) (int, error)
	OutboxPending    func(context.Context) (int, error)
	LeasesHeld       func(context.Context) (int, error)
	ActiveRuns       func() int
	LiveSockets      func() int
}

// storeCollector reads the store's series at each scrape (Sources): what answers is reported,
// what does not is left out, and store_up says whether every read answered.
type storeCollector struct {
	src                     Sources
	pending, outbox, leases *prometheus.Desc
	up                      *prometheus.Desc
}

func newStoreCollector(src Sources) *storeCollector {
	return &storeCollector{src: src,
		pending: prometheus.NewDesc("countersign_pending_approvals_shared",
			"Approvals waiting for a person, in every session: the database's count, the same on every replica (aggregate with max, not sum). Absent while the store does not answer.", nil, nil),
		outbox: prometheus.NewDesc("countersign_webhook_outbox_pending_shared",
			"Webhook deliveries neither delivered nor given up: the database's count, the same on every replica (aggregate with max, not sum). Absent while the store does not answer.", nil, nil),
		leases: prometheus.NewDesc("countersign_session_leases_held",
			"Sessions whose run this replica drives, by the leases it holds in the database (PostgreSQL replicas; sum over replicas).", nil, nil),
		up: prometheus.NewDesc("countersign_store_up",
			"1 when this replica's scrape read the store, 0 when it did not answer (GET /readyz says why).", nil, nil),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.outbox
	ch <- c.leases
	ch <- c.up
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	up := 1.0
	for _, s := range []struct {
		desc *prometheus.Desc
		read func(context.Context) (int, error)
	}{{c.pending, c.src.PendingApprovals}, {c.outbox, c.src.OutboxPending}, {c.leases, c.src.LeasesHeld}} {
		if s.read == nil || up == 0 { // after one failure, the store is not asked again
			continue
		}
		n, err := s.read(ctx)
		if err != nil {
			up = 0
			continue
		}
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, float64(n))
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}

// Metrics holds the series; its zero value is not usable: use New.
type Metrics struct {
	reg           *prometheus.Registry
	decisionWait  prometheus.Histogram
	roundTrip     prometheus.Histogram
	toolCalls     *prometheus.CounterVec
	runsStarted   prometheus.Counter
	commitSeconds prometheus.Histogram
	commitWrites  prometheus.Histogram
	replicaLag    prometheus.Histogram
	rereads       prometheus.Counter
	rejected      *prometheus.CounterVec
	activeRuns    atomic.Pointer[func() int]
	knownTool     atomic.Pointer[func(name string) bool]
}

// New registers every series of the package doc on a registry of its own (not the global one:
// two servers in one test process do not collide).
func New(src Sources) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.decisionWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "countersign_decision_wait_seconds", Help: "Time from a prompt's creation to a person's decision.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600},
	})
	m.roundTrip = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "countersign_approval_round_trip_seconds", Help: "Time from a person's approval to the call's start.",
		Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .5, 1},
	})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "countersign_tool_calls_total", Help: "Tool calls ended, model-issued and nested, by tool and outcome.",
	}, []string{"tool", "outcome"})
	m.runsStarted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "countersign_runs_started_total", Help: "Runs started: messages sent and parked runs resumed.",
	})
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "countersign_store_commit_seconds", Help: "Duration of one store commit (a group of writes).",
		Buckets: []float64{.00005, .0001, .0002, .0005, .001, .002, .005, .01, .02, .05, .1, .5},
	})
	m.commitWrites = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "countersign_store_commit_writes", Help: "Writes per store commit.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	})
	m.replicaLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "countersign_replica_event_lag_seconds",
		Help:    "Time from an event's publication on one replica to its notification's arrival on another (PostgreSQL replicas; clocks' skew included).",
		Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 5},
	})
	m.rereads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "countersign_replica_event_rereads_total",
		Help: "Reads of stored events that a lost notification, a large event or a LISTEN reconnect cost (PostgreSQL replicas).",
	})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "countersign_relay_rejected_total",
		Help: "Notifications on the replicas' channel dropped unheard, by reason: unsigned, bad_mac, stale, replay, malformed, not_stored (PostgreSQL replicas).",
	}, []string{"reason"})
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	m.reg.MustRegister(m.decisionWait, m.roundTrip, m.toolCalls, m.runsStarted, m.commitSeconds, m.commitWrites,
		m.replicaLag, m.rereads, m.rejected, newStoreCollector(src),
		gauge("countersign_runs_active", "Sessions with a run: streaming, executing, or parked on an approval.", func() float64 {
			if f := m.activeRuns.Load(); f != nil {
				return float64((*f)())
			}
			if src.ActiveRuns == nil {
				return 0
			}
			return float64(src.ActiveRuns())
		}),
		gauge("countersign_live_sockets", "Open live WebSockets: pages and the JSON API's events.", func() float64 {
			if src.LiveSockets == nil {
				return 0
			}
			return float64(src.LiveSockets())
		}),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// ReplicaLag records one cross-replica notification's lag (relay.Relay.OnLag).
func (m *Metrics) ReplicaLag(d time.Duration) { m.replicaLag.Observe(d.Seconds()) }

// Reread counts one read of stored events a replica needed (relay.Relay.OnReread).
func (m *Metrics) Reread(int) { m.rereads.Inc() }

// RelayRejected counts one notification the relay dropped unheard, by reason (relay.Relay.OnReject:
// one of relay's Reject* constants, a bounded set).
func (m *Metrics) RelayRejected(reason string) { m.rejected.WithLabelValues(reason).Inc() }

// SetActiveRuns sets the source of runs_active once the runner exists (it takes the Metrics as
// its Observer, so it is made after them). Call it before serving.
func (m *Metrics) SetActiveRuns(f func() int) { m.activeRuns.Store(&f) }

// Handler serves the registry in the Prometheus text (or OpenMetrics) format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// RunStarted implements agent.Observer.
func (m *Metrics) RunStarted() { m.runsStarted.Inc() }

// OtherTool is the tool label of a call whose name is not a registered tool's (a name a model
// invented): the label's values stay as many as the tools (issue 33).
const OtherTool = "other"

// SetTools sets what tells a registered tool's name (tool.Registry.Lookup's answer) once the
// registry exists; a call of any other name is counted as OtherTool. Until it is set, every name
// is counted as it is.
func (m *Metrics) SetTools(known func(name string) bool) { m.knownTool.Store(&known) }

// ToolCall implements agent.Observer: a call of tool ended with outcome; tool is counted as
// OtherTool unless it is registered (SetTools).
func (m *Metrics) ToolCall(tool, outcome string) {
	if known := m.knownTool.Load(); known != nil && !(*known)(tool) {
		tool = OtherTool
	}
	m.toolCalls.WithLabelValues(tool, outcome).Inc()
}

// Decided implements agent.Observer.
func (m *Metrics) Decided(wait, start time.Duration) {
	m.decisionWait.Observe(wait.Seconds())
	if start > 0 {
		m.roundTrip.Observe(start.Seconds())
	}
}

// Commit is a store's OnCommit (sqlite.DB.OnCommit, pg.DB.OnCommit): one commit of writes writes that took d.
func (m *Metrics) Commit(d time.Duration, writes int) {
	m.commitSeconds.Observe(d.Seconds())
	m.commitWrites.Observe(float64(writes))
}
