package templates

import (
	"context"
	"io"
	"strings"

	"github.com/a-h/templ"

	"countersign/internal/render"
)

// Showing what is written (SPEC §14; issue 28): every prompt text a person decides on — a
// command, a file's path, a diff's lines, a script's path — goes through Revealed, which marks
// each character that would not show or would reorder the text (render.Reveal) where it is, e.g.
// "<U+202E>", and a prompt that holds one says so above its buttons with HiddenWarning. One
// helper, so that no prompt shows one text and runs or writes another.

// revealed writes prefix and segs as HTML text, each hidden character's marker (render.Reveal)
// in a highlighted <mark>. Written in Go rather than templ so that nothing but the text lands
// inside a <pre>, whose whitespace shows.
func revealed(prefix string, segs []render.Segment) templ.Component {
	return templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		if _, err := io.WriteString(w, templ.EscapeString(prefix)); err != nil {
			return err
		}
		for _, s := range segs {
			text := templ.EscapeString(s.Text)
			if s.Hidden {
				text = `<mark class="hidden-char" title="invisible or bidirectional character">` + text + `</mark>`
			}
			if _, err := io.WriteString(w, text); err != nil {
				return err
			}
		}
		return nil
	})
}

// Revealed is s as HTML text with its hidden characters marked (see revealed): the one way a
// prompt shows text a person decides on.
func Revealed(s string) templ.Component {
	segs, _ := render.Reveal(s)
	return revealed("", segs)
}

// revealedString is s with its hidden characters written as their markers ("<U+202E>"), for an
// attribute (an aria-label, a title), where no <mark> can go.
func revealedString(s string) string {
	segs, hidden := render.Reveal(s)
	if !hidden {
		return s
	}
	var b strings.Builder
	for _, seg := range segs {
		b.WriteString(seg.Text)
	}
	return b.String()
}

// hasHidden reports whether any of texts holds a character render.Reveal marks.
func hasHidden(texts ...string) bool {
	for _, s := range texts {
		if _, hidden := render.Reveal(s); hidden {
			return true
		}
	}
	return false
}

// hiddenWarningText is HiddenWarning's sentence: parts name what holds the characters
// ("command"; "path", "content"), outcome what may differ from what is seen ("what you see may
// not be what runs"). E.g. "This path and content contain invisible or bidirectional characters,
// marked below like <U+202E>: what you see may not be what is written."
func hiddenWarningText(parts []string, outcome string) string {
	verb := "contains"
	if len(parts) > 1 {
		verb = "contain"
	}
	return "This " + strings.Join(parts, " and ") + " " + verb +
		" invisible or bidirectional characters, marked below like <U+202E>: " + outcome + "."
}
