package tools

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestGitDiffRunsNoRepositoryPrograms: git_diff is read-only, so nothing the repository's
// configuration names runs: no filter driver (clean, smudge, long-running process; one marked
// required, one whose name has a dot), no external diff (diff.external, diff.<driver>.command),
// no textconv, no fsmonitor hook. Each would touch a marker outside the workspace. The diff still
// shows the changes, with the raw content.
func TestGitDiffRunsNoRepositoryPrograms(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	base := t.TempDir()
	ws, marks := filepath.Join(base, "ws"), filepath.Join(base, "marks")
	for _, d := range []string{ws, marks} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	git(t, ws, "init", "-q")
	writeFiles(t, ws, map[string]string{
		".gitattributes": "*.txt filter=evil diff=evil\n*.md filter=ev.il\n",
		"a.txt":          "one\n",
		"b.md":           "# b\n",
	})
	git(t, ws, "add", ".")
	git(t, ws, "commit", "-q", "-m", "first")
	// The programs, configured after the commit so that the commit itself ran none.
	touch := func(name string) string { return "touch " + filepath.Join(marks, name) }
	for _, kv := range [][2]string{
		{"filter.evil.clean", touch("clean") + "; cat"},
		{"filter.evil.smudge", touch("smudge") + "; cat"},
		{"filter.evil.process", touch("process")},
		{"filter.evil.required", "true"},
		{"filter.ev.il.clean", touch("dotted-clean") + "; cat"},
		{"diff.external", touch("external")},
		{"diff.evil.command", touch("diff-command")},
		{"diff.evil.textconv", touch("textconv") + "; cat"},
		{"core.fsmonitor", touch("fsmonitor")},
	} {
		git(t, ws, "config", kv[0], kv[1])
	}
	writeFiles(t, ws, map[string]string{"a.txt": "one\ntwo two\n", "b.md": "# b\n\nmore\n", "new.txt": "new\n"})
	tools := mustTools(t, Config{})

	res, callErr := call(t, tools, "git_diff", ws, map[string]any{})
	entries, err := os.ReadDir(marks)
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	for _, e := range entries {
		ran = append(ran, e.Name())
	}
	if len(ran) > 0 {
		t.Errorf("git_diff ran repository programs: %v", ran)
	}
	got := mustSucceed[GitDiffOutput](t, tools, "git_diff", res, callErr)
	var files []string
	for _, f := range got.Files {
		files = append(files, f.Path+" "+f.Status)
	}
	if want := []string{"a.txt modified", "b.md modified", "new.txt added"}; !reflect.DeepEqual(files, want) {
		t.Errorf("files %v, want %v", files, want)
	}
	if len(got.Files) > 0 && !strings.Contains(got.Files[0].Patch, "+two two\n") {
		t.Errorf("a.txt patch %q, want the raw change", got.Files[0].Patch)
	}
}

func TestNeutralFilters(t *testing.T) {
	list := "core.bare\nfalse\x00filter.lfs.clean\ngit-lfs clean -- %f\x00filter.lfs.required\ntrue\x00" +
		"filter.My.Driver.smudge\nx\x00filter.lfs.process\ny\x00diff.evil.command\nz\x00filter\x00filter.bare\x00"
	got := neutralFilters(list)
	want := []string{
		"GIT_CONFIG_KEY_0=filter.lfs.clean", "GIT_CONFIG_VALUE_0=",
		"GIT_CONFIG_KEY_1=filter.lfs.smudge", "GIT_CONFIG_VALUE_1=",
		"GIT_CONFIG_KEY_2=filter.lfs.process", "GIT_CONFIG_VALUE_2=",
		"GIT_CONFIG_KEY_3=filter.lfs.required", "GIT_CONFIG_VALUE_3=false",
		"GIT_CONFIG_KEY_4=filter.My.Driver.clean", "GIT_CONFIG_VALUE_4=",
		"GIT_CONFIG_KEY_5=filter.My.Driver.smudge", "GIT_CONFIG_VALUE_5=",
		"GIT_CONFIG_KEY_6=filter.My.Driver.process", "GIT_CONFIG_VALUE_6=",
		"GIT_CONFIG_KEY_7=filter.My.Driver.required", "GIT_CONFIG_VALUE_7=false",
		"GIT_CONFIG_COUNT=8",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("neutralFilters =\n%q\nwant\n%q", got, want)
	}
	if got := neutralFilters("core.bare\nfalse\x00"); got != nil {
		t.Errorf("no filters: %q, want nil", got)
	}
}
