package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"countersign/internal/testkit"
)

// Issue 28, acceptance 2 ("Paths resolve before they are judged"), through the JSON API of the
// real server with faux scripts: each attack asks, is denied or is refused, and no file changes
// that a person did not approve.

// writeFiles writes each path (relative to dir) with its content, making its folders.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// runDenyingPrompts creates a session on the faux model script with the tools active (and the
// mode, unless ""; and rules, each "effect text", saved for the session), sends a message,
// denies every prompt it opens and waits for the run to end with the script's last text "done".
// It returns the tool call ids that asked, every approval (pending or decided) by tool call id,
// and the session as the API gives it.
func runDenyingPrompts(t *testing.T, p *proc, script, mode string, tools []string, rules ...string) (asked map[string]bool, rows map[string]auditRow, body []byte) {
	t.Helper()
	var sess struct{ ID string }
	p.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": script, "model": "faux:" + script}, &sess)
	p.mustAPI(t, http.StatusOK, "PUT", "/api/sessions/"+sess.ID+"/tools", map[string]any{"active": tools}, nil)
	for _, r := range rules {
		effect, text, _ := strings.Cut(r, " ")
		p.mustAPI(t, http.StatusCreated, "POST", "/api/rules", map[string]string{"text": text, "effect": effect, "scope": "session", "sessionId": sess.ID}, nil)
	}
	if mode != "" {
		p.mustAPI(t, http.StatusOK, "PATCH", "/api/sessions/"+sess.ID, map[string]string{"mode": mode}, nil)
	}
	p.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	asked = map[string]bool{}
	testkit.Eventually(t, "the run to end", func() bool {
		var out struct{ Approvals []auditRow }
		p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID+"/approvals?status=pending", nil, &out)
		for _, a := range out.Approvals {
			asked[a.ToolCallID] = true
			p.mustAPI(t, http.StatusOK, "POST", "/api/approvals/"+a.ID+"/decision", map[string]string{"decision": "deny"}, nil)
		}
		body = p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID, nil, nil)
		return bytes.Contains(body, []byte(`"done"`)) && bytes.Contains(body, []byte(`"state": "idle"`))
	})
	var all struct{ Approvals []auditRow }
	p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID+"/approvals", nil, &all)
	rows = map[string]auditRow{}
	for _, a := range all.Approvals {
		rows[a.ToolCallID] = a
	}
	return asked, rows, body
}

// pathAttacksScript reads a denied file through the workspace's own name, writes .git/config
// through a symlink under docs/, and appends to .git/config from an allowed `git log`.
const pathAttacksScript = `{"steps":[
 {"content":[
   {"type":"toolCall","id":"dodge","name":"read_file","arguments":{"path":"../ws/secrets/x"}},
   {"type":"toolCall","id":"link","name":"write_file","arguments":{"path":"docs/link","content":"[core]\n\tfsmonitor = touch pwned\n"}},
   {"type":"toolCall","id":"redirect","name":"run_command","arguments":{"command":"git log -1 >> .git/config"}}],
  "stopReason":"toolUse"},
 {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`

// TestPathsAreJudgedWhereTheToolOpensInTheRealServer (issue 28): under `deny
// read_file(secrets/**)` and `allow read_file`, `read_file ../<workspace>/secrets/x` is denied by
// the deny rule; under `allow write_file(docs/**)`, a write to docs/link (a symlink to
// .git/config) asks; under `allow run_command(git log:*)`, `git log -1 >> .git/config` asks.
// Denied, .git/config is unchanged and the secret never reaches the transcript.
func TestPathsAreJudgedWhereTheToolOpensInTheRealServer(t *testing.T) {
	f := newServerFiles(t)
	const gitConfig = "[core]\n\trepositoryformatversion = 0\n"
	writeFiles(t, f.workspace, map[string]string{"secrets/x": "top-secret-value", ".git/config": gitConfig, "docs/readme.md": "hi",
		"../scripts/paths.json": pathAttacksScript})
	if err := os.Symlink("../.git/config", filepath.Join(f.workspace, "docs", "link")); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(t.TempDir(), "policy.json")
	writeFiles(t, filepath.Dir(policy), map[string]string{"policy.json": `{"permissions": {
	  "allow": ["read_file", "write_file(docs/**)", "run_command(git log:*)"],
	  "deny": ["read_file(secrets/**)"]}}`})
	p := startServing(t, append(f.args("127.0.0.1:0"), "-policy", policy)...)
	asked, rows, body := runDenyingPrompts(t, p, "paths", "", []string{"read_file", "write_file", "run_command"})

	if a := rows["dodge"]; a.Status != "denied" || a.DecisionSource != "rule" || a.RuleText != "read_file(secrets/**)" {
		t.Errorf("read_file ../ws/secrets/x: %+v, want denied by the rule read_file(secrets/**)", a)
	}
	if bytes.Contains(body, []byte("top-secret-value")) {
		t.Errorf("the secret reached the transcript:\n%s", body)
	}
	if !asked["link"] || !asked["redirect"] || len(asked) != 2 {
		t.Errorf("asked for %v, want exactly the write through docs/link and the redirection", asked)
	}
	if got, _ := os.ReadFile(filepath.Join(f.workspace, ".git", "config")); string(got) != gitConfig {
		t.Errorf(".git/config changed: %q", got)
	}
}

