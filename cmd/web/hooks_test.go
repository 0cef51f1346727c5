package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDoorOneInTheRealServer: the server as it runs — a policy file's Bash rules, a connection
// made through the API — answers Claude Code's recorded PreToolUse: a rule allows
// `Bash(git status)`, a `deny Bash(rm:*)` blocks with its reason, any other command is held
// and, nobody deciding, answered with no verdict before the hook's timeout; the revoked
// connection's next hook is 401.
func TestDoorOneInTheRealServer(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(file, []byte(`{"permissions": {"allow": ["Bash(git status)"], "deny": ["Bash(rm:*)"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	login := startServer(t, []string{"-policy", file, "-token", testToken}, nil)
	base := login[:strings.Index(login, "/login")]
	do := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+auth)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	st, body := do("POST", "/api/connections", testToken, `{"label": "laptop", "kind": "claude-code"}`)
	var conn struct {
		Token      string
		Connection struct{ ID string }
	}
	if err := json.Unmarshal([]byte(body), &conn); err != nil || st != 201 || conn.Token == "" {
		t.Fatalf("POST /api/connections: %d %s", st, body)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "internal", "hooks", "testdata", "claude-code", "http-PreToolUse.body.json"))
	if err != nil {
		t.Fatal(err)
	}
	hook := func(command, query string) (int, string) {
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		m["tool_input"] = map[string]any{"command": command}
		b, _ := json.Marshal(m)
		return do("POST", "/hooks/claude-code"+query, conn.Token, string(b))
	}
	for _, c := range []struct{ command, want string }{
		{"git status", `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"rule Bash(git status) allows git status"}}`},
		{"rm -rf build", `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"rule Bash(rm:*) denies rm -rf build"}}`},
	} {
		if st, got := hook(c.command, ""); st != 200 || got != c.want {
			t.Errorf("%s: %d %s\nwant %s", c.command, st, got, c.want)
		}
	}
	start := time.Now()
	if st, got := hook("touch proof", "?timeout=2"); st != 200 || got != "{}" || time.Since(start) >= 2*time.Second {
		t.Errorf("a held call: %d %s after %v, want no verdict before 2 s", st, got, time.Since(start))
	}
	if st, _ := do("DELETE", "/api/connections/"+conn.Connection.ID, testToken, ""); st != 200 {
		t.Fatalf("revoke: %d", st)
	}
	if st, got := hook("git status", ""); st != 401 || strings.Contains(got, "allow") {
		t.Errorf("the revoked connection's next hook: %d %s, want 401", st, got)
	}
}
