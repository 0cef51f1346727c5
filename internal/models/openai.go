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
	// connection error) is tried again, with the SDK's backoff; 0 means never.
	MaxRetries int
	// IdleTimeout fails a stream that sends nothing for this long; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// OpenAI is a model served by an OpenAI-compatible Chat Completions endpoint, streamed with the
// official SDK (github.com/openai/openai-go/v3, client.Chat.Completions.NewStreaming). It
// implements agent.Model and is safe for concurrent use. Key, base URL and model come from its
// OpenAIConfig; the SDK itself still honours OPENAI_ORG_ID, OPENAI_PROJECT_ID and
// OPENAI_CUSTOM_HEADERS (and OPENAI_BASE_URL when BaseURL is "").
type OpenAI struct {
	client openai.Client
	model  string
	idle   time.Duration
}

// NewOpenAI returns the model cfg describes. It makes no request.
func NewOpenAI(cfg OpenAIConfig) *OpenAI {
	opts := []option.RequestOption{
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(max(cfg.MaxRetries, 0)),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &OpenAI{client: openai.NewClient(opts...), model: cfg.Model, idle: cfg.IdleTimeout}
}

// Stream implements agent.Model with one streamed Chat Completions request: the transcript and
// the declared tools go out as messages and function tools; text deltas reach onDelta as they
// arrive; tool calls are returned whole, in the model's order, once the stream has finished.
// finish_reason stop, tool_calls and length become stopReason stop, toolUse and length; any
// other (content_filter, ...) stopReason error with a message.
//
// Errors start with "openai: ": the HTTP status and the provider's message ("openai: 429 Too
// Many Requests: Rate limit reached ..."), an error event in the stream, a stream cut before
// its finish_reason, a timeout, or the context's cancellation. No partial message is returned
// with an error.
func (o *OpenAI) Stream(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
	params, names, err := o.params(req)
	if err != nil {
		return agent.Message{}, fmt.Errorf("openai: %w", err)
	}
	ctx, w := watch(ctx, o.idle)
	defer w.stop()

	stream := o.client.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	var text strings.Builder
	var calls openaiCalls
	finish := ""
	for stream.Next() {
		w.kick()
		for _, choice := range stream.Current().Choices {
			if choice.Index != 0 {
				continue // n is 1: other choices are not asked for
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
		return agent.Message{}, openaiError(err)
	}
	if finish == "" {
		return agent.Message{}, errors.New("openai: the stream ended before the model finished (no finish_reason)")
	}

	msg := agent.Message{Role: agent.Assistant}
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
	for _, c := range calls {
		args, err := callArguments(c.arguments.String())
		if err != nil {
			if finish == "length" {
				continue // cut off by the token limit; a length message's calls never run
			}
			return agent.Message{}, fmt.Errorf("openai: tool call %s (%s): %w", c.id, c.name, err)
		}
		b := agent.Block{Type: "toolCall", ID: c.id, Name: names.local(c.name), Arguments: args}
		if b.ID == "" {
			b.ID = newCallID()
		}
		msg.Content = append(msg.Content, b)
		onDelta(agent.Delta{ToolCall: &b})
	}
	finishCalls(&msg)
	return msg, nil
}

// openaiCall is a tool call being streamed.
type openaiCall struct {
	index     int64
	id, name  string
	arguments strings.Builder
}

// openaiCalls gathers streamed tool-call fragments in order. A fragment belongs to the call with
// its index; a fragment with a new id at a used index starts another call (servers that send
// each call whole at index 0).
type openaiCalls []*openaiCall

func (cs *openaiCalls) add(f openai.ChatCompletionChunkChoiceDeltaToolCall) {
	var c *openaiCall
	for i := len(*cs) - 1; i >= 0; i-- {
		if (*cs)[i].index == f.Index {
			c = (*cs)[i]
			break
		}
	}
	if c == nil || f.ID != "" && c.id != "" && f.ID != c.id {
		c = &openaiCall{index: f.Index}
		*cs = append(*cs, c)
	}
	if c.id == "" {
		c.id = f.ID
	}
	if c.name == "" {
		c.name = f.Function.Name
	}
	c.arguments.WriteString(f.Function.Arguments)
}

// params maps a request to Chat Completions parameters (see replayable for what is dropped).
func (o *OpenAI) params(req agent.Request) (openai.ChatCompletionNewParams, toolNames, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(o.model)}
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

// openaiError words an SDK error as the provider's message.
func openaiError(err error) error {
	var api *openai.Error
	if errors.As(err, &api) {
		msg := api.Message
		if msg == "" && api.Response != nil && api.Response.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(api.Response.Body, 1024))
			msg = strings.TrimSpace(string(body))
		}
		return fmt.Errorf("openai: %s: %s", statusLine(api.StatusCode), msg)
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		var body struct {
			Error json.RawMessage `json:"error"`
		}
		var detail struct {
			Message string `json:"message"`
		}
		msg := strings.TrimSpace(string(se.Event.Data))
		if json.Unmarshal(se.Event.Data, &body) == nil {
			if json.Unmarshal(body.Error, &detail) == nil && detail.Message != "" {
				msg = detail.Message
			} else if json.Unmarshal(body.Error, &msg) != nil {
				msg = string(body.Error)
			}
		}
		return fmt.Errorf("openai: error in the stream: %s", msg)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("openai: the stream was cut before the model finished: %w", err)
	}
	return fmt.Errorf("openai: %w", err)
}

var _ agent.Model = (*OpenAI)(nil)
