package fakemodels

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// recordedRequest is one model request an agent sent (testdata/, from ../shared/agents/recorded).
type recordedRequest struct {
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

// replay posts a recorded request to base with a plain HTTP client, as the agent sent it (path,
// query, headers but the connection's own), and returns the response.
func replay(t *testing.T, base, file string) *http.Response {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var rr recordedRequest
	if err := json.Unmarshal(b, &rr); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, base+rr.URL, bytes.NewReader(rr.Body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range rr.Headers {
		switch strings.ToLower(k) {
		case "host", "content-length", "connection", "accept-encoding":
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type event struct {
	name string
	data map[string]any
}

// readSSE reads a whole event stream: each event's name and decoded data; the data's "type"
// must equal the event's name (both APIs repeat it).
func readSSE(t *testing.T, resp *http.Response) []event {
	t.Helper()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var out []event
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var cur event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
		case line == "":
			if cur.name == "" || cur.data == nil || cur.data["type"] != cur.name {
				t.Fatalf("event %q with data %v", cur.name, cur.data)
			}
			out = append(out, cur)
			cur = event{}
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
	if cur.name != "" {
		t.Fatalf("the stream ended inside an event")
	}
	return out
}

func names(evs []event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.name)
	}
	return out
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

// TestAnthropicStreamsAToolCallThenText: Claude Code's recorded first request gets a Bash
// tool_use in the real event order, its input in input_json_delta fragments that join to the
// input; the second (with the tool_result) gets a text block and end_turn. Requests are recorded.
func TestAnthropicStreamsAToolCallThenText(t *testing.T) {
	const input = `{"command":"touch /tmp/proof-1","description":"make a proof file"}`
	a := &Anthropic{Script: ToolThenText("Bash", input, "all done")}
	base := serve(t, a)

	evs := readSSE(t, replay(t, base, "claude-code-request-1.json"))
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}
	if got := names(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v\nwant   %v", got, want)
	}
	if m := evs[0].data["message"].(map[string]any); m["model"] != "claude-opus-5-5" || m["role"] != "assistant" {
		t.Errorf("message_start %v", m)
	}
	block := evs[1].data["content_block"].(map[string]any)
	if block["type"] != "tool_use" || block["name"] != "Bash" || block["id"] != "toolu_fake_1" || !reflect.DeepEqual(block["input"], map[string]any{}) {
		t.Errorf("content_block_start %v", block)
	}
	var joined strings.Builder
	for _, e := range evs[2:6] {
		d := e.data["delta"].(map[string]any)
		if d["type"] != "input_json_delta" {
			t.Errorf("delta %v", d)
		}
		joined.WriteString(d["partial_json"].(string))
	}
	if joined.String() != input {
		t.Errorf("input_json_delta joins to %q", joined.String())
	}
	if d := evs[7].data["delta"].(map[string]any); d["stop_reason"] != "tool_use" {
		t.Errorf("message_delta %v", d)
	}

	evs = readSSE(t, replay(t, base, "claude-code-request-2.json"))
	want = []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if got := names(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v\nwant   %v", got, want)
	}
	var text strings.Builder
	for _, e := range evs[2:5] {
		text.WriteString(e.data["delta"].(map[string]any)["text"].(string))
	}
	if text.String() != "all done" || evs[6].data["delta"].(map[string]any)["stop_reason"] != "end_turn" {
		t.Errorf("text %q, message_delta %v", text.String(), evs[6].data)
	}

	reqs := a.Requests()
	if len(reqs) != 2 || reqs[0].Path != "/v1/messages" || reqs[0].Query != "beta=true" || reqs[0].Header.Get("Anthropic-Version") != "2023-06-01" {
		t.Errorf("requests %d, first %s?%s", len(reqs), reqs[0].Path, reqs[0].Query)
	}
}

// TestAnthropicCountTokensAndNonStreaming: count_tokens and a request without stream answer
// JSON; an unknown path is a 404 in the API's error shape.
func TestAnthropicCountTokensAndNonStreaming(t *testing.T) {
	base := serve(t, &Anthropic{Script: ToolThenText("Bash", `{"command":"ls"}`, "done")})
	post := func(path, body string) (int, map[string]any) {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, m
	}
	if code, m := post("/v1/messages/count_tokens?beta=true", `{"model":"m","messages":[]}`); code != 200 || m["input_tokens"] == nil {
		t.Errorf("count_tokens: %d %v", code, m)
	}
	code, m := post("/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	content, _ := m["content"].([]any)
	if code != 200 || m["stop_reason"] != "tool_use" || len(content) != 1 || content[0].(map[string]any)["input"].(map[string]any)["command"] != "ls" {
		t.Errorf("non-streaming: %d %v", code, m)
	}
	if code, m := post("/v1/complete", `{}`); code != 404 || m["type"] != "error" {
		t.Errorf("unknown path: %d %v", code, m)
	}
}

// TestResponsesStreamsCodexShellThenTextAndTheGuardian: Codex's recorded first request gets an
// exec_command function call with an escalation, in the real event order with increasing
// sequence numbers, the argument deltas joining to the arguments; the second (with the
// function_call_output) gets "done"; the guardian's request gets its JSON verdict.
func TestResponsesStreamsCodexShellThenTextAndTheGuardian(t *testing.T) {
	f := &Responses{Script: CodexShell("touch /tmp/proof-1", "deny")}
	base := serve(t, f)

	evs := readSSE(t, replay(t, base, "codex-request-1.json"))
	want := []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.function_call_arguments.delta", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if got := names(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v\nwant   %v", got, want)
	}
	for i, e := range evs {
		if e.data["sequence_number"] != float64(i) {
			t.Errorf("%s: sequence_number %v, want %d", e.name, e.data["sequence_number"], i)
		}
	}
	var joined strings.Builder
	for _, e := range evs[3:6] {
		joined.WriteString(e.data["delta"].(string))
	}
	item := evs[7].data["item"].(map[string]any)
	var args map[string]string
	if err := json.Unmarshal([]byte(item["arguments"].(string)), &args); err != nil {
		t.Fatal(err)
	}
	if joined.String() != item["arguments"] || item["name"] != "exec_command" || item["call_id"] != "call_fake_1" ||
		args["cmd"] != "touch /tmp/proof-1" || args["sandbox_permissions"] != "require_escalated" {
		t.Errorf("function call %v, deltas %q", item, joined.String())
	}
	if r := evs[8].data["response"].(map[string]any); r["status"] != "completed" || r["model"] != "gpt-5.5" || len(r["output"].([]any)) != 1 || r["usage"] == nil {
		t.Errorf("response.completed %v", r)
	}

	evs = readSSE(t, replay(t, base, "codex-request-2.json"))
	want = []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if got := names(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v\nwant   %v", got, want)
	}
	if evs[4].data["delta"] != "done" {
		t.Errorf("text %v", evs[4].data)
	}

	evs = readSSE(t, replay(t, base, "codex-guardian-request.json"))
	var verdict map[string]string
	for _, e := range evs {
		if e.name == "response.output_text.done" {
			if err := json.Unmarshal([]byte(e.data["text"].(string)), &verdict); err != nil {
				t.Fatal(err)
			}
		}
	}
	if verdict["outcome"] != "deny" {
		t.Errorf("guardian: %v", verdict)
	}
	if n := len(f.Requests()); n != 3 {
		t.Errorf("%d requests recorded", n)
	}
}

// TestChunksKeepRunesWhole: fragments split on rune boundaries and join to the whole.
func TestChunksKeepRunesWhole(t *testing.T) {
	for _, s := range []string{"", "ab", `{"cmd":"échó ✓ done"}`, strings.Repeat("✓", 7)} {
		c := chunks(s)
		if strings.Join(c, "") != s {
			t.Errorf("%q → %q", s, c)
		}
		for _, p := range c {
			if !utf8.ValidString(p) {
				t.Errorf("%q split inside a rune: %q", s, c)
			}
		}
	}
}
