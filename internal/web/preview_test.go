package web_test

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/tool"
	"countersign/internal/tools"
)

// Issue 16, item 8: Edit is an editor. A write_file prompt edits the content as text, and the
// server renders the call as edited (the same diff component) while the decider types, checked
// as an approval would check it, deciding nothing.

// builtinTool is the built-in tool called name.
func builtinTool(t *testing.T, name string) *tool.Tool {
	t.Helper()
	for _, tl := range tools.Builtin(tools.Config{}) {
		if tl.Name == name {
			return tl
		}
	}
	t.Fatalf("no built-in tool %s", name)
	return nil
}

// pendingWrite starts a session of ts whose model asks to write_file args, and returns the
// session and approval ids once the prompt waits.
func pendingWrite(t *testing.T, ts *testServer, script string) (string, string) {
	t.Helper()
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "edit", "model": "faux:" + script, "workspace": ts.workDir}, &sess)
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	id := next(t, events, "approval_requested")["approval"].(map[string]any)["id"].(string)
	return sess.ID, id
}

const writeNotes = `{"steps":[{"content":[{"type":"toolCall","id":"w","name":"write_file","arguments":{"path":"notes.txt","content":"a\nB\n"}}],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`

// writeCRLF asks to write content a textarea would change (its carriage returns).
const writeCRLF = `{"steps":[{"content":[{"type":"toolCall","id":"w","name":"write_file","arguments":{"path":"dos.txt","content":"a\r\nb\r\n"}}],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`

