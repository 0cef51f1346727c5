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
	// MaxTokens caps the tokens of one reply; 0 means DefaultAnthropicMaxTokens.
	MaxTokens int64
	// HTTPClient sends the requests; nil means the SDK's default client.
	HTTPClient *http.Client
	// MaxRetries is how many times a request that failed before streaming began (429, 5xx, 529
	// overloaded, a connection error) is tried again, with the SDK's backoff; 0 means never.
	MaxRetries int
	// IdleTimeout fails a stream that sends nothing for this long; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// Anthropic is a model served by the Anthropic Messages API, streamed with the official SDK
// (github.com/anthropics/anthropic-sdk-go/v2, client.Messages.NewStreaming). It implements
// agent.Model and is safe for concurrent use. Unlike anthropic.NewClient's default, it reads no
// environment variable or profile: everything comes from its AnthropicConfig.
type Anthropic struct {
	client    anthropic.Client
	model     string
	maxTokens int64
	idle      time.Duration
}

// NewAnthropic returns the model cfg describes. It makes no request.
func NewAnthropic(cfg AnthropicConfig) *Anthropic {
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithMaxRetries(max(cfg.MaxRetries, 0)),
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
	maxTokens := cfg.MaxTokens
	if maxTokens <= 0 {
		maxTokens = DefaultAnthropicMaxTokens
	}
	return &Anthropic{client: anthropic.NewClient(opts...), model: cfg.Model, maxTokens: maxTokens, idle: cfg.IdleTimeout}
}

// anthropicBlock is a content block being streamed.
type anthropicBlock struct {
	kind  string // "text", "tool_use"; others (thinking, ...) are ignored
	text  strings.Builder
	input strings.Builder // input_json_delta fragments
	start json.RawMessage // the input in content_block_start, used when no fragment came
	call  *agent.Block    // the finished tool call, set at content_block_stop
	err   error           // arguments that are not a JSON object
}

// Stream implements agent.Model with one streamed Messages API request: the transcript and the
// declared tools go out as messages (tool results as tool_result blocks in user messages) and
// tools; text deltas reach onDelta as they arrive; a tool call is announced and returned whole
// once its content block stops. stop_reason end_turn and stop_sequence become stopReason stop,
// tool_use toolUse, max_tokens (and model_context_window_exceeded) length; any other (refusal,
// pause_turn, ...) stopReason error with a message.
//
// Errors start with "anthropic: ": the HTTP status and the provider's message ("anthropic: 429
// Too Many Requests: This request would exceed ..."), an error event in the stream
// (overloaded_error, ...), a stream cut before message_stop, a timeout, or the context's
// cancellation. No partial message is returned with an error.
func (a *Anthropic) Stream(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
	params, names, err := a.params(req)
	if err != nil {
		return agent.Message{}, fmt.Errorf("anthropic: %w", err)
	}
	ctx, w := watch(ctx, a.idle)
	defer w.stop()

	stream := a.client.Messages.NewStreaming(ctx, params)
	defer stream.Close()
	var blocks []*anthropicBlock
	byIndex := map[int64]*anthropicBlock{}
	stopReason, stopped := "", false
	for stream.Next() {
		w.kick()
		ev := stream.Current()
		switch ev.Type {
		case "content_block_start":
			b := &anthropicBlock{kind: ev.ContentBlock.Type}
			switch b.kind {
			case "text":
				if t := ev.ContentBlock.Text; t != "" {
					b.text.WriteString(t)
					onDelta(agent.Delta{Text: t})
				}
			case "tool_use":
				b.call = &agent.Block{Type: "toolCall", ID: ev.ContentBlock.ID, Name: names.local(ev.ContentBlock.Name)}
				b.start, _ = json.Marshal(ev.ContentBlock.Input)
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
			case ev.Delta.Type == "input_json_delta" && b.kind == "tool_use":
				b.input.WriteString(ev.Delta.PartialJSON)
			}
		case "content_block_stop":
			if b := byIndex[ev.Index]; b != nil && b.kind == "tool_use" {
				raw := b.input.String()
				if strings.TrimSpace(raw) == "" && len(b.start) > 0 && string(b.start) != "null" {
					raw = string(b.start)
				}
				if b.call.Arguments, b.err = callArguments(raw); b.err == nil {
					announced := *b.call
					onDelta(agent.Delta{ToolCall: &announced})
				}
			}
		case "message_delta":
			if r := ev.Delta.StopReason; r != "" {
				stopReason = string(r)
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

	msg := agent.Message{Role: agent.Assistant}
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
		case b.kind == "tool_use" && b.call.Arguments != nil:
			msg.Content = append(msg.Content, *b.call)
		case b.kind == "tool_use" && msg.StopReason == agent.Length:
			// Cut off by the token limit; a length message's calls never run.
		case b.kind == "tool_use" && b.err != nil:
			return agent.Message{}, fmt.Errorf("anthropic: tool call %s (%s): %w", b.call.ID, b.call.Name, b.err)
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
	p := anthropic.MessageNewParams{Model: a.model, MaxTokens: a.maxTokens}
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

// anthropicError words an SDK error as the provider's message.
func anthropicError(err error) error {
	var api *anthropic.Error
	if errors.As(err, &api) {
		msg := api.Message
		if msg == "" {
			msg = api.RawJSON()
		}
		if msg == "" && api.Response != nil && api.Response.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(api.Response.Body, 1024))
			msg = strings.TrimSpace(string(body))
		}
		if api.StatusCode < 400 { // an error event in a stream that had started well
			if t := api.Type(); t != "" {
				msg = string(t) + ": " + msg
			}
			return fmt.Errorf("anthropic: error in the stream: %s", msg)
		}
		return fmt.Errorf("anthropic: %s: %s", statusLine(api.StatusCode), msg)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("anthropic: the stream was cut before the model finished: %w", err)
	}
	return fmt.Errorf("anthropic: %w", err)
}

var _ agent.Model = (*Anthropic)(nil)
