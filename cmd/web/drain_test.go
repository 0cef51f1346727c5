package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"countersign/internal/testkit"
)

// TestSIGTERMLetsAnExecutingCommandFinishAndStoresItsResult (issue 33: a graceful drain): SIGTERM
// during an executing command does not kill it: /readyz answers 503, a new run is refused, the
// command finishes once released, and after the exit its result is stored, not "Run stopped by
// server shutdown" nor "Interrupted by server restart".
func TestSIGTERMLetsAnExecutingCommandFinishAndStoresItsResult(t *testing.T) {
	f := newServerFiles(t)
	p := startServing(t, append(f.args("127.0.0.1:0"), "-drain-timeout", "1m")...)
	id := startExecutingCall(t, p, f)
	var other struct{ ID string }
	p.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "second", "model": "faux:blocking"}, &other)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "/readyz to answer 503 while draining", func() bool {
		res, err := http.Get(p.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode == http.StatusServiceUnavailable
	})
	if st, b := p.api(t, "POST", "/api/sessions/"+other.ID+"/messages", map[string]string{"text": "go"}); st != http.StatusConflict || !strings.Contains(string(b), "shutting down") {
		t.Errorf("a new run while draining = %d %s, want 409 saying the server is shutting down", st, b)
	}
	select {
	case <-p.exited:
		t.Fatalf("the server exited with the command still executing; stderr:\n%s", p.stderr.String())
	default:
	}
	if err := os.WriteFile(filepath.Join(f.workspace, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := p.waitExit(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(f.workspace, "finished")); err != nil {
		t.Errorf("the command did not finish: %v", err)
	}

	p = startServing(t, f.args("127.0.0.1:0")...)
	var sess struct {
		Entries []struct {
			Message struct {
				Role         string
				ToolCallID   string
				ErrorMessage string
				Result       *struct {
					IsError bool
					Content []struct{ Text string }
				}
			}
		}
	}
	b := p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, &sess)
	// The call's result is the command's own, neither "Run stopped by server shutdown" nor
	// "Interrupted by server restart". The model turn that follows it is no call: the drain does
	// not wait for it, so it either finished or was stopped by the shutdown (a race CI found).
	results := 0
	for _, e := range sess.Entries {
		m := e.Message
		if m.Role != "toolResult" {
			continue
		}
		results++
		if m.ToolCallID != "call-1" || m.Result == nil || m.Result.IsError || len(m.Result.Content) == 0 ||
			!strings.Contains(m.Result.Content[0].Text, "ran-after-release") {
			t.Errorf("the command's result is not the command's own: %+v", m)
		}
	}
	if results != 1 {
		t.Errorf("%d tool results, want the command's one: %s", results, b)
	}
	if bytes.Contains(b, []byte("Interrupted by server restart")) {
		t.Errorf("the transcript says the call was interrupted: %s", b)
	}
}

// TestADrainTimeoutStopsACommandThatDoesNotFinish: a command still executing when
// -drain-timeout runs out is stopped, and the server exits.
func TestADrainTimeoutStopsACommandThatDoesNotFinish(t *testing.T) {
	f := newServerFiles(t)
	p := startServing(t, append(f.args("127.0.0.1:0"), "-drain-timeout", "200ms")...)
	id := startExecutingCall(t, p, f)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.waitExit(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(f.workspace, "finished")); err == nil {
		t.Errorf("the command finished although nothing released it")
	}
	p = startServing(t, f.args("127.0.0.1:0")...)
	if b := p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil); !bytes.Contains(b, []byte("Run stopped by server shutdown")) {
		t.Errorf("the stopped command's result: %s", b)
	}
}
