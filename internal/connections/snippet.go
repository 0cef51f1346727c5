package connections

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"countersign/internal/apperr"
)

// TokenEnv is the environment variable every snippet reads the token from: Claude Code's hook
// headers interpolate it (allowedEnvVars), countersign-hook reads it (internal/hookclient), an
// MCP client's headers expand it. A snippet itself never holds the token: only its Export line.
const TokenEnv = "COUNTERSIGN_AGENT_TOKEN"

// HookTimeout is the timeout, in seconds, that the snippets give the hooks that wait for a
// person (PreToolUse, PermissionRequest): Countersign answers before it (the deadline minus a
// margin, SPEC §18), with the decision or with no verdict.
const HookTimeout = 600

// ReportTimeout is the timeout, in seconds, of the hooks that only report (PostToolUse,
// UserPromptSubmit, Stop, SessionEnd): Countersign never holds them, so a short timeout keeps a
// server that accepts the connection but hangs from stalling the agent's turn for ten minutes.
const ReportTimeout = 30

// PlaceholderToken stands for a token in documentation (the README's snippets).
const PlaceholderToken = "cs_agent_PASTE_YOUR_TOKEN_HERE"

// Snippet is what to paste to connect an agent, as the Agents page and POST /api/connections
// show it once, right after the connection is made.
type Snippet struct {
	Kind Kind `json:"kind"`
	// Where says where Text goes ("~/.codex/config.toml", ".claude/settings.json"…).
	Where string `json:"where"`
	// Format is Text's language: "json", "toml" or "text".
	Format string `json:"format"`
	// Text is the configuration to paste. It names the token's variable (TokenEnv), never the
	// token.
	Text string `json:"text"`
	// Export is the shell line that puts the token in the agent's environment: the one place the
	// token appears.
	Export string `json:"export"`
	// Unreachable says, in a sentence or two, what the agent does when Countersign cannot answer.
	Unreachable string `json:"unreachable"`
	// Verified reports whether this snippet was run against the real agent here (Claude Code
	// 2.1.328, Codex 0.169.0); false for the kinds only written from the agents' documentation.
	Verified bool `json:"verified"`
	// Notes are further steps or caveats, one sentence each.
	Notes []string `json:"notes,omitempty"`
}

