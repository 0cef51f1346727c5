package tools

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"countersign/internal/orphans"
	"countersign/internal/procenv"
)

// awaitFile polls until file exists, failing after 10 s.
func awaitFile(t *testing.T, file string) {
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

// Every process a call starts, and what they start, carries the call's marker, whatever the
// tools' configuration says; the server's store, the session and the call identify it.
func TestEveryProcessOfACallIsMarkedWithIt(t *testing.T) {
	tools := mustTools(t, Config{StoreID: "sqlite:/data/cs.db", Env: []string{"COUNTERSIGN_CALL=forged"}})
	res, err := call(t, tools, "run_command", t.TempDir(), map[string]any{
		"command": `printenv COUNTERSIGN_CALL; sh -c 'printenv COUNTERSIGN_CALL'`})
	out := mustSucceed[RunCommandOutput](t, tools, "run_command", res, err)
	want := "sqlite:%2Fdata%2Fcs.db s1 c1\n"
	if out.Stdout != want+want {
		t.Errorf("the command and its child saw COUNTERSIGN_CALL = %q, want %q twice", out.Stdout, want)
	}
}

// A command dies with the server (the parent-death signal): run_command's shell is the server's
// own interpreter, and every program it starts (here sleep, and the process group's leader) is
// the server's child with the parent-death signal, so a kill -9 of the server leaves nothing to
// go on with `sleep 60; touch finished`, and nothing for orphans.Kill to find. (What a program
// starts in turn is not the server's child: cmd/web's interrupted tests cover those, which
// orphans.Kill ends by their marker.)
func TestACommandsProgramsDieWithTheServer(t *testing.T) {
	ws := t.TempDir()
	c := procenv.Call{Store: "sqlite:" + filepath.Join(ws, "cs.db"), SessionID: "s1", ToolCallID: "c1"}
	server := exec.Command("/proc/self/exe", procsServerArg, c.Store, "touch started; sleep 60; touch finished", ws)
	server.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = server.Process.Kill()
		_ = server.Wait()
		_, _ = orphans.Kill(context.Background(), c)
	})
	awaitFile(t, filepath.Join(ws, "started"))
	// The call's living processes: `touch started` may still be found as it exits, and be gone
	// (reaped) a moment later, so only processes whose stat is readable and not a zombie count.
	var pids []int
	for deadline := time.Now().Add(5 * time.Second); len(pids) < 2; time.Sleep(5 * time.Millisecond) {
		found, err := orphans.Find(c)
		if err != nil {
			t.Fatal(err)
		}
		pids = pids[:0]
		for _, pid := range found {
			if f := statFields(pid); len(f) >= 2 && f[0] != "Z" {
				pids = append(pids, pid)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call's processes are %v, want the group's leader and sleep", pids)
		}
	}
	for _, pid := range pids {
		f := statFields(pid)
		if f == nil {
			continue // ended since (touch): nothing left of it to outlive the server
		}
		if len(f) < 2 || f[1] != strconv.Itoa(server.Process.Pid) {
			t.Errorf("process %d (%v) is not the server's child", pid, f)
		}
	}

	if err := server.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = server.Wait()
	for _, pid := range pids {
		for deadline := time.Now().Add(5 * time.Second); running(pid); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the command's process %d still runs 5 s after the server was killed", pid)
			}
		}
	}
	killed, err := orphans.Kill(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(killed) != 0 {
		t.Errorf("orphans.Kill killed %v, want nothing left to kill", killed)
	}
	if _, err := os.Stat(filepath.Join(ws, "finished")); err == nil {
		t.Error("the command went on after the server was killed")
	}
}

// running reports whether pid is a process that has not exited (not gone, not a zombie).
func running(pid int) bool {
	f := statFields(pid)
	return len(f) > 0 && f[0] != "Z"
}

// A codemode worker lives as long as its call, whatever happens to the thread of the goroutine
// that asked for it: the parent-death signal follows the thread that started the process, and a
// goroutine that exits locked to its thread ends the thread (a library may do that).
func TestCodemodeWorkerOutlivesTheThreadThatAskedForIt(t *testing.T) {
	type started struct {
		w   *codemodeWorker
		tid int
		err error
	}
	ch := make(chan started)
	var s started
	for s.w == nil {
		go func() {
			runtime.LockOSThread()
			if syscall.Gettid() == os.Getpid() {
				// The main thread is never ended (the runtime parks it instead): try again.
				runtime.UnlockOSThread()
				ch <- started{}
				return
			}
			// Never unlocked: the thread ends with this goroutine.
			w, err := startWorker([]string{"/proc/self/exe", fakeWorkerArg, "silent"}, MaxCodemodeMessage, []string{})
			ch <- started{w, syscall.Gettid(), err}
		}()
		if s = <-ch; s.err != nil {
			t.Fatal(s.err)
		}
	}
	defer s.w.stop()
	task := "/proc/self/task/" + strconv.Itoa(s.tid)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d did not end", s.tid)
		}
	}
	// The silent worker exits 0 when its stdin closes; killed, it would have ended by SIGKILL.
	s.w.stdin.Close()
	select {
	case <-s.w.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not exit when its stdin closed")
	}
	if st := s.w.cmd.ProcessState; !st.Exited() || st.ExitCode() != 0 {
		t.Errorf("the worker ended with %v, want exit status 0: it was killed when the thread that asked for it ended", st)
	}
}
