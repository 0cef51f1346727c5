package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/store/sqlite"
	"countersign/internal/testkit"
)

// These tests start the real server binary, as `make run` does, to see what two processes do to
// one database (issue 15 item 4).

// testToken is an owner token of the length the server requires.
const testToken = "a-test-owner-token-of-forty-characters-x"

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// serverBinary builds the server once per test run, into a folder removed by TestMain.
func serverBinary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "countersign-bin")
		if err != nil {
			binaryErr = err
			return
		}
		binDir = dir
		binaryPath = filepath.Join(dir, "countersign")
		out, err := exec.Command("go", "build", "-o", binaryPath, ".").CombinedOutput()
		if err != nil {
			binaryErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// proc is a server process started from the binary.
type proc struct {
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:PORT
	stderr *syncBuffer
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// syncBuffer is a bytes.Buffer safe for the process's writer and the test's reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startProc starts the binary with args and no environment but PATH and HOME. It does not wait
// for anything; the process is killed when the test ends if it is still running.
func startProc(t *testing.T, args ...string) (*proc, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(serverBinary(t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	return startCmd(t, cmd)
}

// startCmd starts cmd, a server command with its environment and attributes set, as startProc
// does.
func startCmd(t *testing.T, cmd *exec.Cmd) (*proc, *bufio.Reader) {
	t.Helper()
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
			t.Errorf("server pid %d did not stop within 15s of SIGTERM", cmd.Process.Pid)
		}
	})
	return p, bufio.NewReader(out)
}

// startServing starts the binary and waits for its login line.
func startServing(t *testing.T, args ...string) *proc {
	t.Helper()
	p, out := startProc(t, args...)
	return awaitLogin(t, p, out)
}

// awaitLogin waits for a started server's login line on out and notes its address.
func awaitLogin(t *testing.T, p *proc, out *bufio.Reader) *proc {
	t.Helper()
	line, err := out.ReadString('\n')
	go io.Copy(io.Discard, out)
	if err != nil {
		t.Fatalf("reading the login line: %v; stderr:\n%s", err, p.stderr.String())
	}
	m := regexp.MustCompile(`^Countersign listening on (http://127\.0\.0\.1:\d+)/login\?token=\S+\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("login line %q", line)
	}
	p.base = m[1]
	return p
}

// waitExit waits for a process that must end on its own and returns its exit code.
func (p *proc) waitExit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the process did not exit within 30s; stderr:\n%s", p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// api sends a JSON API request as the owner and returns the status and body.
func (p *proc) api(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

// mustAPI is api that requires status want and decodes the body into v (when v is not nil).
func (p *proc) mustAPI(t *testing.T, want int, method, path string, body, v any) []byte {
	t.Helper()
	st, b := p.api(t, method, path, body)
	if st != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, st, b, want)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return b
}

// blockingScript is a faux script whose one tool call is a run_command (so it asks for approval)
// that says it started by creating the file "started", then waits for the file "release".
const blockingScript = `{"steps":[
 {"content":[{"type":"text","text":"Running it."},
   {"type":"toolCall","id":"call-1","name":"run_command","arguments":{"command":"touch started; while [ ! -e release ]; do sleep 0.05; done; touch finished; echo ran-after-release"}}],
  "stopReason":"toolUse"},
 {"content":[{"type":"text","text":"All done: {{lastResult.stdout}}"}],"stopReason":"stop"}
]}`

// serverFiles is a folder with a workspace and a scripts folder holding blockingScript.
type serverFiles struct{ db, workspace, scripts string }

func newServerFiles(t *testing.T) serverFiles {
	t.Helper()
	dir := t.TempDir()
	f := serverFiles{db: filepath.Join(dir, "data", "cs.db"), workspace: filepath.Join(dir, "ws"), scripts: filepath.Join(dir, "scripts")}
	for _, d := range []string{f.workspace, f.scripts} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(f.scripts, "blocking.json"), []byte(blockingScript), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f serverFiles) args(addr string) []string {
	return []string{"-addr", addr, "-db", f.db, "-workspace", f.workspace, "-scripts", f.scripts, "-token", testToken, "-faux-delay", "0s"}
}

// startExecutingCall creates a session on p, sends a message, approves the run_command it asks
// for and waits until the command runs (and waits for "release"). It returns the session id.
func startExecutingCall(t *testing.T, p *proc, f serverFiles) string {
	t.Helper()
	// A test that fails leaves the command waiting: release it at the end and let it finish
	// before the workspace goes, so no shell loop outlives the test. (A killed server's command
	// died with it, or with the recovery of the next server: nothing runs there then.)
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(f.workspace, "release"), nil, 0o644)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(f.workspace, "finished")); err == nil || len(runningIn(f.workspace)) == 0 {
				return
			}
		}
	})
	var sess struct{ ID string }
	p.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "first", "model": "faux:blocking"}, &sess)
	p.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	var pending struct {
		Approvals []struct{ ID string }
	}
	testkit.Eventually(t, "the run_command approval", func() bool {
		p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID+"/approvals?status=pending", nil, &pending)
		return len(pending.Approvals) == 1
	})
	p.mustAPI(t, http.StatusOK, "POST", "/api/approvals/"+pending.Approvals[0].ID+"/decision", map[string]string{"decision": "approve"}, nil)
	testkit.Eventually(t, "the command to start", func() bool {
		_, err := os.Stat(filepath.Join(f.workspace, "started"))
		return err == nil
	})
	return sess.ID
}

// commandScript is a faux script whose one tool call is run_command with command (a JSON
// string, quoted), which the gate asks a person about.
func commandScript(command string) string {
	return `{"steps":[
 {"content":[{"type":"toolCall","id":"call-1","name":"run_command","arguments":{"command":` + command + `}}],"stopReason":"toolUse"},
 {"content":[{"type":"text","text":"Done."}],"stopReason":"stop"}]}`
}

// escapersScript's command leaves processes that outlive its shell: a subshell in its process
// group and a shell in a session of its own (setsid), each to write a file after 20 s
// (marker2, marker3); it creates "started2" once they are on their way.
var escapersScript = commandScript(`"(sleep 20; touch marker2) & setsid sh -c 'sleep 20; touch marker3' & touch started2; wait"`)

// startApproved creates a session with model on p, sends a message, approves the run_command it
// asks for and waits until the command has created the file started in the workspace. It
// returns the session's id.
func startApproved(t *testing.T, p *proc, f serverFiles, model, started string) string {
	t.Helper()
	var sess struct{ ID string }
	p.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": model, "model": model}, &sess)
	p.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	var pending struct {
		Approvals []struct{ ID string }
	}
	testkit.Eventually(t, "the run_command approval", func() bool {
		p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID+"/approvals?status=pending", nil, &pending)
		return len(pending.Approvals) == 1
	})
	p.mustAPI(t, http.StatusOK, "POST", "/api/approvals/"+pending.Approvals[0].ID+"/decision", map[string]string{"decision": "approve"}, nil)
	testkit.Eventually(t, "the command to start", func() bool {
		_, err := os.Stat(filepath.Join(f.workspace, started))
		return err == nil
	})
	return sess.ID
}

// runningIn returns the pids of the processes whose working folder is dir, from /proc (Linux;
// none elsewhere): what a tool call started in a workspace and still runs there. A zombie has
// no working folder: it has ended.
func runningIn(dir string) []int {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == real {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A second start on a database that a running server uses exits non-zero with a clear message,
// before it touches the database: the first server's transcript and approvals are unchanged,
// and the first server carries on (its executing call finishes and the run ends).
func TestSecondServerOnOneDatabaseExitsAndChangesNothing(t *testing.T) {
	f := newServerFiles(t)
	first := startServing(t, f.args("127.0.0.1:0")...)
	id := startExecutingCall(t, first, f)

	transcript := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil)
	approvals := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id+"/approvals", nil, nil)

	// As a second `make run` in the same folder: same database, same address.
	second, _ := startProc(t, f.args(strings.TrimPrefix(first.base, "http://"))...)
	if code := second.waitExit(t); code == 0 {
		t.Errorf("the second start exited 0; stderr:\n%s", second.stderr.String())
	}
	msg := second.stderr.String()
	real, err := filepath.EvalSymlinks(f.db)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("another Countersign server is using %s (lock %s.lock held by pid %d)", f.db, real, first.cmd.Process.Pid)
	if !strings.Contains(msg, want) {
		t.Errorf("the second start said %q, want it to contain %q", msg, want)
	}

	if got := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil); !bytes.Equal(got, transcript) {
		t.Errorf("the first server's session changed:\nbefore %s\nafter  %s", transcript, got)
	}
	if got := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id+"/approvals", nil, nil); !bytes.Equal(got, approvals) {
		t.Errorf("the first server's approvals changed:\nbefore %s\nafter  %s", approvals, got)
	}

	// The first server still works: the call finishes and the run ends with its result.
	if err := os.WriteFile(filepath.Join(f.workspace, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the run to end with the command's output", func() bool {
		b := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil)
		return bytes.Contains(b, []byte("All done: ran-after-release")) && bytes.Contains(b, []byte(`"state": "idle"`))
	})
	if b := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil); bytes.Contains(b, []byte("Interrupted by server restart")) {
		t.Errorf("the transcript has an interruption: %s", b)
	}
}

// The lock holds whatever name the database is given (issue 15 item 4): a second start through
// a symlink to the database, or through a hard link to it, exits non-zero with the clear message
// having changed nothing: the first server's transcript and approvals are unchanged (no
// "Interrupted by server restart" in its live run), and the links' folder holds only the link.
func TestSecondServerThroughALinkExitsAndChangesNothing(t *testing.T) {
	f := newServerFiles(t)
	first := startServing(t, f.args("127.0.0.1:0")...)
	id := startExecutingCall(t, first, f)
	transcript := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil)
	approvals := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id+"/approvals", nil, nil)
	real, err := filepath.EvalSymlinks(f.db)
	if err != nil {
		t.Fatal(err)
	}

	for _, link := range []struct {
		name string
		make func(oldname, newname string) error
		want string // in the second start's message, after "another Countersign server is using LINK"
	}{
		{"a symlink", os.Symlink, fmt.Sprintf(" (lock %s.lock held by pid %d)", real, first.cmd.Process.Pid)},
		{"a hard link", os.Link, " (its database file is locked by another process"},
	} {
		t.Run(link.name, func(t *testing.T) {
			other := t.TempDir()
			name := filepath.Join(other, "x.db")
			if err := link.make(f.db, name); err != nil {
				t.Fatal(err)
			}
			// A free port, so only the lock can stop it; the last -db wins.
			second, _ := startProc(t, append(f.args("127.0.0.1:0"), "-db", name)...)
			if code := second.waitExit(t); code == 0 {
				t.Errorf("the second start exited 0; stderr:\n%s", second.stderr.String())
			}
			if msg, want := second.stderr.String(), "another Countersign server is using "+name+link.want; !strings.Contains(msg, want) {
				t.Errorf("the second start said %q, want it to contain %q", msg, want)
			}
			entries, err := os.ReadDir(other)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("the links' folder holds %q, want only x.db", names)
			}
			if got := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil); !bytes.Equal(got, transcript) {
				t.Errorf("the first server's session changed:\nbefore %s\nafter  %s", transcript, got)
			}
			if got := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id+"/approvals", nil, nil); !bytes.Equal(got, approvals) {
				t.Errorf("the first server's approvals changed:\nbefore %s\nafter  %s", approvals, got)
			}
		})
	}

	// The first server carries on: the call finishes with its own result, and only that one.
	if err := os.WriteFile(filepath.Join(f.workspace, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the run to end with the command's output", func() bool {
		b := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil)
		return bytes.Contains(b, []byte("All done: ran-after-release")) && bytes.Contains(b, []byte(`"state": "idle"`))
	})
	if b := first.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil); bytes.Contains(b, []byte("Interrupted by server restart")) {
		t.Errorf("the transcript has an interruption: %s", b)
	}
}

// A start whose port is taken fails before recovery: the database of a killed server keeps its
// executing call unanswered until a server that can serve starts on it and recovers it.
func TestBusyPortFailsBeforeRecovery(t *testing.T) {
	f := newServerFiles(t)
	first := startServing(t, f.args("127.0.0.1:0")...)
	id := startExecutingCall(t, first, f)
	// A crash: the call was executing; the lock goes with the process.
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	second, _ := startProc(t, f.args(busy.Addr().String())...)
	if code := second.waitExit(t); code == 0 {
		t.Fatalf("a start on a busy port exited 0; stderr:\n%s", second.stderr.String())
	}
	if msg := second.stderr.String(); !strings.Contains(msg, "address already in use") {
		t.Errorf("the start on a busy port said %q, want \"address already in use\"", msg)
	}

	// Recovery has not run: the call is still unanswered in the database…
	db, err := sqlite.Open(context.Background(), f.db)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := db.Entries(context.Background(), id)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Message.Role == agent.ToolResult {
			t.Errorf("after the busy-port start the call has a result: %+v", e.Message.Result)
		}
	}
	// …and the next server that can serve recovers it.
	third := startServing(t, f.args("127.0.0.1:0")...)
	b := third.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil)
	if n := bytes.Count(b, []byte("Interrupted by server restart")); n != 1 {
		t.Errorf("after a start that serves, the transcript has %d interruptions, want 1: %s", n, b)
	}
}

// TestFileToolsCannotReachTheServersOwnFiles: with the database inside the workspace (as `make
// run` keeps it), read_file and write_file are refused on the database, its companions and the
// share key and the policy file before any prompt (SPEC §14: the agent can never write its own rules), and the
// database is unchanged for it.
func TestFileToolsCannotReachTheServersOwnFiles(t *testing.T) {
	f := newServerFiles(t)
	f.db = filepath.Join(f.workspace, "cs.db") // as `make run` does: the database in the workspace
	script := `{"steps":[
	 {"content":[{"type":"toolCall","id":"r","name":"read_file","arguments":{"path":"cs.db"}},
	   {"type":"toolCall","id":"w","name":"write_file","arguments":{"path":"cs.db.share-key","content":"mine"}},
	   {"type":"toolCall","id":"x","name":"write_file","arguments":{"path":"./cs.db-wal","content":"x"}},
	   {"type":"toolCall","id":"p","name":"write_file","arguments":{"path":"policy.json","content":"{}"}}],
	  "stopReason":"toolUse"},
	 {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`
	if err := os.WriteFile(filepath.Join(f.scripts, "reach.json"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(f.workspace, "policy.json") // the policy file in the workspace too
	if err := os.WriteFile(policy, []byte(`{"permissions": {"allow": ["read_file"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServing(t, append(f.args("127.0.0.1:0"), "-policy", policy)...)
	key, err := os.ReadFile(f.db + ".share-key")
	if err != nil {
		t.Fatal(err)
	}
	var sess struct{ ID string }
	p.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "reach", "model": "faux:reach"}, &sess)
	p.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	var body []byte
	testkit.Eventually(t, "the run to end", func() bool {
		body = p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID, nil, nil)
		return bytes.Contains(body, []byte(`"state": "idle"`)) && bytes.Contains(body, []byte(`"done"`))
	})
	if n := bytes.Count(body, []byte("one of the server's own files")); n < 4 {
		t.Errorf("%d refusals naming the server's own files in the transcript, want 4:\n%s", n, body)
	}
	var pending struct{ Approvals []json.RawMessage }
	p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID+"/approvals?status=pending", nil, &pending)
	if len(pending.Approvals) != 0 {
		t.Errorf("a refused call still asked: %s", pending.Approvals)
	}
	if got, _ := os.ReadFile(f.db + ".share-key"); !bytes.Equal(got, key) {
		t.Errorf("the share key changed")
	}
	if got, _ := os.ReadFile(policy); string(got) != `{"permissions": {"allow": ["read_file"]}}` {
		t.Errorf("the policy file changed: %s", got)
	}
}