// MakeSnippet returns the snippet for connection c with token (PlaceholderToken for
// documentation) and Countersign's base URL as the agent reaches it (http(s)://host[:port][/path]).
// Errors (apperr.Invalid): a base URL that is not http(s), has a query, a fragment, user info or
// characters that would need quoting in a shell or a config file; a token with characters other
// than letters, digits and _; an unknown kind.
func MakeSnippet(c Connection, token, baseURL string) (Snippet, error) {
	base, err := checkBase(baseURL)
	if err != nil {
		return Snippet{}, err
	}
	if token == "" || strings.IndexFunc(token, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) >= 0 {
		return Snippet{}, apperr.Errorf(apperr.Invalid, "A snippet needs the connection's token (letters, digits and _ only).")
	}
	s := Snippet{Kind: c.Kind, Export: "export " + TokenEnv + "=" + token}
	switch c.Kind {
	case ClaudeCode:
		s.Where, s.Format, s.Verified = ".claude/settings.json in your project (or ~/.claude/settings.json for every project)", "json", true
		s.Text = claudeCodeSettings(base)
		s.Unreachable = "If Countersign cannot be reached, Claude Code blocks every tool call (onFailure: block on PreToolUse and PermissionRequest) until it is back or you remove these hooks; prompts and outcomes are then not recorded. If nobody decides before the hook's 600 s timeout, Countersign answers with no verdict and Claude Code falls back to its own permission prompt (headless: the call is denied)."
		s.Notes = []string{
			"Start claude from a shell where " + TokenEnv + " is set: the Authorization header reads it (allowedEnvVars), and it arrives empty otherwise.",
			"Claude Code ignores a settings file that fails its validation without a word in -p: keep the field names as they are.",
		}
	case Codex:
		s.Where, s.Format, s.Verified = "~/.codex/config.toml (or a trusted project's .codex/config.toml)", "toml", true
		s.Text = codexConfig(c, base)
		s.Unreachable = "If Countersign cannot be reached, countersign-hook gives no verdict and Codex decides as it would without these hooks (its guardian model or your own approval). With --fail-closed on the PreToolUse and PermissionRequest commands it exits 2 instead, and Codex blocks the call."
		s.Notes = []string{
			"countersign-hook must be on the PATH of the shell that runs codex (go install countersign/cmd/countersign-hook, or copy the binary).",
			"Codex runs new or changed hooks only after you trust them: open /hooks in Codex once after pasting.",
		}
	case Gemini:
		s.Where, s.Format = "~/.gemini/settings.json (or .gemini/settings.json in your project)", "json"
		s.Text = mustJSON(obj{
			{"hooks", obj{
				{"BeforeTool", []any{geminiGroup(".*", base, HookTimeout)}},
				{"AfterTool", []any{geminiGroup(".*", base, ReportTimeout)}},
				{"BeforeAgent", []any{geminiGroup("", base, ReportTimeout)}},
				{"SessionEnd", []any{geminiGroup("", base, ReportTimeout)}},
			}},
		})
		s.Unreachable = commandUnreachable("Gemini CLI")
		s.Notes = []string{notVerified("Gemini CLI"), "Gemini CLI's hook timeout is in milliseconds; on its Stable channel hooks may first need \"hooksConfig\": {\"enabled\": true}."}
	case Cursor:
		s.Where, s.Format = "~/.cursor/hooks.json (or .cursor/hooks.json in your project)", "json"
		s.Text = mustJSON(obj{
			{"version", 1},
			{"hooks", obj{
				{"beforeShellExecution", []any{cursorHook(base)}},
				{"beforeMCPExecution", []any{cursorHook(base)}},
				{"afterFileEdit", []any{cursorHook(base)}},
				{"beforeSubmitPrompt", []any{cursorHook(base)}},
				{"stop", []any{cursorHook(base)}},
			}},
		})
		s.Unreachable = commandUnreachable("Cursor")
		s.Notes = []string{notVerified("Cursor"), "Cursor has no hook before a file edit: edits are reported after they are made (afterFileEdit), not asked."}
	case Copilot:
		s.Where, s.Format = ".github/hooks/countersign.json in your repository", "json"
		s.Text = mustJSON(obj{
			{"version", 1},
			{"hooks", obj{
				{"preToolUse", []any{copilotHook(base, HookTimeout)}},
				{"postToolUse", []any{copilotHook(base, ReportTimeout)}},
				{"userPromptSubmitted", []any{copilotHook(base, ReportTimeout)}},
				{"sessionEnd", []any{copilotHook(base, ReportTimeout)}},
			}},
		})
		s.Unreachable = commandUnreachable("Copilot CLI")
		s.Notes = []string{notVerified("Copilot CLI")}
	case MCP:
		s.Where, s.Format = "your MCP client's server list (Claude Code: .mcp.json; other clients that take a Streamable HTTP server with headers: the same entry)", "json"
		s.Text = mustJSON(obj{
			{"mcpServers", obj{
				{"countersign", obj{
					{"type", "http"},
					{"url", base + "/mcp"},
					{"headers", obj{{"Authorization", "Bearer ${" + TokenEnv + "}"}}},
				}},
			}},
		})
		s.Unreachable = "If Countersign cannot be reached, the client shows the server as failed and its tools cannot be listed or called: nothing runs through it. A call nobody decides in time is answered with an error result that says where to approve it; the same call repeated finds the decision."
		s.Notes = []string{"The tools are those of the MCP servers Countersign is started with (-mcp-config), each call countersigned; in Claude Code they are named mcp__countersign__<server>__<tool>.",
			"A call nobody decides is answered after 55 s (before the 60 s most clients wait); a client that waits longer for a tool call can say so with ?timeout=<its timeout in seconds> on the URL, and Countersign answers 5 s before it.",
			"Cursor (~/.cursor/mcp.json, from Cursor's documentation, not run here): " + compactJSON(obj{{"mcpServers", obj{{"countersign", obj{
				{"url", base + "/mcp"}, {"headers", obj{{"Authorization", "Bearer ${env:" + TokenEnv + "}"}}}}}}}}),
			"VS Code (.vscode/mcp.json, from VS Code's documentation, not run here): " + compactJSON(obj{{"servers", obj{{"countersign", obj{
				{"type", "http"}, {"url", base + "/mcp"}, {"headers", obj{{"Authorization", "Bearer ${input:countersign-token}"}}}}}}},
				{"inputs", []any{obj{{"type", "promptString"}, {"id", "countersign-token"}, {"description", "Countersign connection token"}, {"password", true}}}}}),
			"A client that launches only stdio servers: countersign mcp-proxy --connection-token-env " + TokenEnv + " --url " + base + " -- <the server's command>."}
	case API:
		s.Where, s.Format = "your agent's code: the approval API's base URL and header", "text"
		s.Text = "Base URL:  " + base + "/aap\n" +
			"Header:    Authorization: Bearer $" + TokenEnv + "\n\n" +
			"# Ask for an approval, then wait for the decision (at most 30 s per request):\n" +
			"curl -sS -X POST '" + base + "/aap/v1/requests' \\\n" +
			"  -H \"Authorization: Bearer $" + TokenEnv + "\" \\\n" +
			"  -H 'Content-Type: application/json' -H \"Idempotency-Key: $(uuidgen)\" \\\n" +
			"  --data @request.json\n" +
			"curl -sS -H \"Authorization: Bearer $" + TokenEnv + "\" '" + base + "/aap/v1/requests/<id>?wait=30s'\n"
		s.Unreachable = "If Countersign cannot be reached, your agent's request fails (a connection error or a 5xx): your code decides, and the safe reading is a deny."
		s.Notes = []string{"The API is the Agent Approval Protocol v1 (request bodies as its specification says): POST /aap/v1/requests, GET /aap/v1/requests/<id>?wait=30s, DELETE to cancel.",
			"The README's \"Your own agent, on the approval API\" has recipes for the Vercel AI SDK, the OpenAI Agents SDK, LangGraph and Pydantic AI."}
	default:
		_, err := CheckKind(string(c.Kind))
		return Snippet{}, err
	}
	return s, nil
}

