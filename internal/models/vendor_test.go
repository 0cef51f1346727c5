package models

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/tool"
)

func TestReplayable(t *testing.T) {
	user := agent.Message{Role: agent.User, Content: []agent.Block{{Type: "text", Text: "Go."}}}
	call := func(id string) agent.Block {
		return agent.Block{Type: "toolCall", ID: id, Name: "read_file", Arguments: json.RawMessage(`{}`)}
	}
	result := func(id string) agent.Message {
		return agent.Message{Role: agent.ToolResult, ToolCallID: id, ToolName: "read_file", Result: &tool.Result{Content: []tool.Content{tool.Text("ok")}}}
	}
	missing := func(id string) agent.Message {
		res := tool.ErrorResult("No result: the run ended before tool call %s (read_file) finished.", id)
		return agent.Message{Role: agent.ToolResult, ToolCallID: id, ToolName: "read_file", Result: &res}
	}
	calling := agent.Message{Role: agent.Assistant, StopReason: agent.ToolUse, Content: []agent.Block{call("c1"), call("c2")}}
	tests := []struct {
		name string
		in   []agent.Message
		want []agent.Message
	}{{
		name: "error and aborted messages without content are dropped",
		in: []agent.Message{user,
			{Role: agent.Assistant, StopReason: agent.Error, ErrorMessage: "openai: 429 Too Many Requests: slow down"},
			user,
			{Role: agent.Assistant, StopReason: agent.Aborted, ErrorMessage: "Run stopped by owner", Content: []agent.Block{{Type: "text", Text: " "}}},
			user},
		want: []agent.Message{user, user, user},
	}, {
		name: "an aborted message with text is kept",
		in:   []agent.Message{user, {Role: agent.Assistant, StopReason: agent.Aborted, Content: []agent.Block{{Type: "text", Text: "Half"}}}},
		want: []agent.Message{user, {Role: agent.Assistant, StopReason: agent.Aborted, Content: []agent.Block{{Type: "text", Text: "Half"}}}},
	}, {
		name: "answered calls are kept",
		in:   []agent.Message{user, calling, result("c1"), result("c2")},
		want: []agent.Message{user, calling, result("c1"), result("c2")},
	}, {
		name: "a missing result is made up, an orphan result dropped",
		in:   []agent.Message{user, calling, result("c2"), result("zz"), user, result("c1")},
		want: []agent.Message{user, calling, result("c2"), missing("c1"), user},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := replayable(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestVendorToolName(t *testing.T) {
	long := strings.Repeat("a", 100)
	tests := []struct{ name, want string }{
		{"read_file", "read_file"},
		{"run-command", "run-command"},
		{"files.search", "files_search_" + hash8("files.search")},
		{long, strings.Repeat("a", 55) + "_" + hash8(long)},
	}
	for _, tt := range tests {
		got := vendorToolName(tt.name)
		if got != tt.want {
			t.Errorf("vendorToolName(%q): got %q, want %q", tt.name, got, tt.want)
		}
		if !vendorToolNameRule.MatchString(got) {
			t.Errorf("vendorToolName(%q) = %q: the vendors refuse it", tt.name, got)
		}
		if back := newToolNames([]agent.ToolSpec{{Name: tt.name}}).local(got); back != tt.name {
			t.Errorf("local(%q): got %q, want %q", got, back, tt.name)
		}
	}
	if got, want := vendorToolName("files_search"), "files_search"; got != want {
		t.Errorf("a valid name that looks like a mapped one: got %q, want %q", got, want)
	}
}

func hash8(name string) string {
	s := vendorToolName(name)
	return s[len(s)-8:]
}

// TestDottedToolNames checks that a tool whose name the vendors refuse is declared under its
// vendor name and that calls to it come back under its own.
func TestDottedToolNames(t *testing.T) {
	vendorName := vendorToolName("files.search")
	tests := []struct {
		vendor string
		model  func(*fakeVendor) agent.Model
	}{
		{"openai", func(f *fakeVendor) agent.Model { return newTestOpenAI(f, 0) }},
		{"anthropic", func(f *fakeVendor) agent.Model { return newTestAnthropic(f, 0) }},
	}
	for _, tt := range tests {
		t.Run(tt.vendor, func(t *testing.T) {
			body := strings.Replace(recorded(t, tt.vendor, "tools.sse"), `"name":"read_file"`, `"name":"`+vendorName+`"`, 1)
			f := newFakeVendor(t, serveSSE(body))
			req := userSays("Search.")
			req.Tools = []agent.ToolSpec{{Name: "files.search", InputSchema: json.RawMessage(`{"type":"object"}`)}}
			got, err := tt.model(f).Stream(context.Background(), req, func(agent.Delta) {})
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if got, want := got.ToolCalls()[0].Name, "files.search"; got != want {
				t.Errorf("call name: got %q, want %q", got, want)
			}
			r, _ := f.only(t)
			if !strings.Contains(string(r.Body), `"name":"`+vendorName+`"`) || strings.Contains(string(r.Body), "files.search") {
				t.Errorf("declared tools: want the name %q only: %s", vendorName, r.Body)
			}
		})
	}
}

func TestCallArguments(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", "{}", true},
		{"  ", "{}", true},
		{`{ "path": "a" }`, `{"path":"a"}`, true},
		{`{"path":`, "", false},
		{`{"path": "a"} x`, "", false},
		{`["a"]`, "", false},
		{`"a"`, "", false},
	}
	for _, tt := range tests {
		got, err := callArguments(tt.in)
		if (err == nil) != tt.ok || string(got) != tt.want {
			t.Errorf("callArguments(%q): got %s, %v; want %s, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// TestArgumentsThatDoNotParseAreACallWithItsReasonNotAFailedStream (issue 34, SPEC §9): a tool
// call whose streamed arguments do not parse (an unclosed JSON object, as small local models
// send) ends no vendor's stream: the message keeps the call, with {} as its arguments and the
// reason, for the call pipeline to answer with an error result.
func TestArgumentsThatDoNotParseAreACallWithItsReasonNotAFailedStream(t *testing.T) {
	tests := []struct {
		name   string
		stream func(f *fakeVendor) func(context.Context, agent.Request, func(agent.Delta)) (agent.Message, error)
		body   string
		id     string
	}{{
		name: "OpenAI Chat Completions",
		stream: func(f *fakeVendor) func(context.Context, agent.Request, func(agent.Delta)) (agent.Message, error) {
			return newTestOpenAI(f, 0).Stream
		},
		body: strings.Replace(recorded(t, "openai", "tools_ollama.sse"),
			`"arguments":"{\"path\":\"README.md\"}"`, `"arguments":"{\"path\":"`, 1),
		id: "call_9x2mfl3q",
	}, {
		name: "OpenAI Responses",
		stream: func(f *fakeVendor) func(context.Context, agent.Request, func(agent.Delta)) (agent.Message, error) {
			return newTestResponses(f, "gpt-4.1-mini", 0).Stream
		},
		body: strings.ReplaceAll(recorded(t, "responses", "tools.sse"),
			`"arguments":"{\"path\":\"README.md\"}"`, `"arguments":"{\"path\":"`),
		id: "call_Qx1vR8pT2mLk",
	}, {
		name: "Anthropic Messages",
		stream: func(f *fakeVendor) func(context.Context, agent.Request, func(agent.Delta)) (agent.Message, error) {
			return newTestAnthropic(f, 0).Stream
		},
		body: strings.Replace(recorded(t, "anthropic", "tools.sse"),
			`"partial_json":"ME.md\"}"`, `"partial_json":"ME.md\""`, 1),
		id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeVendor(t, serveSSE(tt.body))
			var announced []agent.Block
			msg, err := tt.stream(f)(context.Background(), userSays("Hi"), func(d agent.Delta) {
				if d.ToolCall != nil {
					announced = append(announced, *d.ToolCall)
				}
			})
			if err != nil {
				t.Fatalf("Stream: %v; want the message with the call", err)
			}
			var bad *agent.Block
			for _, c := range msg.ToolCalls() {
				if c.ID == tt.id {
					bad = &c
				}
			}
			if bad == nil {
				t.Fatalf("the message lacks the call %s: %+v", tt.id, msg.Content)
			}
			if !strings.HasPrefix(bad.ArgumentsError, "arguments are not valid JSON") || string(bad.Arguments) != "{}" {
				t.Errorf("the call: arguments %s, error %q; want {} and \"arguments are not valid JSON…\"", bad.Arguments, bad.ArgumentsError)
			}
			if msg.StopReason != agent.ToolUse {
				t.Errorf("stop reason %q, want toolUse", msg.StopReason)
			}
			found := false
			for _, a := range announced {
				found = found || a.ID == tt.id && a.ArgumentsError != ""
			}
			if !found {
				t.Errorf("the call was not announced with its reason: %+v", announced)
			}
		})
	}
}

// cloudflare502 is a gateway's HTML error page, as a proxy in front of a provider sends it.
const cloudflare502 = `<!DOCTYPE html>
<html lang="en-US">
<head><title>api.example.com | 502: Bad gateway</title>
<style>body{font-family:sans-serif}</style></head>
<body><div id="cf-wrapper"><h1>Bad gateway</h1><p>The web server reported a bad gateway error.</p>
<script>window.cf = {ray: "8f1e2d3c4b5a6978"}</script></div></body></html>`

// TestAProvidersHTMLErrorPageIsSummarised (issue 34): a proxy's HTML error page is not the error
// text verbatim: the status and the page's title, or its first line of text, bounded.
func TestAProvidersHTMLErrorPageIsSummarised(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"a page with a title", cloudflare502, "api.example.com | 502: Bad gateway"},
		{"a page without a title", "<html><body>\n<h1>504 Gateway Time-out</h1>\n<hr><center>nginx</center>\n</body></html>", "504 Gateway Time-out"},
		{"plain text", "upstream connect error\nreset reason: overflow", "upstream connect error"},
		{"a long line", strings.Repeat("x", 5000), strings.Repeat("x", 200) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorText(tt.body); got != tt.want {
				t.Errorf("errorText: got %q, want %q", got, tt.want)
			}
		})
	}
	for _, v := range []struct {
		name   string
		stream func(f *fakeVendor) error
	}{
		{"openai", func(f *fakeVendor) error {
			_, err := newTestOpenAI(f, 0).Stream(context.Background(), userSays("Hi"), func(agent.Delta) {})
			return err
		}},
		{"anthropic", func(f *fakeVendor) error {
			_, err := newTestAnthropic(f, 0).Stream(context.Background(), userSays("Hi"), func(agent.Delta) {})
			return err
		}},
	} {
		t.Run(v.name, func(t *testing.T) {
			f := newFakeVendor(t, serveError(http.StatusBadGateway, cloudflare502, map[string]string{"Content-Type": "text/html"}))
			err := v.stream(f)
			want := v.name + ": 502 Bad Gateway: api.example.com | 502: Bad gateway"
			if err == nil || err.Error() != want {
				t.Errorf("error: got %v, want %q", err, want)
			}
		})
	}
}
