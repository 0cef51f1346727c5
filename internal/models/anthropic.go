package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"countersign/internal/agent"
	"countersign/internal/tool"
)

// DefaultAnthropicMaxTokens is the max_tokens sent when AnthropicConfig.MaxTokens is 0 (the
// Messages API requires one).
const DefaultAnthropicMaxTokens = 4096

// AnthropicConfig configures an Anthropic Messages API model.
type AnthropicConfig struct {
	// APIKey is the API key (the SDK sends it as a bearer token); "" sends none (a proxy that
	// adds it).
	APIKey string
	// BaseURL is the API root; "" means https://api.anthropic.com.
	BaseURL string
	// Model is the vendor's model name, e.g. "claude-sonnet-4-5".
	Model string
	// MaxTokens caps the tokens of one reply; 0 means DefaultAnthropicMaxTokens. With a thinking
	// budget it is raised, if need be, to the budget plus DefaultAnthropicMaxTokens (the API
	// wants max_tokens above budget_tokens).
	MaxTokens int64
	// Thinking asks for extended thinking; the zero value asks for none.
	Thinking AnthropicThinking
	// HTTPClient sends the requests; nil means the SDK's default client.
	HTTPClient *http.Client
	// MaxRetries is how many times a request that failed before streaming began (429, 5xx, 529
	// overloaded, a connection error) is tried again, with the SDK's backoff, each announced as
	// agent.Delta{Retry} (see retry.go); 0 means never.
	MaxRetries int
	// IdleTimeout fails a stream that sends nothing for this long; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ContextWindow is the model's context window in tokens; 0 means the table's (window.go).
	ContextWindow int
}

// AnthropicThinking is the extended thinking a request asks for (Messages API "thinking"): with
// Adaptive, thinking.type "adaptive" (the model decides how much; the newer models); else with a
// Budget, thinking.type "enabled" with budget_tokens (at least MinAnthropicThinkingBudget; a
// smaller budget is raised to it); else none.
type AnthropicThinking struct {
	Adaptive bool
	Budget   int64
}

// MinAnthropicThinkingBudget is the smallest thinking budget the Messages API takes, in tokens.
const MinAnthropicThinkingBudget = 1024

