// Package mcp makes the tools of MCP servers Countersign tools (SPEC §13). A Manager connects to
// every server of a Config with the official Go SDK (stdio servers as child processes, streamable
// HTTP servers by URL), lists their tools and offers each as a *tool.Tool named
// "<server>__<tool>", whose Execute forwards tools/call to the server. Terms and rules follow MCP
// revision 2025-11-25: §tools (definitions, annotations, results), §utilities "progress" and
// "cancellation", §lifecycle.
//
// Wiring (cmd/web): start the Manager, register its tools, and register again whenever it
// reports a change:
//
//	m := mcp.NewManager(cfg, log)
//	refresh := func() {
//		added, err := m.RegisterTools(reg)
//		if len(added) > 0 {
//			log.Info("MCP tools registered", "tools", added)
//		}
//		if err != nil {
//			log.Warn("MCP tools refused by the registry", "err", err)
//		}
//		// …and push the Tools panel (m.Servers()) to open pages.
//	}
//	m.OnChange(refresh) // before Start, so no change is missed
//	m.Start(ctx)
//	refresh()
//	defer m.Close()
//
// A *tool.Tool is never mutated and a tool name keeps its pointer for the Manager's life, so the
// registry can hold it: a tool that appears later (tools/list_changed, a reconnect) is a new
// value to register; a tool the server drops, or whose server is down, stays registered and its
// calls fail with a clear error.
package mcp

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"countersign/internal/tool"
)

// State is a server's connection state, as the Tools panel shows it.
type State string

// The states of a server.
const (
	Starting State = "starting" // the first connection attempt is under way
	Up       State = "up"       // connected and its tools listed
	Down     State = "down"     // failed to start, crashed, timed out or lost; reconnecting with backoff
)

// ServerStatus is one server as the Tools panel shows it.
type ServerStatus struct {
	Name      string `json:"name"`
	Transport string `json:"transport"` // "stdio" or "http"
	Trusted   bool   `json:"trusted"`
	State     State  `json:"state"`
	// Error is why the server is down (or the last failure while starting), "" when up.
	Error string `json:"error,omitempty"`
	// Tools are the Countersign names ("<server>__<tool>") of the tools the server offers, as
	// last listed, sorted. They stay listed while the server is down.
	Tools []string `json:"tools"`
	// Warnings are things the user should know about the tool list: tools that could not be
	// offered (a name that breaks the MCP rule once prefixed) and tools whose definition changed
	// after registration (the first definition stays in force until Countersign restarts).
	Warnings []string `json:"warnings,omitempty"`
}

// Timings a Manager uses. Tests shorten them.
const (
	defaultConnectTimeout = 30 * time.Second // to start, initialize and list tools
	defaultStartWait      = 10 * time.Second // how long Start waits for first attempts
	defaultBackoffMin     = time.Second      // first reconnect delay, doubled after each failure
	defaultBackoffMax     = 30 * time.Second // longest reconnect delay
	defaultKeepAlive      = 30 * time.Second // ping interval; a missed ping marks the server down
	defaultTerminate      = 2 * time.Second  // stdio: wait after closing stdin before SIGTERM
)

// Manager runs the MCP servers of a Config and offers their tools. Its methods are safe for
// concurrent use.
type Manager struct {
	log     *slog.Logger
	servers []*server
	passEnv []string     // Config.PassEnv
	tokens  atomic.Int64 // progress tokens, unique per Manager

	connectTimeout, startWait    time.Duration
	backoffMin, backoffMax       time.Duration
	keepAlive, terminateDuration time.Duration

	mu       sync.Mutex
	onChange []func()
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	notifyMu sync.Mutex // OnChange callbacks run one at a time

	regMu sync.Mutex          // RegisterTools runs one at a time
	tried map[*tool.Tool]bool // tools RegisterTools has registered or seen refused

	refused map[string]string // guarded by mu: why the registry refused a tool, by tool name
}

