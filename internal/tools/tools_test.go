package tools

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/tool"
)

// fakeContext is the tool.Context of a test call: a workspace and nothing else.
type fakeContext struct{ workspace string }

func (f fakeContext) ToolCallID() string { return "c1" }
func (f fakeContext) SessionID() string  { return "s1" }
func (f fakeContext) Workspace() string  { return f.workspace }
func (f fakeContext) ExecuteTool(context.Context, string, any) tool.Outcome {
	return tool.Outcome{IsError: true, Result: tool.ErrorResult("no nested calls in tests")}
}

// Consent is no person's: Authorize (which allows everything here) decides every start.
func (f fakeContext) Consent() tool.Consent { return tool.Consent{} }
func (f fakeContext) Authorize(context.Context, string, any, string) tool.Authorization {
	return tool.Authorization{Allowed: true}
}

// mustTools registers Builtin(cfg) in a fresh registry, which compiles every schema, and returns
// the tools by name.
func mustTools(tb testing.TB, cfg Config) map[string]*tool.Tool {
	tb.Helper()
	reg := tool.NewRegistry()
	out := map[string]*tool.Tool{}
	for _, t := range Builtin(cfg) {
		if err := reg.Register(t); err != nil {
			tb.Fatalf("Register(%s): %v", t.Name, err)
		}
		out[t.Name] = t
	}
	return out
}

// call runs tool name with args (marshalled to JSON) in workspace, validating the arguments
// against the inputSchema first, as the pipeline does.
func call(tb testing.TB, tools map[string]*tool.Tool, name, workspace string, args any) (tool.Result, error) {
	tb.Helper()
	return callCtx(context.Background(), tb, tools, name, workspace, args, nil)
}

func callCtx(ctx context.Context, tb testing.TB, tools map[string]*tool.Tool, name, workspace string, args any, onUpdate func(tool.Update)) (tool.Result, error) {
	tb.Helper()
	t, ok := tools[name]
	if !ok {
		tb.Fatalf("no tool %s", name)
	}
	raw, err := json.Marshal(args)
	if err != nil {
		tb.Fatal(err)
	}
	if v := t.ValidateInput(raw); len(v) > 0 {
		tb.Fatalf("%s: arguments %s break the inputSchema: %v", name, raw, v)
	}
	return t.Execute(ctx, raw, onUpdate, fakeContext{workspace: workspace})
}

// mustSucceed checks that a call succeeded with structuredContent valid against the tool's own
// outputSchema, and decodes it into T.
func mustSucceed[T any](tb testing.TB, tools map[string]*tool.Tool, name string, res tool.Result, err error) T {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%s: error %v", name, err)
	}
	if res.IsError {
		tb.Fatalf("%s: isError result: %s", name, res.TextOf())
	}
	return mustStructured[T](tb, tools, name, res)
}

// mustStructured checks res's structuredContent against the tool's outputSchema (even for an
// isError result, whose shape is promised to be the same) and decodes it.
func mustStructured[T any](tb testing.TB, tools map[string]*tool.Tool, name string, res tool.Result) T {
	tb.Helper()
	if len(res.Content) == 0 || res.Content[0].Type != "text" || res.Content[0].Text == "" {
		tb.Errorf("%s: no text block: %+v", name, res.Content)
	}
	if v := tools[name].ValidateOutput(res.StructuredContent); len(v) > 0 {
		tb.Fatalf("%s: structuredContent %s violates the outputSchema: %v", name, res.StructuredContent, v)
	}
	var out T
	if err := json.Unmarshal(res.StructuredContent, &out); err != nil {
		tb.Fatal(err)
	}
	return out
}

// writeFiles creates files (path → content) under dir.
func writeFiles(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// snapshot lists every path under dir with its content ("<dir>" for folders, "-> target" for
// symlinks), to prove that nothing changed there.
func snapshot(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[p] = "-> " + target
		case d.IsDir():
			out[p] = "<dir>"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[p] = string(b)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func TestBuiltinDefinitions(t *testing.T) {
	tools := mustTools(t, Config{})
	type hints struct{ readOnly, destructive, idempotent, openWorld *bool }
	yes, no := tool.Bool(true), tool.Bool(false)
	tests := []struct {
		name string
		want hints
	}{
		{"read_file", hints{readOnly: yes, openWorld: no}},
		{"list_files", hints{readOnly: yes, openWorld: no}},
		{"write_file", hints{destructive: yes, openWorld: no}},
		{"run_command", hints{}}, // none at all, so it needs approval (SPEC §10)
		{"git_diff", hints{readOnly: yes, openWorld: no}},
		// They run workspace code: not read-only, open world, destructive not promised (issue 15).
		{"run_checks", hints{readOnly: no, openWorld: yes}},
		{"failing_tests", hints{readOnly: no, openWorld: yes}},
		{"review_diff", hints{readOnly: yes, openWorld: no}},
		{"codemode", hints{readOnly: yes, openWorld: no}},
	}
	if got, want := len(tools), len(tests); got != want {
		t.Errorf("len(Builtin) = %d, want %d", got, want)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, ok := tools[tt.name]
			if !ok {
				t.Fatalf("Builtin has no %s", tt.name)
			}
			a := tl.Annotations
			got := hints{a.ReadOnlyHint, a.DestructiveHint, a.IdempotentHint, a.OpenWorldHint}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("annotations = %s, want %s", fmtHints(got.readOnly, got.destructive, got.idempotent, got.openWorld),
					fmtHints(tt.want.readOnly, tt.want.destructive, tt.want.idempotent, tt.want.openWorld))
			}
			if !tl.HasOutputSchema() {
				t.Error("no outputSchema")
			}
			if tl.Title == "" || tl.Description == "" {
				t.Error("no title or description")
			}
		})
	}
}