// ParseAnthropicThinking reads a thinking setting as written in ANTHROPIC_THINKING: "" or "off"
// (none), "adaptive", or a budget in tokens of at least MinAnthropicThinkingBudget. Anything
// else is an error saying what is accepted.
func ParseAnthropicThinking(v string) (AnthropicThinking, error) {
	switch v = strings.ToLower(strings.TrimSpace(v)); v {
	case "", "off":
		return AnthropicThinking{}, nil
	case "adaptive":
		return AnthropicThinking{Adaptive: true}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < MinAnthropicThinkingBudget {
		return AnthropicThinking{}, fmt.Errorf("thinking %q: want off, adaptive, or a budget of at least %d tokens", v, MinAnthropicThinkingBudget)
	}
	return AnthropicThinking{Budget: n}, nil
}

// Anthropic is a model served by the Anthropic Messages API, streamed with the official SDK
// (github.com/anthropics/anthropic-sdk-go/v2, client.Messages.NewStreaming). It implements
// agent.Model and agent.ContextWindow and is safe for concurrent use. Unlike
// anthropic.NewClient's default, it reads no environment variable or profile: everything comes
// from its AnthropicConfig.
type Anthropic struct {
	client    anthropic.Client
	model     string
	maxTokens int64
	thinking  anthropic.ThinkingConfigParamUnion // zero: not sent
	idle      time.Duration
	retries   int
	window    int
}

// NewAnthropic returns the model cfg describes. It makes no request.
func NewAnthropic(cfg AnthropicConfig) *Anthropic {
	retries := max(cfg.MaxRetries, 0)
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithMaxRetries(retries),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	a := &Anthropic{model: cfg.Model, maxTokens: cfg.MaxTokens, idle: cfg.IdleTimeout, retries: retries}
	if a.maxTokens <= 0 {
		a.maxTokens = DefaultAnthropicMaxTokens
	}
	switch {
	case cfg.Thinking.Adaptive:
		a.thinking = anthropic.ThinkingConfigParamUnion{OfAdaptive: &anthropic.ThinkingConfigAdaptiveParam{}}
	case cfg.Thinking.Budget > 0:
		budget := max(cfg.Thinking.Budget, MinAnthropicThinkingBudget)
		a.thinking = anthropic.ThinkingConfigParamOfEnabled(budget)
		a.maxTokens = max(a.maxTokens, budget+DefaultAnthropicMaxTokens)
	}
	a.window = cfg.ContextWindow
	if a.window <= 0 {
		// The API refuses a request whose input and max_tokens together exceed the window.
		a.window = max(contextWindowOf(cfg.Model)-int(a.maxTokens), 0)
	}
	a.client = anthropic.NewClient(opts...)
	return a
}

// ContextWindow implements agent.ContextWindow: the most input tokens one request may carry (the
// config's ContextWindow, else the model's window from the table in window.go less max_tokens,
// which the API counts against it).
func (a *Anthropic) ContextWindow() int { return a.window }

// anthropicBlock is a content block being streamed.
type anthropicBlock struct {
	kind     string // "text", "tool_use", "thinking", "redacted_thinking"; others are ignored
	text     strings.Builder
	input    strings.Builder // input_json_delta fragments
	start    json.RawMessage // the input in content_block_start, used when no fragment came
	call     *agent.Block    // tool_use: the call, with its arguments set at content_block_stop
	position int             // tool_use: among the message's calls, from 0
	thinking agent.Block     // thinking and redacted_thinking: the block as kept
}

// Stream implements agent.Model with one streamed Messages API request: the session's
// instructions as system, the transcript and the declared tools as messages (tool results as
// tool_result blocks in user messages, thinking blocks sent back as they came) and tools. As the
// stream arrives, onDelta gets:
//   - Text: text_delta;
//   - Thinking: thinking_delta; the block is kept with its signature (signature_delta), and a
//     redacted_thinking block with its data, to be sent back unchanged and in place in the next
//     request, as the API requires of an assistant turn with tool_use;
//   - Partial: a tool call while its input_json_delta fragments stream (each fragment, see partials);
//   - ToolCall: a tool call complete, at its content_block_stop, when its input is a JSON object;
//   - Retry: before the SDK waits to try again (see retry.go).
//
// The message's Usage: Input is input_tokens, CacheRead cache_read_input_tokens, CacheWrite
// cache_creation_input_tokens and Output output_tokens, from message_start.message.usage,
// overridden by message_delta.usage where it carries them (its counts are the totals so far).
// stop_reason end_turn and stop_sequence become stopReason stop, tool_use toolUse, max_tokens
// (and model_context_window_exceeded) length; any other (refusal, pause_turn, ...) stopReason
// error with a message.
//
// Errors start with "anthropic: ": the HTTP status and the provider's message ("anthropic: 429
// Too Many Requests: This request would exceed ..."), an error event in the stream
// (overloaded_error, ...), a stream cut before message_stop, a timeout, or the context's
// cancellation. A request too long for the model's context window ("prompt is too long") is also
// ErrContextLength. No partial message is returned with an error.
func (a *Anthropic) Stream(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
	params, names, err := a.params(req)
	if err != nil {
		return agent.Message{}, fmt.Errorf("anthropic: %w", err)
	}
	ctx, w := watch(ctx, a.idle)
	defer w.stop()
	retries := &retryNotice{maxRetries: a.retries, watch: w, onDelta: onDelta}

	stream := a.client.Messages.NewStreaming(ctx, params, option.WithMiddleware(retries.middleware))
	defer stream.Close()
	var blocks []*anthropicBlock
	byIndex := map[int64]*anthropicBlock{}
	partial := newPartials(onDelta)
	calls := 0
	var usage *agent.Usage
	stopReason, stopped := "", false
	for stream.Next() {
		w.kick()
		ev := stream.Current()
		switch ev.Type {
		case "message_start":
			u := ev.Message.Usage
			usage = &agent.Usage{Input: u.InputTokens, Output: u.OutputTokens, CacheRead: u.CacheReadInputTokens, CacheWrite: u.CacheCreationInputTokens}
		case "content_block_start":
			cb := ev.ContentBlock
			b := &anthropicBlock{kind: cb.Type}
			switch b.kind {
			case "text":
				if t := cb.Text; t != "" {
					b.text.WriteString(t)
					onDelta(agent.Delta{Text: t})
				}
			case "tool_use":
				b.call = &agent.Block{Type: "toolCall", ID: cb.ID, Name: names.local(cb.Name)}
				b.start, _ = json.Marshal(cb.Input)
				b.position, calls = calls, calls+1
				partial.update(b.position, b.call.ID, b.call.Name, "")
			case "thinking":
				b.thinking = agent.Block{Type: "thinking", Signature: cb.Signature}
				if t := cb.Thinking; t != "" {
					b.text.WriteString(t)
					onDelta(agent.Delta{Thinking: t})
				}
			case "redacted_thinking":
				b.thinking = agent.Block{Type: "thinking", Redacted: true, Data: cb.Data}
			}
			byIndex[ev.Index] = b
			blocks = append(blocks, b)
		case "content_block_delta":
			b := byIndex[ev.Index]
			switch {
			case b == nil:
			case ev.Delta.Type == "text_delta" && b.kind == "text":
				b.text.WriteString(ev.Delta.Text)
				onDelta(agent.Delta{Text: ev.Delta.Text})
			case ev.Delta.Type == "input_json_delta" && b.kind == "tool_use" && ev.Delta.PartialJSON != "":
				b.input.WriteString(ev.Delta.PartialJSON)
				partial.update(b.position, b.call.ID, b.call.Name, b.input.String())
			case ev.Delta.Type == "thinking_delta" && b.kind == "thinking":
				b.text.WriteString(ev.Delta.Thinking)
				onDelta(agent.Delta{Thinking: ev.Delta.Thinking})
			case ev.Delta.Type == "signature_delta" && b.kind == "thinking":
				b.thinking.Signature += ev.Delta.Signature
			}
		case "content_block_stop":
			if b := byIndex[ev.Index]; b != nil && b.kind == "tool_use" {
				raw := b.input.String()
				if strings.TrimSpace(raw) == "" && len(b.start) > 0 && string(b.start) != "null" {
					raw = string(b.start)
				}
				*b.call = callBlock(b.call.ID, b.call.Name, raw)
				announced := *b.call
				onDelta(agent.Delta{ToolCall: &announced})
			}
		case "message_delta":
			if r := ev.Delta.StopReason; r != "" {
				stopReason = string(r)
			}
			if usage == nil {
				usage = &agent.Usage{}
			}
			u := ev.Usage
			if u.JSON.OutputTokens.Valid() {
				usage.Output = u.OutputTokens
			}
			if u.JSON.InputTokens.Valid() {
				usage.Input = u.InputTokens
			}
			if u.JSON.CacheReadInputTokens.Valid() {
				usage.CacheRead = u.CacheReadInputTokens
			}
			if u.JSON.CacheCreationInputTokens.Valid() {
				usage.CacheWrite = u.CacheCreationInputTokens
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := streamFailure(ctx); err != nil {
		return agent.Message{}, fmt.Errorf("anthropic: %w", err)
	}
	if err := stream.Err(); err != nil {
		return agent.Message{}, anthropicError(err)
	}
	if !stopped {
		return agent.Message{}, errors.New("anthropic: the stream ended before the model finished (no message_stop)")
	}

	msg := agent.Message{Role: agent.Assistant, Usage: usage}
	switch stopReason {
	case "end_turn", "stop_sequence":
		msg.StopReason = agent.Stop
	case "tool_use":
		msg.StopReason = agent.ToolUse
	case "max_tokens", "model_context_window_exceeded":
		msg.StopReason = agent.Length
	case "refusal":
		msg.StopReason, msg.ErrorMessage = agent.Error, "anthropic: the model declined to answer (stop_reason refusal)"
	default:
		msg.StopReason, msg.ErrorMessage = agent.Error, fmt.Sprintf("anthropic: the model stopped with stop_reason %q", stopReason)
	}
	for _, b := range blocks {
		switch {
		case b.kind == "text" && b.text.Len() > 0:
			msg.Content = append(msg.Content, agent.Block{Type: "text", Text: b.text.String()})
		case b.kind == "thinking" || b.kind == "redacted_thinking":
			t := b.thinking
			t.Thinking = b.text.String()
			msg.Content = append(msg.Content, t)
		case b.kind == "tool_use" && msg.StopReason == agent.Length && (b.call.Arguments == nil || b.call.ArgumentsError != ""):
			// Cut off by the token limit; a length message's calls never run.
		case b.kind == "tool_use" && b.call.Arguments != nil:
			msg.Content = append(msg.Content, *b.call)
		case b.kind == "tool_use":
			return agent.Message{}, fmt.Errorf("anthropic: tool call %s (%s) did not finish (no content_block_stop)", b.call.ID, b.call.Name)
		}
	}
	finishCalls(&msg)
	return msg, nil
}

// params maps a request to Messages API parameters (see replayable for what is dropped):
// consecutive messages of one role are merged, so tool results answering one assistant message
// share one user message, as the API requires.
func (a *Anthropic) params(req agent.Request) (anthropic.MessageNewParams, toolNames, error) {
	p := anthropic.MessageNewParams{Model: a.model, MaxTokens: a.maxTokens, Thinking: a.thinking}
	if strings.TrimSpace(req.System) != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for _, spec := range req.Tools {
		schema, err := inputSchema(spec.InputSchema)
		if err != nil {
			return p, nil, fmt.Errorf("tool %s: %w", spec.Name, err)
		}
		t := &anthropic.ToolParam{Name: vendorToolName(spec.Name), InputSchema: anthropicSchema(schema)}
		if spec.Description != "" {
			t.Description = anthropic.String(spec.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: t})
	}
	add := func(user bool, blocks []anthropic.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(p.Messages); n > 0 {
			last := &p.Messages[n-1]
			if user && last.OfUser != nil {
				last.OfUser.Content = append(last.OfUser.Content, blocks...)
				return
			}
			if !user && last.OfAssistant != nil {
				last.OfAssistant.Content = append(last.OfAssistant.Content, blocks...)
				return
			}
		}
		if user {
			p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
		} else {
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
		}
	}
	for _, m := range replayable(req.Messages) {
		var blocks []anthropic.ContentBlockParamUnion
		switch m.Role {
		case agent.User:
			for _, b := range m.Content {
				switch {
				case b.Type == "text" && strings.TrimSpace(b.Text) != "":
					blocks = append(blocks, anthropic.NewTextBlock(b.Text))
				case b.Type == "image":
					blocks = append(blocks, anthropic.NewImageBlockBase64(b.MimeType, b.Data))
				}
			}
			add(true, blocks)
		case agent.Assistant:
			for _, b := range m.Content {
				switch {
				case b.Type == "text" && strings.TrimSpace(b.Text) != "":
					blocks = append(blocks, anthropic.NewTextBlock(b.Text))
				case b.Type == "toolCall":
					blocks = append(blocks, anthropic.NewToolUseBlock(b.ID, replayArguments(b.Arguments), vendorToolName(b.Name)))
				case b.Type == "thinking" && b.Redacted && b.Data != "":
					blocks = append(blocks, anthropic.NewRedactedThinkingBlock(b.Data))
				case b.Type == "thinking" && !b.Redacted && b.ID == "" && b.Signature != "":
					// Anthropic's own (a Responses reasoning item has an ID; a Chat Completions
					// server's reasoning no signature): sent back as it came.
					blocks = append(blocks, anthropic.NewThinkingBlock(b.Signature, b.Thinking))
				}
			}
			add(false, blocks)
		case agent.ToolResult:
			add(true, []anthropic.ContentBlockParamUnion{{OfToolResult: anthropicResult(m)}})
		}
	}
	return p, newToolNames(req.Tools), nil
}

// anthropicResult maps a tool result to a tool_result block: its ModelContent (SPEC §1 results,
// rule 5; details are never sent) and is_error.
func anthropicResult(m agent.Message) *anthropic.ToolResultBlockParam {
	r := m.Result
	if r == nil {
		r = &tool.Result{}
	}
	out := &anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID, IsError: anthropic.Bool(r.IsError)}
	for _, c := range r.ModelContent() {
		switch {
		case c.Type == "text" && c.Text != "":
			out.Content = append(out.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: c.Text}})
		case c.Type == "image":
			img := anthropic.NewImageBlockBase64(c.MimeType, c.Data)
			out.Content = append(out.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: img.OfImage})
		}
	}
	return out
}

