package fakemodels

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
)

// Anthropic is a fake Anthropic Messages API (an http.Handler; serve it with httptest and set
// ANTHROPIC_BASE_URL to its URL):
//
//	POST /v1/messages               stream: true → SSE; otherwise one JSON message
//	POST /v1/messages/count_tokens  {"input_tokens": <body bytes / 4>}
//
// Every other path is a 404 in the API's error shape. Tool call ids are "toolu_fake_<n>",
// message ids "msg_fake_<n>", counted per handler.
type Anthropic struct {
	Script Script
	recorder
	n atomic.Int64
}

// ServeHTTP answers one request.
func (a *Anthropic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := a.record(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]int{"input_tokens": len(req.Body)/4 + 1})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		model, stream, err := decodeRequest(req.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "the body is not JSON: "+err.Error())
			return
		}
		turn := Turn{Text: "done"}
		if a.Script != nil {
			turn = a.Script(req)
		}
		n := a.n.Add(1)
		if stream {
			a.stream(w, model, n, turn)
		} else {
			a.message(w, model, n, turn)
		}
	default:
		writeError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("no route %s %s in the fake", r.Method, r.URL.Path))
	}
}

// blocks are the turn's content blocks as a complete message holds them.
func (a *Anthropic) blocks(n int64, turn Turn) ([]map[string]any, string) {
	var blocks []map[string]any
	stop := "end_turn"
	if turn.Text != "" || turn.ToolName == "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": turn.Text})
	}
	if turn.ToolName != "" {
		input := json.RawMessage(turn.ToolInput)
		if !json.Valid(input) {
			input = json.RawMessage(`{}`)
		}
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_fake_%d", n), "name": turn.ToolName, "input": input})
		stop = "tool_use"
	}
	return blocks, stop
}

func usage(out int) map[string]any {
	return map[string]any{"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": out}
}

// message answers a non-streaming request.
func (a *Anthropic) message(w http.ResponseWriter, model string, n int64, turn Turn) {
	blocks, stop := a.blocks(n, turn)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("msg_fake_%d", n), "type": "message", "role": "assistant", "model": model,
		"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": usage(10),
	})
}

// stream answers a streaming request: message_start, per block content_block_start,
// content_block_delta (text_delta or input_json_delta fragments), content_block_stop, then
// message_delta with the stop_reason and message_stop.
func (a *Anthropic) stream(w http.ResponseWriter, model string, n int64, turn Turn) {
	s := newSSE(w)
	blocks, stop := a.blocks(n, turn)
	s.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": fmt.Sprintf("msg_fake_%d", n), "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage(1),
	}})
	for i, b := range blocks {
		switch b["type"] {
		case "text":
			s.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, c := range chunks(turn.Text) {
				s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": c}})
			}
		case "tool_use":
			s.event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{
				"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			input, _ := json.Marshal(b["input"])
			for _, c := range append([]string{""}, chunks(string(input))...) {
				s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": c}})
			}
		}
		s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	s.event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 10}})
	s.event("message_stop", map[string]any{"type": "message_stop"})
}
