// Package render turns agent output into safe, display-ready values for the web layer: assistant
// text as sanitised Markdown HTML (SPEC §6) and a write_file call as a unified diff against the
// file's current content (SPEC §3, "What a prompt shows").
//
// Everything here is a pure function of its arguments; the package-level values are immutable
// machinery (a Markdown converter, a sanitiser policy, a highlighter), not configuration.
package render

import (
	"bytes"
	"html"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/alecthomas/chroma/v2"
	chromahtml "github.com/alecthomas/chroma/v2/formatters/html"
	"github.com/alecthomas/chroma/v2/lexers"
	"github.com/alecthomas/chroma/v2/styles"
	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	extast "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/renderer"
	gmhtml "github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/util"
)

// ChromaStyle is the chroma style (a light theme) that ChromaCSS describes.
const ChromaStyle = "github"

// maxHighlightBytes bounds the code block that is syntax highlighted. Markdown runs on every
// streamed update of an assistant message, and chroma's regexp lexers have no time limit, so a
// larger block is shown as plain (escaped) text in the same wrapper.
const maxHighlightBytes = 64 << 10

var (
	// markdown converts CommonMark + GFM (tables, strikethrough, autolinks, task lists) to HTML.
	// Raw HTML is passed through on purpose: the sanitiser, not goldmark, decides what survives,
	// so harmless inline HTML (<kbd>, <sub>, <details>) keeps working.
	markdown = goldmark.New(
		goldmark.WithExtensions(
			// Alignment as the align attribute: a style attribute would be stripped (CSP
			// style-src 'self' and the sanitiser both refuse inline styles).
			extension.NewTable(extension.WithTableCellAlignMethod(extension.TableCellAlignAttribute)),
			extension.Strikethrough,
			extension.Linkify,
			extension.TaskList,
		),
		goldmark.WithRendererOptions(
			gmhtml.WithUnsafe(),
			// Priority 100 beats goldmark's own renderers (1000) and the task-list one (500).
			renderer.WithNodeRenderers(util.Prioritized(nodeRenderer{}, 100)),
		),
	)

	// codeFormatter writes chroma tokens as <span class="…">, never style="…".
	codeFormatter = chromahtml.New(chromahtml.WithClasses(true))

	// codeStyle is the theme whose classes ChromaCSS describes.
	codeStyle = styles.Get(ChromaStyle)

	// policy is the sanitiser; see newPolicy.
	policy = newPolicy()

	// chromaCSS caches the stylesheet: it depends only on ChromaStyle.
	chromaCSS = sync.OnceValue(func() string {
		var b strings.Builder
		if err := codeFormatter.WriteCSS(&b, codeStyle); err != nil {
			// Cannot happen: a strings.Builder does not fail.
			return ""
		}
		return b.String()
	})
)

// Markdown renders assistant text (CommonMark with the GFM extensions: tables, strikethrough,
// autolinks, task lists) as sanitised HTML, safe to embed as is (SPEC §6: "Assistant text is
// rendered as sanitised Markdown").
//
// Fenced code blocks are highlighted by chroma with CSS classes (serve ChromaCSS for them); a
// block in an unknown or no language, or larger than 64 KiB, is shown unhighlighted in the same
// <pre class="chroma"> wrapper. Images are shown as links to the image, never loaded. Task-list
// items start with ☐ or ☑. The sanitiser then removes everything that is not plain
// presentational HTML: scripts, event handlers, style and id attributes, forms, embeds, and URLs
// other than http, https and mailto (relative ones included). Links get
// rel="nofollow noreferrer noopener", and target="_blank" when they point at another host.
//
// Markdown is safe for concurrent use and cheap enough to call on every streamed update.
func Markdown(src string) string {
	var buf bytes.Buffer
	if err := markdown.Convert([]byte(src), &buf); err != nil {
		// Converting into a bytes.Buffer cannot fail; keep the text visible if it ever does.
		return "<pre>" + html.EscapeString(src) + "</pre>"
	}
	return policy.Sanitize(buf.String())
}

// ChromaCSS returns the stylesheet for the classes Markdown puts on highlighted code (chroma's
// class names, theme ChromaStyle), scoped under the .chroma wrapper. The web layer serves it as
// /static/chroma.css: the page's Content-Security-Policy (style-src 'self') forbids inline
// styles. The result is computed once.
func ChromaCSS() string { return chromaCSS() }

// chromaClassRE matches a class attribute made only of chroma's class names (token classes such
// as "k" or "nf", structural ones such as "chroma", "line", "cl", and the theme's mode class).
var chromaClassRE = func() *regexp.Regexp {
	seen := map[string]bool{"light": true, "dark": true}
	for _, name := range chroma.StandardTypes {
		if name != "" {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, regexp.QuoteMeta(name))
	}
	sort.Strings(names)
	one := `(?:` + strings.Join(names, "|") + `)`
	return regexp.MustCompile(`^` + one + `(?: ` + one + `)*$`)
}()

