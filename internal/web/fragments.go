package web

import (
	"context"
	"io"

	"github.com/a-h/templ"

	"countersign/web/templates"
)

// fragments renders several components one after the other; nil components are skipped.
func fragments(cs ...templ.Component) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		for _, c := range cs {
			if c == nil {
				continue
			}
			if err := c.Render(ctx, w); err != nil {
				return err
			}
		}
		return nil
	})
}

// appendTo wraps c in an out-of-band swap that appends it to the element with id parentID. The
// appended element carries data-upsert, so app.js replaces an older copy with the same id.
func appendTo(parentID string, c templ.Component) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		if _, err := io.WriteString(w, `<div hx-swap-oob="beforeend:#`+templ.EscapeString(parentID)+`">`); err != nil {
			return err
		}
		if err := c.Render(ctx, w); err != nil {
			return err
		}
		_, err := io.WriteString(w, `</div>`)
		return err
	})
}

// removeElement is an out-of-band swap that removes the element with id id, if the page has it.
func removeElement(id string) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		_, err := io.WriteString(w, `<div id="`+templ.EscapeString(id)+`" hx-swap-oob="delete"></div>`)
		return err
	})
}

// messageDOMID is the element id of a transcript message (templates.MessageView.DOMID).
func messageDOMID(messageID string) string {
	return templates.MessageView{ID: messageID}.DOMID()
}