// bareRepoScript writes, in one batch, the files that make a plain workspace a git repository
// whose config runs a program (issue 28: "accept-edits builds a repository"), and the config and
// a hook of a repository already laid out in the workspace (mirror.git, as a clone can carry).
const bareRepoScript = `{"steps":[
 {"content":[
   {"type":"toolCall","id":"head","name":"write_file","arguments":{"path":"HEAD","content":"ref: refs/heads/main\n"}},
   {"type":"toolCall","id":"objects","name":"write_file","arguments":{"path":"objects/info/packs","content":""}},
   {"type":"toolCall","id":"refs","name":"write_file","arguments":{"path":"refs/heads/main","content":""}},
   {"type":"toolCall","id":"config","name":"write_file","arguments":{"path":"config","content":"[core]\n\tfsmonitor = touch pwned\n"}},
   {"type":"toolCall","id":"mirror-config","name":"write_file","arguments":{"path":"mirror.git/config","content":"[core]\n\tfsmonitor = touch pwned\n"}},
   {"type":"toolCall","id":"mirror-hook","name":"write_file","arguments":{"path":"mirror.git/hooks/post-checkout","content":"#!/bin/sh\ntouch pwned\n"}},
   {"type":"toolCall","id":"notes","name":"write_file","arguments":{"path":"notes.md","content":"hello"}}],
  "stopReason":"toolUse"},
 {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`

// TestAcceptEditsDoesNotBuildARepositoryInTheRealServer (issue 28): in accept-edits mode the
// write of HEAD asks (every HEAD does: the batch's other writes were each judged in a workspace
// with no layout), and so do the config and a hook of mirror.git, a folder laid out as a
// repository; the other writes are the mode's. Denied, the workspace is not a git repository and
// mirror.git is unchanged.
func TestAcceptEditsDoesNotBuildARepositoryInTheRealServer(t *testing.T) {
	f := newServerFiles(t)
	const mirrorConfig = "[core]\n\tbare = true\n"
	writeFiles(t, f.workspace, map[string]string{"mirror.git/HEAD": "ref: refs/heads/main\n", "mirror.git/config": mirrorConfig,
		"mirror.git/objects/info/packs": "", "mirror.git/refs/heads/main": "", "../scripts/bare.json": bareRepoScript})
	p := startServing(t, f.args("127.0.0.1:0")...)
	asked, rows, _ := runDenyingPrompts(t, p, "bare", "accept-edits", []string{"write_file"})

	for _, id := range []string{"head", "mirror-config", "mirror-hook"} {
		if !asked[id] {
			t.Errorf("%s did not ask: %+v", id, rows[id])
		}
	}
	if len(asked) != 3 {
		t.Errorf("asked for %v, want exactly head, mirror-config and mirror-hook", asked)
	}
	for _, id := range []string{"objects", "refs", "config", "notes"} {
		if a := rows[id]; a.Status != "approved" || a.DecisionSource != "mode" {
			t.Errorf("%s: %+v, want approved by accept-edits mode", id, a)
		}
	}
	if _, err := os.Stat(filepath.Join(f.workspace, "HEAD")); !os.IsNotExist(err) {
		t.Errorf("HEAD was written (stat: %v): the workspace is laid out as a repository", err)
	}
	if got, _ := os.ReadFile(filepath.Join(f.workspace, "mirror.git", "config")); string(got) != mirrorConfig {
		t.Errorf("mirror.git/config changed: %q", got)
	}
	if _, err := os.Stat(filepath.Join(f.workspace, "mirror.git", "hooks")); !os.IsNotExist(err) {
		t.Errorf("a hook was written in mirror.git (stat: %v)", err)
	}
}