// newPolicy returns the sanitiser for rendered Markdown: bluemonday's UGCPolicy, element for
// element and attribute for attribute, except that
//   - id attributes are refused: the page's live updates swap fragments by id, and assistant text
//     must not be able to shadow an approval's element;
//   - images (and image maps) are refused: a remote image loads without a click, which lets a
//     prompt-injected model send data out in its URL (Markdown renders images as links instead);
//   - relative URLs are refused, so a link cannot point at the app's own routes;
//
// and that it adds class on span, code, pre and div matching chroma's class names only,
// rel="nofollow noreferrer noopener" on links and target="_blank" on links to other hosts.
// UGCPolicy cannot be narrowed after the fact (bluemonday policies only grow), hence the copy.
func newPolicy() *bluemonday.Policy {
	p := bluemonday.NewPolicy()

	// Global attributes (UGCPolicy's AllowStandardAttributes without id).
	p.AllowAttrs("dir").Matching(bluemonday.Direction).Globally()
	p.AllowAttrs("lang").Matching(regexp.MustCompile(`^[a-zA-Z]{2,20}(?:-[a-zA-Z0-9]{1,8})*$`)).Globally()
	p.AllowAttrs("title").Matching(bluemonday.Paragraph).Globally()

	// URLs: http, https and mailto, absolute only.
	p.AllowURLSchemes("mailto", "http", "https")
	p.RequireParseableURLs(true)
	p.AllowRelativeURLs(false)
	p.RequireNoFollowOnLinks(true)
	p.RequireNoReferrerOnLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true) // also adds rel="noopener"

	// Sectioning, headings, grouping (as UGCPolicy).
	p.AllowElements("article", "aside", "figure", "section", "summary", "hgroup",
		"h1", "h2", "h3", "h4", "h5", "h6", "br", "div", "hr", "p", "span", "wbr")
	p.AllowAttrs("open").Matching(regexp.MustCompile(`(?i)^(|open)$`)).OnElements("details")
	p.AllowAttrs("cite").OnElements("blockquote", "q")

	// Links.
	p.AllowAttrs("href").OnElements("a")

	// Phrasing and style elements (as UGCPolicy; kbd added for keyboard input).
	p.AllowElements("abbr", "acronym", "cite", "code", "dfn", "em", "figcaption", "kbd",
		"mark", "s", "samp", "strong", "sub", "sup", "var", "del", "ins",
		"b", "i", "pre", "small", "strike", "tt", "u", "rp", "rt", "ruby")
	p.AllowAttrs("datetime").Matching(bluemonday.ISO8601).OnElements("time", "del", "ins")
	p.AllowAttrs("cite").Matching(bluemonday.Paragraph).OnElements("del", "ins")
	p.AllowAttrs("dir").Matching(bluemonday.Direction).OnElements("bdi", "bdo")
	p.AllowAttrs("value", "min", "max", "low", "high", "optimum").Matching(bluemonday.Number).OnElements("meter")
	p.AllowAttrs("value", "max").Matching(bluemonday.Number).OnElements("progress")

	// Lists and tables.
	p.AllowLists()
	p.AllowTables()

	// Syntax highlighting: chroma's class names, nothing else.
	p.AllowAttrs("class").Matching(chromaClassRE).OnElements("span", "code", "pre", "div")
	return p
}

// nodeRenderer overrides goldmark's HTML for the nodes Countersign shows differently: fenced
// code (chroma), images (links) and task-list checkboxes (text, not form controls).
type nodeRenderer struct{}

// RegisterFuncs implements renderer.NodeRenderer.
func (nodeRenderer) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindFencedCodeBlock, renderFencedCode)
	reg.Register(ast.KindImage, renderImage)
	reg.Register(extast.KindTaskCheckBox, renderTaskCheckBox)
}

// renderFencedCode writes a fenced code block highlighted by chroma, or plain when the
// language is unknown, absent, or the block is too large to highlight on every update.
func renderFencedCode(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkSkipChildren, nil
	}
	n := node.(*ast.FencedCodeBlock)
	var code strings.Builder
	lines := n.Lines()
	for i := range lines.Len() {
		seg := lines.At(i)
		code.Write(seg.Value(source))
	}
	text := code.String()

	var lexer chroma.Lexer
	if lang := n.Language(source); len(lang) > 0 && len(text) <= maxHighlightBytes {
		lexer = lexers.Get(string(lang))
	}
	if lexer != nil {
		if it, err := chroma.Coalesce(lexer).Tokenise(nil, text); err == nil {
			var out bytes.Buffer
			if err := codeFormatter.Format(&out, codeStyle, it); err == nil {
				_, _ = w.Write(out.Bytes())
				_ = w.WriteByte('\n')
				return ast.WalkSkipChildren, nil
			}
		}
	}
	_, _ = w.WriteString(`<pre class="chroma"><code>`)
	_, _ = w.WriteString(html.EscapeString(text))
	_, _ = w.WriteString("</code></pre>\n")
	return ast.WalkSkipChildren, nil
}

// renderImage writes an image as a link to it labelled with its alt text (or its URL), so
// nothing is fetched without a click; inside a link it writes the alt text only.
func renderImage(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	n := node.(*ast.Image)
	inLink := false
	for p := n.Parent(); p != nil; p = p.Parent() {
		if p.Kind() == ast.KindLink || p.Kind() == ast.KindAutoLink {
			inLink = true
			break
		}
	}
	if entering {
		if !inLink {
			_, _ = w.WriteString(`<a href="`)
			_, _ = w.Write(util.EscapeHTML(util.URLEscape(n.Destination, true)))
			_, _ = w.WriteString(`">`)
		}
		if !n.HasChildren() {
			_, _ = w.Write(util.EscapeHTML(n.Destination))
		}
		return ast.WalkContinue, nil
	}
	if !inLink {
		_, _ = w.WriteString("</a>")
	}
	return ast.WalkContinue, nil
}

// renderTaskCheckBox writes a task-list checkbox as a ballot box character: a read-only mark
// rather than a form control the sanitiser would have to allow.
func renderTaskCheckBox(w util.BufWriter, _ []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	if node.(*extast.TaskCheckBox).IsChecked {
		_, _ = w.WriteString("☑ ")
	} else {
		_, _ = w.WriteString("☐ ")
	}
	return ast.WalkContinue, nil
}
