package fakemodels

import (
	"encoding/json"
	"regexp"
	"strings"
)

// Directive lines a prompt may carry to choose what the fake model does (FromPrompt), so one
// fake server serves many agents at once, each run steered by its own prompt:
//
//	fake-bash: <command>         ask for the shell tool with this command (Claude Code's `Bash`
//	                             {command, description}; Codex's `exec_command` {cmd,
//	                             justification, sandbox_permissions: "require_escalated"})
//	fake-guardian: allow|deny    what Codex's guardian answers (default deny: only a hook's
//	                             allow runs the command)
//	fake-tool: <name> <json>     ask for the tool of that name (an MCP tool as the agent names
//	                             it: mcp__countersign__stdio__echo) with the JSON object as input
//
// The directives are read from the user's messages of the request (the agents add context
// messages of their own; those carry no directive). Codex's guardian quotes the prompt with each
// line prefixed "user: ", which is allowed.
var directive = regexp.MustCompile(`(?m)^(?:user: )?fake-(bash|guardian|tool):[ \t]*(.+?)[ \t]*$`)

// ResultPrefix starts the fake model's last answer, followed by the tool's result as the agent
// reported it back (its output, or the reason it was blocked), so a test reads in the agent's
// final output what the model saw.
const ResultPrefix = "fake model saw: "

// FromPrompt is a Script for both APIs, steered by the directives in the user's prompt: with
// `fake-bash:` it asks for the shell tool (when the request offers it) until the request carries
// the tool's result, then answers ResultPrefix + that result; without one it answers "ok".
// Codex's guardian gets GuardianAnswer with the `fake-guardian:` outcome (default "deny").
func FromPrompt() Script {
	return func(r Request) Turn {
		d := r.Directives()
		if r.IsGuardian() {
			outcome := d["guardian"]
			if outcome != "allow" {
				outcome = "deny"
			}
			return Turn{Text: GuardianAnswer(outcome, "fake guardian: "+outcome)}
		}
		if r.HasToolResult() {
			return Turn{Text: ResultPrefix + r.LastToolResult()}
		}
		if t, ok := d["tool"]; ok {
			name, input, _ := strings.Cut(t, " ")
			if !r.OffersTool(name) {
				return Turn{Text: "the request offers no tool " + name}
			}
			if strings.TrimSpace(input) == "" {
				input = "{}"
			}
			return Turn{ToolName: name, ToolInput: input}
		}
		cmd, ok := d["bash"]
		if !ok {
			return Turn{Text: "ok"}
		}
		switch {
		case r.OffersTool("Bash"):
			in, _ := json.Marshal(map[string]string{"command": cmd, "description": "run the command the test asked for"})
			return Turn{ToolName: "Bash", ToolInput: string(in)}
		case r.OffersTool("exec_command"):
			in, _ := json.Marshal(map[string]string{"cmd": cmd, "justification": "run the command the test asked for", "sandbox_permissions": "require_escalated"})
			return Turn{ToolName: "exec_command", ToolInput: string(in)}
		}
		return Turn{Text: "ok"}
	}
}

// requestBody is what FromPrompt reads of either API's request.
type requestBody struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Input json.RawMessage `json:"input"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

type block struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"`
	Output  json.RawMessage `json:"output"`
	Role    string          `json:"role"`
}

// text is a content field's text: a string, or the text of its blocks.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []block
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	var parts []string
	for _, b := range blocks {
		switch {
		case b.Text != "":
			parts = append(parts, b.Text)
		case len(b.Content) > 0:
			parts = append(parts, text(b.Content))
		}
	}
	return strings.Join(parts, "\n")
}

// Directives returns the `fake-<name>: <value>` lines of the request's user messages (the first
// of each name).
func (r Request) Directives() map[string]string {
	var b requestBody
	_ = json.Unmarshal(r.Body, &b)
	var texts []string
	for _, m := range b.Messages {
		if m.Role == "user" {
			texts = append(texts, text(m.Content))
		}
	}
	var items []block
	_ = json.Unmarshal(b.Input, &items)
	for _, it := range items {
		if it.Role == "user" {
			texts = append(texts, text(it.Content))
		}
	}
	out := map[string]string{}
	for _, t := range texts {
		for _, m := range directive.FindAllStringSubmatch(t, -1) {
			if _, seen := out[m[1]]; !seen {
				out[m[1]] = m[2]
			}
		}
	}
	return out
}

// OffersTool reports whether the request offers a tool of that name.
func (r Request) OffersTool(name string) bool {
	var b requestBody
	_ = json.Unmarshal(r.Body, &b)
	for _, t := range b.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// LastToolResult is the text of the last tool result in the request: Anthropic's `tool_result`
// block content, or the Responses API's `function_call_output` output.
func (r Request) LastToolResult() string {
	var b requestBody
	_ = json.Unmarshal(r.Body, &b)
	if n := len(b.Messages); n > 0 {
		var blocks []block
		_ = json.Unmarshal(b.Messages[n-1].Content, &blocks)
		for i := len(blocks) - 1; i >= 0; i-- {
			if blocks[i].Type == "tool_result" {
				return text(blocks[i].Content)
			}
		}
		return ""
	}
	var items []block
	_ = json.Unmarshal(b.Input, &items)
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].Type == "function_call_output" {
			return text(items[i].Output)
		}
	}
	return ""
}