func fmtHints(ps ...*bool) string {
	var parts []string
	for _, p := range ps {
		if p == nil {
			parts = append(parts, "absent")
		} else {
			parts = append(parts, strconv.FormatBool(*p))
		}
	}
	return strings.Join(parts, "/")
}

func TestReadFile(t *testing.T) {
	ws := t.TempDir()
	var long strings.Builder
	for i := 1; i <= 10; i++ {
		fmt.Fprintf(&long, "line %d\n", i)
	}
	writeFiles(t, ws, map[string]string{
		"a.txt":       "one\ntwo\nthree",
		"long.txt":    long.String(),
		"empty.txt":   "",
		"dir/b.txt":   "b\n",
		"binary.bin":  "a\x00b",
		"unicode.txt": "héllo wörld\n",
	})
	if err := os.Symlink("a.txt", filepath.Join(ws, "inner-link")); err != nil {
		t.Fatal(err)
	}
	tools := mustTools(t, Config{})
	tests := []struct {
		name string
		args map[string]any
		want ReadFileOutput
	}{
		{"whole file", map[string]any{"path": "a.txt"},
			ReadFileOutput{Path: "a.txt", Content: "one\ntwo\nthree", TotalLines: 3, Offset: 1, Lines: 3}},
		{"offset and limit", map[string]any{"path": "long.txt", "offset": 3, "limit": 2},
			ReadFileOutput{Path: "long.txt", Content: "line 3\nline 4\n", TotalLines: 10, Offset: 3, Lines: 2, Truncated: true}},
		{"limit past the end", map[string]any{"path": "long.txt", "offset": 9, "limit": 5},
			ReadFileOutput{Path: "long.txt", Content: "line 9\nline 10\n", TotalLines: 10, Offset: 9, Lines: 2}},
		{"empty file", map[string]any{"path": "empty.txt"},
			ReadFileOutput{Path: "empty.txt", Content: "", TotalLines: 0, Offset: 1, Lines: 0}},
		{"nested, with ..", map[string]any{"path": "dir/../dir/b.txt"},
			ReadFileOutput{Path: "dir/b.txt", Content: "b\n", TotalLines: 1, Offset: 1, Lines: 1}},
		{"absolute inside the workspace", map[string]any{"path": filepath.Join(ws, "dir", "b.txt")},
			ReadFileOutput{Path: "dir/b.txt", Content: "b\n", TotalLines: 1, Offset: 1, Lines: 1}},
		{"symlink inside the workspace", map[string]any{"path": "inner-link"},
			ReadFileOutput{Path: "a.txt", Content: "one\ntwo\nthree", TotalLines: 3, Offset: 1, Lines: 3}},
		{"unicode", map[string]any{"path": "unicode.txt"},
			ReadFileOutput{Path: "unicode.txt", Content: "héllo wörld\n", TotalLines: 1, Offset: 1, Lines: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := call(t, tools, "read_file", ws, tt.args)
			got := mustSucceed[ReadFileOutput](t, tools, "read_file", res, err)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}

	errTests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"missing", map[string]any{"path": "nope.txt"}, "no such file"},
		{"folder", map[string]any{"path": "dir"}, "is a folder"},
		{"binary", map[string]any{"path": "binary.bin"}, "binary file"},
		{"offset past the end", map[string]any{"path": "a.txt", "offset": 5}, "past the end"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, tools, "read_file", ws, tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestReadFileOutputCap(t *testing.T) {
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"big.txt": strings.Repeat("abcdefghi\n", 100)})
	tools := mustTools(t, Config{OutputCap: 35})
	res, err := call(t, tools, "read_file", ws, map[string]any{"path": "big.txt"})
	got := mustSucceed[ReadFileOutput](t, tools, "read_file", res, err)
	want := ReadFileOutput{Path: "big.txt", Content: "abcdefghi\nabcdefghi\nabcdefghi\nabcde", TotalLines: 100, Offset: 1, Lines: 4, Truncated: true}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if !strings.Contains(res.TextOf(), "offset=4") {
		t.Errorf("text %q does not say how to continue", res.TextOf())
	}
}

func TestListFiles(t *testing.T) {
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{
		"a.go":         "package a\n",
		"b.txt":        "bb",
		"sub/c.go":     "package c\n",
		"sub/d/e.go":   "package e\n",
		".git/HEAD":    "ref: refs/heads/main\n",
		".git/x/y.go":  "",
		"other/f.json": "{}",
	})
	tools := mustTools(t, Config{})
	tests := []struct {
		name string
		args map[string]any
		want ListFilesOutput
	}{
		{"everything but .git", map[string]any{}, ListFilesOutput{Path: ".", Files: []FileEntry{
			{Path: "a.go", Size: 10}, {Path: "b.txt", Size: 2}, {Path: "other", Dir: true}, {Path: "other/f.json", Size: 2},
			{Path: "sub", Dir: true}, {Path: "sub/c.go", Size: 10}, {Path: "sub/d", Dir: true}, {Path: "sub/d/e.go", Size: 10},
		}}},
		{"pattern", map[string]any{"pattern": "*.go"}, ListFilesOutput{Path: ".", Files: []FileEntry{
			{Path: "a.go", Size: 10}, {Path: "sub/c.go", Size: 10}, {Path: "sub/d/e.go", Size: 10},
		}}},
		{"subfolder", map[string]any{"path": "sub"}, ListFilesOutput{Path: "sub", Files: []FileEntry{
			{Path: "sub/c.go", Size: 10}, {Path: "sub/d", Dir: true}, {Path: "sub/d/e.go", Size: 10},
		}}},
		{"no match", map[string]any{"pattern": "*.rs"}, ListFilesOutput{Path: ".", Files: []FileEntry{}}},
		{"a file", map[string]any{"path": "sub/c.go"}, ListFilesOutput{Path: "sub/c.go", Files: []FileEntry{{Path: "sub/c.go", Size: 10}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := call(t, tools, "list_files", ws, tt.args)
			got := mustSucceed[ListFilesOutput](t, tools, "list_files", res, err)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}

	t.Run("bad pattern", func(t *testing.T) {
		_, err := call(t, tools, "list_files", ws, map[string]any{"pattern": "[a"})
		if err == nil {
			t.Error("no error for a malformed pattern")
		}
	})

	t.Run("capped", func(t *testing.T) {
		ws := t.TempDir()
		for i := range MaxListEntries + 5 {
			writeFiles(t, ws, map[string]string{fmt.Sprintf("f%04d.txt", i): ""})
		}
		res, err := call(t, tools, "list_files", ws, map[string]any{})
		got := mustSucceed[ListFilesOutput](t, tools, "list_files", res, err)
		if len(got.Files) != MaxListEntries || !got.Truncated {
			t.Errorf("got %d files, truncated %v; want %d, true", len(got.Files), got.Truncated, MaxListEntries)
		}
	})
}

func TestWriteFile(t *testing.T) {
	ws := t.TempDir()
	writeFiles(t, ws, map[string]string{"old.txt": "old"})
	tools := mustTools(t, Config{})
	tests := []struct {
		name    string
		path    string
		content string
		want    WriteFileOutput
		file    string // where the content must land, relative to ws
	}{
		{"new file in new folders", "a/b/new.txt", "hello\n", WriteFileOutput{Path: "a/b/new.txt", Bytes: 6, Created: true}, "a/b/new.txt"},
		{"replace", "old.txt", "new", WriteFileOutput{Path: "old.txt", Bytes: 3}, "old.txt"},
		{"absolute inside", filepath.Join(ws, "abs.txt"), "x", WriteFileOutput{Path: "abs.txt", Bytes: 1, Created: true}, "abs.txt"},
		{"empty content", "empty.txt", "", WriteFileOutput{Path: "empty.txt", Created: true}, "empty.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := call(t, tools, "write_file", ws, map[string]any{"path": tt.path, "content": tt.content})
			got := mustSucceed[WriteFileOutput](t, tools, "write_file", res, err)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			b, err := os.ReadFile(filepath.Join(ws, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(b), tt.content; got != want {
				t.Errorf("file content = %q, want %q", got, want)
			}
		})
	}
	t.Run("folder", func(t *testing.T) {
		_, err := call(t, tools, "write_file", ws, map[string]any{"path": "a", "content": "x"})
		if err == nil || !strings.Contains(err.Error(), "folder") {
			t.Errorf("err = %v, want a folder error", err)
		}
	})
}

// TestWorkspaceJail checks SPEC §9: a file tool path that resolves outside the workspace is an
// error and nothing is read or written.
func TestWorkspaceJail(t *testing.T) {
	base := t.TempDir()
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	writeFiles(t, ws, map[string]string{"inside.txt": "inside"})
	writeFiles(t, outside, map[string]string{"secret.txt": "secret"})
	for link, target := range map[string]string{
		"link-file": filepath.Join(outside, "secret.txt"),
		"link-dir":  outside,
		"rel-link":  "../outside",
		"dangling":  filepath.Join(outside, "new.txt"),
	} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	tools := mustTools(t, Config{})
	tests := []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": "../outside/secret.txt"}},
		{"read_file", map[string]any{"path": filepath.Join(outside, "secret.txt")}},
		{"read_file", map[string]any{"path": "link-file"}},
		{"read_file", map[string]any{"path": "link-dir/secret.txt"}},
		{"read_file", map[string]any{"path": "rel-link/secret.txt"}},
		{"read_file", map[string]any{"path": "/etc/hostname"}},
		{"write_file", map[string]any{"path": "../outside.txt", "content": "x"}},
		{"write_file", map[string]any{"path": "../outside/secret.txt", "content": "x"}},
		{"write_file", map[string]any{"path": filepath.Join(outside, "abs.txt"), "content": "x"}},
		{"write_file", map[string]any{"path": "link-file", "content": "x"}},
		{"write_file", map[string]any{"path": "link-dir/new.txt", "content": "x"}},
		{"write_file", map[string]any{"path": "link-dir/sub/new.txt", "content": "x"}},
		{"write_file", map[string]any{"path": "rel-link/new.txt", "content": "x"}},
		{"write_file", map[string]any{"path": "dangling", "content": "x"}},
		{"list_files", map[string]any{"path": ".."}},
		{"list_files", map[string]any{"path": "link-dir"}},
		{"list_files", map[string]any{"path": outside}},
	}
	for _, tt := range tests {
		t.Run(tt.tool+" "+fmt.Sprint(tt.args["path"]), func(t *testing.T) {
			before := snapshot(t, base)
			// Refused at argument validation, before the gate (SPEC §3 step 2)...
			raw, _ := json.Marshal(tt.args)
			if vs := tools[tt.tool].CheckInput(raw, ws); len(vs) != 1 || vs[0].Pointer != "/path" ||
				!strings.Contains(vs[0].Message, ErrOutsideWorkspace.Error()) {
				t.Errorf("CheckInput = %v, want one /path violation saying %q", vs, ErrOutsideWorkspace)
			}
			// ...and again when the tool runs, as the file system may have changed in between.
			res, err := call(t, tools, tt.tool, ws, tt.args)
			if err == nil {
				t.Fatalf("no error; result %s", res.TextOf())
			}
			if !errors.Is(err, ErrOutsideWorkspace) {
				t.Errorf("err = %v, want one wrapping ErrOutsideWorkspace", err)
			}
			if strings.Contains(err.Error(), "secret") && !strings.Contains(fmt.Sprint(tt.args["path"]), "secret") {
				t.Errorf("err %q leaks outside content", err)
			}
			if after := snapshot(t, base); !reflect.DeepEqual(after, before) {
				t.Errorf("files changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
	// Paths inside pass the check, existing or not.
	for _, in := range []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": "inside.txt"}},
		{"read_file", map[string]any{"path": filepath.Join(ws, "inside.txt")}},
		{"write_file", map[string]any{"path": "sub/dir/new.txt", "content": "x"}},
		{"list_files", map[string]any{}},
		{"list_files", map[string]any{"path": "."}},
	} {
		raw, _ := json.Marshal(in.args)
		if vs := tools[in.tool].CheckInput(raw, ws); vs != nil {
			t.Errorf("%s %s: CheckInput = %v, want none", in.tool, raw, vs)
		}
	}
}

func TestRunCommand(t *testing.T) {
	ws := t.TempDir()
	tools := mustTools(t, Config{})
	tests := []struct {
		name    string
		command string
		want    RunCommandOutput // DurationMs ignored
		text    []string
	}{
		{"non-zero exit is data", "echo out; echo err >&2; exit 3",
			RunCommandOutput{ExitCode: 3, Stdout: "out\n", Stderr: "err\n"}, []string{"Exit code 3", "out", "err"}},
		{"success", "printf hello", RunCommandOutput{Stdout: "hello"}, []string{"Exit code 0", "hello", "stderr: (empty)"}},
		{"runs in the workspace", "pwd", RunCommandOutput{Stdout: ws + "\n"}, nil},
		// A script the kernel runs with /bin/sh: $$ is its own pid (in the interpreter, the server's).
		{"killed by a signal", "printf '#!/bin/sh\\nkill -TERM $$\\n' > self.sh; chmod +x self.sh; ./self.sh", RunCommandOutput{ExitCode: 143}, nil},
		{"kill signals what the command started", "printf '#!/bin/sh\\necho $$ > kill.pid; exec sleep 30\\n' > job.sh; chmod +x job.sh; ./job.sh & while [ ! -s kill.pid ]; do sleep 0.01; done; kill -TERM $(cat kill.pid); wait; echo done",
			RunCommandOutput{Stdout: "done\n"}, nil},
		// In the interpreter $$ is the server's pid: kill refuses it, and the server lives on.
		{"kill never signals the server", "kill -TERM $$; echo alive",
			RunCommandOutput{ExitCode: 0, Stdout: "alive\n", Stderr: "kill: -TERM " + strconv.Itoa(os.Getpid()) + " would signal the Countersign server (in run_command's shell $$ is the server's process), so it was not sent\n"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := call(t, tools, "run_command", ws, map[string]any{"command": tt.command})
			got := mustSucceed[RunCommandOutput](t, tools, "run_command", res, err)
			got.DurationMs = 0
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			for _, s := range tt.text {
				if !strings.Contains(res.TextOf(), s) {
					t.Errorf("text %q does not contain %q", res.TextOf(), s)
				}
			}
		})
	}

	t.Run("commands get an allowlisted environment", func(t *testing.T) {
		t.Setenv("COUNTERSIGN_TOKEN", "owner-secret")
		t.Setenv("OPENAI_API_KEY", "sk-secret")
		t.Setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
		t.Setenv("SOME_SERVER_SETTING", "server-only")
		t.Setenv("PASSED_ON", "passed")
		t.Setenv("COUNTERSIGN_TEST_VISIBLE", "no")
		t.Setenv("HOME", "/home/someone")
		tools := mustTools(t, Config{Env: []string{"COUNTERSIGN_TEST_VISIBLE=yes"}, PassEnv: []string{"PASSED_ON"}})
		res, err := call(t, tools, "run_command", ws, map[string]any{"command": `echo "[$COUNTERSIGN_TOKEN][$OPENAI_API_KEY][$ANTHROPIC_API_KEY][$SOME_SERVER_SETTING][$PASSED_ON][$COUNTERSIGN_TEST_VISIBLE][$HOME][${PATH:+path}]"`})
		got := mustSucceed[RunCommandOutput](t, tools, "run_command", res, err)
		if want := "[][][][][passed][yes][/home/someone][path]\n"; got.Stdout != want {
			t.Errorf("stdout = %q, want %q", got.Stdout, want)
		}
	})

	t.Run("output cap", func(t *testing.T) {
		tools := mustTools(t, Config{OutputCap: 100})
		res, err := call(t, tools, "run_command", ws, map[string]any{
			"command": "i=0; while [ $i -lt 50 ]; do echo line$i; i=$((i+1)); done; echo small >&2",
		})
		got := mustSucceed[RunCommandOutput](t, tools, "run_command", res, err)
		if !got.Truncated || len(got.Stdout) != 100 || !strings.HasSuffix(got.Stdout, "line49\n") {
			t.Errorf("stdout %q (%d bytes), truncated %v; want its last 100 bytes, truncated", got.Stdout, len(got.Stdout), got.Truncated)
		}
		if got.Stderr != "small\n" {
			t.Errorf("stderr = %q, want %q", got.Stderr, "small\n")
		}
	})

	t.Run("cannot start", func(t *testing.T) {
		_, err := call(t, tools, "run_command", filepath.Join(ws, "missing"), map[string]any{"command": "true"})
		if err == nil || !errors.Is(err, errCannotStart) {
			t.Errorf("err = %v, want a cannot-start error", err)
		}
	})
}

func TestRunCommandTimeout(t *testing.T) {
	ws := t.TempDir()
	tools := mustTools(t, Config{})
	start := time.Now()
	res, err := call(t, tools, "run_command", ws, map[string]any{"command": "echo before; sleep 30", "timeoutMs": 300})
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("took %s", elapsed)
	}
	if !res.IsError {
		t.Error("isError = false, want true")
	}
	if got, want := res.TextOf(), "Command timed out after 300 ms"; !strings.HasPrefix(got, want) {
		t.Errorf("text = %q, want it to start with %q", got, want)
	}
	got := mustStructured[RunCommandOutput](t, tools, "run_command", res)
	if got.ExitCode != -1 || got.Stdout != "before\n" {
		t.Errorf("got %+v, want exitCode -1 and the output so far", got)
	}
}

// pidFrom waits for a command to write a pid to file.
func pidFrom(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(file)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", file)
	return 0
}

// waitDead waits until pid is gone (or a zombie nobody reaped yet).
func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// The state follows the parenthesised command name.
		if s := string(b); strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " Z") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("process %d still runs", pid)
	_ = exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
}

func TestRunCommandCancel(t *testing.T) {
	ws := t.TempDir()
	tools := mustTools(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type outcome struct {
		res tool.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := callCtx(ctx, t, tools, "run_command", ws, map[string]any{"command": "printf '#!/bin/sh\\necho $$ > child.pid; exec sleep 30\\n' > job.sh; chmod +x job.sh; ./job.sh & wait"}, nil)
		done <- outcome{res, err}
	}()
	child := pidFrom(t, filepath.Join(ws, "child.pid"))
	start := time.Now()
	cancel()
	select {
	case o := <-done:
		if o.err == nil {
			t.Errorf("no error after cancellation; result %s", o.res.TextOf())
		}
		if !errors.Is(o.err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", o.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run_command did not return after cancellation")
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("took %s to stop", elapsed)
	}
	waitDead(t, child)
}

func TestRunCommandStopsBackgroundProcesses(t *testing.T) {
	ws := t.TempDir()
	tools := mustTools(t, Config{})
	start := time.Now()
	res, err := call(t, tools, "run_command", ws, map[string]any{"command": "printf '#!/bin/sh\\necho $$ > bg.pid; exec sleep 30\\n' > job.sh; chmod +x job.sh; ./job.sh & while [ ! -s bg.pid ]; do sleep 0.01; done; echo started"})
	got := mustSucceed[RunCommandOutput](t, tools, "run_command", res, err)
	if got.Stdout != "started\n" {
		t.Errorf("stdout = %q", got.Stdout)
	}
	if elapsed := time.Since(start); elapsed > pipeGrace {
		t.Errorf("took %s: the background process kept the output open", elapsed)
	}
	waitDead(t, pidFrom(t, filepath.Join(ws, "bg.pid")))
}

// updates collects progress updates and notes any that come after the call returned.
type updates struct {
	mu       sync.Mutex
	list     []tool.Update
	returned bool
	late     int
}

func (u *updates) add(up tool.Update) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.returned {
		u.late++
	}
	u.list = append(u.list, up)
}

func (u *updates) finish() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.returned = true
}

func (u *updates) get() ([]tool.Update, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]tool.Update(nil), u.list...), u.late
}

func TestRunCommandProgress(t *testing.T) {
	ws := t.TempDir()
	tools := mustTools(t, Config{})
	var ups updates
	res, err := callCtx(context.Background(), t, tools, "run_command", ws,
		map[string]any{"command": "for i in 1 2 3; do echo line$i; sleep 0.2; done"}, ups.add)
	ups.finish()
	mustSucceed[RunCommandOutput](t, tools, "run_command", res, err)
	time.Sleep(3 * reportEvery)
	list, late := ups.get()
	if late > 0 {
		t.Errorf("%d updates after the call returned", late)
	}
	if len(list) < 2 {
		t.Fatalf("got %d updates, want at least 2: %+v", len(list), list)
	}
	last := list[len(list)-1]
	if !strings.HasPrefix(last.Message, "line") || len(last.Content) != 1 || !strings.Contains(last.Content[0].Text, "line1\n") {
		t.Errorf("last update %+v: want the latest line and the output so far", last)
	}
}

func TestReporterThrottles(t *testing.T) {
	var ups updates
	r := newReporter(ups.add)
	for i := range 1000 {
		r.update(func() tool.Update { return tool.Update{Progress: float64(i)} })
	}
	time.Sleep(2 * reportEvery)
	r.close()
	ups.finish()
	list, _ := ups.get()
	if len(list) < 1 || len(list) > 3 {
		t.Errorf("got %d updates for 1000 quick ones, want 1 to 3", len(list))
	}
	if got, want := list[len(list)-1].Progress, 999.0; got != want {
		t.Errorf("last progress = %v, want %v (the latest)", got, want)
	}
}

// git runs git in dir for a test.
func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func TestGitDiff(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	ws := t.TempDir()
	git(t, ws, "init", "-q")
	writeFiles(t, ws, map[string]string{"a.txt": "one\ntwo\n", "b.txt": "bye\n", "keep.txt": "same\n", ".gitignore": "*.log\n"})
	git(t, ws, "add", ".")
	git(t, ws, "commit", "-q", "-m", "first")
	writeFiles(t, ws, map[string]string{"a.txt": "one\n2\nthree\n", "c.txt": "new\nfile", "debug.log": "ignored\n"})
	if err := os.Remove(filepath.Join(ws, "b.txt")); err != nil {
		t.Fatal(err)
	}
	git(t, ws, "mv", "keep.txt", "kept é.txt")
	tools := mustTools(t, Config{})

	res, err := call(t, tools, "git_diff", ws, map[string]any{})
	got := mustSucceed[GitDiffOutput](t, tools, "git_diff", res, err)
	type summary struct {
		Path, Status         string
		Additions, Deletions int
		Untracked            bool
	}
	var sums []summary
	for _, f := range got.Files {
		sums = append(sums, summary{f.Path, f.Status, f.Additions, f.Deletions, f.Untracked})
		if !strings.HasPrefix(f.Patch, "diff --git a/"+cmp.Or(f.OldPath, f.Path)+" b/"+f.Path+"\n") {
			t.Errorf("%s: patch %q does not start with its header", f.Path, f.Patch)
		}
	}
	want := []summary{
		{"a.txt", "modified", 2, 1, false},
		{"b.txt", "deleted", 0, 1, false},
		{"kept é.txt", "renamed", 0, 0, false},
		{"c.txt", "added", 2, 0, true},
	}
	if !reflect.DeepEqual(sums, want) {
		t.Errorf("files = %+v, want %+v", sums, want)
	}
	if got.Base != "HEAD" || got.Truncated {
		t.Errorf("base %q, truncated %v; want HEAD, false", got.Base, got.Truncated)
	}
	if len(got.Files) == 4 {
		if p := got.Files[0].Patch; !strings.Contains(p, "-two\n+2\n+three\n") {
			t.Errorf("a.txt patch = %q", p)
		}
		if got.Files[2].OldPath != "keep.txt" {
			t.Errorf("rename: oldPath = %q, want keep.txt", got.Files[2].OldPath)
		}
		if p, want := got.Files[3].Patch, "diff --git a/c.txt b/c.txt\nnew file mode 100644\n--- /dev/null\n+++ b/c.txt\n@@ -0,0 +1,2 @@\n+new\n+file\n\\ No newline at end of file\n"; p != want {
			t.Errorf("c.txt patch = %q, want %q", p, want)
		}
	}
	if !strings.Contains(res.TextOf(), "4 files changed against HEAD") {
		t.Errorf("text = %q", res.TextOf())
	}

	t.Run("against a base", func(t *testing.T) {
		git(t, ws, "add", "-A")
		git(t, ws, "commit", "-q", "-m", "second")
		res, err := call(t, tools, "git_diff", ws, map[string]any{"base": "HEAD~1"})
		got := mustSucceed[GitDiffOutput](t, tools, "git_diff", res, err)
		if got.Base != "HEAD~1" || len(got.Files) != 4 {
			t.Errorf("got %+v, want 4 files against HEAD~1", got)
		}
		res, err = call(t, tools, "git_diff", ws, map[string]any{})
		got = mustSucceed[GitDiffOutput](t, tools, "git_diff", res, err)
		if len(got.Files) != 0 || res.TextOf() != "No changes against HEAD." {
			t.Errorf("clean tree: got %+v, text %q", got, res.TextOf())
		}
	})

	t.Run("no commits yet", func(t *testing.T) {
		ws := t.TempDir()
		git(t, ws, "init", "-q")
		writeFiles(t, ws, map[string]string{"x.txt": "x\n", "staged.txt": "s\n"})
		git(t, ws, "add", "staged.txt")
		res, err := call(t, tools, "git_diff", ws, map[string]any{})
		got := mustSucceed[GitDiffOutput](t, tools, "git_diff", res, err)
		if len(got.Files) != 2 || got.Files[0].Path != "staged.txt" || got.Files[1].Path != "x.txt" {
			t.Errorf("got %+v, want staged.txt and x.txt", got)
		}
	})

	errTests := []struct {
		name string
		ws   string
		args map[string]any
		want string
	}{
		{"not a repository", t.TempDir(), map[string]any{}, "not a git repository"},
		{"unknown base", ws, map[string]any{"base": "no-such-branch"}, "no-such-branch"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, tools, "git_diff", tt.ws, tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	t.Run("option as base", func(t *testing.T) {
		if v := tools["git_diff"].ValidateInput(json.RawMessage(`{"base": "--output=/tmp/x"}`)); len(v) == 0 {
			t.Error("inputSchema accepts a base starting with -")
		}
		if _, err := gitDiff(context.Background(), Config{}.withDefaults(), ws, "--output=x"); err == nil {
			t.Error("no error for a base starting with -")
		}
		if _, err := os.Stat(filepath.Join(ws, "x")); err == nil {
			t.Error("git wrote the --output file")
		}
	})
}

func TestGitDiffPatchCap(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	ws := t.TempDir()
	git(t, ws, "init", "-q")
	writeFiles(t, ws, map[string]string{"big.txt": "", "small.txt": ""})
	git(t, ws, "add", ".")
	git(t, ws, "commit", "-q", "-m", "first")
	writeFiles(t, ws, map[string]string{"big.txt": strings.Repeat("a line of text\n", 200), "small.txt": "x\n"})
	tools := mustTools(t, Config{OutputCap: 1024})
	res, err := call(t, tools, "git_diff", ws, map[string]any{})
	got := mustSucceed[GitDiffOutput](t, tools, "git_diff", res, err)
	if len(got.Files) != 2 || !got.Truncated {
		t.Fatalf("got %+v, want 2 files, truncated", got)
	}
	big, small := got.Files[0], got.Files[1]
	if !big.Truncated || len(big.Patch) > 256 || big.Additions != 200 || !strings.HasSuffix(big.Patch, "\n") {
		t.Errorf("big.txt: %d bytes of patch, truncated %v, +%d", len(big.Patch), big.Truncated, big.Additions)
	}
	if small.Truncated || !strings.HasSuffix(small.Patch, "+x\n") {
		t.Errorf("small.txt patch %q, truncated %v: want it whole", small.Patch, small.Truncated)
	}
}

// brokenModule copies testdata/gomod (module example.com/broken: calc has a failing test
// TestSub, greet a vet finding) to a temporary workspace.
func brokenModule(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go not installed")
	}
	ws := t.TempDir()
	if err := os.CopyFS(ws, os.DirFS("testdata/gomod")); err != nil {
		t.Fatal(err)
	}
	return ws
}

// goEnv keeps the copied module on its own, whatever go.work the environment points at.
var goEnv = []string{"GOWORK=off"}

func TestRunChecks(t *testing.T) {
	ws := brokenModule(t)
	tools := mustTools(t, Config{Env: goEnv})
	var ups updates
	res, err := callCtx(context.Background(), t, tools, "run_checks", ws, map[string]any{}, ups.add)
	ups.finish()
	got := mustSucceed[RunChecksOutput](t, tools, "run_checks", res, err)
	if got.Passed || len(got.Checks) != 1 {
		t.Fatalf("got %+v, want one failing check", got)
	}
	c := got.Checks[0]
	if c.Name != "vet" || c.Command != "go vet ./..." || c.Status != "fail" || c.ExitCode == 0 {
		t.Errorf("check = %+v, want vet failing", c)
	}
	want := CheckMessage{File: "greet/greet.go", Line: 7, Column: 2, Text: "self-assignment of name"}
	if !reflect.DeepEqual(c.Messages, []CheckMessage{want}) {
		t.Errorf("messages = %+v, want [%+v]", c.Messages, want)
	}
	if !strings.Contains(res.TextOf(), "greet/greet.go:7:2: self-assignment of name") {
		t.Errorf("text = %q", res.TextOf())
	}
	if list, _ := ups.get(); len(list) == 0 || list[0].Total != 1 {
		t.Errorf("updates = %+v, want progress per check", list)
	}
}

func TestRunChecksConfigured(t *testing.T) {
	ws := t.TempDir()
	other := t.TempDir()
	cfg := Config{
		Checks: []Check{{Name: "ok", Command: "echo fine"}},
		Workspaces: map[string]WorkspaceConfig{ws: {Checks: []Check{
			{Name: "ok", Command: "true"},
			{Name: "lint", Command: "echo 'x.go:3: too long'; echo \"$PWD/y.go:1:5: bad\"; echo '\tmore detail'; exit 2"},
			{Name: "missing", Command: "no-such-command-countersign"},
		}}},
	}
	tools := mustTools(t, cfg)
	tests := []struct {
		name   string
		ws     string
		checks []string
		want   RunChecksOutput
	}{
		{"workspace's own checks", ws, nil, RunChecksOutput{Checks: []CheckResult{
			{Name: "ok", Command: "true", Status: "pass", Messages: []CheckMessage{}},
			{Name: "lint", Command: cfg.Workspaces[ws].Checks[1].Command, Status: "fail", ExitCode: 2, Messages: []CheckMessage{
				{File: "x.go", Line: 3, Text: "too long"},
				{File: "y.go", Line: 1, Column: 5, Text: "bad\n\tmore detail"},
			}},
			{Name: "missing", Command: "no-such-command-countersign", Status: "error", ExitCode: 127, Messages: []CheckMessage{
				{Text: "/bin/sh: 1: no-such-command-countersign: not found"},
			}},
		}}},
		{"by name", ws, []string{"ok"}, RunChecksOutput{Passed: true, Checks: []CheckResult{
			{Name: "ok", Command: "true", Status: "pass", Messages: []CheckMessage{}},
		}}},
		{"default checks elsewhere", other, nil, RunChecksOutput{Passed: true, Checks: []CheckResult{
			{Name: "ok", Command: "echo fine", Status: "pass", Messages: []CheckMessage{{Text: "fine"}}},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := map[string]any{}
			if tt.checks != nil {
				args["checks"] = tt.checks
			}
			res, err := call(t, tools, "run_checks", tt.ws, args)
			got := mustSucceed[RunChecksOutput](t, tools, "run_checks", res, err)
			// Shells word "not found" differently; compare the gist.
			for i := range got.Checks {
				for j, m := range got.Checks[i].Messages {
					if strings.Contains(m.Text, "not found") {
						got.Checks[i].Messages[j].Text = "/bin/sh: 1: no-such-command-countersign: not found"
					}
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	t.Run("unknown check", func(t *testing.T) {
		_, err := call(t, tools, "run_checks", ws, map[string]any{"checks": []string{"nope"}})
		if err == nil || !strings.Contains(err.Error(), `unknown check "nope"`) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestFailingTests(t *testing.T) {
	ws := brokenModule(t)
	tools := mustTools(t, Config{Env: goEnv})
	var ups updates
	res, err := callCtx(context.Background(), t, tools, "failing_tests", ws, map[string]any{}, ups.add)
	ups.finish()
	got := mustSucceed[FailingTestsOutput](t, tools, "failing_tests", res, err)
	if len(got.Failures) != 1 {
		t.Fatalf("failures = %+v, want one", got.Failures)
	}
	f := got.Failures[0]
	if f.Package != "example.com/broken/calc" || f.Test != "TestSub" || !strings.Contains(f.Output, "Sub(5, 3) = 8, want 2") {
		t.Errorf("failure = %+v, want calc TestSub with its output", f)
	}
	if got.Passed != 1 || got.Failed != 1 || got.Packages != 2 || got.Truncated {
		t.Errorf("counts: %+v, want passed 1, failed 1, 2 packages", got)
	}
	if !strings.Contains(res.TextOf(), "FAIL example.com/broken/calc TestSub") {
		t.Errorf("text = %q", res.TextOf())
	}
	if list, _ := ups.get(); len(list) == 0 || !strings.Contains(list[len(list)-1].Message, "packages done") {
		t.Errorf("updates = %+v, want progress", list)
	}

	t.Run("one package", func(t *testing.T) {
		res, err := call(t, tools, "failing_tests", ws, map[string]any{"packages": []string{"./greet"}})
		got := mustSucceed[FailingTestsOutput](t, tools, "failing_tests", res, err)
		want := FailingTestsOutput{Failures: []TestFailure{}, Packages: 1}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("build failure", func(t *testing.T) {
		writeFiles(t, ws, map[string]string{"calc/oops.go": "package calc\n\nfunc oops() int { return \"x\" }\n"})
		defer os.Remove(filepath.Join(ws, "calc", "oops.go"))
		res, err := call(t, tools, "failing_tests", ws, map[string]any{"packages": []string{"./calc"}})
		got := mustSucceed[FailingTestsOutput](t, tools, "failing_tests", res, err)
		if len(got.Failures) != 1 || got.Failures[0].Test != "" || !strings.Contains(got.Failures[0].Output, "oops.go:3") {
			t.Errorf("failures = %+v, want calc's build failure", got.Failures)
		}
	})
	t.Run("no such package", func(t *testing.T) {
		res, err := call(t, tools, "failing_tests", ws, map[string]any{"packages": []string{"./nosuch"}})
		got := mustSucceed[FailingTestsOutput](t, tools, "failing_tests", res, err)
		if len(got.Failures) != 1 || !strings.Contains(got.Failures[0].Output, "nosuch") {
			t.Errorf("failures = %+v, want a setup failure naming ./nosuch", got.Failures)
		}
	})
	t.Run("not a test stream", func(t *testing.T) {
		tools := mustTools(t, Config{TestCommand: "echo oops >&2; exit 1; :"})
		_, err := call(t, tools, "failing_tests", ws, map[string]any{})
		if err == nil || !strings.Contains(err.Error(), "oops") {
			t.Errorf("err = %v, want one with the command's stderr", err)
		}
	})
}

func TestParseMessages(t *testing.T) {
	ws := "/work/ws"
	tests := []struct {
		name   string
		output string
		want   []CheckMessage
	}{
		{"vet", "# example.com/x\n./a.go:10:2: bad thing\n", []CheckMessage{{File: "a.go", Line: 10, Column: 2, Text: "bad thing"}}},
		{"vet type error", "vet: sub/b.go:3:7: undefined: x\n", []CheckMessage{{File: "sub/b.go", Line: 3, Column: 7, Text: "undefined: x"}}},
		{"absolute inside", "/work/ws/c.go:1: no column\n", []CheckMessage{{File: "c.go", Line: 1, Text: "no column"}}},
		{"absolute outside", "/elsewhere/d.go:2:3: x\n", []CheckMessage{{File: "/elsewhere/d.go", Line: 2, Column: 3, Text: "x"}}},
		{"continuation", "e.go:1:1: first\n\tsecond\n", []CheckMessage{{File: "e.go", Line: 1, Column: 1, Text: "first\n\tsecond"}}},
		{"plain", "something odd\n\n", []CheckMessage{{Text: "something odd"}}},
		{"empty", "", []CheckMessage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, truncated := parseMessages(ws, tt.output, 10)
			if !reflect.DeepEqual(got, tt.want) || truncated {
				t.Errorf("got %+v (truncated %v), want %+v", got, truncated, tt.want)
			}
		})
	}
	got, truncated := parseMessages(ws, "a\nb\nc\n", 2)
	if len(got) != 2 || !truncated {
		t.Errorf("got %d messages, truncated %v; want 2, true", len(got), truncated)
	}
}

func TestCapture(t *testing.T) {
	tests := []struct {
		name   string
		tail   bool
		writes []string
		want   string
		trunc  bool
	}{
		{"head under", false, []string{"ab", "c"}, "abc", false},
		{"head over", false, []string{"abcd", "efgh"}, "abcde", true},
		{"tail under", true, []string{"ab", "c"}, "abc", false},
		{"tail over", true, []string{"abcd", "efgh", "ijklmnop"}, "lmnop", true},
		{"tail on a rune boundary", true, []string{"ééé"}, "éé", true}, // 6 bytes; the last 5 start inside "é"
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCapture(5, tt.tail)
			for _, w := range tt.writes {
				c.write([]byte(w))
			}
			if got := c.String(); got != tt.want || c.truncated() != tt.trunc {
				t.Errorf("got %q (truncated %v), want %q (%v)", got, c.truncated(), tt.want, tt.trunc)
			}
		})
	}
}

// TestDiffTextSaysOneFileInTheSingular (issue 34): one changed file is "1 file changed", not
// "1 files changed".
func TestDiffTextSaysOneFileInTheSingular(t *testing.T) {
	for _, tt := range []struct {
		files []DiffFile
		want  string
	}{
		{[]DiffFile{{Path: "a.txt", Additions: 1}}, "1 file changed against HEAD, +1 -0\n"},
		{[]DiffFile{{Path: "a.txt", Additions: 1}, {Path: "b.txt", Deletions: 2}}, "2 files changed against HEAD, +1 -2\n"},
	} {
		if got := diffText(GitDiffOutput{Base: "HEAD", Files: tt.files}); !strings.HasPrefix(got, tt.want) {
			t.Errorf("diffText: got %q, want it to start %q", got, tt.want)
		}
	}
}
