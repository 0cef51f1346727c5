//go:build linux

package main

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"countersign/internal/testkit"
)

// nobody is the unprivileged user these tests run the server and its neighbours as.
const nobody = 65534

// asNobody makes cmd run as uid and gid 65534 with no supplementary groups.
func asNobody(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	return cmd
}

// readAsNobody reads path with cat running as uid 65534: what any process of that user (a tool
// command, an MCP stdio server) reads there.
func readAsNobody(t *testing.T, path string) (out, stderr string, err error) {
	t.Helper()
	cmd := asNobody(exec.Command("cat", path))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// nobodyFolder is a fresh folder uid 65534 can use, with a copy of the server binary it can run
// (serverBinary builds into a 0700 folder), a workspace, a data folder and a scripts folder
// holding script under the name "script.json". It is removed when the test ends.
func nobodyFolder(t *testing.T, script string) (bin string, f serverFiles) {
	t.Helper()
	dir, err := os.MkdirTemp("", "countersign-nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(serverBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "countersign")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	f = serverFiles{db: filepath.Join(dir, "data", "cs.db"), workspace: filepath.Join(dir, "ws"), scripts: filepath.Join(dir, "scripts")}
	for _, d := range []string{filepath.Dir(f.db), f.workspace, f.scripts} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(f.scripts, "script.json"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return bin, f
}

// readsEnviron is a faux script that does what a tool command or an MCP server could: read its
// parent's (the server's) environment, then runs a codemode script, whose worker the server
// starts from its own binary.
const readsEnviron = `{"steps":[
 {"content":[{"type":"toolCall","id":"call-1","name":"run_command","arguments":{"command":"cat /proc/$$/environ; echo \"read exit $?\"; tr '\\0' '\\n' < /proc/self/environ"}}],
  "stopReason":"toolUse"},
 {"content":[{"type":"toolCall","id":"call-2","name":"codemode","arguments":{"code":"return (6 * 7) + '-from-the-worker'"}}],
  "stopReason":"toolUse"},
 {"content":[{"type":"text","text":"Done."}],"stopReason":"stop"}
]}`

// The server's environment (owner token, model providers' keys) cannot be read through
// /proc/<pid>/environ by other processes of its user: not by cat, not by a tool command the
// server starts. Codemode's worker still starts. The control: the same read of a process of the
// same user that is dumpable (sleep) works, so the test would see a leak.
func TestServerEnvironmentIsNotReadableByItsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the server and the reader as uid 65534 (CI runs as root)")
	}
	const openAIKey, anthropicKey = "sk-openai-secret-key-for-the-dumpable-test", "sk-ant-secret-key-for-the-dumpable-test"
	secrets := []string{testToken, openAIKey, anthropicKey}

	// Control: a dumpable process of uid 65534 is readable by uid 65534.
	sleep := asNobody(exec.Command("sleep", "600"))
	sleep.Env = []string{"CONTROL_SECRET=" + openAIKey}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	if out, stderr, err := readAsNobody(t, "/proc/"+strconv.Itoa(sleep.Process.Pid)+"/environ"); err != nil || !strings.Contains(out, openAIKey) {
		t.Fatalf("control: uid 65534 could not read the environment of its own sleep (err %v, stderr %q): the test cannot tell", err, stderr)
	}

	bin, f := nobodyFolder(t, readsEnviron)
	cmd := asNobody(exec.Command(bin, "-addr", "127.0.0.1:0", "-db", f.db, "-workspace", f.workspace,
		"-scripts", f.scripts, "-faux-delay", "0s"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + f.workspace, "COUNTERSIGN_TOKEN=" + testToken,
		"OPENAI_API_KEY=" + openAIKey, "ANTHROPIC_API_KEY=" + anthropicKey}
	p, out := startCmd(t, cmd)
	p = awaitLogin(t, p, out)
	pid := strconv.Itoa(p.cmd.Process.Pid)

	got, stderr, err := readAsNobody(t, "/proc/"+pid+"/environ")
	if err == nil || !strings.Contains(stderr, "Permission denied") {
		t.Errorf("uid 65534 reading the server's environ: err %v, stderr %q; want permission denied", err, stderr)
	}
	for _, s := range secrets {
		if strings.Contains(got, s) {
			t.Errorf("uid 65534 read %q from the server's environ", s)
		}
	}

	// The same through the server: a tool command reads its parent's environ; codemode runs.
	var sess struct{ ID string }
	p.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "environ", "model": "faux:script"}, &sess)
	var list struct {
		Tools []struct {
			Name   string
			Active bool
		}
	}
	p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID+"/tools", nil, &list)
	active := []string{"codemode"}
	for _, tl := range list.Tools {
		if tl.Active {
			active = append(active, tl.Name)
		}
	}
	p.mustAPI(t, http.StatusOK, "PUT", "/api/sessions/"+sess.ID+"/tools", map[string][]string{"active": active}, nil)
	p.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	var pending struct {
		Approvals []struct{ ID string }
	}
	testkit.Eventually(t, "the run_command approval", func() bool {
		p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID+"/approvals?status=pending", nil, &pending)
		return len(pending.Approvals) == 1
	})
	p.mustAPI(t, http.StatusOK, "POST", "/api/approvals/"+pending.Approvals[0].ID+"/decision", map[string]string{"decision": "approve"}, nil)
	var transcript []byte
	testkit.Eventually(t, "the run to end", func() bool {
		transcript = p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID, nil, nil)
		return bytes.Contains(transcript, []byte("Done.")) && bytes.Contains(transcript, []byte(`"state": "idle"`))
	})
	for _, s := range secrets {
		if bytes.Contains(transcript, []byte(s)) {
			t.Errorf("the tool command read %q from the server's environ", s)
		}
	}
	// run_command's shell runs inside the server ($$ is the server's pid): a program it starts
	// cannot read the server's environ, and a redirection from /proc/self is refused.
	for _, want := range []string{"environ: Permission denied", "read exit 1", "Blocked: open /proc/self/environ", "42-from-the-worker"} {
		if !bytes.Contains(transcript, []byte(want)) {
			t.Errorf("the transcript lacks %q:\n%s", want, transcript)
		}
	}
}
