package tools

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerFilesAreOutOfReach: read_file and write_file never touch the server's own files
// (SPEC §14: the agent can never write its own rules) — not by name, not through a symlink or a
// hard link in the workspace, not a companion that does not exist yet — and say so before the
// prompt (InputCheck) and again when they run; other files work as before.
func TestServerFilesAreOutOfReach(t *testing.T) {
	ws := t.TempDir()
	db := filepath.Join(ws, "countersign.db")
	policy := filepath.Join(t.TempDir(), "policy.json")
	for f, content := range map[string]string{db: "SQLite format 3", policy: `{"permissions": {}}`, filepath.Join(ws, "plain.txt"): "hello"} {
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(db, filepath.Join(ws, "soft.db")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(db, filepath.Join(ws, "hard.db")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(policy, filepath.Join(ws, "policy-copy.json")); err != nil {
		t.Skipf("no hard link across folders here: %v", err)
	}
	cfg := Config{Protected: Protected{db, db + "-wal", db + "-shm", policy}}
	byName := mustTools(t, cfg)
	for _, name := range []string{"read_file", "write_file"} {
		for _, path := range []string{"countersign.db", "./sub/../countersign.db", db, "soft.db", "hard.db", "countersign.db-wal", "policy-copy.json"} {
			args := map[string]any{"path": path}
			if name == "write_file" {
				args["content"] = "INSERT INTO rules"
			}
			raw, _ := json.Marshal(args)
			vs := byName[name].CheckInput(raw, ws)
			if len(vs) != 1 || vs[0].Pointer != "/path" || !strings.Contains(vs[0].Message, "one of the server's own files") {
				t.Errorf("%s %s: violations %v, want one at /path naming the server's own files", name, path, vs)
			}
			if _, err := call(t, byName, name, ws, args); !errors.Is(err, ErrProtected) {
				t.Errorf("%s %s ran: err %v, want ErrProtected", name, path, err)
			}
		}
		if vs := byName[name].CheckInput(json.RawMessage(`{"path": "plain.txt", "content": "x"}`), ws); len(vs) != 0 {
			t.Errorf("%s plain.txt: violations %v, want none", name, vs)
		}
	}
	for f, want := range map[string]string{db: "SQLite format 3", policy: `{"permissions": {}}`} {
		if got, _ := os.ReadFile(f); string(got) != want {
			t.Errorf("%s now holds %q", f, got)
		}
	}
	if _, err := os.Stat(db + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the -wal file was created: %v", err)
	}
	if res, err := call(t, byName, "read_file", ws, map[string]any{"path": "plain.txt"}); err != nil || !strings.Contains(res.TextOf(), "hello") {
		t.Errorf("read_file plain.txt = %q, %v", res.TextOf(), err)
	}
}

// TestRelativeServerFilesAreOutOfReach: `make run` passes the database as a relative path
// ("countersign.db", relative to the server's working folder): it is protected all the same.
func TestRelativeServerFilesAreOutOfReach(t *testing.T) {
	ws := t.TempDir()
	t.Chdir(ws)
	if err := os.WriteFile(filepath.Join(ws, "countersign.db"), []byte("SQLite format 3"), 0o600); err != nil {
		t.Fatal(err)
	}
	byName := mustTools(t, Config{Protected: Protected{"countersign.db", "countersign.db-wal"}})
	for _, path := range []string{"countersign.db", "countersign.db-wal"} {
		raw, _ := json.Marshal(map[string]string{"path": path, "content": "x"})
		if vs := byName["write_file"].CheckInput(raw, ws); len(vs) != 1 || !strings.Contains(vs[0].Message, "one of the server's own files") {
			t.Errorf("write_file %s: violations %v, want the server's own files", path, vs)
		}
	}
}

// TestProtectedConfigFilesAndScripts (issue 28): the MCP config, the -system-prompt file and the
// -scripts folder's scripts (an entry "<folder>/*.json") are refused by read_file and write_file
// whatever path reaches them — by name, through the workspace's own name, through a symlink —
// while another file of the scripts folder's kind elsewhere is not.
func TestProtectedConfigFilesAndScripts(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, "ws")
	scripts := filepath.Join(ws, "scripts")
	for f, content := range map[string]string{
		filepath.Join(ws, "mcp.json"):       `{"mcpServers": {"x": {"command": "x", "env": {"TOKEN": "secret"}}}}`,
		filepath.Join(ws, "prompt.md"):      "You are careful.",
		filepath.Join(scripts, "demo.json"): `{"steps": []}`,
		filepath.Join(ws, "data.json"):      "{}",
	} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("mcp.json", filepath.Join(ws, "cfg")); err != nil {
		t.Fatal(err)
	}
	byName := mustTools(t, Config{Protected: Protected{filepath.Join(ws, "mcp.json"), filepath.Join(ws, "prompt.md"), filepath.Join(scripts, "*.json")}})
	for _, name := range []string{"read_file", "write_file"} {
		for _, p := range []string{"mcp.json", "../ws/mcp.json", "cfg", "prompt.md", "scripts/demo.json", "scripts/new.json", "./scripts/../scripts/demo.json"} {
			args := map[string]any{"path": p}
			if name == "write_file" {
				args["content"] = "x"
			}
			raw, _ := json.Marshal(args)
			if vs := byName[name].CheckInput(raw, ws); len(vs) != 1 || !strings.Contains(vs[0].Message, "one of the server's own files") {
				t.Errorf("%s %s: violations %v, want the server's own files", name, p, vs)
			}
			if _, err := call(t, byName, name, ws, args); !errors.Is(err, ErrProtected) {
				t.Errorf("%s %s ran: err %v, want ErrProtected", name, p, err)
			}
		}
	}
	if res, err := call(t, byName, "read_file", ws, map[string]any{"path": "data.json"}); err != nil || !strings.Contains(res.TextOf(), "{}") {
		t.Errorf("read_file data.json = %q, %v", res.TextOf(), err)
	}
	if _, err := os.Stat(filepath.Join(scripts, "new.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a new script was written: %v", err)
	}
}
