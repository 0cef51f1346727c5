package fakemodels

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// Responses is a fake OpenAI Responses API (an http.Handler). Codex ignores OPENAI_BASE_URL: its
// config.toml names a provider with `base_url = "<url>/v1"` and `wire_api = "responses"`.
//
//	POST /v1/responses   stream: true → SSE; otherwise one JSON response object
//
// Every other path is a 404 in the API's error shape. Function call ids are "call_fake_<n>"
// (item ids "fc_fake_<n>"), response ids "resp_fake_<n>", counted per handler.
type Responses struct {
	Script Script
	recorder
	n atomic.Int64
}

// ServeHTTP answers one request.
func (f *Responses) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := f.record(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route %s %s in the fake", r.Method, r.URL.Path))
		return
	}
	model, stream, err := decodeRequest(req.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "the body is not JSON: "+err.Error())
		return
	}
	turn := Turn{Text: "done"}
	if f.Script != nil {
		turn = f.Script(req)
	}
	n := f.n.Add(1)
	items := f.items(n, turn)
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(f.response(n, model, "completed", items))
		return
	}
	f.stream(w, model, n, turn, items)
}

// items are the turn's output items as the completed response holds them.
func (f *Responses) items(n int64, turn Turn) []map[string]any {
	var items []map[string]any
	if turn.Text != "" || turn.ToolName == "" {
		items = append(items, map[string]any{
			"id": fmt.Sprintf("msg_fake_%d", n), "type": "message", "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": turn.Text, "annotations": []any{}}},
		})
	}
	if turn.ToolName != "" {
		items = append(items, map[string]any{
			"id": fmt.Sprintf("fc_fake_%d", n), "type": "function_call", "status": "completed",
			"arguments": turn.ToolInput, "call_id": fmt.Sprintf("call_fake_%d", n), "name": turn.ToolName,
		})
	}
	return items
}

// response is the response object; usage only once completed.
func (f *Responses) response(n int64, model, status string, output []map[string]any) map[string]any {
	r := map[string]any{
		"id": fmt.Sprintf("resp_fake_%d", n), "object": "response", "created_at": time.Now().Unix(), "status": status,
		"error": nil, "incomplete_details": nil, "model": model, "output": output, "parallel_tool_calls": true,
		"store": false, "tool_choice": "auto", "tools": []any{}, "usage": nil,
	}
	if output == nil {
		r["output"] = []any{}
	}
	if status == "completed" {
		r["usage"] = map[string]any{
			"input_tokens": 100, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": 10, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 110,
		}
	}
	return r
}

// stream answers a streaming request in the real order, every event with its sequence_number.
func (f *Responses) stream(w http.ResponseWriter, model string, n int64, turn Turn, items []map[string]any) {
	s := newSSE(w)
	seq := 0
	emit := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		s.event(typ, fields)
	}
	emit("response.created", map[string]any{"response": f.response(n, model, "in_progress", nil)})
	emit("response.in_progress", map[string]any{"response": f.response(n, model, "in_progress", nil)})
	for i, item := range items {
		id := item["id"]
		switch item["type"] {
		case "message":
			emit("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}})
			emit("response.content_part.added", map[string]any{"item_id": id, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
			for _, c := range chunks(turn.Text) {
				emit("response.output_text.delta", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "delta": c, "logprobs": []any{}})
			}
			emit("response.output_text.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "text": turn.Text, "logprobs": []any{}})
			emit("response.content_part.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": turn.Text, "annotations": []any{}}})
		case "function_call":
			emit("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"id": id, "type": "function_call", "status": "in_progress", "arguments": "", "call_id": item["call_id"], "name": item["name"]}})
			for _, c := range chunks(turn.ToolInput) {
				emit("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": i, "delta": c})
			}
			emit("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i, "arguments": turn.ToolInput})
		}
		emit("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	emit("response.completed", map[string]any{"response": f.response(n, model, "completed", items)})
}
