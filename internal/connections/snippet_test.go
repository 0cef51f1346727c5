package connections_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"countersign/internal/apperr"
	"countersign/internal/connections"
	"countersign/internal/hookclient"
)

var update = flag.Bool("update", false, "rewrite testdata/snippets/ from MakeSnippet")

const (
	testBase  = "http://127.0.0.1:8080"
	testToken = "cs_agent_abcdefghijklmnopqrstuvwxyz234567"
)

func snippet(t *testing.T, kind connections.Kind) connections.Snippet {
	t.Helper()
	s, err := connections.MakeSnippet(connections.Connection{ID: "c0ffee", Label: "alice's laptop", Kind: kind}, testToken, testBase+"/")
	if err != nil {
		t.Fatalf("MakeSnippet(%s): %v", kind, err)
	}
	return s
}

// readJSON decodes a file of testdata/recorded-configs (copied from ../shared/agents/recorded/configs).
func readRecorded(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "recorded-configs", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTheClaudeCodeSnippetUsesOnlyWhatTheRealAgentAccepted holds the Claude Code snippet to the
// settings Claude Code 2.1.328 accepted here (recorded-configs/cc-*.json): the same nesting
// (event → [{matcher?, hooks: [hook]}]), no field name those files do not use, only events they
// configure, and for every event an HTTP hook to /hooks/claude-code with the bearer header read
// from the token variable, which allowedEnvVars lets through. PreToolUse and PermissionRequest
// block when Countersign cannot answer; the reporting events do not.
func TestTheClaudeCodeSnippetUsesOnlyWhatTheRealAgentAccepted(t *testing.T) {
	type hookGroup map[string]json.RawMessage
	type settings struct {
		Hooks map[string][]hookGroup `json:"hooks"`
	}
	groupKeys, hookKeys, events := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, name := range []string{"cc-http-all.json", "cc-http-block.json", "cc-http-headers.json", "cc-http.json", "cc-mcp.json"} {
		var rec settings
		if err := json.Unmarshal(readRecorded(t, name), &rec); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for ev, groups := range rec.Hooks {
			events[ev] = true
			for _, g := range groups {
				for k := range g {
					groupKeys[k] = true
				}
				var hs []map[string]json.RawMessage
				if err := json.Unmarshal(g["hooks"], &hs); err != nil {
					t.Fatal(err)
				}
				for _, h := range hs {
					for k := range h {
						hookKeys[k] = true
					}
				}
			}
		}
	}

	s := snippet(t, connections.ClaudeCode)
	if !s.Verified || s.Format != "json" || !strings.Contains(s.Where, ".claude/settings.json") {
		t.Errorf("snippet %+v", s)
	}
	var whole map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s.Text), &whole); err != nil || len(whole) != 1 || whole["hooks"] == nil {
		t.Fatalf("the snippet is not a whole {\"hooks\": …} settings object: %v\n%s", err, s.Text)
	}
	type hook struct {
		Type           string            `json:"type"`
		URL            string            `json:"url"`
		Timeout        int               `json:"timeout"`
		Headers        map[string]string `json:"headers"`
		AllowedEnvVars []string          `json:"allowedEnvVars"`
		OnFailure      string            `json:"onFailure"`
	}
	var got settings
	if err := json.Unmarshal([]byte(s.Text), &got); err != nil {
		t.Fatal(err)
	}
	var order []string
	dec := json.NewDecoder(strings.NewReader(string(whole["hooks"])))
	dec.Token()
	for dec.More() {
		tok, _ := dec.Token()
		order = append(order, tok.(string))
		var skip json.RawMessage
		dec.Decode(&skip)
	}
	if want := []string{"PreToolUse", "PermissionRequest", "PostToolUse", "UserPromptSubmit", "Stop", "SessionEnd"}; !slices.Equal(order, want) {
		t.Fatalf("events %v, want %v", order, want)
	}
	for _, ev := range order {
		if !events[ev] {
			t.Errorf("event %s is configured by no recorded settings", ev)
		}
		groups := got.Hooks[ev]
		if len(groups) != 1 {
			t.Fatalf("%s: %d groups", ev, len(groups))
		}
		for k := range groups[0] {
			if !groupKeys[k] {
				t.Errorf("%s: group field %q is in no recorded settings", ev, k)
			}
		}
		tool := ev == "PreToolUse" || ev == "PermissionRequest" || ev == "PostToolUse"
		if m := string(groups[0]["matcher"]); tool != (m == `"*"`) {
			t.Errorf("%s: matcher %s", ev, m)
		}
		var raw []map[string]json.RawMessage
		json.Unmarshal(groups[0]["hooks"], &raw)
		var hs []hook
		json.Unmarshal(groups[0]["hooks"], &hs)
		if len(hs) != 1 {
			t.Fatalf("%s: %d hooks", ev, len(hs))
		}
		for k := range raw[0] {
			if !hookKeys[k] {
				t.Errorf("%s: hook field %q is in no recorded settings", ev, k)
			}
		}
		h := hs[0]
		gates := ev == "PreToolUse" || ev == "PermissionRequest"
		wantTimeout, wantFailure := connections.ReportTimeout, ""
		if gates {
			wantTimeout, wantFailure = 600, "block"
		}
		if h.Type != "http" || h.URL != testBase+"/hooks/claude-code?timeout="+strconv.Itoa(wantTimeout) || h.Timeout != wantTimeout || h.OnFailure != wantFailure ||
			h.Headers["Authorization"] != "Bearer $COUNTERSIGN_AGENT_TOKEN" || len(h.Headers) != 1 ||
			!slices.Equal(h.AllowedEnvVars, []string{"COUNTERSIGN_AGENT_TOKEN"}) {
			t.Errorf("%s: hook %+v", ev, h)
		}
	}
}

