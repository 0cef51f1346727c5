package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"countersign/internal/tool"
)

// TestWriteFilePreviewIsTheFileWhenTheApprovalOpensAndHonoursTheJail (issue 19): write_file's
// preview, which the gate stores with its approval, is the file's content (or "new file", or
// why it cannot be shown); a path the jail refuses gives no preview and reads nothing — the
// call itself gets the refusal it gets today, from InputCheck.
func TestWriteFilePreviewIsTheFileWhenTheApprovalOpensAndHonoursTheJail(t *testing.T) {
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	for _, d := range []string{ws, filepath.Join(ws, "dir")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(filepath.Join(ws, "notes.txt"), "a\nb\n")
	mustWrite(filepath.Join(ws, "big.txt"), strings.Repeat("x", MaxPreview+1))
	mustWrite(filepath.Join(root, "secret.txt"), "outside\n")
	if err := os.Symlink(filepath.Join(root, "secret.txt"), filepath.Join(ws, "link.txt")); err != nil {
		t.Fatal(err)
	}
	wf := writeFileTool(Config{})
	if wf.Preview == nil {
		t.Fatal("write_file has no preview")
	}
	args := func(p string) json.RawMessage {
		b, _ := json.Marshal(map[string]string{"path": p, "content": "new\n"})
		return b
	}
	for _, tc := range []struct {
		path string
		want *tool.Preview
	}{
		{"notes.txt", &tool.Preview{Path: "notes.txt", Exists: true, Content: "a\nb\n",
			Digest: "911169ddaaf146aff539f58c26c489af3b892dff0fe283c1c264c65ae5aa59a2"}},
		{"sub/new.txt", &tool.Preview{Path: "sub/new.txt"}},
		{"dir", &tool.Preview{Path: "dir", Exists: true, Error: "dir is a folder"}},
	} {
		got, err := wf.Preview(context.Background(), args(tc.path), ws)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("preview of %s = %+v, %v; want %+v", tc.path, got, err, tc.want)
		}
	}
	big, err := wf.Preview(context.Background(), args("big.txt"), ws)
	if err != nil || big == nil || !big.Exists || big.Content != "" || !strings.Contains(big.Error, "too large to preview") ||
		big.Digest != sha256Hex([]byte(strings.Repeat("x", MaxPreview+1))) {
		t.Errorf("preview of a file over MaxPreview = %+v, %v; want no content, why, and the whole file's digest", big, err)
	}

	// Outside the workspace, by a relative path, an absolute one or a link: no preview, nothing
	// of the file in the error, and the call is refused as before.
	for _, p := range []string{"../secret.txt", filepath.Join(root, "secret.txt"), "link.txt"} {
		got, err := wf.Preview(context.Background(), args(p), ws)
		if got != nil || err == nil || strings.Contains(err.Error(), "outside\n") {
			t.Errorf("preview of %s = %+v, %v; want none and an error", p, got, err)
		}
		if p != "link.txt" && !errors.Is(err, ErrOutsideWorkspace) {
			t.Errorf("preview of %s: %v, want ErrOutsideWorkspace", p, err)
		}
		if vs := wf.InputCheck(args(p), ws); p != "link.txt" && len(vs) == 0 {
			t.Errorf("InputCheck lets %s through", p)
		}
	}
}
