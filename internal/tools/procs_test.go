package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Test helpers that look at processes through /proc (Linux), exported to this package's
// external tests (nested_test.go).

// CodemodeWorkers lists the pids of this test process's children that are codemode workers:
// those started from /proc/self/exe (their command name is "exe"), which is what the default
// CodemodeConfig.Command and the fake workers start and nothing else here does; zombies
// included, so an empty list means every worker was killed and reaped.
func CodemodeWorkers(tb testing.TB) []int {
	tb.Helper()
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fields := statFields(pid)
		if len(fields) < 2 || fields[1] != strconv.Itoa(self) || comm(pid) != "exe" {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// comm is a process's command name ("" when it is gone).
func comm(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// statFields are the fields of /proc/<pid>/stat after the command name: state, ppid, …; nil
// when the process is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// CPUTime is the CPU time (user and system) of this test process and its living codemode
// workers, at the kernel's clock tick (100 Hz here).
func CPUTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ticks int64
	for _, pid := range append(CodemodeWorkers(tb), os.Getpid()) {
		f := statFields(pid)
		if len(f) < 13 {
			continue // gone
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += utime + stime
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// AwaitSpinning waits until this process and its workers have used cpu more CPU time than
// when it was called: a script spinning in a native call, whichever process runs it. It fails
// the test after 20 s.
func AwaitSpinning(tb testing.TB, cpu time.Duration) {
	tb.Helper()
	base := CPUTime(tb)
	deadline := time.Now().Add(20 * time.Second)
	for CPUTime(tb)-base < cpu {
		if time.Now().After(deadline) {
			tb.Fatalf("the script did not use %s of CPU within 20s", cpu)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ResetPeakRSS sets this process's VmHWM to its current RSS (/proc/self/clear_refs, "5").
func ResetPeakRSS(tb testing.TB) {
	tb.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		tb.Fatalf("reset the peak RSS: %v", err)
	}
}

// StatusBytes is a field of /proc/self/status given in kB ("VmRSS", "VmHWM"), in bytes.
func StatusBytes(tb testing.TB, field string) int64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				tb.Fatalf("%s %q: %v", field, rest, err)
			}
			return kb << 10
		}
	}
	tb.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// WorkerLimits is the "Max cpu time" and "Max address space" lines of a process's
// /proc/<pid>/limits.
func WorkerLimits(tb testing.TB, pid int) (cpu, as string) {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "limits"))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "Max cpu time"):
			cpu = strings.Join(strings.Fields(line), " ")
		case strings.HasPrefix(line, "Max address space"):
			as = strings.Join(strings.Fields(line), " ")
		}
	}
	return cpu, as
}

// procsServerArg starts this package's test binary as a stand-in for a server running one
// run_command call (see procsServer).
const procsServerArg = "__procs-server"

// procsServer runs run_command as call c1 of session s1 of store args[0], with command args[1]
// in workspace args[2], as the server would, and returns when it ends (the tests kill it first).
func procsServer(args []string) int {
	for _, t := range Builtin(Config{StoreID: args[0]}) {
		if t.Name == "run_command" {
			raw, _ := json.Marshal(map[string]string{"command": args[1]})
			_, _ = t.Execute(context.Background(), raw, nil, fakeContext{workspace: args[2]})
			return 0
		}
	}
	return 1
}
