package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"countersign/internal/testkit"
)

// TestAKilledReplicasCommandNeverFinishesAfterTheTakeover (issue 33 acceptance 3, SPEC §16
// "Trust between replicas"): replica A is killed (SIGKILL) while it executes two approved
// commands, `sleep 3; touch marker` in the server's own shell and `sh -c 'sleep 3; touch
// marker2'` through a real shell. Replica B takes the sessions over and records both calls as
// "Interrupted by server restart"; neither marker ever appears. (The case is `sleep 20`:
// 3 s keeps the test short, and since B takes over only once A's 8 s lease has expired, a
// command that outlived A would have written its marker before B records the call; the test
// still waits past the sleep's end, counted from the kill, before it looks.)
func TestAKilledReplicasCommandNeverFinishesAfterTheTakeover(t *testing.T) {
	f := newReplicaFiles(t)
	scripts := map[string]string{
		"sleeper.json": commandScript(`"touch started1; sleep 3; touch marker"`),
		"sh.json":      commandScript(`"touch started2; sh -c 'sleep 3; touch marker2'"`),
	}
	for name, script := range scripts {
		if err := os.WriteFile(filepath.Join(f.scripts, name), []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, pid := range runningIn(f.workspace) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	a := startServing(t, f.args()...)
	b := startServing(t, f.args()...)
	defer func() {
		if t.Failed() {
			t.Logf("B's log:\n%s", b.stderr.String())
		}
	}()
	sleeper := startApproved(t, a, f.serverFiles, "faux:sleeper", "started1")
	shell := startApproved(t, a, f.serverFiles, "faux:sh", "started2")

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	killed := time.Now()
	for _, id := range []string{sleeper, shell} {
		testkit.Eventually(t, "B to end "+id+"'s call as interrupted", func() bool {
			tr := transcriptText(t, b, id)
			return strings.Contains(tr, "Interrupted by server restart") && strings.Contains(tr, `"state":"idle"`)
		})
	}
	took := time.Since(killed)
	t.Logf("B recorded the calls as interrupted %v after A was killed", took)
	// Past the commands' end as if they had lived on (3 s from the kill, and a second more).
	if wait := 4*time.Second - took; wait > 0 {
		time.Sleep(wait)
	}
	for _, marker := range []string{"marker", "marker2"} {
		if _, err := os.Stat(filepath.Join(f.workspace, marker)); err == nil {
			t.Errorf("%s appeared: a command of the killed replica ran on after B called it interrupted", marker)
		}
	}
	if left := runningIn(f.workspace); len(left) > 0 {
		t.Errorf("processes %v of A's commands still run after B recorded them as interrupted", left)
	}
	// B ran neither command again.
	var pending struct {
		Approvals []struct{ ID string }
	}
	b.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sleeper+"/approvals?status=pending", nil, &pending)
	if len(pending.Approvals) != 0 {
		t.Errorf("the interrupted session has pending approvals %v", pending.Approvals)
	}
}
