package models

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"countersign/internal/agent"
)

// ResponsesConfig configures a model served by OpenAI's Responses API (POST /v1/responses).
type ResponsesConfig struct {
	// APIKey is sent as "Authorization: Bearer <key>"; "" sends none.
	APIKey string
	// BaseURL is the API root; "" means https://api.openai.com/v1.
	BaseURL string
	// Model is the vendor's model name, e.g. "gpt-5-mini" or "o4-mini".
	Model string
	// Reasoning says whether the model reasons (OpenAI's gpt-5 and o-series): its requests then
	// ask for reasoning summaries and for the encrypted reasoning to be returned, so reasoning
	// items can be sent back in the next request. Unset, it is guessed from the model name
	// (ReasoningModel).
	Reasoning *bool
	// ReasoningSummary is the reasoning.summary asked of a reasoning model: "auto" (the
	// default when ""), "concise", "detailed", or "none" to ask for none (an organisation that
	// is not verified may not be given summaries).
	ReasoningSummary string
	// HTTPClient sends the requests; nil means the SDK's default client.
	HTTPClient *http.Client
	// MaxRetries is how many times a request that failed before streaming began (429, 5xx, a
	// connection error) is tried again, with the SDK's backoff, each announced as
	// agent.Delta{Retry} (see retry.go); 0 means never.
	MaxRetries int
	// IdleTimeout fails a stream that sends nothing for this long; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ContextWindow is the model's context window in tokens; 0 means the table's (window.go).
	ContextWindow int
}

// ReasoningModel guesses from its name whether an OpenAI model reasons: the o-series (o1, o3,
// o4-mini, ...), codex-mini and gpt-5 (except the gpt-5-chat models) do.
func ReasoningModel(model string) bool {
	name := strings.ToLower(model)
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	switch {
	case strings.HasPrefix(name, "gpt-5"):
		return !strings.Contains(name, "-chat")
	case strings.HasPrefix(name, "codex-"):
		return true
	case len(name) >= 2 && name[0] == 'o' && name[1] >= '1' && name[1] <= '9':
		return true
	}
	return false
}

// Responses is a model served by OpenAI's Responses API, streamed with the official SDK
// (github.com/openai/openai-go/v3, client.Responses.NewStreaming). It implements agent.Model and
// agent.ContextWindow and is safe for concurrent use. Requests are stateless (store: false, no
// previous_response_id): every request carries the whole transcript, with a reasoning model's
// reasoning items returned encrypted (include: reasoning.encrypted_content) and sent back as
// they came, so nothing needs to be kept at OpenAI.
type Responses struct {
	client    openai.Client
	model     string
	reasoning bool
	summary   string
	idle      time.Duration
	retries   int
	window    int
}

// NewResponses returns the model cfg describes. It makes no request.
func NewResponses(cfg ResponsesConfig) *Responses {
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
	r := &Responses{client: openai.NewClient(opts...), model: cfg.Model, idle: cfg.IdleTimeout, retries: retries,
		reasoning: ReasoningModel(cfg.Model), summary: cfg.ReasoningSummary, window: cfg.ContextWindow}
	if cfg.Reasoning != nil {
		r.reasoning = *cfg.Reasoning
	}
	if r.summary == "" {
		r.summary = "auto"
	}
	if r.window <= 0 {
		r.window = contextWindowOf(cfg.Model)
	}
	return r
}

// ContextWindow implements agent.ContextWindow: the model's context window in tokens (the
// config's, else the table's in window.go, else DefaultContextWindow).
func (r *Responses) ContextWindow() int { return r.window }

// responsesItem is an output item being streamed.
type responsesItem struct {
	kind     string // "message", "function_call", "reasoning"; others are ignored
	id       string // the item's id (msg_…, fc_…, rs_…)
	text     strings.Builder
	callID   string
	name     string
	args     strings.Builder
	position int // function_call: among the message's calls, from 0
	done     bool
	block    *agent.Block // set when the item is done: the block as kept
	summary  int64        // reasoning: the summary part being streamed (-1: none yet)
}