// checkBase returns baseURL without a trailing slash, or apperr.Invalid. The snippets put it in
// JSON, in TOML basic strings and in single-quoted shell words: it must need no quoting in any.
func checkBase(baseURL string) (string, error) {
	bad := apperr.Errorf(apperr.Invalid, "Countersign's base URL %q: want http(s)://host[:port][/path], without a query, a fragment, user info, spaces or quotes.", baseURL)
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(baseURL, "'\"\\`$ ?#{}<>^|") {
		return "", bad
	}
	for _, r := range baseURL {
		if r < 0x21 || r > 0x7e {
			return "", bad
		}
	}
	return strings.TrimRight(baseURL, "/"), nil
}

// claudeCodeSettings is the `hooks` block of Claude Code's settings (2.1.328), with the field
// names the real agent accepted (../shared/agents/recorded/configs/cc-http-block.json,
// cc-http-headers.json, cc-http-all.json): HTTP hooks posting to <base>/hooks/claude-code.
//
// onFailure per event: PreToolUse and PermissionRequest have "block" — the safe choice: when
// Countersign cannot be reached (a refused connection, a 5xx, a body that is not JSON), Claude
// Code blocks the call and tells the model the hook failed, rather than running it under its own
// permission flow (which in bypassPermissions mode would run it unasked). A Countersign that
// answers, even with no verdict at the deadline, is no failure: Claude Code then goes on with its
// own prompt. The reporting events (PostToolUse, UserPromptSubmit, Stop, SessionEnd) have no
// onFailure: a lost report must not stop the agent.
//
// The URL repeats the hook's timeout (?timeout=): an HTTP hook cannot send its timeout, and
// Countersign answers a held call 5 s before it. Whoever lowers `timeout` sees the number beside
// it to lower too.
//
// HTTP hooks are refused on SessionStart by Claude Code, so there is none.
func claudeCodeSettings(base string) string {
	hook := func(timeout int, block bool) obj {
		h := obj{
			{"type", "http"},
			{"url", base + "/hooks/claude-code?timeout=" + strconv.Itoa(timeout)},
			{"timeout", timeout},
			{"headers", obj{{"Authorization", "Bearer $" + TokenEnv}}},
			{"allowedEnvVars", []string{TokenEnv}},
		}
		if block {
			h = append(h, field{"onFailure", "block"})
		}
		return h
	}
	tools := func(timeout int, block bool) []any {
		return []any{obj{{"matcher", "*"}, {"hooks", []any{hook(timeout, block)}}}}
	}
	turn := func() []any { return []any{obj{{"hooks", []any{hook(ReportTimeout, false)}}}} }
	return mustJSON(obj{
		{"hooks", obj{
			{"PreToolUse", tools(HookTimeout, true)},
			{"PermissionRequest", tools(HookTimeout, true)},
			{"PostToolUse", tools(ReportTimeout, false)},
			{"UserPromptSubmit", turn()},
			{"Stop", turn()},
			{"SessionEnd", turn()},
		}},
	})
}

// hookCommand is the countersign-hook command line for agent: the base URL single-quoted (it
// holds no quote, checkBase), the timeout the agent gives the hook, and --fail-closed when asked.
func hookCommand(agent Kind, base string, timeout int, failClosed bool) string {
	cmd := fmt.Sprintf("countersign-hook hook --agent %s --url '%s' --timeout %d", agent, base, timeout)
	if failClosed {
		cmd += " --fail-closed"
	}
	return cmd
}

