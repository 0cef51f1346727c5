package models

import "strings"

// Context windows (SPEC §17 "Usage and context"): each vendor model implements
// agent.ContextWindow, the most input tokens one request may carry, from the table below unless
// its config names a window. The agent uses it unless -context-tokens is set.

// DefaultContextWindow is the window, in tokens, of an OpenAI-compatible model the table does not
// know: most often a local server's (Ollama, vLLM, LM Studio, llama.cpp), which is commonly run
// with a window of 32K or less whatever the model could take. It is deliberately conservative: a
// request cut short is better than a provider's 400 (or, with Ollama, a prompt silently cut);
// set -context-tokens (or the config's ContextWindow) to the server's real window.
const DefaultContextWindow = 32_768

// contextWindows are the published context windows of vendor models, in tokens, by model-name
// prefix (the longest matching prefix wins; a name is matched after its last "/", so
// "openai/gpt-4o" is gpt-4o). Sources: OpenAI's model pages (platform.openai.com/docs/models) and
// Anthropic's models overview (docs.claude.com, "Model comparison"), as of 2026. Where the vendor
// counts the output against the window, the entry is what is left for input: gpt-5 has a
// 400,000-token window of which up to 128,000 are output, so 272,000 input. Anthropic's models
// count max_tokens too; Anthropic.ContextWindow subtracts it.
var contextWindows = []struct {
	prefix string
	tokens int
}{
	// OpenAI.
	{"gpt-3.5-turbo", 16_385},
	{"gpt-4", 8_192},
	{"gpt-4-turbo", 128_000},
	{"gpt-4o", 128_000},
	{"chatgpt-4o", 128_000},
	{"gpt-4.1", 1_047_576},
	{"gpt-4.5", 128_000},
	{"gpt-5", 272_000},
	{"gpt-5-chat", 128_000},
	{"o1", 200_000},
	{"o1-mini", 128_000},
	{"o3", 200_000},
	{"o4-mini", 200_000},
	{"codex-mini", 200_000},
	{"gpt-oss", 131_072},
	// Anthropic: every current Claude model has a 200K window (1M only behind a beta header,
	// which Countersign does not send).
	{"claude-", 200_000},
}

// contextWindowOf is model's window from the table, or DefaultContextWindow.
func contextWindowOf(model string) int {
	name := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	best, tokens := -1, DefaultContextWindow
	for _, w := range contextWindows {
		if strings.HasPrefix(name, w.prefix) && len(w.prefix) > best {
			best, tokens = len(w.prefix), w.tokens
		}
	}
	return tokens
}
