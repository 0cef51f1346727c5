package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"countersign/internal/orphans"
	"countersign/internal/procenv"
)

// TestAKilledServersCommandsDieBeforeTheRestartSaysInterrupted (issue 28 acceptance 4, SPEC §8):
// the server is killed (SIGKILL) while two approved commands run: `sleep 20; touch marker`, and
// one whose background jobs outlive their shell, in its process group and in a session of their
// own (setsid). A restart on the same database records both calls as "Interrupted by server
// restart", and before it does (before it serves at all), nothing of either command runs any
// more: marker, marker2 and marker3 never appear.
func TestAKilledServersCommandsDieBeforeTheRestartSaysInterrupted(t *testing.T) {
	f := newServerFiles(t)
	scripts := map[string]string{
		"sleeper.json":  commandScript(`"touch started1; sleep 20; touch marker"`),
		"escapers.json": escapersScript,
	}
	for name, script := range scripts {
		if err := os.WriteFile(filepath.Join(f.scripts, name), []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever happens, nothing this test started outlives it.
	t.Cleanup(func() {
		for _, pid := range runningIn(f.workspace) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	first := startServing(t, f.args("127.0.0.1:0")...)
	sleeper := startApproved(t, first, f, "faux:sleeper", "started1")
	escapers := startApproved(t, first, f, "faux:escapers", "started2")

	// Every process of both commands carries its call's marker: the store (the database's real
	// path), the session and the call.
	real, err := filepath.EvalSymlinks(f.db)
	if err != nil {
		t.Fatal(err)
	}
	calls := []procenv.Call{
		{Store: "sqlite:" + real, SessionID: sleeper, ToolCallID: "call-1"},
		{Store: "sqlite:" + real, SessionID: escapers, ToolCallID: "call-1"},
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var marked []int
		for _, c := range calls {
			pids, err := orphans.Find(c)
			if err != nil {
				t.Fatal(err)
			}
			marked = append(marked, pids...)
		}
		slices.Sort(marked)
		running := runningIn(f.workspace)
		if len(running) >= 6 && slices.Equal(marked, running) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes in the workspace %v, marked with their call %v: want the same, at least two shells, a subshell, a setsid sh and their sleeps", running, marked)
		}
	}

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	restarted := time.Now()
	second := startServing(t, f.args("127.0.0.1:0")...)
	// Recovery runs before the server serves: when it answers, nothing of the calls runs.
	if left := runningIn(f.workspace); len(left) > 0 {
		t.Errorf("processes %v of the killed server's commands still run after the restart recorded them as interrupted", left)
	}
	for _, c := range calls {
		if pids, err := orphans.Find(c); err != nil || len(pids) > 0 {
			t.Errorf("processes marked with %+v after the restart: %v, %v", c, pids, err)
		}
	}
	t.Logf("restarted and recovered in %v", time.Since(restarted))
	for _, id := range []string{sleeper, escapers} {
		b := second.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil)
		if n := bytes.Count(b, []byte("Interrupted by server restart")); n != 1 {
			t.Errorf("session %s has %d interruptions, want 1: %s", id, n, b)
		}
	}
	if !bytes.Contains([]byte(second.stderr.String()), []byte("killed what an interrupted call left running")) {
		t.Errorf("the restarted server's log does not say it killed anything:\n%s", second.stderr.String())
	}
	for _, name := range []string{"marker", "marker2", "marker3"} {
		if _, err := os.Stat(filepath.Join(f.workspace, name)); err == nil {
			t.Errorf("%s was written: a command of the killed server ran on", name)
		}
	}
}
