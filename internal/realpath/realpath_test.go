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

// mkTree makes the folders (names ending in "/") and empty files of names under root.
func mkTree(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, n := range names {
		p := filepath.Join(root, n)
		if n[len(n)-1] == '/' {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLocateFindsWhereTheToolOpens (SPEC §14 "Paths as they resolve"): joined to the workspace,
// cleaned, symlinks resolved, another name of the workspace recognised.
func TestLocateFindsWhereTheToolOpens(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, "ws")
	mkTree(t, ws, "docs/", "secrets/k", ".git/config")
	if err := os.Symlink("../.git/config", filepath.Join(ws, "docs", "link")); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(root, "alias")
	if err := os.Symlink(ws, alias); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, workspace, p, rel string
		inside                  bool
	}{
		{"plain", ws, "docs/a", "docs/a", true},
		{"the folder itself", ws, ".", ".", true},
		{"the workspace's own name", ws, "../ws/secrets/k", "secrets/k", true},
		{"a symlink into .git", ws, "docs/link", ".git/config", true},
		{"absolute through an alias", ws, alias + "/secrets/k", "secrets/k", true},
		{"the workspace given by its alias", alias, "secrets/k", "secrets/k", true},
		{"outside", ws, "../x", "", false},
		{"absolute outside", ws, "/etc/passwd", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := Locate(tc.workspace, tc.p)
			if err != nil || pl.Rel != tc.rel || pl.Inside != tc.inside || pl.Root != ws {
				t.Fatalf("Locate(%q) = %+v, %v; want rel %q inside %v root %s", tc.p, pl, err, tc.rel, tc.inside, ws)
			}
		})
	}
	for _, p := range []string{"", "a\x00b"} {
		if _, err := Locate(ws, p); err == nil {
			t.Errorf("Locate(%q) did not fail", p)
		}
	}
}

// TestGitSeesWhatGitWouldTakeAsItsOwn: .git and .countersign at any depth; a folder laid out as
// a repository (HEAD + objects/ + refs/, or HEAD + commondir) and everything in it; the write
// that completes such a layout; any write of a file named HEAD (several writes decided at once
// could each find the layout incomplete). Plain files, reads of a plain HEAD and folders merely
// named like git's are not.
func TestGitSeesWhatGitWouldTakeAsItsOwn(t *testing.T) {
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mkTree(t, ws, "src/a.go", "bare/HEAD", "bare/objects/", "bare/refs/", "half/objects/", "half/refs/",
		"wt/HEAD", "wt/commondir", "two/HEAD", "two/objects/", "refs-only/refs/", "plain/HEAD")
	for _, tc := range []struct {
		p     string
		write bool
		git   bool
	}{
		{"src/a.go", true, false},
		{".git/config", true, true},
		{"sub/.GIT/hooks/pre-push", false, true},
		{".countersign/x", true, true},
		{"bare/config", true, true},
		{"bare/config", false, true},
		{"bare/hooks/post-checkout", true, true},
		{"half/HEAD", true, true},
		{"half/config", true, false},
		{"two/refs/heads/main", true, true},
		{"two/info/attributes", true, false},
		{"wt/config", true, true},
		{"refs-only/refs/heads/main", true, false},
		{"new/HEAD", true, true},
		{"plain/HEAD", false, false},
		{"objects/x", true, false},
	} {
		pl, err := Locate(ws, tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if why := pl.Git(tc.write); (why != "") != tc.git {
			t.Errorf("%s (write %v): Git = %q, want git's own %v", tc.p, tc.write, why, tc.git)
		}
	}
	// The workspace folder itself laid out: a write of its config completes nothing new but is
	// inside the repository.
	mkTree(t, ws, "HEAD", "objects/", "refs/")
	pl, _ := Locate(ws, "config")
	if why := pl.Git(true); why == "" {
		t.Errorf("config in a workspace laid out as a repository is not git's own")
	}
}

// TestIsOneOfPatterns: an entry ending in a pattern covers the files of its folder that match,
// whatever path reaches them, and nothing below or beside them.
func TestIsOneOfPatterns(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	scripts := filepath.Join(root, "scripts")
	mkTree(t, scripts, "demo.json", "notes.txt", "sub/x.json")
	files := []string{filepath.Join(root, "link", "*.json")}
	if err := os.Symlink(scripts, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"demo.json": true, "new.json": true, "notes.txt": false, "sub/x.json": false} {
		if got := IsOneOf(filepath.Join(scripts, p), files); got != want {
			t.Errorf("IsOneOf(%s) = %v, want %v", p, got, want)
		}
	}
}