// TestTheCodexSnippetHasTheRecordedShapeAndItsCommandReachesTheServer holds the Codex snippet to
// the config.toml Codex 0.169.0 accepted (recorded-configs/codex-config*.toml): only lines of the
// forms those files use, events they configure; then runs each hook's command line through
// countersign-hook's own code (hookclient.Main) against a test server: it posts to
// /hooks/codex with the token from the environment and the hook's timeout.
func TestTheCodexSnippetHasTheRecordedShapeAndItsCommandReachesTheServer(t *testing.T) {
	recorded := string(readRecorded(t, "codex-config-all.toml"))
	table := regexp.MustCompile(`^\[\[hooks\.(\w+)(\.hooks)?\]\]$`)
	keyValue := regexp.MustCompile(`^(matcher|type|command|timeout) = (".*"|\d+)$`)
	s := snippet(t, connections.Codex)
	if !s.Verified || s.Format != "toml" || !strings.Contains(s.Where, ".codex/config.toml") {
		t.Errorf("snippet %+v", s)
	}
	var (
		events   []string
		commands []string
		timeouts []int
	)
	for i, line := range strings.Split(strings.TrimRight(s.Text, "\n"), "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case table.MatchString(line):
			m := table.FindStringSubmatch(line)
			if !strings.Contains(recorded, "[[hooks."+m[1]+"]]") {
				t.Errorf("line %d: event %s is configured in no recorded config", i+1, m[1])
			}
			if m[2] == "" {
				events = append(events, m[1])
			}
		case keyValue.MatchString(line):
			m := keyValue.FindStringSubmatch(line)
			if strings.HasPrefix(m[2], `"`) {
				v, err := strconv.Unquote(m[2]) // the TOML basic strings here hold nothing Go quotes differently
				if err != nil || strings.ContainsAny(v, `"\`) {
					t.Errorf("line %d: %s is not a plain basic string", i+1, m[2])
				}
				if m[1] == "command" {
					commands = append(commands, v)
				}
			} else if m[1] == "timeout" {
				n, _ := strconv.Atoi(m[2])
				timeouts = append(timeouts, n)
			}
		default:
			t.Errorf("line %d %q has a form no recorded config has", i+1, line)
		}
	}
	if want := []string{"PreToolUse", "PermissionRequest", "PostToolUse", "UserPromptSubmit", "Stop"}; !slices.Equal(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
	if len(commands) != len(events) || len(timeouts) != len(events) {
		t.Fatalf("%d commands, %d timeouts for %d events", len(commands), len(timeouts), len(events))
	}
	if !strings.Contains(s.Text, "--fail-closed") || strings.Count(s.Text, "--fail-closed") != 2 {
		t.Errorf("the fail-closed option is not offered for PreToolUse and PermissionRequest:\n%s", s.Text)
	}

	type hit struct{ path, auth, timeout string }
	var hits []hit
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		hits = append(hits, hit{r.URL.Path, r.Header.Get("Authorization"), r.Header.Get(hookclient.HeaderTimeout)})
	}))
	defer srv.Close()
	for i, cmd := range commands {
		words := strings.Fields(strings.ReplaceAll(cmd, "'"+testBase+"'", srv.URL))
		if words[0] != "countersign-hook" || words[1] != "hook" {
			t.Fatalf("command %q", cmd)
		}
		var stderr bytes.Buffer
		env := map[string]string{hookclient.TokenEnv: testToken}
		code := hookclient.Main(words[2:], strings.NewReader(`{"hook_event_name":"`+events[i]+`"}`), io.Discard, &stderr, func(k string) string { return env[k] })
		if code != 0 {
			t.Fatalf("%s: countersign-hook exited %d: %s", events[i], code, stderr.String())
		}
		if want := (hit{"/hooks/codex", "Bearer " + testToken, strconv.Itoa(timeouts[i])}); hits[i] != want {
			t.Errorf("%s: the server got %+v, want %+v", events[i], hits[i], want)
		}
	}
	if hookclient.TokenEnv != connections.TokenEnv {
		t.Errorf("countersign-hook reads %s, the snippets export %s", hookclient.TokenEnv, connections.TokenEnv)
	}
}

// TestASnippetHoldsTheTokenOnlyInItsExportLine: the configuration names the variable; the token
// is in the export line alone, so the page can show the configuration again without a secret.
func TestASnippetHoldsTheTokenOnlyInItsExportLine(t *testing.T) {
	for _, k := range connections.Kinds() {
		s := snippet(t, k)
		if strings.Contains(s.Text, testToken) || strings.Contains(s.Unreachable, testToken) || strings.Contains(strings.Join(s.Notes, " "), testToken) {
			t.Errorf("%s: the token is in the snippet's text", k)
		}
		if s.Export != "export COUNTERSIGN_AGENT_TOKEN="+testToken {
			t.Errorf("%s: export line %q", k, s.Export)
		}
		// The HTTP kinds name the variable in their headers; the command kinds run
		// countersign-hook, which reads it from the environment.
		if !strings.Contains(s.Text, "COUNTERSIGN_AGENT_TOKEN") && !strings.Contains(s.Text, "countersign-hook hook --agent "+string(k)+" ") {
			t.Errorf("%s: the snippet does not read the token's variable", k)
		}
		if s.Unreachable == "" || s.Where == "" {
			t.Errorf("%s: no word on where it goes or what happens when Countersign is unreachable", k)
		}
		if s.Format == "json" && !json.Valid([]byte(s.Text)) {
			t.Errorf("%s: not JSON:\n%s", k, s.Text)
		}
		if !strings.Contains(s.Text, testBase) || strings.Contains(s.Text, testBase+"//") {
			t.Errorf("%s: the base URL is not joined cleanly:\n%s", k, s.Text)
		}
		verified := k == connections.ClaudeCode || k == connections.Codex
		hasNote := strings.Contains(strings.Join(s.Notes, " "), "Not verified against the real")
		if k != connections.MCP && k != connections.API && (s.Verified != verified || hasNote == verified) {
			t.Errorf("%s: verified %v, not-verified note %v", k, s.Verified, hasNote)
		}
	}
}

func TestMakeSnippetRefusesWhatCannotBePastedSafely(t *testing.T) {
	c := connections.Connection{ID: "c1", Label: "x", Kind: connections.Codex}
	for _, tt := range []struct{ name, token, base string }{
		{"no scheme", testToken, "127.0.0.1:8080"},
		{"ftp", testToken, "ftp://host"},
		{"query", testToken, "http://host/?a=b"},
		{"fragment", testToken, "http://host/#x"},
		{"user info", testToken, "http://u:p@host"},
		{"quote", testToken, "http://host/it's"},
		{"dollar", testToken, "http://host/$HOME"},
		{"space", testToken, "http://host/a b"},
		{"no token", "", testBase},
		{"token with a quote", "cs_agent_a'b", testBase},
		{"token with a space", "cs_agent_a b", testBase},
	} {
		if _, err := connections.MakeSnippet(c, tt.token, tt.base); apperr.CodeOf(err) != apperr.Invalid {
			t.Errorf("%s: %v, want invalid", tt.name, err)
		}
	}
	if _, err := connections.MakeSnippet(connections.Connection{Kind: "vim"}, testToken, testBase); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("unknown kind: %v, want invalid", err)
	}
	if s, err := connections.MakeSnippet(c, testToken, "https://cs.example.com/team/"); err != nil || !strings.Contains(s.Text, "--url 'https://cs.example.com/team'") {
		t.Errorf("a base with a path: %v\n%s", err, s.Text)
	}
}

// TestSnippetsMatchTheirGoldenFiles pins every kind's snippet as the page shows it
// (testdata/snippets/<kind>.txt; go test -update rewrites them).
func TestSnippetsMatchTheirGoldenFiles(t *testing.T) {
	for _, k := range connections.Kinds() {
		s := snippet(t, k)
		var b strings.Builder
		b.WriteString("# where: " + s.Where + "\n# format: " + s.Format + "\n# verified: " + strconv.FormatBool(s.Verified) + "\n")
		b.WriteString("# unreachable: " + s.Unreachable + "\n")
		for _, n := range s.Notes {
			b.WriteString("# note: " + n + "\n")
		}
		b.WriteString(s.Export + "\n\n" + s.Text)
		path := filepath.Join("testdata", "snippets", string(k)+".txt")
		if *update {
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		if b.String() != string(want) {
			t.Errorf("%s differs from %s (go test -update rewrites it):\n%s", k, path, b.String())
		}
	}
}

// TestTheREADMEShowsEveryKindsSnippetAsThePageMakesIt: the README's section "Countersign your
// Claude Code / Codex / …" holds each kind's snippet, export line and unreachable sentence exactly
// as MakeSnippet makes them (for a server at http://127.0.0.1:8080 and PlaceholderToken), so the
// README cannot drift from what the Agents page shows.
func TestTheREADMEShowsEveryKindsSnippetAsThePageMakesIt(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	if !strings.Contains(text, "## Countersign your Claude Code / Codex / Gemini CLI / Cursor / Copilot CLI") {
		t.Fatal("the README has no section for the agents people already run")
	}
	for _, k := range connections.Kinds() {
		s, err := connections.MakeSnippet(connections.Connection{ID: "c0ffee00c0ffee00", Label: "alice's laptop", Kind: k},
			connections.PlaceholderToken, "http://127.0.0.1:8080")
		if err != nil {
			t.Fatal(err)
		}
		for what, want := range map[string]string{
			"snippet":     "```" + s.Format + "\n" + s.Text + "```\n",
			"export line": "```sh\n" + s.Export + "\n```\n",
			"unreachable": "**When Countersign is unreachable:** " + s.Unreachable,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the README lacks the %s as the page makes it:\n%s", k, what, want)
			}
		}
	}
}
