package render

import (
	"fmt"
	"strings"
)

// UnifiedDiff is Diff(path, oldContent, newContent, exists) written as unified-diff text, its
// notes as lines starting "# ": the diff a webhook payload's summary carries (notify.DiffFunc).
func UnifiedDiff(path, oldContent, newContent string, exists bool) string {
	d := Diff(path, oldContent, newContent, exists)
	var b strings.Builder
	old := "a/" + d.Path
	if d.New {
		old = "/dev/null"
	}
	fmt.Fprintf(&b, "--- %s\n+++ b/%s\n", old, d.Path)
	for _, h := range d.Hunks {
		b.WriteString(h.Header + "\n")
		for _, l := range h.Lines {
			b.WriteString(l.Kind.Sign() + l.Text + "\n")
		}
	}
	for _, n := range d.Notes {
		b.WriteString("# " + n + "\n")
	}
	return b.String()
}