// NewManager returns a Manager for cfg; nothing runs until Start. A nil logger means
// slog.Default().
func NewManager(cfg Config, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.Default()
	}
	m := &Manager{
		log:            logger,
		passEnv:        cfg.PassEnv,
		connectTimeout: defaultConnectTimeout, startWait: defaultStartWait,
		backoffMin: defaultBackoffMin, backoffMax: defaultBackoffMax,
		keepAlive: defaultKeepAlive, terminateDuration: defaultTerminate,
	}
	for _, sc := range cfg.Servers {
		m.servers = append(m.servers, newServer(m, sc))
	}
	return m
}

// Start connects to every server in the background, each retrying with backoff (1s, 2s, 4s…
// at most 30s) until ctx ends or Close. It returns once every server is up or has failed its
// first attempt, or after 10 seconds, whichever comes first; servers still starting then
// announce themselves through OnChange. Calls after the first do nothing.
func (m *Manager) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	m.mu.Lock()
	if m.cancel != nil {
		m.mu.Unlock()
		cancel()
		return
	}
	m.cancel = cancel
	m.mu.Unlock()
	var first sync.WaitGroup
	for _, s := range m.servers {
		first.Add(1)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			s.run(ctx, sync.OnceFunc(first.Done))
		}()
	}
	done := make(chan struct{})
	go func() { first.Wait(); close(done) }()
	timer := time.NewTimer(m.startWait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
}

// Close disconnects every server (stdio servers get their stdin closed, then SIGTERM, then
// SIGKILL) and waits for the background work to end. Calls in flight fail. Do not call it from an
// OnChange callback.
func (m *Manager) Close() {
	m.mu.Lock()
	cancel := m.cancel
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	m.wg.Wait()
}

// OnChange registers f to be called after a server's state, error or tool list changes (a
// connection made or lost, a tools/list_changed handled). Callbacks run one at a time, in
// registration order, on a Manager goroutine or on the goroutine of the call that found the
// server gone; they should be quick (refresh the registry, publish an event) and must not call
// Close.
func (m *Manager) OnChange(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onChange = append(m.onChange, f)
}

func (m *Manager) changed() {
	m.mu.Lock()
	fs := slices.Clone(m.onChange)
	m.mu.Unlock()
	m.notifyMu.Lock()
	defer m.notifyMu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Tools returns the tools every server currently offers (its last tools/list, MCP 2025-11-25
// §tools; kept while the server is down), sorted by name. A tool's pointer is the same in every call; see the package comment
// for registering them.
func (m *Manager) Tools() []*tool.Tool {
	var out []*tool.Tool
	for _, s := range m.servers {
		out = append(out, s.currentTools()...)
	}
	slices.SortFunc(out, func(a, b *tool.Tool) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// RegisterTools registers in reg every tool of Tools() that reg does not hold yet and returns
// their names. A tool the registry refuses (say, an inputSchema without root "type": "object",
// which MCP 2025-11-25 §tools requires) is reported once, in err, and not tried again. Safe to
// call from OnChange and elsewhere at the same time.
func (m *Manager) RegisterTools(reg *tool.Registry) (added []string, err error) {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	if m.tried == nil {
		m.tried = map[*tool.Tool]bool{}
	}
	var errs []error
	for _, t := range m.Tools() {
		if m.tried[t] {
			continue
		}
		m.tried[t] = true
		if _, ok := reg.Lookup(t.Name); ok {
			continue
		}
		if err := reg.Register(t); err != nil {
			errs = append(errs, err)
			m.mu.Lock()
			if m.refused == nil {
				m.refused = map[string]string{}
			}
			m.refused[t.Name] = err.Error()
			m.mu.Unlock()
			continue
		}
		added = append(added, t.Name)
	}
	return added, errors.Join(errs...)
}

// Servers returns the status of every server, in the order of the config file. A tool that
// RegisterTools saw refused (say, a schema with an external $ref) stays in Tools, as the server
// offers it, with a warning giving the registry's reason.
func (m *Manager) Servers() []ServerStatus {
	out := make([]ServerStatus, 0, len(m.servers))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.servers {
		st := s.status()
		for _, name := range st.Tools {
			if why, ok := m.refused[name]; ok {
				st.Warnings = append(st.Warnings, "refused by Countersign, not offered to the model: "+why)
			}
		}
		out = append(out, st)
	}
	return out
}
