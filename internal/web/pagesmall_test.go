package web

import (
	"testing"
)

// Issue 34: the New-session form starts at a real provider's model when one is configured, and
// faux:demo only when none is.
func TestDefaultModelIsARealProvidersWhenOneIsConfigured(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"faux:demo", "faux:edit"}, "faux:demo"},
		{[]string{"faux:demo", "openai:gpt-4o", "anthropic:claude-sonnet-4"}, "openai:gpt-4o"},
		{nil, "faux:demo"},
	} {
		if got := defaultModel(tc.names); got != tc.want {
			t.Errorf("defaultModel(%v) = %q, want %q", tc.names, got, tc.want)
		}
	}
}

// Issue 34: a notification names what the call does: the command, else the arguments.
func TestCallSummaryIsTheCommandElseCompactArguments(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{`{"command": "git   push\n origin"}`, "$ git push origin"},
		{`{"path": "a.txt", "content": "x"}`, `{"path":"a.txt","content":"x"}`},
		{`not json`, ""},
	} {
		if got := callSummary([]byte(tc.args)); got != tc.want {
			t.Errorf("callSummary(%s) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
