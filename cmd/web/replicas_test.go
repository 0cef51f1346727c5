package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"countersign/internal/pgtest"
	"countersign/internal/testkit"
)

// These tests start two real server binaries on one PostgreSQL database, as a team runs them
// behind a proxy (issue 21, SPEC §16): the same database, the same -share-key, the same
// workspace.

// countScript makes one run_command call, which the gate asks a person about, that appends a
// line to the workspace's file "count": how many times the tool ran.
const countScript = `{"steps":[
 {"content":[{"type":"toolCall","id":"call-1","name":"run_command","arguments":{"command":"echo ran >> count; echo counted"}}],
  "stopReason":"toolUse"},
 {"content":[{"type":"text","text":"Done: {{lastResult.stdout}}"}],"stopReason":"stop"}
]}`

// replicaFiles are the files two replicas share: a database URL, a share key, a workspace and a
// scripts folder (blockingScript and countScript).
type replicaFiles struct {
	serverFiles
	url, key string
}

func newReplicaFiles(t *testing.T) replicaFiles {
	t.Helper()
	f := replicaFiles{serverFiles: newServerFiles(t), url: pgtest.Database(t)}
	f.key = filepath.Join(filepath.Dir(f.workspace), "keys", "team.share-key")
	if err := os.WriteFile(filepath.Join(f.scripts, "count.json"), []byte(countScript), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f replicaFiles) args() []string {
	return []string{"-addr", "127.0.0.1:0", "-db", f.url, "-share-key", f.key, "-workspace", f.workspace,
		"-scripts", f.scripts, "-token", testToken, "-faux-delay", "0s"}
}

// count is how many times countScript's command ran.
func (f replicaFiles) count(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.workspace, "count"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	// "ran", not "ran\n": the server's shell (mvdan.cc/sh's interpreter) writes echo's words and
	// its newline in separate writes, so two commands appending at once can leave "ranran\n\n"
	// (a clean-clone CI run counted 49 of 50 that way; dash writes each line at once).
	return strings.Count(string(b), "ran")
}

type apiSession struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// pendingOn waits until session id has one pending approval, read through p, and returns it.
func pendingOn(t *testing.T, p *proc, id string) string {
	t.Helper()
	var pending struct {
		Approvals []struct{ ID string }
	}
	testkit.Eventually(t, "the pending approval on "+p.base, func() bool {
		p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id+"/approvals?status=pending", nil, &pending)
		return len(pending.Approvals) == 1
	})
	return pending.Approvals[0].ID
}

// transcriptText is session id's transcript as p's API shows it, without what may differ between
// two reads (nothing should).
func transcriptText(t *testing.T, p *proc, id string) string {
	t.Helper()
	var s struct {
		State   string            `json:"state"`
		Entries []json.RawMessage `json:"entries"`
	}
	p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+id, nil, &s)
	b, _ := json.Marshal(s)
	return string(b)
}

