package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A bad policy file refuses to start (SPEC §14): run returns "file:line:col: reason" for each
// kind of error, and neither the database nor its folder exists afterwards.
func TestABadPolicyFileRefusesToStart(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string // want after "<file>:"
	}{
		{"syntax error", "{\"permissions\": {\"allow\": [\"read_file\",]}}", `1:40: invalid character ']' looking for beginning of value`},
		{"unknown effect", "{\"rules\": [\n  {\"effect\": \"block\", \"tool\": \"x\"}]}", `2:14: unknown effect "block" (want allow, ask or deny)`},
		{"bad specifier", "{\"permissions\": {\n \"deny\": [\"write_file(docs/[**)\"]}}", `2:11: rule "write_file(docs/[**)": path specifier "docs/[**" is not a valid glob`},
		{"CEL error", "{\"rules\": [{\"effect\": \"deny\", \"tool\": \"pay__*\",\n   \"when\": \"args.amount >\"}]}", "2:12: when: ERROR: <input>:1:14: Syntax error: mismatched input '<EOF>'"},
		{"unknown mode", `{"permissions": {"defaultMode": "yolo"}}`, `1:33: unknown mode "yolo" (want default, plan or accept-edits)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "policy.json")
			if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(dir, "data", "cs.db")
			args := []string{"-addr", "127.0.0.1:0", "-db", db, "-workspace", t.TempDir(), "-policy", file}
			var stdout bytes.Buffer
			err := run(context.Background(), args, func(string) string { return "" }, &stdout, io.Discard)
			if err == nil || !strings.HasPrefix(err.Error(), file+":"+tc.want) {
				t.Fatalf("run: %v\nwant the error to start with %s:%s", err, file, tc.want)
			}
			if _, err := os.Stat(filepath.Dir(db)); !os.IsNotExist(err) {
				t.Errorf("the database folder exists after a refused start (stat: %v)", err)
			}
			if stdout.Len() > 0 {
				t.Errorf("a refused start printed %q", stdout.String())
			}
		})
	}
}

// COUNTERSIGN_POLICY is read like -policy, which wins; a refused file through the environment
// names the file.
func TestPolicyFileFromTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"rules": [{"effect": "deny"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "cs.db"), "-workspace", t.TempDir()}
	err := run(context.Background(), args, func(k string) string {
		if k == "COUNTERSIGN_POLICY" {
			return bad
		}
		return ""
	}, io.Discard, io.Discard)
	if err == nil || err.Error() != bad+`:1:12: a rule needs "tool"` {
		t.Fatalf("run: %v, want %s:1:12: a rule needs \"tool\"", err, bad)
	}
}

// A valid policy file's rules are listed read-only by the API, and its defaultMode is a new
// session's mode.
func TestAPolicyFilesRulesAndDefaultModeApply(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(file, []byte(`{"permissions": {"allow": ["run_command(git status)"], "deny": ["run_command(rm:*)"], "defaultMode": "plan"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	login := startServer(t, []string{"-policy", file, "-token", testToken}, nil)
	base := login[:strings.Index(login, "/login")]
	api := func(method, path, body string, out any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode/100 != 2 {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("%s %s: %s %s", method, path, res.Status, b)
		}
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	var rs struct {
		Rules []struct {
			Text, Effect, Source string
			ReadOnly             bool
		}
	}
	api("GET", "/api/rules", "", &rs)
	got := []string{}
	for _, r := range rs.Rules {
		if !r.ReadOnly || r.Source != "policy-file" {
			t.Errorf("rule %+v is not read-only from the policy file", r)
		}
		got = append(got, r.Effect+" "+r.Text)
	}
	if want := "allow run_command(git status), deny run_command(rm:*)"; strings.Join(got, ", ") != want {
		t.Errorf("rules %q, want %q", strings.Join(got, ", "), want)
	}
	var sess struct{ Mode string }
	api("POST", "/api/sessions", `{"title": "t", "model": "faux:demo"}`, &sess)
	if sess.Mode != "plan" {
		t.Errorf("a new session's mode is %q, want the policy file's plan", sess.Mode)
	}
}
