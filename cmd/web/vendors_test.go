package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A vendor setting the models refuse (ANTHROPIC_THINKING) refuses to start, naming the variable,
// before the database exists (SPEC §9, §17).
func TestABadVendorSettingRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "cs.db")
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_THINKING": "lots"}
	var stdout bytes.Buffer
	err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "-db", db, "-workspace", t.TempDir()},
		func(k string) string { return env[k] }, &stdout, io.Discard)
	want := `ANTHROPIC_THINKING: thinking "lots": want off, adaptive, or a budget of at least 1024 tokens`
	if err == nil || err.Error() != want {
		t.Fatalf("run: %v, want %q", err, want)
	}
	if _, err := os.Stat(filepath.Dir(db)); !os.IsNotExist(err) {
		t.Errorf("the database folder exists after a refused start (stat: %v)", err)
	}
	if stdout.Len() > 0 {
		t.Errorf("a refused start printed %q", stdout.String())
	}
}
