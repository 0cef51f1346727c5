package render

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	nethtml "golang.org/x/net/html"
)

func TestMarkdown(t *testing.T) {
	for _, tt := range []struct {
		name    string
		src     string
		want    []string // substrings of the output
		notWant []string // substrings that must not appear (case-insensitive)
	}{
		{
			name: "code block with a language is highlighted with chroma classes",
			src:  "```go\nfunc main() { fmt.Println(\"hi\") }\n```\n",
			want: []string{
				`<pre class="chroma`, `<code>`,
				`<span class="kd">func</span>`, `<span class="nf">main</span>`,
				`<span class="s">&#34;hi&#34;</span>`,
			},
			notWant: []string{"style=", "tabindex"},
		},
		{
			name:    "code block in an unknown language is escaped, not highlighted",
			src:     "```nosuchlang\n<b>x</b> & y\n```\n",
			want:    []string{`<pre class="chroma"><code>&lt;b&gt;x&lt;/b&gt; &amp; y`},
			notWant: []string{"<b>"},
		},
		{
			name: "code block without a language",
			src:  "```\nplain\n```\n",
			want: []string{`<pre class="chroma"><code>plain`},
		},
		{
			name: "table",
			src:  "| a | b |\n|:--|--:|\n| 1 | 2 |\n",
			want: []string{"<table>", "<th align=\"left\">a</th>", "<td align=\"right\">2</td>"},
		},
		{
			name: "strikethrough, emphasis, inline code",
			src:  "~~old~~ *new* `x < y`",
			want: []string{"<del>old</del>", "<em>new</em>", "<code>x &lt; y</code>"},
		},
		{
			name:    "task list items are marks, not form controls",
			src:     "- [x] done\n- [ ] todo\n",
			want:    []string{"☑ done", "☐ todo"},
			notWant: []string{"<input"},
		},
		{
			name: "links get rel and target",
			src:  "[docs](https://example.com/a?b=1)",
			want: []string{`href="https://example.com/a?b=1"`, `rel="nofollow noreferrer noopener"`, `target="_blank"`},
		},
		{
			name: "bare URLs are autolinked",
			src:  "see https://example.com/x and www.example.org",
			want: []string{`<a href="https://example.com/x" rel="nofollow noreferrer noopener" target="_blank">`, `href="http://www.example.org"`},
		},
		{
			name:    "plain text is escaped",
			src:     "5 < 6 & \"quotes\" > 'apostrophes'",
			want:    []string{"5 &lt; 6 &amp; &#34;quotes&#34; &gt; &#39;apostrophes&#39;"},
			notWant: []string{"< 6"},
		},
		{
			name:    "script element is removed",
			src:     "hello <script>alert(1)</script> world\n\n<script>\nalert(2)\n</script>\n",
			want:    []string{"hello", "world"},
			notWant: []string{"<script", "alert("},
		},
		{
			name:    "img with onerror is removed",
			src:     "<img src=x onerror=alert(1)>",
			notWant: []string{"<img", "onerror", "alert"},
		},
		{
			name:    "javascript: link loses its href",
			src:     "[x](javascript:alert(1)) [y](JaVaScRiPt:alert(2)) <a href=\"javascript:alert(3)\">z</a>",
			want:    []string{"x", "y", "z"},
			notWant: []string{"javascript:", "href"},
		},
		{
			name:    "style, event handler and id attributes are removed",
			src:     `<a href="https://example.com" style="position:fixed" onclick="alert(1)" id="approvals">a</a> <span style="color:red" class="evil k">s</span> <div id="transcript">d</div>`,
			want:    []string{`<a href="https://example.com" rel="nofollow noreferrer noopener" target="_blank">a</a>`, "<span>s</span>", "<div>d</div>"},
			notWant: []string{"style=", "onclick", "id=", "evil"},
		},
		{
			name:    "chroma class names pass on raw spans",
			src:     `<span class="k nf">kw</span>`,
			want:    []string{`<span class="k nf">kw</span>`},
			notWant: []string{},
		},
		{
			name:    "images become links and are never loaded",
			src:     "![a chart](https://evil.example/leak?data=secret) and [![badge](https://x.example/b.svg)](https://x.example)",
			want:    []string{`<a href="https://evil.example/leak?data=secret" rel="nofollow noreferrer noopener" target="_blank">a chart</a>`, `<a href="https://x.example" rel="nofollow noreferrer noopener" target="_blank">badge</a>`},
			notWant: []string{"<img", "src="},
		},
		{
			name:    "relative and data URLs are refused",
			src:     "[stop](/api/sessions/1/stop) [d](data:text/html;base64,PHNjcmlwdD4=)",
			want:    []string{"stop", "d"},
			notWant: []string{"href", "data:"},
		},
		{
			name:    "forms, iframes and styles are removed",
			src:     "<form action=\"/x\"><input name=token></form><iframe src=\"https://x\"></iframe><style>body{}</style><svg onload=alert(1)>",
			notWant: []string{"<form", "<input", "<iframe", "<style", "<svg", "onload"},
		},
		{
			name: "harmless inline HTML survives",
			src:  "press <kbd>Ctrl</kbd>+<kbd>C</kbd>, H<sub>2</sub>O",
			want: []string{"<kbd>Ctrl</kbd>", "<sub>2</sub>"},
		},
		{
			name: "mailto links stay, without target",
			src:  "<mailto:a@example.com>",
			want: []string{`<a href="mailto:a@example.com" rel="nofollow noreferrer">mailto:a@example.com</a>`},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Markdown(tt.src)
			for _, want := range tt.want {
				if !strings.Contains(got, want) {
					t.Errorf("Markdown(%q) = %q, want it to contain %q", tt.src, got, want)
				}
			}
			for _, bad := range tt.notWant {
				if strings.Contains(strings.ToLower(got), strings.ToLower(bad)) {
					t.Errorf("Markdown(%q) = %q, want no %q", tt.src, got, bad)
				}
			}
		})
	}
}