// TestTwoReplicasServeOneTeam (issue 21 acceptance 2, through the API): a message sent on
// replica A parks on an approval that replica B lists; approving on B runs the call on A, once;
// both replicas show the same finished transcript. A Stop on B stops a run A drives; a message
// on B while A's run holds the session is refused (409).
func TestTwoReplicasServeOneTeam(t *testing.T) {
	f := newReplicaFiles(t)
	a := startServing(t, f.args()...)
	b := startServing(t, f.args()...)

	var s apiSession
	a.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "team", "model": "faux:count"}, &s)
	a.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+s.ID+"/messages", map[string]string{"text": "count"}, nil)
	id := pendingOn(t, b, s.ID)
	if st, body := b.api(t, "POST", "/api/sessions/"+s.ID+"/messages", map[string]string{"text": "again"}); st != http.StatusConflict {
		t.Fatalf("a message on B while A's run waits = %d %s, want 409", st, body)
	}
	b.mustAPI(t, http.StatusOK, "POST", "/api/approvals/"+id+"/decision", map[string]string{"decision": "approve"}, nil)
	testkit.Eventually(t, "the run to finish", func() bool {
		return strings.Contains(transcriptText(t, a, s.ID), "Done: counted") && strings.Contains(transcriptText(t, a, s.ID), `"state":"idle"`)
	})
	if n := f.count(t); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
	if ta, tb := transcriptText(t, a, s.ID), transcriptText(t, b, s.ID); ta != tb {
		t.Fatalf("the replicas disagree:\nA %s\nB %s", ta, tb)
	}
	// B heard A's events through notifications: its lag histogram counted them (SPEC §16). B's
	// transcript above came from the database; its listener may still be working through the
	// notifications on a busy machine, so the histogram is waited for.
	lagCount := func() (uint64, string) {
		req, _ := http.NewRequest("GET", b.base+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("B's /metrics does not parse: %v", err)
		}
		f := fams["countersign_replica_event_lag_seconds"]
		if f == nil || len(f.Metric) != 1 {
			return 0, fmt.Sprint(f)
		}
		return f.Metric[0].GetHistogram().GetSampleCount(), ""
	}
	testkit.Eventually(t, "B's countersign_replica_event_lag_seconds to count A's events", func() bool {
		n, bad := lagCount()
		if bad != "" {
			t.Fatalf("B's countersign_replica_event_lag_seconds = %s", bad)
		}
		return n > 0
	})

	// A rule saved on B decides A's next call: A read the rules again.
	var rule struct{ ID string }
	b.mustAPI(t, http.StatusCreated, "POST", "/api/rules", map[string]string{"text": "run_command", "effect": "allow", "scope": "workspace", "workspace": f.workspace}, &rule)
	testkit.Eventually(t, "A to list the rule saved on B", func() bool {
		_, body := a.api(t, "GET", "/api/rules", nil)
		return bytes.Contains(body, []byte(`"text": "run_command"`))
	})
	var ruled apiSession
	a.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "ruled", "model": "faux:count"}, &ruled)
	a.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+ruled.ID+"/messages", map[string]string{"text": "count"}, nil)
	testkit.Eventually(t, "A to run the call the rule allows", func() bool {
		tr := transcriptText(t, a, ruled.ID)
		return strings.Contains(tr, "Done: counted") && strings.Contains(tr, `"state":"idle"`)
	})

	// Deleted on B, gone on A.
	b.mustAPI(t, http.StatusNoContent, "DELETE", "/api/rules/"+rule.ID, nil, nil)
	testkit.Eventually(t, "A to drop the rule deleted on B", func() bool {
		_, body := a.api(t, "GET", "/api/rules", nil)
		return !bytes.Contains(body, []byte(`"text": "run_command"`))
	})

	// Stop on B reaches the run A drives (its call executing).
	var blocked apiSession
	a.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "stop me", "model": "faux:blocking"}, &blocked)
	a.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+blocked.ID+"/messages", map[string]string{"text": "go"}, nil)
	b.mustAPI(t, http.StatusOK, "POST", "/api/approvals/"+pendingOn(t, b, blocked.ID)+"/decision", map[string]string{"decision": "approve"}, nil)
	testkit.Eventually(t, "the blocking command to start", func() bool {
		_, err := os.Stat(filepath.Join(f.workspace, "started"))
		return err == nil
	})
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(f.workspace, "release"), nil, 0o644) })
	b.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+blocked.ID+"/stop", nil, nil)
	testkit.Eventually(t, "the run A drives to stop", func() bool {
		tr := transcriptText(t, a, blocked.ID)
		return strings.Contains(tr, "Run stopped by owner") && strings.Contains(tr, `"state":"idle"`)
	})
}