// codexConfig is Codex's (0.169.0) config.toml hooks, in the shape the real agent accepted
// (../shared/agents/recorded/configs/codex-config*.toml): command hooks running countersign-hook.
// Codex has no HTTP hook. Without --fail-closed an unreachable Countersign is no verdict (exit 0,
// nothing on stdout): Codex goes its own way. The comment above the tables offers the
// fail-closed lines.
func codexConfig(c Connection, base string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Countersign: connection %s (%s). Needs countersign-hook on the PATH and\n", c.ID, oneLine(c.Label))
	fmt.Fprintf(&b, "# %s in Codex's environment. Trust the hooks once with /hooks in Codex.\n", TokenEnv)
	b.WriteString("#\n# To block calls while Countersign cannot answer, use these two commands instead:\n")
	fmt.Fprintf(&b, "#   command = \"%s\"  (PreToolUse)\n", hookCommand(Codex, base, HookTimeout, true))
	fmt.Fprintf(&b, "#   command = \"%s\"  (PermissionRequest)\n", hookCommand(Codex, base, HookTimeout, true))
	for _, e := range []struct {
		event   string
		matcher bool
		timeout int
	}{
		{"PreToolUse", true, HookTimeout},
		{"PermissionRequest", true, HookTimeout},
		{"PostToolUse", true, ReportTimeout},
		{"UserPromptSubmit", false, ReportTimeout},
		{"Stop", false, ReportTimeout},
	} {
		fmt.Fprintf(&b, "\n[[hooks.%s]]\n", e.event)
		if e.matcher {
			b.WriteString("matcher = \"*\"\n")
		}
		fmt.Fprintf(&b, "[[hooks.%s.hooks]]\ntype = \"command\"\ncommand = \"%s\"\ntimeout = %d\n",
			e.event, hookCommand(Codex, base, e.timeout, false), e.timeout)
	}
	return b.String()
}

// geminiGroup is one Gemini CLI hook definition (settings.json `hooks.<Event>[]`): a matcher
// (a regular expression over tool names; "" for lifecycle events: none) and the command hook,
// whose timeout (seconds here) Gemini CLI takes in milliseconds.
func geminiGroup(matcher, base string, timeout int) obj {
	h := obj{{"name", "countersign"}, {"type", "command"}, {"command", hookCommand(Gemini, base, timeout, false)}, {"timeout", timeout * 1000}}
	if matcher == "" {
		return obj{{"hooks", []any{h}}}
	}
	return obj{{"matcher", matcher}, {"hooks", []any{h}}}
}

// cursorHook is one Cursor hook (hooks.json `hooks.<event>[]`): a command.
func cursorHook(base string) obj {
	return obj{{"command", hookCommand(Cursor, base, HookTimeout, false)}}
}

// copilotHook is one Copilot CLI hook (.github/hooks/*.json `hooks.<event>[]`): a command for
// bash, with its timeout in seconds.
func copilotHook(base string, timeout int) obj {
	return obj{{"type", "command"}, {"bash", hookCommand(Copilot, base, timeout, false)}, {"timeoutSec", timeout}}
}

func commandUnreachable(agent string) string {
	return "If Countersign cannot be reached, countersign-hook gives no verdict (exit 0, nothing printed) and " + agent +
		" goes its own way. Add --fail-closed to the command to make it exit 2 instead, which " + agent + " documents as blocking the call."
}

func notVerified(agent string) string {
	return "Not verified against the real " + agent + " here: written from its hook documentation, and Countersign reads no " + agent + " hook events yet."
}

// oneLine is s with line breaks as spaces, for a comment line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// obj is a JSON object whose fields keep their order (the snippets read as the agents' own
// documentation writes them: PreToolUse first, type before url).
type obj []field

type field struct {
	k string
	v any
}

// MarshalJSON writes the fields in order.
func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshal(f.k)
		if err != nil {
			return nil, err
		}
		v, err := marshal(f.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal is json.Marshal without HTML escaping (a URL's & stays &).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// mustJSON is v as indented JSON (two spaces) with a final newline. The snippets' values are
// strings, numbers and objects: marshalling them cannot fail.
func mustJSON(v any) string {
	raw, err := marshal(v)
	if err != nil {
		panic(err)
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		panic(err)
	}
	b.WriteByte('\n')
	return b.String()
}

// compactJSON is mustJSON(v) on one line, for a note.
func compactJSON(v any) string {
	var b bytes.Buffer
	_ = json.Compact(&b, []byte(mustJSON(v)))
	return b.String()
}
