package web_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/a-h/templ"

	"countersign/internal/web"
)

// A component that fails halfway answers 500 with an error page, not the half it wrote with 200.
func TestRenderErrorIsA500NotAHalfPage(t *testing.T) {
	half := templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		io.WriteString(w, "<main>first half of the transcript")
		return errors.New("template blew up")
	})
	rec := httptest.NewRecorder()
	web.RenderFor(rec, httptest.NewRequest("GET", "/s/x", nil), http.StatusOK, half)
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", rec.Code)
	}
	body := rec.Body.String()
	if strings.Contains(body, "first half") {
		t.Errorf("the half page reached the client: %q", body)
	}
	if !strings.Contains(body, "could not be rendered") {
		t.Errorf("no error page: %q", body)
	}

	whole := templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, "<main>all of it</main>")
		return err
	})
	rec = httptest.NewRecorder()
	web.RenderFor(rec, httptest.NewRequest("GET", "/s/x", nil), http.StatusTeapot, whole)
	if rec.Code != http.StatusTeapot || rec.Body.String() != "<main>all of it</main>" {
		t.Errorf("a good render: %d %q, want 418 and the component", rec.Code, rec.Body.String())
	}
}