func TestMarkdownClosesWhatItOpens(t *testing.T) {
	for _, src := range []string{
		"text with <b>unclosed bold",
		"<a href=\"https://example.com\">a link left open",
		"<table><tr><td>cell",
		"<details><summary>s</summary>streaming…",
		"</div></div></section> closing more than it opened",
		"```go\nfunc main() {", // a message cut mid-stream
	} {
		t.Run(src, func(t *testing.T) {
			got := Markdown(src)
			if err := checkBalanced(got); err != nil {
				t.Errorf("Markdown(%q) = %q: %v", src, got, err)
			}
		})
	}
}

// checkBalanced reports an end tag without its start tag, or a start tag never closed.
func checkBalanced(s string) error {
	var open []string
	z := nethtml.NewTokenizer(strings.NewReader(s))
	for {
		switch z.Next() {
		case nethtml.ErrorToken:
			if len(open) > 0 {
				return fmt.Errorf("unclosed %q", open)
			}
			return nil
		case nethtml.StartTagToken:
			name, _ := z.TagName()
			if !voidElements[string(name)] {
				open = append(open, string(name))
			}
		case nethtml.EndTagToken:
			name, _ := z.TagName()
			if len(open) == 0 || open[len(open)-1] != string(name) {
				return fmt.Errorf("</%s> does not close the innermost open element (open: %q)", name, open)
			}
			open = open[:len(open)-1]
		}
	}
}

var voidElements = map[string]bool{"br": true, "hr": true, "wbr": true, "img": true, "input": true, "col": true}

func TestMarkdownLargeCodeBlockIsNotHighlighted(t *testing.T) {
	src := "```go\n" + strings.Repeat("var x = 1\n", maxHighlightBytes/10+1) + "```\n"
	got := Markdown(src)
	if strings.Contains(got, `class="kd"`) {
		t.Errorf("a code block over %d bytes was highlighted", maxHighlightBytes)
	}
	if want := `<pre class="chroma"><code>var x = 1`; !strings.Contains(got, want) {
		t.Errorf("Markdown(large block) starts %q, want it to contain %q", got[:min(len(got), 80)], want)
	}
}

func TestMarkdownConcurrent(t *testing.T) {
	const src = "# Title\n\n```python\nprint('x')\n```\n\n| a |\n|---|\n| b |\n"
	want := Markdown(src)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if got := Markdown(src); got != want {
					t.Errorf("Markdown(%q) = %q concurrently, want %q", src, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestChromaCSS(t *testing.T) {
	got := ChromaCSS()
	for _, want := range []string{".chroma", ".chroma .kd", ".chroma .nf"} {
		if !strings.Contains(got, want) {
			t.Errorf("ChromaCSS() lacks %q:\n%s", want, got)
		}
	}
}

// TestSanitiserKeepsChromaClasses checks that the policy's class pattern covers every class
// chroma emits, so highlighting survives sanitising.
func TestSanitiserKeepsChromaClasses(t *testing.T) {
	src := "```go\npackage main\n// c\nfunc f() (int, error) { return 1 + 2.5, nil }\n```\n" +
		"```python\n@dec\nclass A(B):\n    '''doc'''\n    x = f\"{y!r}\" # c\n```\n" +
		"```js\nconst re = /a+/g; let s = `t${1}`;\n```\n" +
		"```diff\n--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n```\n"
	var raw strings.Builder
	if err := markdown.Convert([]byte(src), &raw); err != nil {
		t.Fatal(err)
	}
	classAttr := regexp.MustCompile(`class="([^"]*)"`)
	got := classAttr.FindAllString(Markdown(src), -1)
	want := classAttr.FindAllString(raw.String(), -1)
	if len(want) < 10 {
		t.Fatalf("only %d class attributes before sanitising: %s", len(want), raw.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("class attributes after sanitising = %q, want %q", got, want)
	}
}
