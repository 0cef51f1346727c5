package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"countersign/internal/agent"
)

// OpenAIConfig configures an OpenAI Chat Completions model. Any OpenAI-compatible endpoint works
// (OpenAI, Ollama, vLLM, LM Studio): point BaseURL at it.
type OpenAIConfig struct {
	// APIKey is sent as "Authorization: Bearer <key>"; "" sends none (a local server).
	APIKey string
	// BaseURL is the API root, e.g. "http://127.0.0.1:11434/v1" for Ollama; "" means
	// https://api.openai.com/v1.
	BaseURL string
	// Model is the vendor's model name, e.g. "gpt-4o-mini" or "llama3.1:8b".
	Model string
	// HTTPClient sends the requests; nil means the SDK's default client.
	HTTPClient *http.Client
	// MaxRetries is how many times a request that failed before streaming began (429, 5xx, a
	// connection error) is tried again, with the SDK's backoff, each announced as
	// agent.Delta{Retry} (see retry.go); 0 means never.
	MaxRetries int
	// IdleTimeout fails a stream that sends nothing for this long; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ContextWindow is the model's context window in tokens; 0 means the table's (window.go),
	// DefaultContextWindow for a model it does not know.
	ContextWindow int
}

// OpenAI is a model served by an OpenAI-compatible Chat Completions endpoint, streamed with the
// official SDK (github.com/openai/openai-go/v3, client.Chat.Completions.NewStreaming). It
// implements agent.Model and agent.ContextWindow and is safe for concurrent use. Key, base URL
// and model come from its OpenAIConfig; the SDK itself still honours OPENAI_ORG_ID,
// OPENAI_PROJECT_ID and OPENAI_CUSTOM_HEADERS (and OPENAI_BASE_URL when BaseURL is "").
type OpenAI struct {
	client  openai.Client
	model   string
	idle    time.Duration
	retries int
	window  int
}

// NewOpenAI returns the model cfg describes. It makes no request.
func NewOpenAI(cfg OpenAIConfig) *OpenAI {
	retries := max(cfg.MaxRetries, 0)
	opts := []option.RequestOption{
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(retries),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	window := cfg.ContextWindow
	if window <= 0 {
		window = contextWindowOf(cfg.Model)
	}
	return &OpenAI{client: openai.NewClient(opts...), model: cfg.Model, idle: cfg.IdleTimeout, retries: retries, window: window}
}

// ContextWindow implements agent.ContextWindow: the model's context window in tokens (the
// config's, else the table's in window.go, else DefaultContextWindow).
func (o *OpenAI) ContextWindow() int { return o.window }

// Stream implements agent.Model with one streamed Chat Completions request: the session's
// instructions go first as a "system" message (OpenAI treats it as "developer" for the models
// that want that, and every OpenAI-compatible server knows "system"), then the transcript and
// the declared tools as messages and function tools. As the stream arrives, onDelta gets:
//   - Text: answer text (content and refusal deltas);
//   - Thinking: reasoning text, from the reasoning_content (DeepSeek, vLLM) or reasoning (Ollama,
//     vLLM, OpenRouter) deltas some servers stream; it is kept as a thinking block at the start
//     of the message and never sent back (Chat Completions has no field for it);
//   - Partial: a tool call while its arguments stream (each fragment, see partials);
//   - ToolCall: a tool call complete, once the model has moved on to the next call or finished,
//     and only when its arguments are a JSON object;
//   - Retry: before the SDK waits to try again (see retry.go).
//
// The message's Usage comes from the usage chunk asked for with stream_options.include_usage:
// Input is prompt_tokens less prompt_tokens_details.cached_tokens (DeepSeek's
// prompt_cache_hit_tokens), CacheRead the cached tokens, Output completion_tokens (reasoning
// included). A server that sends no usage leaves it nil. finish_reason stop, tool_calls and
// length become stopReason stop, toolUse and length; any other (content_filter, ...) stopReason
// error with a message.
//
// Errors start with "openai: ": the HTTP status and the provider's message ("openai: 429 Too
// Many Requests: Rate limit reached ..."), an error in the stream, a stream cut before its
// finish_reason, a timeout, or the context's cancellation. A request too long for the model's
// context window is also ErrContextLength. No partial message is returned with an error.
func (o *OpenAI) Stream(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
	params, names, err := o.params(req)
	if err != nil {
		return agent.Message{}, fmt.Errorf("openai: %w", err)
	}
	ctx, w := watch(ctx, o.idle)
	defer w.stop()
	retries := &retryNotice{maxRetries: o.retries, watch: w, onDelta: onDelta}

	stream := o.client.Chat.Completions.NewStreaming(ctx, params, option.WithMiddleware(retries.middleware))
	defer stream.Close()
	var text, thinking strings.Builder
	calls := openaiCalls{names: names, onDelta: onDelta, partials: newPartials(onDelta)}
	var usage *agent.Usage
	finish := ""
	for stream.Next() {
		w.kick()
		chunk := stream.Current()
		if chunk.JSON.Usage.Valid() {
			usage = openaiUsage(chunk.Usage)
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue // n is 1: other choices are not asked for
			}
			if r := openaiReasoning(choice.Delta); r != "" {
				thinking.WriteString(r)
				onDelta(agent.Delta{Thinking: r})
			}
			for _, d := range []string{choice.Delta.Content, choice.Delta.Refusal} {
				if d != "" {
					text.WriteString(d)
					onDelta(agent.Delta{Text: d})
				}
			}
			for _, tc := range choice.Delta.ToolCalls {
				calls.add(tc)
			}
			if choice.FinishReason != "" {
				finish = choice.FinishReason
			}
		}
	}
	if err := streamFailure(ctx); err != nil {
		return agent.Message{}, fmt.Errorf("openai: %w", err)
	}
	if err := stream.Err(); err != nil {
		return agent.Message{}, openaiError("openai", err)
	}
	if finish == "" {
		return agent.Message{}, errors.New("openai: the stream ended before the model finished (no finish_reason)")
	}

	msg := agent.Message{Role: agent.Assistant, Usage: usage}
	if thinking.Len() > 0 {
		msg.Content = append(msg.Content, agent.Block{Type: "thinking", Thinking: thinking.String()})
	}
	if text.Len() > 0 {
		msg.Content = append(msg.Content, agent.Block{Type: "text", Text: text.String()})
	}
	switch finish {
	case "stop":
		msg.StopReason = agent.Stop
	case "tool_calls", "function_call":
		msg.StopReason = agent.ToolUse
	case "length":
		msg.StopReason = agent.Length
	case "content_filter":
		msg.StopReason, msg.ErrorMessage = agent.Error, "openai: the reply was stopped by the provider's content filter"
	default:
		msg.StopReason, msg.ErrorMessage = agent.Error, fmt.Sprintf("openai: the model stopped with finish_reason %q", finish)
	}
	for _, c := range calls.list {
		b := calls.finish(c)
		if b.ArgumentsError != "" && finish == "length" {
			continue // cut off by the token limit; a length message's calls never run
		}
		msg.Content = append(msg.Content, b)
	}
	finishCalls(&msg)
	return msg, nil
}