// anthropicSchema is a declared inputSchema as the SDK's input_schema (always type "object").
func anthropicSchema(schema map[string]any) anthropic.ToolInputSchemaParam {
	var s anthropic.ToolInputSchemaParam
	extra := map[string]any{}
	for k, v := range schema {
		switch k {
		case "type":
		case "properties":
			s.Properties = v
		case "required":
			if list, ok := v.([]any); ok {
				for _, r := range list {
					if name, ok := r.(string); ok {
						s.Required = append(s.Required, name)
					}
				}
			}
		default:
			extra[k] = v
		}
	}
	if s.Properties == nil {
		s.Properties = map[string]any{}
	}
	if len(extra) > 0 {
		s.ExtraFields = extra
	}
	return s
}

// anthropicError words an SDK error as the provider's message; one that says the request was too
// long for the model's context window is also ErrContextLength.
func anthropicError(err error) error {
	var api *anthropic.Error
	if errors.As(err, &api) {
		msg := api.Message
		if msg == "" {
			msg = api.RawJSON()
		}
		if msg == "" && api.Response != nil && api.Response.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(api.Response.Body, 64<<10))
			msg = strings.TrimSpace(string(body))
		}
		if api.Message == "" && !json.Valid([]byte(msg)) {
			msg = errorText(msg) // a proxy's HTML page: its title, never the page
		}
		if api.StatusCode < 400 { // an error event in a stream that had started well
			if t := api.Type(); t != "" {
				msg = string(t) + ": " + msg
			}
			return markContextLength(fmt.Errorf("anthropic: error in the stream: %s", msg), "", msg)
		}
		out := fmt.Errorf("anthropic: %s: %s", statusLine(api.StatusCode), msg)
		if api.StatusCode == http.StatusBadRequest || api.StatusCode == http.StatusRequestEntityTooLarge {
			return markContextLength(out, "", msg)
		}
		return out
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("anthropic: the stream was cut before the model finished: %w", err)
	}
	return fmt.Errorf("anthropic: %w", err)
}

var (
	_ agent.Model         = (*Anthropic)(nil)
	_ agent.ContextWindow = (*Anthropic)(nil)
)
