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
	b := p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, nil)
	if !bytes.Contains(b, []byte("ran-after-release")) {
		t.Errorf("the command's result is not stored: %s", b)
	}
	for _, bad := range []string{"Run stopped by server shutdown", "Interrupted by server restart"} {
		if bytes.Contains(b, []byte(bad)) {
			t.Errorf("the transcript says %q: %s", bad, b)
		}
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
