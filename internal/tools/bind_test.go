package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"countersign/internal/tool"
)

// A person's approval binds what they saw (SPEC §14; issue 28): write_file writes, and
// run_command runs, only over the workspace their prompt showed.

// consentContext is the tool.Context of a call approved as consent says.
type consentContext struct {
	fakeContext
	consent tool.Consent
}

func (c consentContext) Consent() tool.Consent { return c.consent }

func mustWriteFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWriteFileApprovedByAPersonWritesOnlyOverTheFileTheirDiffShowed: the preview stored with the
// approval holds the digest of the file then (also of one too large to show; nothing for a new
// file); a write a person approved checks it and, when the file changed since — a line added, the
// file created, removed or replaced by a folder — writes nothing and says why. A write no person
// approved (a rule, a mode), an edit that names another path, and an unchanged file write as
// before.
func TestWriteFileApprovedByAPersonWritesOnlyOverTheFileTheirDiffShowed(t *testing.T) {
	wf := mustTools(t, Config{})["write_file"]
	args := func(p, content string) json.RawMessage {
		b, _ := json.Marshal(map[string]string{"path": p, "content": content})
		return b
	}
	const changedMsg = " changed on disk after the prompt showed its diff; nothing was written. Call write_file again to see the new diff."
	big := strings.Repeat("x", MaxPreview+1)
	for _, tc := range []struct {
		name    string
		before  *string // the file when the prompt opens; nil: missing
		change  func(t *testing.T, p string)
		consent func(p *tool.Preview) tool.Consent
		path    string // the path the call writes, when an edit changed it
		refused bool
	}{
		{name: "a line added after the prompt", before: ptr("a\nb\n"),
			change: func(t *testing.T, p string) { mustWriteFile(t, p, "a\nb\nnobody saw this\n") }, refused: true},
		{name: "the same length, one byte changed", before: ptr("a\nb\n"),
			change: func(t *testing.T, p string) { mustWriteFile(t, p, "a\nc\n") }, refused: true},
		{name: "a file created after a prompt that showed a new file",
			change: func(t *testing.T, p string) { mustWriteFile(t, p, "theirs\n") }, refused: true},
		{name: "an empty file created after a prompt that showed a new file",
			change: func(t *testing.T, p string) { mustWriteFile(t, p, "") }, refused: true},
		{name: "the file removed after the prompt", before: ptr("a\n"),
			change: func(t *testing.T, p string) { os.Remove(p) }, refused: true},
		{name: "a file too large to show, changed", before: &big,
			change: func(t *testing.T, p string) { mustWriteFile(t, p, big[:len(big)-1]+"y") }, refused: true},
		{name: "a file too large to show, unchanged", before: &big},
		{name: "unchanged", before: ptr("a\nb\n")},
		{name: "a new file, still missing"},
		{name: "changed, but no person approved it (a rule)", before: ptr("a\n"),
			change:  func(t *testing.T, p string) { mustWriteFile(t, p, "a\nb\n") },
			consent: func(*tool.Preview) tool.Consent { return tool.Consent{} }},
		{name: "changed, approved with an edit that names another path", before: ptr("a\n"),
			change: func(t *testing.T, p string) { mustWriteFile(t, p, "a\nb\n") }, path: "other.txt"},
		{name: "a preview stored before digests: checked against its content", before: ptr("a\n"),
			change: func(t *testing.T, p string) { mustWriteFile(t, p, "a\nb\n") },
			consent: func(p *tool.Preview) tool.Consent {
				old := *p
				old.Digest = ""
				return tool.Consent{ByPerson: true, Preview: &old}
			}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			file := filepath.Join(ws, "f.txt")
			if tc.before != nil {
				mustWriteFile(t, file, *tc.before)
			}
			p, err := wf.Preview(context.Background(), args("f.txt", "new\n"), ws)
			if err != nil || p == nil {
				t.Fatalf("preview: %+v, %v", p, err)
			}
			switch {
			case tc.before == nil && (p.Exists || p.Digest != ""):
				t.Fatalf("a new file's preview %+v has a digest", p)
			case tc.before != nil && p.Digest != sha256Hex([]byte(*tc.before)):
				t.Fatalf("preview digest %q, want the file's", p.Digest)
			}
			if tc.change != nil {
				tc.change(t, file)
			}
			want, _ := os.ReadFile(file)
			consent := tool.Consent{ByPerson: true, Preview: p}
			if tc.consent != nil {
				consent = tc.consent(p)
			}
			target := "f.txt"
			if tc.path != "" {
				target = tc.path
			}
			res, err := wf.Execute(context.Background(), args(target, "new\n"), nil, consentContext{fakeContext{ws}, consent})
			if !tc.refused {
				if err != nil || res.IsError {
					t.Fatalf("write = %+v, %v; want it written", res, err)
				}
				if got := mustRead(t, filepath.Join(ws, target)); got != "new\n" {
					t.Errorf("%s holds %q after the write", target, got)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrChangedSincePrompt) || err.Error() != "f.txt"+changedMsg {
				t.Fatalf("write = %+v, %v; want %q", res, err, "f.txt"+changedMsg)
			}
			got, _ := os.ReadFile(file)
			if string(got) != string(want) {
				t.Errorf("f.txt holds %q after a refused write, want %q untouched", got, want)
			}
		})
	}
}

func ptr(s string) *string { return &s }