// openaiUsage maps a Chat Completions usage to agent.Usage (see Stream).
func openaiUsage(u openai.CompletionUsage) *agent.Usage {
	cached := u.PromptTokensDetails.CachedTokens
	if f, ok := u.JSON.ExtraFields["prompt_cache_hit_tokens"]; ok && cached == 0 {
		_ = json.Unmarshal([]byte(f.Raw()), &cached)
	}
	cached = min(max(cached, 0), u.PromptTokens)
	return &agent.Usage{Input: u.PromptTokens - cached, Output: u.CompletionTokens, CacheRead: cached}
}

// openaiReasoning is the reasoning text of a delta from servers that stream it beside the
// content: "reasoning_content" (DeepSeek, vLLM, SGLang) or "reasoning" (Ollama, vLLM,
// OpenRouter).
func openaiReasoning(d openai.ChatCompletionChunkChoiceDelta) string {
	for _, key := range []string{"reasoning_content", "reasoning"} {
		if f, ok := d.JSON.ExtraFields[key]; ok {
			var s string
			if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
				return s
			}
		}
	}
	return ""
}

// openaiCall is a tool call being streamed.
type openaiCall struct {
	index     int64 // the stream's index
	position  int   // among the message's calls, from 0
	id, name  string
	arguments strings.Builder
	announced bool
}

// openaiCalls gathers streamed tool-call fragments in order. A fragment belongs to the call with
// its index; a fragment with a new id at a used index starts another call (servers that send
// each call whole at index 0). A call is announced complete (Delta{ToolCall}) when a later call
// starts, if its arguments are a JSON object by then; the others when the stream has finished.
type openaiCalls struct {
	list     []*openaiCall
	names    toolNames
	onDelta  func(agent.Delta)
	partials *partials
}

func (cs *openaiCalls) add(f openai.ChatCompletionChunkChoiceDeltaToolCall) {
	var c *openaiCall
	for i := len(cs.list) - 1; i >= 0; i-- {
		if cs.list[i].index == f.Index {
			c = cs.list[i]
			break
		}
	}
	if c == nil || f.ID != "" && c.id != "" && f.ID != c.id {
		for _, earlier := range cs.list {
			if !earlier.announced {
				cs.announce(earlier)
			}
		}
		c = &openaiCall{index: f.Index, position: len(cs.list)}
		cs.list = append(cs.list, c)
	}
	if c.id == "" {
		c.id = f.ID
	}
	if c.name == "" {
		c.name = f.Function.Name
	}
	c.arguments.WriteString(f.Function.Arguments)
	cs.partials.update(c.position, c.id, cs.names.local(c.name), c.arguments.String())
}