// Stream implements agent.Model with one streamed Responses API request (OpenAI Responses API
// streaming events): the session's instructions as instructions, the transcript as input items
// (user and assistant messages, function_call and function_call_output items, reasoning items as
// they came), the declared tools as function tools (strict: false, as the declared schemas are
// not written for strict mode). As the stream arrives, onDelta gets:
//   - Text: response.output_text.delta and response.refusal.delta;
//   - Thinking: response.reasoning_summary_text.delta (summary parts apart by a blank line) and
//     response.reasoning_text.delta; the reasoning item is kept as a thinking block with its id
//     and encrypted_content (Signature), from response.output_item.done;
//   - Partial: a function call while response.function_call_arguments.delta streams (each
//     fragment, see partials);
//   - ToolCall: a function call complete, at its response.output_item.done, when its arguments
//     are a JSON object;
//   - Retry: before the SDK waits to try again (see retry.go).
//
// The message's Usage, from response.completed (or response.incomplete): Input is input_tokens
// less input_tokens_details.cached_tokens and cache_write_tokens, CacheRead cached_tokens,
// CacheWrite cache_write_tokens, Output output_tokens (reasoning included). response.completed
// is stopReason toolUse when the message holds function calls, else stop; response.incomplete
// for max_output_tokens is length, for anything else (content_filter) error with a message.
//
// Errors start with "openai-responses: ": the HTTP status and the provider's message, an error
// event or response.failed in the stream (with the provider's code and message), a stream cut
// before response.completed, a timeout, or the context's cancellation. A request too long for
// the model's context window (code context_length_exceeded) is also ErrContextLength. No
// partial message is returned with an error.
func (r *Responses) Stream(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
	params, names, err := r.params(req)
	if err != nil {
		return agent.Message{}, fmt.Errorf("openai-responses: %w", err)
	}
	ctx, w := watch(ctx, r.idle)
	defer w.stop()
	retries := &retryNotice{maxRetries: r.retries, watch: w, onDelta: onDelta}

	stream := r.client.Responses.NewStreaming(ctx, params, option.WithMiddleware(retries.middleware))
	defer stream.Close()
	var items []*responsesItem
	byIndex := map[int64]*responsesItem{}
	partial := newPartials(onDelta)
	calls := 0
	var final *responses.Response
	var failure error
	for failure == nil && final == nil && stream.Next() {
		w.kick()
		ev := stream.Current()
		switch ev.Type {
		case "response.output_item.added":
			it := &responsesItem{kind: ev.Item.Type, id: ev.Item.ID, summary: -1}
			if it.kind == "function_call" {
				it.callID, it.name = ev.Item.CallID, names.local(ev.Item.Name)
				it.args.WriteString(ev.Item.Arguments.OfString)
				it.position, calls = calls, calls+1
				partial.update(it.position, it.callID, it.name, it.args.String())
			}
			byIndex[ev.OutputIndex] = it
			items = append(items, it)
		case "response.output_text.delta", "response.refusal.delta":
			if it := byIndex[ev.OutputIndex]; it != nil && it.kind == "message" && ev.Delta != "" {
				it.text.WriteString(ev.Delta)
				onDelta(agent.Delta{Text: ev.Delta})
			}
		case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			if it := byIndex[ev.OutputIndex]; it != nil && it.kind == "reasoning" && ev.Delta != "" {
				d := ev.Delta
				if ev.Type == "response.reasoning_summary_text.delta" && ev.SummaryIndex != it.summary {
					if it.summary >= 0 {
						d = "\n\n" + d
					}
					it.summary = ev.SummaryIndex
				}
				it.text.WriteString(d)
				onDelta(agent.Delta{Thinking: d})
			}
		case "response.function_call_arguments.delta":
			if it := byIndex[ev.OutputIndex]; it != nil && it.kind == "function_call" {
				it.args.WriteString(ev.Delta)
				partial.update(it.position, it.callID, it.name, it.args.String())
			}
		case "response.output_item.done":
			if it := byIndex[ev.OutputIndex]; it != nil {
				it.finish(ev.Item, names, onDelta)
			}
		case "response.completed", "response.incomplete":
			resp := ev.Response
			final = &resp
		case "response.failed":
			failure = responsesFailure(string(ev.Response.Error.Code), ev.Response.Error.Message)
		case "error":
			failure = responsesFailure(ev.Code, ev.Message)
		}
	}
	if err := streamFailure(ctx); err != nil {
		return agent.Message{}, fmt.Errorf("openai-responses: %w", err)
	}
	if failure != nil {
		return agent.Message{}, failure
	}
	if err := stream.Err(); err != nil {
		return agent.Message{}, openaiError("openai-responses", err)
	}
	if final == nil {
		return agent.Message{}, errors.New("openai-responses: the stream ended before the model finished (no response.completed)")
	}

	msg := agent.Message{Role: agent.Assistant, Usage: responsesUsage(final.Usage)}
	switch {
	case final.Status == "incomplete" && final.IncompleteDetails.Reason == "max_output_tokens":
		msg.StopReason = agent.Length
	case final.Status == "incomplete":
		msg.StopReason, msg.ErrorMessage = agent.Error, fmt.Sprintf("openai-responses: the reply is incomplete (%s)", final.IncompleteDetails.Reason)
	default:
		msg.StopReason = agent.Stop
	}
	for _, it := range items {
		switch {
		case it.kind == "function_call" && msg.StopReason == agent.Length && (it.block == nil || it.block.ArgumentsError != ""):
			// Cut off by the token limit; a length message's calls never run.
		case it.block != nil:
			msg.Content = append(msg.Content, *it.block)
		case it.kind == "function_call":
			return agent.Message{}, fmt.Errorf("openai-responses: tool call %s (%s) did not finish (no response.output_item.done)", it.callID, it.name)
		case it.kind == "message" && it.text.Len() > 0:
			// A message whose done event did not come: its text as streamed.
			msg.Content = append(msg.Content, agent.Block{Type: "text", Text: it.text.String()})
		}
	}
	finishCalls(&msg)
	return msg, nil
}