// TestAKilledReplicasRunsAreTakenOver (issue 21 acceptance 3): replica A is killed (SIGKILL)
// while two of its runs are parked on an approval and another's call is executing. Within 15 s
// replica B drives the parked ones: one approved on B right after the kill (the decision reached
// no live replica: B runs the call once it owns the session), one approved once B owns it; each
// call ran exactly once; the executing call is not run again, and its result says it was
// interrupted. What an executing command left running (background jobs that outlive its shell)
// is killed before B records it as interrupted (issue 28).
func TestAKilledReplicasRunsAreTakenOver(t *testing.T) {
	f := newReplicaFiles(t)
	if err := os.WriteFile(filepath.Join(f.scripts, "escapers.json"), []byte(escapersScript), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range runningIn(f.workspace) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	a := startServing(t, f.args()...)
	b := startServing(t, f.args()...)

	executing := startExecutingCall(t, a, f.serverFiles)
	escapers := startApproved(t, a, f.serverFiles, "faux:escapers", "started2")
	var parked apiSession
	a.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "parked", "model": "faux:count"}, &parked)
	a.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+parked.ID+"/messages", map[string]string{"text": "count"}, nil)
	id := pendingOn(t, b, parked.ID)

	var later apiSession // approved once B owns it
	a.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "parked later", "model": "faux:count"}, &later)
	a.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+later.ID+"/messages", map[string]string{"text": "count"}, nil)
	laterID := pendingOn(t, b, later.ID)

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.exited
	killed := time.Now()
	// The person approves on B at once; B runs the call once it owns the session.
	b.mustAPI(t, http.StatusOK, "POST", "/api/approvals/"+id+"/decision", map[string]string{"decision": "approve"}, nil)
	defer func() {
		if t.Failed() {
			t.Logf("B's log:\n%s", b.stderr.String())
		}
	}()
	testkit.Eventually(t, "B to finish the parked run", func() bool {
		tr := transcriptText(t, b, parked.ID)
		return strings.Contains(tr, "Done: counted") && strings.Contains(tr, `"state":"idle"`)
	})
	took := time.Since(killed)
	t.Logf("the parked run finished on B %v after A was killed", took)
	if took > 15*time.Second {
		t.Errorf("B finished the run %v after the kill, want within 15 s", took)
	}
	if n := f.count(t); n != 1 {
		t.Fatalf("the tool ran %d times, want exactly 1", n)
	}
	testkit.Eventually(t, "B to own the other parked session", func() bool {
		return strings.Contains(b.stderr.String(), "took over a session\" session="+later.ID)
	})
	b.mustAPI(t, http.StatusOK, "POST", "/api/approvals/"+laterID+"/decision", map[string]string{"decision": "approve"}, nil)
	testkit.Eventually(t, "B to finish the run it owns", func() bool {
		tr := transcriptText(t, b, later.ID)
		return strings.Contains(tr, "Done: counted") && strings.Contains(tr, `"state":"idle"`)
	})
	if n := f.count(t); n != 2 {
		t.Fatalf("the tool ran %d times for two approvals, want 2", n)
	}
	testkit.Eventually(t, "B to end the executing call as interrupted", func() bool {
		tr := transcriptText(t, b, executing)
		return strings.Contains(tr, "Interrupted by server restart") && strings.Contains(tr, `"state":"idle"`)
	})
	if _, err := os.Stat(filepath.Join(f.workspace, "finished")); err == nil {
		t.Fatal("the interrupted command ran again")
	}
	testkit.Eventually(t, "B to end the escapers' call as interrupted", func() bool {
		return strings.Contains(transcriptText(t, b, escapers), "Interrupted by server restart")
	})
	if left := runningIn(f.workspace); len(left) > 0 {
		t.Errorf("processes %v of A's commands still run after B recorded them as interrupted", left)
	}
	if !strings.Contains(b.stderr.String(), "took over a session") {
		t.Errorf("B's log does not say it took over; stderr:\n%s", b.stderr.String())
	}
}