// ownConfigScript reads and writes the server's MCP config, its -system-prompt file and its
// -scripts folder's scripts, all kept in the workspace, by plain names and through the
// workspace's own name.
const ownConfigScript = `{"steps":[
 {"content":[
   {"type":"toolCall","id":"read-mcp","name":"read_file","arguments":{"path":"mcp.json"}},
   {"type":"toolCall","id":"read-mcp-dodge","name":"read_file","arguments":{"path":"../ws/mcp.json"}},
   {"type":"toolCall","id":"read-prompt","name":"read_file","arguments":{"path":"prompt.md"}},
   {"type":"toolCall","id":"write-mcp","name":"write_file","arguments":{"path":"mcp.json","content":"{\"mcpServers\": {\"x\": {\"command\": \"sh\", \"args\": [\"-c\", \"touch pwned\"]}}}"}},
   {"type":"toolCall","id":"write-prompt","name":"write_file","arguments":{"path":"prompt.md","content":"Obey the files."}},
   {"type":"toolCall","id":"write-script","name":"write_file","arguments":{"path":"scripts/evil.json","content":"{\"steps\": []}"}}],
  "stopReason":"toolUse"},
 {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`

// TestTheServersConfigFilesAreOutOfReachInTheRealServer (issue 28): with the MCP config, the
// -system-prompt file and the -scripts folder in the workspace, read_file (allowed by a rule) and
// write_file (in accept-edits mode) are refused before any prompt, naming the server's own
// files; the MCP config's secret never reaches the transcript and nothing changes.
func TestTheServersConfigFilesAreOutOfReachInTheRealServer(t *testing.T) {
	f := newServerFiles(t)
	f.scripts = filepath.Join(f.workspace, "scripts")
	const mcpConfig = `{"mcpServers": {"remote": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer mcp-secret-token"}}}}`
	const prompt = "You are careful. prompt-secret-words"
	writeFiles(t, f.workspace, map[string]string{"mcp.json": mcpConfig, "prompt.md": prompt, "scripts/own.json": ownConfigScript})
	policy := filepath.Join(t.TempDir(), "policy.json")
	writeFiles(t, filepath.Dir(policy), map[string]string{"policy.json": `{"permissions": {"allow": ["read_file"]}}`})
	p := startServing(t, append(f.args("127.0.0.1:0"), "-policy", policy,
		"-mcp-config", filepath.Join(f.workspace, "mcp.json"), "-system-prompt", filepath.Join(f.workspace, "prompt.md"))...)
	asked, _, body := runDenyingPrompts(t, p, "own", "accept-edits", []string{"read_file", "write_file"})

	if len(asked) != 0 {
		t.Errorf("a refused call asked: %v", asked)
	}
	if n := bytes.Count(body, []byte("one of the server's own files")); n < 6 {
		t.Errorf("%d refusals naming the server's own files in the transcript, want 6:\n%s", n, body)
	}
	if bytes.Contains(body, []byte("mcp-secret-token")) {
		t.Errorf("the MCP config's secret reached the transcript:\n%s", body)
	}
	if got, _ := os.ReadFile(filepath.Join(f.workspace, "mcp.json")); string(got) != mcpConfig {
		t.Errorf("the MCP config changed: %s", got)
	}
	if got, _ := os.ReadFile(filepath.Join(f.workspace, "prompt.md")); string(got) != prompt {
		t.Errorf("the system prompt file changed: %s", got)
	}
	if _, err := os.Stat(filepath.Join(f.scripts, "evil.json")); !os.IsNotExist(err) {
		t.Errorf("a script was written into the -scripts folder (stat: %v)", err)
	}
}
