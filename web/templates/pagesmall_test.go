package templates

import (
	"reflect"
	"testing"
)

// Issue 34: the model list groups by provider, real providers before the faux scripts.
func TestModelGroupsByProviderFauxLast(t *testing.T) {
	got := modelGroups([]string{"faux:demo", "openai:gpt-4o", "faux:edit", "anthropic:claude-sonnet-4", "openai:o3"})
	want := []ModelGroup{
		{"openai", []string{"openai:gpt-4o", "openai:o3"}},
		{"anthropic", []string{"anthropic:claude-sonnet-4"}},
		{"faux", []string{"faux:demo", "faux:edit"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("modelGroups = %v, want %v", got, want)
	}
}

// Issue 34: a long output folds at FoldLines lines or FoldBytes; a short one does not.
func TestFoldHeadFoldsLongOutputOnly(t *testing.T) {
	if h, n := FoldHead("a\nb\n"); h != "" || n != 2 {
		t.Errorf("short: %q, %d", h, n)
	}
	long := ""
	for range 30 {
		long += "y\n"
	}
	if h, n := FoldHead(long); n != 30 || h != "y\ny\ny\ny\ny\ny\ny\ny\ny\ny\ny\ny\ny\ny\ny\ny\ny\ny\ny\ny" {
		t.Errorf("30 lines: %q, %d", h, n)
	}
	wide := string(make([]byte, FoldBytes+10))
	if h, n := FoldHead(wide); n != 1 || len(h) != FoldBytes {
		t.Errorf("one wide line: len %d, %d lines", len(h), n)
	}
}

// Issue 34: the context gauge in words.
func TestContextViewText(t *testing.T) {
	for _, tc := range []struct {
		c    ContextView
		want string
	}{
		{ContextView{}, "none reported yet"},
		{ContextView{Used: 2040}, "2,040 tokens (window unknown)"},
		{ContextView{Used: 2040, Window: 32768}, "2,040 of 32,768 tokens (6%)"},
	} {
		if got := tc.c.Text(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
}
