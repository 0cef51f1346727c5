package web_test

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 28, acceptance 8 (SPEC §14 "A person's approval binds what they saw"), through the JSON
// API with a faux model: a prompt is open, the workspace changes under it, and Approve does not
// write or run over what the person never saw — the call ends with a clear message, and what
// changed is still there.

// approveAndEnd approves the session's pending approval aid over the API, with edited arguments
// when edit is not "", and returns the text of the call's result and whether it is an error.
func approveAndEnd(t *testing.T, ts *testServer, sid, aid string, edit ...string) (string, bool) {
	t.Helper()
	events := ts.events(t, sid)
	next(t, events, "snapshot")
	body := map[string]any{"decision": "approve"}
	if len(edit) > 0 {
		body["arguments"] = json.RawMessage(edit[0])
	}
	var decided map[string]any
	if st := ts.call(t, "POST", "/api/approvals/"+aid+"/decision", body, &decided); st != 200 || decided["status"] != "approved" {
		t.Fatalf("decide = %d %v", st, decided)
	}
	res := next(t, events, "tool_execution_end")["result"].(map[string]any)
	var text []string
	for _, c := range res["content"].([]any) {
		text = append(text, c.(map[string]any)["text"].(string))
	}
	next(t, events, "agent_end")
	return strings.Join(text, "\n"), res["isError"] == true
}

