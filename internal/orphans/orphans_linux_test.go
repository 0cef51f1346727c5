package orphans

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"countersign/internal/procenv"
)

// startMarked starts `sh -c script` in its own process group with env's marker for call (nil:
// no marker) and returns it; it is killed and reaped when the test ends.
func startMarked(t *testing.T, call *procenv.Call, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if call != nil {
		cmd.Env = procenv.WithCall(cmd.Env, *call)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd
}

// waitFor polls until file exists, failing after 10 s.
func waitFor(t *testing.T, file string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(file); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", file)
		}
	}
}

// running reports whether pid is a process that has not exited (not gone, not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// A crash leaves a call's processes running: its shell, a subshell in its group and a process
// that left the group with setsid. Kill ends all three (and waits until they are gone), and
// leaves alone a process of the same call id in another store, another session's and an
// unmarked one.
func TestKillEndsTheCallsProcessesAndNoOthers(t *testing.T) {
	dir := t.TempDir()
	call := procenv.Call{Store: "sqlite:" + filepath.Join(dir, "cs.db"), SessionID: "s1", ToolCallID: "c1"}
	nested := call
	nested.ToolCallID = "c1/2"
	own := startMarked(t, &call, "(sleep 60) & setsid sh -c 'sleep 60' & touch "+filepath.Join(dir, "own")+"; wait")
	inner := startMarked(t, &nested, "touch "+filepath.Join(dir, "inner")+"; sleep 60")
	otherStore := call
	otherStore.Store = "sqlite:/elsewhere/cs.db"
	otherSession := call
	otherSession.SessionID = "s2"
	others := []*exec.Cmd{
		startMarked(t, &otherStore, "sleep 60"),
		startMarked(t, &otherSession, "sleep 60"),
		startMarked(t, nil, "sleep 60"),
		startMarked(t, &procenv.Call{Store: call.Store, SessionID: "s1", ToolCallID: "c10"}, "sleep 60"),
	}
	waitFor(t, filepath.Join(dir, "own"))
	waitFor(t, filepath.Join(dir, "inner"))

	before, err := Find(call)
	if err != nil {
		t.Fatal(err)
	}
	// sh, its subshell, its sleep, the setsid sh, its sleep; the nested call's sh and sleep. A
	// subshell or an sh whose last command is its sleep may have exec'd that sleep (dash does):
	// at least four in all — the call's sh, one for each background job, and the nested call's.
	if len(before) < 4 || !slices.Contains(before, own.Process.Pid) || !slices.Contains(before, inner.Process.Pid) {
		t.Fatalf("Find = %v, want the call's shells %d and %d and what they started", before, own.Process.Pid, inner.Process.Pid)
	}
	killed, err := Kill(context.Background(), call)
	if err != nil {
		t.Fatal(err)
	}
	// The shells may start a process between Find and Kill (a subshell forks its sleep): Kill
	// ends at least what Find found, and the others below show it ends nothing else.
	for _, pid := range before {
		if !slices.Contains(killed, pid) {
			t.Errorf("Kill killed %v, missing %d of what Find found: %v", killed, pid, before)
		}
	}
	if after, err := Find(call); err != nil || len(after) != 0 {
		t.Errorf("after Kill, Find = %v, %v; want none", after, err)
	}
	for _, pid := range before {
		if running(pid) {
			t.Errorf("pid %d of the call still runs", pid)
		}
	}
	for _, c := range others {
		if !running(c.Process.Pid) {
			t.Errorf("pid %d (%v) was killed: not the call's", c.Process.Pid, c.Env)
		}
	}
}

// Without processes to kill, Kill returns at once.
func TestKillWithNothingToKillReturnsAtOnce(t *testing.T) {
	start := time.Now()
	killed, err := Kill(context.Background(), procenv.Call{Store: "sqlite:/nowhere", SessionID: "s", ToolCallID: "c1"})
	if err != nil || killed != nil {
		t.Errorf("Kill = %v, %v; want nothing", killed, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Kill took %v", d)
	}
}

// TestKillLeavesWhatALiveServerOwns (issue 33, SPEC §16 "Trust between replicas"): a call's
// process whose owner (procenv.OwnerVar) is another live process — a replica that was cut off
// from the database, whose session another replica takes over on the same machine — is left
// running; once that owner is gone (killed and reaped), Kill ends it. A process this one owns
// (a restart's own predecessor cannot be; a test's is) is killed as before.
func TestKillLeavesWhatALiveServerOwns(t *testing.T) {
	dir := t.TempDir()
	call := procenv.Call{Store: "sqlite:" + filepath.Join(dir, "cs.db"), SessionID: "s1", ToolCallID: "c1"}
	server := exec.Command("sleep", "60") // the live replica that started the call
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	owner := strconv.Itoa(server.Process.Pid) + " " + procenv.StartTime(server.Process.Pid)

	cmd := exec.Command("/bin/sh", "-c", "touch "+filepath.Join(dir, "owned")+"; sleep 60")
	cmd.Env = append(procenv.WithCall([]string{"PATH=" + os.Getenv("PATH")}, call), procenv.OwnerVar+"="+owner)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	waitFor(t, filepath.Join(dir, "owned"))

	if killed, err := Kill(context.Background(), call); err != nil || len(killed) != 0 {
		t.Fatalf("Kill while its owner lives = %v, %v; want nothing killed", killed, err)
	}
	if !running(cmd.Process.Pid) {
		t.Fatal("the live owner's process was killed")
	}
	if found, _ := Find(call); !slices.Contains(found, cmd.Process.Pid) {
		t.Errorf("Find = %v, want it to still report %d", found, cmd.Process.Pid)
	}

	// The owner dies (kill -9, reaped): its call's process is an orphan now.
	_ = server.Process.Kill()
	_ = server.Wait()
	killed, err := Kill(context.Background(), call)
	if err != nil || !slices.Contains(killed, cmd.Process.Pid) {
		t.Fatalf("Kill once the owner is gone = %v, %v; want %d killed", killed, err, cmd.Process.Pid)
	}
	if running(cmd.Process.Pid) {
		t.Error("the dead owner's process still runs")
	}

	// A process owned by this very process is this one's to kill.
	mine := exec.Command("sleep", "60")
	mine.Env = procenv.WithOwner(procenv.WithCall([]string{"PATH=" + os.Getenv("PATH")}, call))
	if err := mine.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mine.Process.Kill(); _ = mine.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if found, _ := Find(call); slices.Contains(found, mine.Process.Pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the own process was never found")
		}
	}
	if killed, err := Kill(context.Background(), call); err != nil || !slices.Contains(killed, mine.Process.Pid) {
		t.Fatalf("Kill of this process's own = %v, %v; want %d killed", killed, err, mine.Process.Pid)
	}
}
