package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// specialWorkspace is a workspace holding a regular file, a named pipe (fifo), a symlink to it, a
// unix socket (sock) and, where the test may create one, a character device (null, like
// /dev/null). It returns the workspace and whether the device exists.
func specialWorkspace(t *testing.T) (ws string, device bool) {
	t.Helper()
	ws = t.TempDir()
	writeFiles(t, ws, map[string]string{"plain.txt": "plain\n"})
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fifo", filepath.Join(ws, "to-fifo")); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(ws, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	// Major 1, minor 3 is /dev/null on Linux; creating it needs CAP_MKNOD.
	device = syscall.Mknod(filepath.Join(ws, "null"), syscall.S_IFCHR|0o666, 1<<8|3) == nil
	return ws, device
}

// returnsWithin runs f in a goroutine and fails the test if it does not return within 5 s: an
// open of a named pipe that blocks shows up as a failure, not a hung suite. On a timeout it
// opens the pipe's other ends without blocking, which releases an open waiting on them.
func returnsWithin[T any](t *testing.T, what, fifo string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(5 * time.Second):
		for _, flag := range []int{os.O_RDONLY, os.O_WRONLY} {
			if fh, err := os.OpenFile(fifo, flag|syscall.O_NONBLOCK, 0); err == nil {
				defer fh.Close()
			}
		}
		t.Fatalf("%s did not return within 5s (blocked on the named pipe?)", what)
		panic("unreachable")
	}
}

type callResult struct {
	text string
	err  error
}

// TestSpecialFilesAreNotOpened (issue 15, item 6): read_file, write_file and the write_file
// preview refuse a named pipe, a socket, a device (and a symlink to a pipe) at once, naming the
// kind, instead of blocking in open; write_file leaves the file as it was; list_files lists them
// without opening them.
func TestSpecialFilesAreNotOpened(t *testing.T) {
	ws, device := specialWorkspace(t)
	fifo := filepath.Join(ws, "fifo")
	tools := mustTools(t, Config{})
	kinds := []struct{ path, kind string }{
		{"fifo", "named pipe"},
		{"to-fifo", "named pipe"},
		{"sock", "socket"},
		{"null", "character device"},
	}
	for _, k := range kinds {
		if k.path == "null" && !device {
			t.Log("no permission to create a device: its cases are skipped")
			continue
		}
		want := k.path + " is not a regular file (" + k.kind + ")"
		if k.path == "to-fifo" {
			want = "fifo is not a regular file (named pipe)" // the resolved path
		}
		t.Run("read_file "+k.path, func(t *testing.T) {
			got := returnsWithin(t, "read_file", fifo, func() callResult {
				res, err := call(t, tools, "read_file", ws, map[string]any{"path": k.path})
				return callResult{res.TextOf(), err}
			})
			if got.err == nil || !strings.Contains(got.err.Error(), want) || !errors.Is(got.err, ErrNotRegular) {
				t.Errorf("read_file %s: err %v (result %q), want one containing %q", k.path, got.err, got.text, want)
			}
		})
		t.Run("preview "+k.path, func(t *testing.T) {
			type preview struct {
				content string
				exists  bool
				err     error
			}
			got := returnsWithin(t, "ReadForPreview", fifo, func() preview {
				c, e, err := ReadForPreview(ws, k.path, 1<<20)
				return preview{c, e, err}
			})
			if got.err == nil || !strings.Contains(got.err.Error(), want) || !got.exists {
				t.Errorf("ReadForPreview %s: %q, exists %v, err %v; want exists and an error containing %q", k.path, got.content, got.exists, got.err, want)
			}
		})
		t.Run("write_file "+k.path, func(t *testing.T) {
			before, err := os.Lstat(filepath.Join(ws, k.path))
			if err != nil {
				t.Fatal(err)
			}
			got := returnsWithin(t, "write_file", fifo, func() callResult {
				res, err := call(t, tools, "write_file", ws, map[string]any{"path": k.path, "content": "x"})
				return callResult{res.TextOf(), err}
			})
			if got.err == nil || !strings.Contains(got.err.Error(), want) || !errors.Is(got.err, ErrNotRegular) {
				t.Errorf("write_file %s: err %v (result %q), want one containing %q", k.path, got.err, got.text, want)
			}
			after, err := os.Lstat(filepath.Join(ws, k.path))
			if err != nil || after.Mode() != before.Mode() {
				t.Errorf("%s after write_file: %v, %v; want it unchanged (%v)", k.path, after, err, before.Mode())
			}
		})
	}
	t.Run("list_files", func(t *testing.T) {
		got := returnsWithin(t, "list_files", fifo, func() callResult {
			res, err := call(t, tools, "list_files", ws, map[string]any{})
			return callResult{res.TextOf(), err}
		})
		if got.err != nil {
			t.Fatal(got.err)
		}
		for _, name := range []string{"fifo", "sock", "to-fifo", "plain.txt"} {
			if !strings.Contains(got.text, name) {
				t.Errorf("list_files %q does not list %s", got.text, name)
			}
		}
	})
	t.Run("a regular file still reads and writes", func(t *testing.T) {
		res, err := call(t, tools, "read_file", ws, map[string]any{"path": "plain.txt"})
		if out := mustSucceed[ReadFileOutput](t, tools, "read_file", res, err); out.Content != "plain\n" {
			t.Errorf("read_file plain.txt = %q", out.Content)
		}
		res, err = call(t, tools, "write_file", ws, map[string]any{"path": "plain.txt", "content": "new"})
		mustSucceed[WriteFileOutput](t, tools, "write_file", res, err)
		if b, err := os.ReadFile(filepath.Join(ws, "plain.txt")); err != nil || string(b) != "new" {
			t.Errorf("plain.txt = %q, %v; want %q", b, err, "new")
		}
	})
}