// finish completes an item with its response.output_item.done: a message's text, a function
// call's final arguments (announced when they are a JSON object), a reasoning item's summary and
// encrypted content.
func (it *responsesItem) finish(done responses.ResponseOutputItemUnion, names toolNames, onDelta func(agent.Delta)) {
	if it.done {
		return
	}
	it.done = true
	switch it.kind {
	case "message":
		text := it.text.String()
		if t := outputText(done); t != "" {
			text = t
		}
		if text != "" {
			it.block = &agent.Block{Type: "text", Text: text}
		}
	case "function_call":
		raw := it.args.String()
		if a := done.Arguments.OfString; a != "" {
			raw = a
		}
		if done.CallID != "" {
			it.callID = done.CallID
		}
		b := callBlock(it.callID, it.name, raw)
		it.block = &b
		announced := b
		onDelta(agent.Delta{ToolCall: &announced})
	case "reasoning":
		text := it.text.String()
		var parts []string
		for _, s := range done.Summary {
			parts = append(parts, s.Text)
		}
		if len(parts) > 0 {
			text = strings.Join(parts, "\n\n")
		}
		it.block = &agent.Block{Type: "thinking", ID: it.id, Thinking: text, Signature: done.EncryptedContent}
	}
}

// outputText joins the output_text parts of a message item.
func outputText(item responses.ResponseOutputItemUnion) string {
	var b strings.Builder
	for _, c := range item.Content {
		switch c.Type {
		case "output_text":
			b.WriteString(c.Text)
		case "refusal":
			b.WriteString(c.Refusal)
		}
	}
	return b.String()
}

// responsesUsage maps a Responses usage to agent.Usage (see Stream); nil when none was reported.
func responsesUsage(u responses.ResponseUsage) *agent.Usage {
	if !u.JSON.InputTokens.Valid() && !u.JSON.OutputTokens.Valid() {
		return nil
	}
	cached := min(max(u.InputTokensDetails.CachedTokens, 0), u.InputTokens)
	written := min(max(u.InputTokensDetails.CacheWriteTokens, 0), u.InputTokens-cached)
	return &agent.Usage{Input: u.InputTokens - cached - written, Output: u.OutputTokens, CacheRead: cached, CacheWrite: written}
}