// TestDecisionRacesAcrossReplicas (issue 21 acceptance 4, through the API): the same approval
// decided on two replicas at once, 50 times: one 200 and one 409 each time, and the call runs
// once per approval.
func TestDecisionRacesAcrossReplicas(t *testing.T) {
	f := newReplicaFiles(t)
	a := startServing(t, f.args()...)
	b := startServing(t, f.args()...)
	const n = 50
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			var s apiSession
			a.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": fmt.Sprint("race ", i), "model": "faux:count"}, &s)
			a.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+s.ID+"/messages", map[string]string{"text": "count"}, nil)
			ids[i] = s.ID
		})
	}
	wg.Wait()
	for i, sid := range ids {
		id := pendingOn(t, a, sid)
		var codes [2]int
		var bodies [2][]byte
		var race sync.WaitGroup
		start := make(chan struct{})
		for j, p := range []*proc{a, b} {
			race.Go(func() {
				<-start
				codes[j], bodies[j] = p.api(t, "POST", "/api/approvals/"+id+"/decision", map[string]string{"decision": "approve"})
			})
		}
		close(start)
		race.Wait()
		ok, conflict := 0, 0
		for j, c := range codes {
			switch c {
			case http.StatusOK:
				ok++
			case http.StatusConflict:
				conflict++
				if !bytes.Contains(bodies[j], []byte("already")) {
					t.Errorf("race %d: the 409 says %s", i, bodies[j])
				}
			}
		}
		if ok != 1 || conflict != 1 {
			t.Fatalf("race %d: codes %v (%s / %s), want one 200 and one 409", i, codes, bodies[0], bodies[1])
		}
	}
	testkit.Eventually(t, "every call to run", func() bool { return f.count(t) >= n })
	for _, sid := range ids {
		testkit.Eventually(t, "the run to end", func() bool { return strings.Contains(transcriptText(t, a, sid), `"state":"idle"`) })
	}
	if c := f.count(t); c != n {
		t.Fatalf("the tool ran %d times for %d approvals", c, n)
	}
}

// TestAReplicaWithAnotherKeyRefusesToStart (SPEC §16): every replica needs the same share-key
// file (its links would be 404 on the others) and, with webhooks, the same notify key; a server
// started with another file refuses to start, naming it, and the first one's links still work.
func TestAReplicaWithAnotherKeyRefusesToStart(t *testing.T) {
	f := newReplicaFiles(t)
	startServer(t, []string{"-db", f.url, "-share-key", f.key, "-token", testToken, "-workspace", f.workspace,
		"-notify-webhook", "ops=http://127.0.0.1:1/hook"}, nil)
	other := filepath.Join(t.TempDir(), "other.share-key")
	for _, tc := range []struct {
		name, key, want string
		hook            bool
	}{
		{"another share key", other, "the share key in " + other + " is not the one", false},
		{"the share key but another notify key", f.key, "the notify key in", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			if tc.hook { // the same share key, copied beside a notify key of its own
				dir := t.TempDir()
				b, err := os.ReadFile(f.key)
				if err != nil {
					t.Fatal(err)
				}
				key = filepath.Join(dir, "team.share-key")
				if err := os.WriteFile(key, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			args := []string{"-addr", "127.0.0.1:0", "-db", f.url, "-share-key", key, "-token", testToken, "-workspace", f.workspace}
			if tc.hook {
				args = append(args, "-notify-webhook", "ops=http://127.0.0.1:1/hook")
			}
			err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("a replica with %s: %v, want it refused saying %q", tc.name, err, tc.want)
			}
			// The refused start made the wrong key's file: it removed it (issue 33), and kept
			// the share key it was given.
			fresh := other
			if tc.hook {
				fresh = strings.TrimSuffix(key, ".share-key") + ".notify-key"
				if _, err := os.Stat(key); err != nil {
					t.Errorf("the share key given: %v", err)
				}
			}
			if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused start left its new key file %s behind (%v)", fresh, err)
			}
		})
	}
}
