package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"countersign/internal/testkit"
)

// sessionsOptions configure the sessions case.
type sessionsOptions struct {
	sessions, turns, parallel int
	// bin is the server binary; empty with inprocess.
	bin string
	// inprocess runs the server in this process (testkit's Runner and web.New) instead of the
	// binary, for -cpuprofile and -memprofile; its memory is then this process's.
	inprocess bool
	// memprofile, when set, is where an in-process run writes a heap profile of what the server
	// holds after the sessions (after a collection, before the environment is closed).
	memprofile string
}

// goalSessionsRSSMB is issue 19's goal 3: the resident memory of one server after 100 sessions
// of 100 turns each, at most 80 MB.
const goalSessionsRSSMB = 80

// sessionsCase (issue 19, goal 3): one server, o.sessions sessions of o.turns model turns each
// (one read-only tool call per turn, then a text turn), o.parallel sessions running at a time,
// each followed to its agent_end on an events WebSocket; then the server's memory from
// /proc/<pid>/status: VmRSS (rss_mb, the goal's figure) with its anonymous (RssAnon: heap,
// stacks) and file-backed (RssFile: mostly the binary) parts, VmHWM (max_rss_mb), the same again
// after two idle seconds (the Go scavenger returns free heap to the system in the background),
// the database's size on disk (the main file and its WAL), the server's CPU time (utime + stime)
// and the whole time taken.
//
// By default the server is the binary, built as make build builds it and started as the rss
// case starts it (-faux-delay 0), with the script in a -scripts folder; its tool is read_file on
// a one-line file (the binary has no echo tool). With o.inprocess it is testkit's Runner (the
// echo tool) behind web.New in this process: the memory figures are then the load program's, not
// the goal's (no under_goal), and -cpuprofile / -memprofile see the server's code.
func sessionsCase(ctx context.Context, o sessionsOptions) (line, error) {
	dir, err := os.MkdirTemp("", "countersign-bench-sessions-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	name := fmt.Sprintf("sessions-%d", o.turns)
	var (
		a       *api
		pid     int
		cpu     func() (time.Duration, error)
		dataDir string
		stop    func()
		heap    func() error // an in-process run's heap profile
	)
	if o.inprocess {
		e, err := testkit.NewBench(ctx, dir, testkit.BenchOptions{})
		if err != nil {
			return nil, err
		}
		defer e.Close()
		e.Models.Add(name, testkit.DirectScript(o.turns))
		if a, stop, err = serve(e); err != nil {
			return nil, err
		}
		pid, dataDir = os.Getpid(), dir
		cpu = func() (time.Duration, error) { return testkit.CPU(), nil }
		if o.memprofile != "" {
			heap = func() error { return writeHeapProfile(o.memprofile) }
		}
	} else {
		ws, scripts := filepath.Join(dir, "workspace"), filepath.Join(dir, "scripts")
		if err := writeReadFileScript(ws, scripts, name, o.turns); err != nil {
			return nil, err
		}
		dataDir = filepath.Join(dir, "data")
		p, err := startServer(ctx, o.bin, "-addr", "127.0.0.1:0", "-db", filepath.Join(dataDir, "cs.db"),
			"-workspace", ws, "-scripts", scripts, "-faux-delay", "0")
		if err != nil {
			return nil, err
		}
		a, pid, stop = p.api, p.cmd.Process.Pid, p.stop
		cpu = func() (time.Duration, error) { return processCPU(pid) }
	}
	defer stop()

	// The first session is created before the start figures, so the server is serving.
	ids := make([]string, o.sessions)
	if ids[0], err = a.createSession(ctx, "sessions-0", "faux:"+name); err != nil {
		return nil, err
	}
	started, err := memory(pid)
	if err != nil {
		return nil, err
	}
	var msStart runtime.MemStats // in process: live heap at start, after a collection
	if o.inprocess {
		runtime.GC()
		runtime.ReadMemStats(&msStart)
	}
	c0, err := cpu()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	events, took, err := runSessions(ctx, a, ids, name, o.parallel)
	if err != nil {
		return nil, err
	}
	first, last := meanMs(took[:min(10, len(took))]), meanMs(took[max(0, len(took)-10):])
	total := time.Since(t0)
	c1, err := cpu()
	if err != nil {
		return nil, err
	}
	ended, err := memory(pid)
	if err != nil {
		return nil, err
	}
	db, wal, err := dbSize(dataDir)
	if err != nil {
		return nil, err
	}
	var ms0, msLive runtime.MemStats // in process: as rss_mb was read, and after a collection
	if o.inprocess {
		runtime.ReadMemStats(&ms0)
		runtime.GC()
		runtime.ReadMemStats(&msLive)
	}
	if heap != nil {
		if err := heap(); err != nil {
			return nil, err
		}
	}
	// Idle: the runtime's scavenger hands free heap back over a few seconds.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	idle, err := memory(pid)
	if err != nil {
		return nil, err
	}
	// Checked after the figures, so these reads do not count in them.
	entries := 0
	for _, id := range ids {
		var sess struct {
			State   string
			Entries []json.RawMessage
		}
		if err := a.do(ctx, "GET", "/api/sessions/"+id, nil, &sess, 200); err != nil {
			return nil, err
		}
		if len(sess.Entries) != 2*o.turns+2 || sess.State != "idle" {
			return nil, fmt.Errorf("sessions: session %s has %d entries (want %d), state %q", id, len(sess.Entries), 2*o.turns+2, sess.State)
		}
		entries += len(sess.Entries)
	}
	mb := func(b int64) float64 { return round1(float64(b) / (1 << 20)) }
	mode := "binary"
	if o.inprocess {
		mode = "inprocess"
	}
	turns := o.sessions * o.turns
	l := line{}.add("peer", "countersign").add("case", "sessions").add("mode", mode).add("n", o.sessions).
		add("turns_per_session", o.turns).add("parallel", o.parallel).
		add("rss_after_start_mb", mb(started.rss)).add("rss_anon_after_start_mb", mb(started.anon)).
		add("rss_mb", mb(ended.rss)).
		add("rss_anon_mb", mb(ended.anon)).add("rss_file_mb", mb(ended.file)).add("max_rss_mb", mb(ended.hwm)).
		add("rss_idle_mb", mb(idle.rss)).add("rss_anon_idle_mb", mb(idle.anon)).
		add("db_mb", mb(db)).add("wal_mb", mb(wal)).
		add("total_ms", ms(total)).add("cpu_ms", ms(c1-c0)).
		add("us_per_turn", round2(float64(total.Nanoseconds())/1e3/float64(turns))).
		add("session_ms_first10", first).add("session_ms_last10", last).
		add("events", events).add("entries", entries)
	if o.inprocess {
		// The live heap (after a collection) at start and after the sessions: what the sessions
		// left behind. Then where this process's anonymous memory is, as the Go runtime counts
		// it, when rss_mb was read: the heap's spans in use (live objects and garbage not yet
		// collected), its free spans not yet returned to the system (resident too), goroutine
		// stacks, and all the runtime holds from the system and has not returned (an upper
		// bound of its resident part). SQLite's own memory (modernc's C heap: page caches) is
		// outside the Go heap: roughly rss_anon_mb − go_held_mb.
		l = l.add("heap_live_after_start_mb", mb(int64(msStart.HeapAlloc))).add("heap_live_mb", mb(int64(msLive.HeapAlloc))).
			add("heap_inuse_mb", mb(int64(ms0.HeapInuse))).
			add("heap_free_mb", mb(int64(ms0.HeapIdle-ms0.HeapReleased))).
			add("stack_mb", mb(int64(ms0.StackInuse))).add("go_held_mb", mb(int64(ms0.Sys-ms0.HeapReleased)))
	} else {
		l = l.add("goal_rss_mb", goalSessionsRSSMB).add("under_goal", mb(ended.rss) <= goalSessionsRSSMB)
	}
	return l, nil
}

// runSessions runs one session per element of ids (ids[0] already created; the others are
// created here, with model "faux:"+script), parallel at a time: each is followed to its
// agent_end on its own events WebSocket, opened before its message is sent. It returns the
// events all sockets received and each run's time (from sending its message to its agent_end).
func runSessions(ctx context.Context, a *api, ids []string, script string, parallel int) (int, []time.Duration, error) {
	took := make([]time.Duration, len(ids))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range ids {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		mu     sync.Mutex
		events int
		first  error
		wg     sync.WaitGroup
	)
	one := func(i int) error {
		var err error
		if ids[i] == "" {
			if ids[i], err = a.createSession(ctx, fmt.Sprintf("sessions-%d", i), "faux:"+script); err != nil {
				return err
			}
		}
		done, closeEvents, err := a.readToEnd(ctx, ids[i])
		if err != nil {
			return err
		}
		defer closeEvents()
		t0 := time.Now()
		if err := a.send(ctx, ids[i], "go"); err != nil {
			return err
		}
		r := <-done
		took[i] = time.Since(t0)
		mu.Lock()
		events += r.n
		mu.Unlock()
		return r.err
	}
	for range max(parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := one(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("session %d: %w", i, err)
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	return events, took, first
}

// writeReadFileScript writes a one-line workspace file, ws/echo.txt, and a faux script
// scripts/<name>.json of k model turns, each one read_file call on it (read-only: no prompt), then
// a text turn.
func writeReadFileScript(ws, scripts, name string, k int) error {
	for _, d := range []string{ws, scripts} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "echo.txt"), []byte("hello\n"), 0o644); err != nil {
		return err
	}
	var steps []string
	for i := range k {
		steps = append(steps, fmt.Sprintf(`{"content":[{"type":"toolCall","id":"c%d","name":"read_file","arguments":{"path":"echo.txt"}}],"stopReason":"toolUse"}`, i))
	}
	steps = append(steps, `{"content":[{"type":"text","text":"done"}],"stopReason":"stop"}`)
	script := `{"steps":[` + strings.Join(steps, ",\n") + `]}`
	return os.WriteFile(filepath.Join(scripts, name+".json"), []byte(script), 0o644)
}

// dbSize returns the sizes in bytes of the SQLite database files in dir: the main files (*.db)
// and their write-ahead logs (*.db-wal). The shared-memory index (*-shm) is not counted.
func dbSize(dir string) (db, wal int64, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			return 0, 0, err
		}
		switch {
		case strings.HasSuffix(e.Name(), ".db"):
			db += info.Size()
		case strings.HasSuffix(e.Name(), ".db-wal"):
			wal += info.Size()
		}
	}
	return db, wal, nil
}

// processCPU is a process's CPU time so far (user + system, every thread) from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(string(b), clockTicks)
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux
// architecture Go supports (sysconf(_SC_CLK_TCK)).
const clockTicks = 100

// parseProcStatCPU reads utime + stime (fields 14 and 15, in clock ticks of hz per second) from
// the text of /proc/<pid>/stat. The command name (field 2, in parentheses) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseProcStatCPU(stat string, hz int64) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no command name in %.80q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] { // fields 14 and 15
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %v", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / time.Duration(hz), nil
}

// writeHeapProfile writes a heap profile (in use and allocated) to path after a collection, so
// in-use figures are what is reachable.
func writeHeapProfile(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// meanMs is the mean of ds in milliseconds, to a tenth.
func meanMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return ms(sum / time.Duration(len(ds)))
}
