//go:build unix

package mcp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"countersign/internal/testkit"
)

func TestConnectTimeout(t *testing.T) {
	cfg := Config{Servers: []ServerConfig{{Name: "hung", Command: "sleep", Args: []string{"60"}}}}
	m, _ := newTestManager(t, cfg, func(m *Manager) {
		m.connectTimeout, m.terminateDuration, m.backoffMin = 300*time.Millisecond, 200*time.Millisecond, time.Minute
	})
	st := status(m, "hung")
	if st.State != Down || !strings.Contains(st.Error, "timed out after 300ms") {
		t.Errorf("hung = %+v, want down, timed out", st)
	}
}

// A server that stops answering (SIGSTOP) misses its keepalive pings: it is marked down, its
// process is ended, and a new one is started.
func TestKeepAlive(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	cfg := Config{Servers: []ServerConfig{{Name: "sleepy", Command: stdioServerBin,
		Env: map[string]string{"STDIOSERVER_PID_FILE": pidFile}}}}
	m, changes := newTestManager(t, cfg, func(m *Manager) {
		m.keepAlive, m.terminateDuration = 200*time.Millisecond, 200*time.Millisecond
	})
	echo := findTool(t, m, "sleepy__echo")
	pid := readPID(t, pidFile)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "sleepy to be marked down", func() bool { return changes.sawState("sleepy", Down) })
	changes.mu.Lock()
	var why string
	for _, st := range changes.seen {
		if st.Name == "sleepy" && st.State == Down && why == "" {
			why = st.Error
		}
	}
	changes.mu.Unlock()
	if !strings.HasPrefix(why, "did not answer a ping within 100ms") {
		t.Errorf("down because %q, want a missed ping", why)
	}
	testkit.Eventually(t, "sleepy to be up again", func() bool { return status(m, "sleepy").State == Up })
	if readPID(t, pidFile) == pid {
		t.Error("sleepy was not restarted")
	}
	if res, err := call(context.Background(), echo, `{"text":"awake"}`, nil); err != nil || res.TextOf() != "echo: awake" {
		t.Errorf("echo = %+v, %v", res, err)
	}
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Signal(syscall.SIGKILL) // in case it survived
	}
}