// TestOpenRegularRefusesASwappedPipe: the check that holds when a regular file is swapped for a
// named pipe between a tool's Stat and its open: the open itself does not block (for reading or
// writing, with or without a process at the other end) and the pipe is refused.
func TestOpenRegularRefusesASwappedPipe(t *testing.T) {
	ws, _ := specialWorkspace(t)
	fifo := filepath.Join(ws, "fifo")
	j, err := openJail(ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, tc := range []struct {
		name string
		flag int
	}{
		{"read", os.O_RDONLY},
		{"write", os.O_WRONLY | os.O_CREATE | os.O_TRUNC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := returnsWithin(t, "openRegular", fifo, func() error {
				f, _, err := j.openRegular("fifo", tc.flag, 0o644)
				if f != nil {
					f.Close()
				}
				return err
			})
			if !errors.Is(err, ErrNotRegular) || !strings.HasPrefix(err.Error(), "fifo is not a regular file") {
				t.Errorf("openRegular(fifo) err = %v, want fifo is not a regular file", err)
			}
		})
	}
	t.Run("write with a reader at the other end", func(t *testing.T) {
		r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		err = returnsWithin(t, "openRegular", fifo, func() error {
			f, _, err := j.openRegular("fifo", os.O_WRONLY|os.O_TRUNC, 0)
			if f != nil {
				f.Close()
			}
			return err
		})
		if want := "fifo is not a regular file (named pipe)"; err == nil || err.Error() != want {
			t.Errorf("openRegular(fifo) err = %v, want %q", err, want)
		}
	})
}

// TestSpecialFilesAreRefusedBeforeThePrompt: read_file and write_file refuse a named pipe,
// socket, device or folder at argument validation (SPEC §3 step 2), so nobody is asked to
// approve a call that could only fail (found by a new-user review: write_file to a FIFO asked,
// then failed). list_files still takes a folder, and a path that does not exist yet passes.
func TestSpecialFilesAreRefusedBeforeThePrompt(t *testing.T) {
	ws, device := specialWorkspace(t)
	byName := mustTools(t, Config{})
	refused := map[string]string{"fifo": "named pipe", "to-fifo": "named pipe", "sock": "socket", ".": "folder"}
	if device {
		refused["null"] = "character device"
	}
	for _, name := range []string{"read_file", "write_file"} {
		for path, kind := range refused {
			args := json.RawMessage(fmt.Sprintf(`{"path": %q, "content": "x"}`, path))
			vs := byName[name].CheckInput(args, ws)
			if len(vs) != 1 || vs[0].Pointer != "/path" || !strings.Contains(vs[0].Message, "is not a regular file ("+kind+")") {
				t.Errorf("%s %s: violations %v, want one at /path naming a %s", name, path, vs, kind)
			}
		}
		for _, path := range []string{"plain.txt", "new/file.txt"} {
			if vs := byName[name].CheckInput(json.RawMessage(fmt.Sprintf(`{"path": %q, "content": "x"}`, path)), ws); len(vs) != 0 {
				t.Errorf("%s %s: violations %v, want none", name, path, vs)
			}
		}
	}
	if vs := byName["list_files"].CheckInput(json.RawMessage(`{"path": "."}`), ws); len(vs) != 0 {
		t.Errorf("list_files .: violations %v, want none", vs)
	}
}