// responsesFailure is the error for an error event or response.failed: the provider's code and
// message.
func responsesFailure(code, message string) error {
	if message == "" {
		message = "no message"
	}
	text := message
	if code != "" {
		text = code + ": " + message
	}
	return markContextLength(fmt.Errorf("openai-responses: error in the stream: %s", text), code, message)
}

// params maps a request to Responses API parameters (see replayable for what is dropped).
func (r *Responses) params(req agent.Request) (responses.ResponseNewParams, toolNames, error) {
	p := responses.ResponseNewParams{
		Model: shared.ResponsesModel(r.model),
		Store: openai.Bool(false),
	}
	if strings.TrimSpace(req.System) != "" {
		p.Instructions = openai.String(req.System)
	}
	if r.reasoning {
		p.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
		if r.summary != "none" {
			p.Reasoning = shared.ReasoningParam{Summary: shared.ReasoningSummary(r.summary)}
		}
	}
	for _, spec := range req.Tools {
		schema, err := inputSchema(spec.InputSchema)
		if err != nil {
			return p, nil, fmt.Errorf("tool %s: %w", spec.Name, err)
		}
		fn := &responses.FunctionToolParam{Name: vendorToolName(spec.Name), Parameters: schema, Strict: openai.Bool(false)}
		if spec.Description != "" {
			fn.Description = openai.String(spec.Description)
		}
		p.Tools = append(p.Tools, responses.ToolUnionParam{OfFunction: fn})
	}
	var input responses.ResponseInputParam
	for _, m := range replayable(req.Messages) {
		switch m.Role {
		case agent.User:
			if item, ok := responsesUser(m); ok {
				input = append(input, item)
			}
		case agent.Assistant:
			for _, b := range m.Content {
				switch {
				case b.Type == "text" && strings.TrimSpace(b.Text) != "":
					input = append(input, responses.ResponseInputItemParamOfMessage(b.Text, responses.EasyInputMessageRoleAssistant))
				case b.Type == "toolCall":
					input = append(input, responses.ResponseInputItemParamOfFunctionCall(
						string(replayArguments(b.Arguments)), b.ID, vendorToolName(b.Name)))
				case b.Type == "thinking" && strings.HasPrefix(b.ID, "rs_") && b.Signature != "":
					// A reasoning item of this API, sent back whole (without its encrypted
					// content it could not be: with store false the API knows no item by id).
					summary := []responses.ResponseReasoningItemSummaryParam{}
					if b.Thinking != "" {
						summary = append(summary, responses.ResponseReasoningItemSummaryParam{Text: b.Thinking})
					}
					item := responses.ResponseInputItemParamOfReasoning(b.ID, summary)
					item.OfReasoning.EncryptedContent = openai.String(b.Signature)
					input = append(input, item)
				}
			}
		case agent.ToolResult:
			item := responses.ResponseInputItemParamOfFunctionCallOutput(resultText(m.Result))
			item.OfFunctionCallOutput.CallID = openai.String(m.ToolCallID)
			input = append(input, item)
		}
	}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	return p, newToolNames(req.Tools), nil
}

// responsesUser maps a user message: its text, or input_text and input_image parts when it holds
// images.
func responsesUser(m agent.Message) (responses.ResponseInputItemUnionParam, bool) {
	var parts responses.ResponseInputMessageContentListParam
	images := false
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			if b.Text != "" {
				parts = append(parts, responses.ResponseInputContentParamOfInputText(b.Text))
			}
		case "image":
			images = true
			parts = append(parts, responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
				Detail:   responses.ResponseInputImageDetailAuto,
				ImageURL: openai.String("data:" + b.MimeType + ";base64," + b.Data),
			}})
		}
	}
	switch {
	case len(parts) == 0:
		return responses.ResponseInputItemUnionParam{}, false
	case images:
		return responses.ResponseInputItemParamOfMessage(parts, responses.EasyInputMessageRoleUser), true
	default:
		return responses.ResponseInputItemParamOfMessage(m.Text(), responses.EasyInputMessageRoleUser), true
	}
}

var (
	_ agent.Model         = (*Responses)(nil)
	_ agent.ContextWindow = (*Responses)(nil)
)
