package realpath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestResolveReal(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws, out := filepath.Join(root, "ws"), filepath.Join(root, "out")
	for _, d := range []string{filepath.Join(ws, "docs"), out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for target, name := range map[string]string{
		out:            "abs",
		"../out":       "rel",
		"docs":         "inside",
		"loop":         "loop",
		out + "/new/x": "dangling",
	} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ name, p, want string }{
		{"plain", "docs/a", ws + "/docs/a"},
		{"absolute", ws + "/docs/a", ws + "/docs/a"},
		{"absolute symlink", "abs/x", out + "/x"},
		{"relative symlink", "rel/x", out + "/x"},
		{"symlink inside", "inside/a", ws + "/docs/a"},
		{"dotdot after symlink is physical", "abs/../x", root + "/x"},
		{"dotdot after folder", "docs/../x", ws + "/x"},
		{"dangling symlink followed", "dangling", out + "/new/x"},
		{"missing then dotdot", "nope/../../x", root + "/x"},
		{"below a file", "file/x", ws + "/file/x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(ws, tc.p)
			if err != nil || got != tc.want {
				t.Fatalf("Resolve(%q) = %q, %v; want %q", tc.p, got, err, tc.want)
			}
		})
	}
	t.Run("loop", func(t *testing.T) {
		if _, err := Resolve(ws, "loop/x"); !errors.Is(err, ErrLinkLoop) {
			t.Fatalf("err %v, want ErrLinkLoop", err)
		}
	})
}
