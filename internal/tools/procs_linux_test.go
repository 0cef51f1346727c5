package tools

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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

// A command's shell dies with the server (the parent-death signal): a kill -9 of the server
// leaves no shell to go on with `sleep 60; touch finished`. What the shell started is not
// reached by the signal: it is in the call's process group and carries its marker, and
// orphans.Kill (what the restarted server does before it records the call as interrupted)
// ends it.
func TestACommandsShellDiesWithTheServer(t *testing.T) {
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
	pids, err := orphans.Find(c)
	if err != nil {
		t.Fatal(err)
	}
	shell := 0
	for _, pid := range pids {
		if f := statFields(pid); len(f) > 1 && f[1] == strconv.Itoa(server.Process.Pid) {
			shell = pid
		}
	}
	if shell == 0 || len(pids) != 2 {
		t.Fatalf("the call's processes are %v, want the server's shell and its sleep", pids)
	}

	if err := server.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = server.Wait()
	for deadline := time.Now().Add(5 * time.Second); running(shell); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's shell (pid %d) still runs 5 s after the server was killed", shell)
		}
	}
	killed, err := orphans.Kill(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.DeleteFunc(slices.Clone(pids), func(pid int) bool { return pid == shell }); !slices.Equal(killed, want) {
		t.Errorf("orphans.Kill killed %v, want the shell's sleep %v", killed, want)
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
