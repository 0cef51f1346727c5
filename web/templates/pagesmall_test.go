package templates

import (
	"context"
	"reflect"
	"strings"
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

// Issue 34: a diff's lines are coloured as write_file's; other output is the text as it is.
func TestOutputColoursADiffAndKeepsPlainText(t *testing.T) {
	var b strings.Builder
	if err := Output(OutputView{Text: "diff --git a/x b/x\n@@ -1 +1 @@\n-old\n+new\n same", Diff: true}).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<span class="diff-line diff-file">diff --git a/x b/x</span>`, `<span class="diff-line diff-hunk">@@ -1 +1 @@</span>`,
		`<span class="diff-line diff-del">-old</span>`, `<span class="diff-line diff-add">+new</span>`, `<span class="diff-line"> same</span>`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %s in %s", want, b.String())
		}
	}
	b.Reset()
	if err := Output(OutputView{Text: "a\nb", Label: "stdout"}).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), `<pre class="result-text" aria-label="stdout">a
b</pre>`; got != want {
		t.Errorf("plain output = %q, want %q", got, want)
	}
}
