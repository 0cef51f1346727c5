package templates

import (
	"context"
	"io"

	"github.com/a-h/templ"

	"countersign/internal/render"
)

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