// TestApprovingAWriteFilePromptDoesNotEraseALineAddedWhileItWaited: notes.txt gains a line while
// the prompt (its diff against "a\nb\n") waits; Approve writes nothing, the call ends saying the
// file changed and to call again, and the line is still there. The same write, unchanged, runs.
func TestApprovingAWriteFilePromptDoesNotEraseALineAddedWhileItWaited(t *testing.T) {
	ts := newTestServer(t, map[string]string{"notes": writeNotes}, builtinTool(t, "write_file"))
	notes := filepath.Join(ts.workDir, "notes.txt")
	if err := os.WriteFile(notes, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sid, aid := pendingWrite(t, ts, "notes")
	const changed = "a\nb\nadded while the prompt waited\n"
	if err := os.WriteFile(notes, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	text, isError := approveAndEnd(t, ts, sid, aid)
	const want = "notes.txt changed on disk after the prompt showed its diff; nothing was written. Call write_file again to see the new diff."
	if !isError || text != want {
		t.Errorf("the call ended with %q (isError %v), want %q", text, isError, want)
	}
	if got, _ := os.ReadFile(notes); string(got) != changed {
		t.Errorf("notes.txt holds %q, want the added line kept: %q", got, changed)
	}

	// Approved with an edit of the content (the same path): the same check.
	if err := os.WriteFile(notes, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sid, aid = pendingWrite(t, ts, "notes")
	if err := os.WriteFile(notes, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	text, isError = approveAndEnd(t, ts, sid, aid, `{"path":"notes.txt","content":"edited by a person\n"}`)
	if !isError || text != want {
		t.Errorf("the edited call ended with %q (isError %v), want %q", text, isError, want)
	}
	if got, _ := os.ReadFile(notes); string(got) != changed {
		t.Errorf("notes.txt holds %q after an edited approval, want the added line kept: %q", got, changed)
	}

	// Unchanged since the prompt: Approve writes as before.
	if err := os.WriteFile(notes, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sid, aid = pendingWrite(t, ts, "notes")
	if text, isError := approveAndEnd(t, ts, sid, aid); isError {
		t.Fatalf("the unchanged write ended with %q", text)
	}
	if got, _ := os.ReadFile(notes); string(got) != "a\nB\n" {
		t.Errorf("notes.txt holds %q after an approved write", got)
	}
}

// TestApprovingShJobShDoesNotRunAScriptChangedWhileItWaited: the prompt of `sh job.sh` shows
// job.sh with its digest (API and page); job.sh changes while it waits; Approve runs nothing, and
// the call ends saying the script changed and to call again.
func TestApprovingShJobShDoesNotRunAScriptChangedWhileItWaited(t *testing.T) {
	script := `{"steps":[{"content":[{"type":"toolCall","id":"j","name":"run_command","arguments":{"command":"sh job.sh"}}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	ts := newTestServer(t, map[string]string{"job": script}, builtinTool(t, "run_command"))
	job := filepath.Join(ts.workDir, "job.sh")
	if err := os.WriteFile(job, []byte("echo shown > shown.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sid, aid := pendingWrite(t, ts, "job")

	// The prompt binds job.sh's digest: stored with the approval, shown on the page.
	const shownDigest = "c5965136dad5" // sha256("echo shown > shown.txt\n"), its first 12 digits
	var api struct {
		Approvals []struct {
			Preview *struct {
				Scripts []struct {
					Path   string
					Exists bool
					SHA256 string
				}
			}
		}
	}
	ts.call(t, "GET", "/api/sessions/"+sid+"/approvals?status=pending", nil, &api)
	if len(api.Approvals) != 1 || api.Approvals[0].Preview == nil || len(api.Approvals[0].Preview.Scripts) != 1 ||
		api.Approvals[0].Preview.Scripts[0].Path != "job.sh" || !strings.HasPrefix(api.Approvals[0].Preview.Scripts[0].SHA256, shownDigest) {
		b, _ := json.Marshal(api)
		t.Fatalf("the API's approval has %s, want job.sh with sha256 %s…", b, shownDigest)
	}
	_, page := get(t, ts, nil, "/sessions/"+sid)
	if prompt := approvalGroup(t, page, aid); !strings.Contains(prompt, `<code class="script-path">job.sh</code>`) ||
		!strings.Contains(prompt, "sha256 "+shownDigest+"…") {
		t.Errorf("the prompt does not show job.sh with its digest:\n%s", prompt)
	}

	if err := os.WriteFile(job, []byte("echo shown > shown.txt\ntouch sneaky.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text, isError := approveAndEnd(t, ts, sid, aid)
	if !isError || !strings.HasPrefix(text, "job.sh changed on disk after the prompt showed its digest (then sha256 "+shownDigest+"…, now sha256 ") ||
		!strings.HasSuffix(text, "); nothing ran. Call run_command again to see the new digest.") {
		t.Errorf("the call ended with %q (isError %v), want job.sh changed, nothing ran", text, isError)
	}
	for _, f := range []string{"shown.txt", "sneaky.txt"} {
		if _, err := os.Stat(filepath.Join(ts.workDir, f)); err == nil {
			t.Errorf("%s exists: the script ran", f)
		}
	}

	// An edit that runs another script: its preview shows that script's digest, not job.sh's,
	// and Approve with it runs nothing (the stored prompt never showed other.sh).
	if err := os.WriteFile(filepath.Join(ts.workDir, "other.sh"), []byte("touch other-ran.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sid, aid = pendingWrite(t, ts, "job")
	st, body := ts.do(t, "POST", "/sessions/"+sid+"/approvals/"+aid+"/preview", "application/x-www-form-urlencoded",
		url.Values{"arguments": {`{"command":"sh other.sh"}`}}.Encode(), nil)
	const otherDigest = "bc17aa97183e" // sha256("touch other-ran.txt\n"), its first 12 digits
	if st != 200 || !strings.Contains(body, `<code class="script-path">other.sh</code>`) || !strings.Contains(body, "sha256 "+otherDigest+"…") ||
		strings.Contains(body, `<code class="script-path">job.sh</code>`) {
		t.Errorf("the edit's preview = %d, want other.sh with its digest and not job.sh:\n%s", st, body)
	}
	text, isError = approveAndEnd(t, ts, sid, aid, `{"command":"sh other.sh"}`)
	if want := "other.sh: the prompt showed no digest of this script, which the command runs; nothing ran. Call run_command again to see its digest."; !isError || text != want {
		t.Errorf("the edited call ended with %q (isError %v), want %q", text, isError, want)
	}
	if _, err := os.Stat(filepath.Join(ts.workDir, "other-ran.txt")); err == nil {
		t.Error("other.sh ran")
	}

	// Unchanged since the prompt: Approve runs it.
	sid, aid = pendingWrite(t, ts, "job")
	if text, isError := approveAndEnd(t, ts, sid, aid); isError {
		t.Fatalf("the unchanged command ended with %q", text)
	}
	if _, err := os.Stat(filepath.Join(ts.workDir, "sneaky.txt")); err != nil {
		t.Errorf("the approved script did not run: %v", err)
	}
}