func TestEditPreviewRendersTheCallAsEditedAndWhatApproveWouldRefuse(t *testing.T) {
	ts := newTestServer(t, map[string]string{"notes": writeNotes}, builtinTool(t, "write_file"))
	notes := filepath.Join(ts.workDir, "notes.txt")
	if err := os.WriteFile(notes, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sid, aid := pendingWrite(t, ts, "notes")
	previewPath := "/sessions/" + sid + "/approvals/" + aid + "/preview"

	st, page := get(t, ts, nil, "/sessions/"+sid)
	if st != 200 {
		t.Fatalf("page = %d", st)
	}
	prompt := approvalGroup(t, page, aid)
	for _, want := range []string{`data-preview-url="` + previewPath + `"`, `class="edit-path"`, "Content", `class="edit-content"`,
		"Arguments as JSON", `name="arguments"`, `class="call-preview"`} {
		if !strings.Contains(prompt, want) {
			t.Errorf("the write_file prompt lacks %s", want)
		}
	}

	preview := func(args string) (int, string) {
		t.Helper()
		return ts.do(t, "POST", previewPath, "application/x-www-form-urlencoded", url.Values{"arguments": {args}}.Encode(), nil)
	}
	for _, tc := range []struct {
		name, args string
		want       []string
		wantNot    []string
	}{
		{"an edit shows its diff against the file", `{"path":"notes.txt","content":"a\nB\nc by a person\n"}`,
			[]string{"Preview of your edit", `class="diff-add"`, "c by a person", `class="diff-del"`}, []string{"Approve will refuse"}},
		{"a new path shows a new file", `{"path":"other.txt","content":"x\n"}`,
			[]string{"other.txt", "new file"}, []string{"Approve will refuse"}},
		{"a path outside the workspace is what Approve would refuse", `{"path":"../outside.txt","content":"x"}`,
			[]string{"Approve will refuse this: Arguments are refused by the tool"}, nil},
		{"arguments against the inputSchema are listed", `{"path":"notes.txt"}`,
			[]string{"Approve will refuse this: Arguments do not match the tool&#39;s inputSchema", "content"}, []string{`class="diff-add"`}},
		{"text that is not JSON says so and shows no view", `{"path":`,
			[]string{"Approve will refuse this: Arguments are not valid JSON"}, []string{"diff"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := preview(tc.args)
			if st != 200 {
				t.Fatalf("preview = %d: %s", st, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("the preview lacks %q:\n%s", w, body)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(body, w) {
					t.Errorf("the preview has %q:\n%s", w, body)
				}
			}
			if strings.Contains(body, `role="alert"`) {
				t.Errorf("a preview is not a refusal, yet it has an alert:\n%s", body)
			}
		})
	}

	// Nothing was decided or written.
	var pending struct{ Approvals []apiApproval }
	ts.call(t, "GET", "/api/sessions/"+sid+"/approvals?status=pending", nil, &pending)
	if len(pending.Approvals) != 1 {
		t.Fatalf("pending approvals after previews = %d, want 1", len(pending.Approvals))
	}
	if b, _ := os.ReadFile(notes); string(b) != "a\nb\n" {
		t.Fatalf("the file changed under previews: %q", b)
	}
	if _, err := os.Stat(filepath.Join(ts.workDir, "other.txt")); err == nil {
		t.Fatal("a preview wrote other.txt")
	}

	// Approve with the edit: the same checks, the file gets the edit; the preview is over (409).
	st, body := ts.do(t, "POST", "/sessions/"+sid+"/approvals/"+aid+"/decision", "application/x-www-form-urlencoded",
		url.Values{"decision": {"approve"}, "arguments": {`{"path":"notes.txt","content":"a\nB\nc by a person\n"}`}}.Encode(), nil)
	if st != 200 || !strings.Contains(body, "with edited arguments") {
		t.Fatalf("approve with the edit = %d: %s", st, body)
	}
	if st, body := preview(`{"path":"notes.txt","content":"late"}`); st != 409 {
		t.Fatalf("preview of a decided approval = %d, want 409: %s", st, body)
	}
	if st, _ := ts.do(t, "POST", "/sessions/"+sid+"/approvals/nope/preview", "application/x-www-form-urlencoded", "arguments=%7B%7D", nil); st != 404 {
		t.Fatalf("preview of an unknown approval = %d, want 404", st)
	}
}

func TestEditPreviewThroughALinkNeedsTheRightToEdit(t *testing.T) {
	ts := newTestServer(t, map[string]string{"notes": writeNotes}, builtinTool(t, "write_file"))
	sid, aid := pendingWrite(t, ts, "notes")
	form := url.Values{"arguments": {`{"path":"notes.txt","content":"z\n"}`}}.Encode()
	for _, tc := range []struct {
		name string
		link map[string]any
		want int
	}{
		{"a viewer", map[string]any{"role": "viewer"}, 404},
		{"an approver without the right to edit", map[string]any{"role": "approver"}, 403},
		{"an approver who may edit", map[string]any{"role": "approver", "canEdit": true}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := createLink(t, ts, sid, tc.link)
			c := reviewer(t, ts, l.URL, "Rita")
			u, _ := url.Parse(l.URL)
			st, body := ts.do(t, "POST", u.Path+"/approvals/"+aid+"/preview", "application/x-www-form-urlencoded", form, c)
			if st != tc.want {
				t.Fatalf("preview = %d, want %d: %.300s", st, tc.want, body)
			}
			if st == 200 && !strings.Contains(body, "Preview of your edit") {
				t.Fatalf("the preview is %s", body)
			}
			// What the link's page offers matches: the editor only with the right to edit.
			_, page := get(t, ts, c, l.URL)
			if got := strings.Contains(page, "data-preview-url="); got != (tc.want == 200) {
				t.Fatalf("page offers the editor = %v, want %v", got, tc.want == 200)
			}
		})
	}
}

// Content a text box would change (carriage returns) or hide stays in the JSON editor, where
// it shows as escapes.
func TestEditAsTextOnlyForContentATextBoxKeeps(t *testing.T) {
	ts := newTestServer(t, map[string]string{"notes": writeNotes, "crlf": writeCRLF}, builtinTool(t, "write_file"))
	for _, tc := range []struct {
		script string
		asText bool
	}{{"notes", true}, {"crlf", false}} {
		sid, aid := pendingWrite(t, ts, tc.script)
		_, page := get(t, ts, nil, "/sessions/"+sid)
		prompt := approvalGroup(t, page, aid)
		if got := strings.Contains(prompt, `class="edit-content"`); got != tc.asText {
			t.Errorf("%s: content edited as text = %v, want %v", tc.script, got, tc.asText)
		}
		if !strings.Contains(prompt, `name="arguments"`) {
			t.Errorf("%s: no Arguments editor", tc.script)
		}
	}
}

// TestWriteFileDiffIsAgainstThePreviewStoredWhenThePromptOpened (issue 19): the prompt's diff is
// drawn from the preview write_file computed when the approval opened and the store kept, not
// from the workspace at render time: after the file changed, and after it was deleted, the page
// (owner's and reviewer's), the JSON API and an edit's preview all show the stored "before".
func TestWriteFileDiffIsAgainstThePreviewStoredWhenThePromptOpened(t *testing.T) {
	ts := newTestServer(t, map[string]string{"notes": writeNotes}, builtinTool(t, "write_file"))
	notes := filepath.Join(ts.workDir, "notes.txt")
	if err := os.WriteFile(notes, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sid, aid := pendingWrite(t, ts, "notes")
	var api struct {
		Approvals []struct {
			ID      string
			Preview *struct {
				Path    string
				Exists  bool
				Content string
			}
		}
	}
	ts.call(t, "GET", "/api/sessions/"+sid+"/approvals?status=pending", nil, &api)
	if len(api.Approvals) != 1 || api.Approvals[0].Preview == nil ||
		*api.Approvals[0].Preview != (struct {
			Path    string
			Exists  bool
			Content string
		}{"notes.txt", true, "a\nb\n"}) {
		t.Fatalf("the API's approval has preview %+v, want notes.txt as it was", api.Approvals)
	}
	l := createLink(t, ts, sid, map[string]any{"role": "approver", "canEdit": true})
	rc := reviewer(t, ts, l.URL, "Rita")
	u, _ := url.Parse(l.URL)

	wantStored := func(t *testing.T, where, html string) {
		t.Helper()
		for _, w := range []string{`class="diff-del"`, `class="diff-add"`, "notes.txt"} {
			if !strings.Contains(html, w) {
				t.Errorf("%s lacks %s:\n%s", where, w, html)
			}
		}
		for _, w := range []string{"new file", "changed after", "PreviewError", "cannot"} {
			if strings.Contains(html, w) {
				t.Errorf("%s has %q, the file as it is now, not as it was:\n%s", where, w, html)
			}
		}
	}
	for _, change := range []struct {
		name string
		do   func() error
	}{
		{"the file changed", func() error { return os.WriteFile(notes, []byte("changed after\n"), 0o644) }},
		{"the file was deleted", func() error { return os.Remove(notes) }},
	} {
		t.Run(change.name, func(t *testing.T) {
			if err := change.do(); err != nil {
				t.Fatal(err)
			}
			st, page := get(t, ts, nil, "/sessions/"+sid)
			if st != 200 {
				t.Fatalf("page = %d", st)
			}
			wantStored(t, "the owner's prompt", approvalGroup(t, page, aid))
			st, page = get(t, ts, rc, l.URL)
			if st != 200 {
				t.Fatalf("reviewer page = %d", st)
			}
			wantStored(t, "the reviewer's prompt", approvalGroup(t, page, aid))
			// An edit of the content keeps the path: its diff is against the same stored "before".
			st, body := ts.do(t, "POST", "/sessions/"+sid+"/approvals/"+aid+"/preview", "application/x-www-form-urlencoded",
				url.Values{"arguments": {`{"path":"notes.txt","content":"a\nB\nc\n"}`}}.Encode(), nil)
			if st != 200 {
				t.Fatalf("edit preview = %d: %s", st, body)
			}
			wantStored(t, "the edit's preview", body)
			st, body = ts.do(t, "POST", u.Path+"/approvals/"+aid+"/preview", "application/x-www-form-urlencoded",
				url.Values{"arguments": {`{"path":"notes.txt","content":"a\nB\nc\n"}`}}.Encode(), rc)
			if st != 200 {
				t.Fatalf("reviewer's edit preview = %d: %s", st, body)
			}
			wantStored(t, "the reviewer's edit preview", body)
		})
	}
}