// finish returns c as a toolCall block, its arguments checked (callBlock); a call that came
// without an id gets one (kept for its announcement and the message).
func (cs *openaiCalls) finish(c *openaiCall) agent.Block {
	if c.id == "" {
		c.id = newCallID()
	}
	b := callBlock(c.id, cs.names.local(c.name), c.arguments.String())
	if !c.announced {
		c.announced = true
		announced := b
		cs.onDelta(agent.Delta{ToolCall: &announced})
	}
	return b
}

// announce reports c complete if its arguments are a JSON object by now (fragments of parallel
// calls may interleave: a call whose arguments do not parse yet may still be streaming).
func (cs *openaiCalls) announce(c *openaiCall) {
	if _, err := callArguments(c.arguments.String()); err == nil {
		cs.finish(c)
	}
}

// params maps a request to Chat Completions parameters (see replayable for what is dropped).
func (o *OpenAI) params(req agent.Request) (openai.ChatCompletionNewParams, toolNames, error) {
	p := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(o.model),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if strings.TrimSpace(req.System) != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for _, spec := range req.Tools {
		schema, err := inputSchema(spec.InputSchema)
		if err != nil {
			return p, nil, fmt.Errorf("tool %s: %w", spec.Name, err)
		}
		fn := shared.FunctionDefinitionParam{Name: vendorToolName(spec.Name), Parameters: schema}
		if spec.Description != "" {
			fn.Description = openai.String(spec.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	for _, m := range replayable(req.Messages) {
		switch m.Role {
		case agent.User:
			if um, ok := openaiUser(m); ok {
				p.Messages = append(p.Messages, um)
			}
		case agent.Assistant:
			var am openai.ChatCompletionAssistantMessageParam
			if t := m.Text(); strings.TrimSpace(t) != "" {
				am.Content.OfString = openai.String(t)
			}
			for _, c := range m.ToolCalls() {
				am.ToolCalls = append(am.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name: vendorToolName(c.Name), Arguments: string(replayArguments(c.Arguments)),
						},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &am})
		case agent.ToolResult:
			p.Messages = append(p.Messages, openai.ToolMessage(resultText(m.Result), m.ToolCallID))
		}
	}
	return p, newToolNames(req.Tools), nil
}

// openaiUser maps a user message: its text, or content parts when it holds images.
func openaiUser(m agent.Message) (openai.ChatCompletionMessageParamUnion, bool) {
	var parts []openai.ChatCompletionContentPartUnionParam
	images := false
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			if b.Text != "" {
				parts = append(parts, openai.TextContentPart(b.Text))
			}
		case "image":
			images = true
			parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
				URL: "data:" + b.MimeType + ";base64," + b.Data,
			}))
		}
	}
	switch {
	case len(parts) == 0:
		return openai.ChatCompletionMessageParamUnion{}, false
	case images:
		return openai.UserMessage(parts), true
	default:
		return openai.UserMessage(m.Text()), true
	}
}

// openaiError words an error of the OpenAI SDK as the provider's message, after prefix (the
// provider's name); one that says the request was too long for the model's context window is
// also ErrContextLength.
func openaiError(prefix string, err error) error {
	var api *openai.Error
	if errors.As(err, &api) {
		msg := api.Message
		if msg == "" && api.Response != nil && api.Response.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(api.Response.Body, 64<<10))
			msg = errorText(string(body))
		}
		out := fmt.Errorf("%s: %s: %s", prefix, statusLine(api.StatusCode), msg)
		if api.StatusCode == http.StatusBadRequest || api.StatusCode == http.StatusRequestEntityTooLarge {
			return markContextLength(out, api.Code, msg)
		}
		return out
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		code, msg := streamErrorDetail(se.Event.Data)
		text := msg
		if code != "" {
			text = code + ": " + msg
		}
		return markContextLength(fmt.Errorf("%s: error in the stream: %s", prefix, text), code, msg)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: the stream was cut before the model finished: %w", prefix, err)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// streamErrorDetail is the code and message of an error event's data: {"error": {"code",
// "message"}}, {"error": "text"}, or the data itself.
func streamErrorDetail(data []byte) (code, msg string) {
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	var detail struct {
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	}
	msg = strings.TrimSpace(string(data))
	if json.Unmarshal(data, &body) == nil && len(body.Error) > 0 {
		if json.Unmarshal(body.Error, &detail) == nil && detail.Message != "" {
			msg = detail.Message
			if json.Unmarshal(detail.Code, &code) != nil {
				code = strings.Trim(string(detail.Code), `"`)
			}
		} else if json.Unmarshal(body.Error, &msg) != nil {
			msg = string(body.Error)
		}
	}
	return code, msg
}

var (
	_ agent.Model         = (*OpenAI)(nil)
	_ agent.ContextWindow = (*OpenAI)(nil)
)
