package render

import (
	"fmt"
	"strings"
	"unicode/utf8"

	udiff "github.com/aymanbagabas/go-udiff"
)

const (
	// MaxDiffBytes is the largest content, old or new, that Diff compares line by line (1 MiB).
	MaxDiffBytes = 1 << 20
	// MaxDiffLines is the most lines (context included) Diff returns across all hunks.
	MaxDiffLines = 5000
	// diffContext is the number of unchanged lines shown around each change, as in diff -u.
	diffContext = 3
)

// LineKind says what a diff line does: "context", "add" or "del".
type LineKind string

// The kinds of diff line.
const (
	LineContext LineKind = "context" // unchanged, shown for context
	LineAdd     LineKind = "add"     // only in the new content
	LineDel     LineKind = "del"     // only in the current content
)

// Class is the CSS class the web layer puts on a line of this kind: "diff-ctx", "diff-add" or
// "diff-del".
func (k LineKind) Class() string {
	switch k {
	case LineAdd:
		return "diff-add"
	case LineDel:
		return "diff-del"
	default:
		return "diff-ctx"
	}
}

// Sign is the unified-diff marker of a line of this kind: "+", "-" or " ".
func (k LineKind) Sign() string {
	switch k {
	case LineAdd:
		return "+"
	case LineDel:
		return "-"
	default:
		return " "
	}
}

// Line is one line of a hunk. Text has no line terminator. OldNo and NewNo are 1-based line
// numbers in the current and the new content; 0 where the line does not exist on that side
// (OldNo for an added line, NewNo for a deleted one).
type Line struct {
	Kind  LineKind
	Text  string
	OldNo int
	NewNo int
}

// Hunk is a run of changed lines with their context. Header is the unified-diff range line,
// "@@ -a,b +c,d @@" (always with counts; an empty range starts at the line before it, as in
// diff -u, so a new file's hunk is "@@ -0,0 +1,n @@").
type Hunk struct {
	Header string
	Lines  []Line
}

// FileDiff is what a write_file approval prompt shows: the change the call makes to a workspace
// file (SPEC §3, "What a prompt shows": "as a diff against the current file for write_file").
//
// Exactly one of these describes the outcome: Identical (nothing changes, no hunks); Binary
// (either side holds NUL bytes or invalid UTF-8, no hunks); a file over MaxDiffBytes (Truncated,
// no hunks); otherwise Hunks, cut to MaxDiffLines lines with Truncated set when longer. Notes
// carries the human-readable explanation of each of these, and of a change to the newline at
// the end of the file, which is not shown as a changed line.
type FileDiff struct {
	// Path is the file's path as the call names it.
	Path string
	// New is true when the file does not exist yet: every line is an "add" line.
	New bool
	// Binary is true when either content is not text (NUL bytes or invalid UTF-8).
	Binary bool
	// Identical is true when the file exists and the new content equals it byte for byte.
	Identical bool
	// Hunks are the changes, in file order.
	Hunks []Hunk
	// Added and Removed count the added and deleted lines of the whole diff, beyond any
	// truncation (for a new file too large to show, Added is its line count).
	Added, Removed int
	// Truncated is true when not every changed line is in Hunks.
	Truncated bool
	// Notes are sentences for the reader, such as why the diff is cut or missing.
	Notes []string
}

// Diff computes the unified diff (3 lines of context) that a write_file call of newContent to
// path makes against oldContent, the file's current content; exists is false when the file does
// not exist yet (oldContent is then ignored). Lines are compared by go-udiff, a port of the Go
// team's diff (golang.org/x/tools/internal/diff), whose search is bounded: a file changed in very
// many places gets a coarser but still correct diff, in at most ~0.1 s for MaxDiffBytes. A
// missing newline at the end of the file never makes a line look changed; when only one side has
// it, a note says so.
func Diff(path, oldContent, newContent string, exists bool) FileDiff {
	d := FileDiff{Path: path, New: !exists}
	if !exists {
		oldContent = ""
		if newContent == "" {
			d.Notes = append(d.Notes, "Creates an empty file.")
			return d
		}
	}
	if exists && oldContent == newContent {
		d.Identical = true
		d.Notes = append(d.Notes, "No changes: the new content is identical to the current file.")
		return d
	}
	if !isText(oldContent) || !isText(newContent) {
		d.Binary = true
		if exists {
			d.Notes = append(d.Notes, fmt.Sprintf("Binary content (%s now, %s after); not shown.",
				size(len(oldContent)), size(len(newContent))))
		} else {
			d.Notes = append(d.Notes, fmt.Sprintf("Binary content (%s); not shown.", size(len(newContent))))
		}
		return d
	}
	if len(oldContent) > MaxDiffBytes || len(newContent) > MaxDiffBytes {
		d.Truncated = true
		if !exists {
			d.Added = countLines(newContent)
		}
		d.Notes = append(d.Notes, fmt.Sprintf("Too large to show: %s (the limit is %s).",
			size(max(len(oldContent), len(newContent))), size(MaxDiffBytes)))
		return d
	}

	// Compare with a final newline on both sides, so "c" at the end of a file without one
	// matches "c\n"; the difference, if any, becomes a note rather than a del/add pair.
	oldEOL, newEOL := endsWithNewline(oldContent), endsWithNewline(newContent)
	if exists && oldContent != "" && newContent != "" && oldEOL != newEOL {
		if newEOL {
			d.Notes = append(d.Notes, "Adds a newline at the end of the file.")
		} else {
			d.Notes = append(d.Notes, "Removes the newline at the end of the file.")
		}
	}
	before, after := withNewline(oldContent), withNewline(newContent)
	if before == after {
		return d
	}
	u, err := udiff.ToUnifiedDiff(path, path, before, udiff.Lines(before, after), diffContext)
	if err != nil {
		// Cannot happen: the edits come from udiff.Lines on the same content.
		d.Truncated = true
		d.Notes = append(d.Notes, "The diff could not be computed.")
		return d
	}

	total, shown := 0, 0
	for _, uh := range u.Hunks {
		h, counts := convertHunk(uh)
		d.Added += counts.added
		d.Removed += counts.removed
		total += len(h.Lines)
		room := MaxDiffLines - shown
		switch {
		case room <= 0:
			d.Truncated = true
			continue
		case len(h.Lines) > room:
			d.Truncated = true
			h.Lines = h.Lines[:room]
			h.Header = headerFrom(uh.FromLine, uh.ToLine, h.Lines)
		}
		shown += len(h.Lines)
		d.Hunks = append(d.Hunks, h)
	}
	if d.Truncated {
		d.Notes = append(d.Notes, fmt.Sprintf("Diff truncated: showing the first %d of %d lines.", MaxDiffLines, total))
	}
	return d
}

// lineCounts are the added and deleted lines of a hunk.
type lineCounts struct{ added, removed int }

// convertHunk numbers a go-udiff hunk's lines and strips their terminators.
func convertHunk(uh *udiff.Hunk) (Hunk, lineCounts) {
	var c lineCounts
	h := Hunk{Lines: make([]Line, 0, len(uh.Lines))}
	oldNo, newNo := uh.FromLine, uh.ToLine
	for _, ul := range uh.Lines {
		l := Line{Text: strings.TrimSuffix(ul.Content, "\n")}
		switch ul.Kind {
		case udiff.Delete:
			l.Kind, l.OldNo = LineDel, oldNo
			oldNo++
			c.removed++
		case udiff.Insert:
			l.Kind, l.NewNo = LineAdd, newNo
			newNo++
			c.added++
		default:
			l.Kind, l.OldNo, l.NewNo = LineContext, oldNo, newNo
			oldNo++
			newNo++
		}
		h.Lines = append(h.Lines, l)
	}
	h.Header = headerFrom(uh.FromLine, uh.ToLine, h.Lines)
	return h, c
}

// headerFrom formats "@@ -a,b +c,d @@" for lines starting at old line a and new line c; an
// empty side starts at the line before, as diff -u writes it.
func headerFrom(oldStart, newStart int, lines []Line) string {
	oldCount, newCount := 0, 0
	for _, l := range lines {
		if l.Kind != LineAdd {
			oldCount++
		}
		if l.Kind != LineDel {
			newCount++
		}
	}
	if oldCount == 0 {
		oldStart--
	}
	if newCount == 0 {
		newStart--
	}
	return fmt.Sprintf("@@ -%d,%d +%d,%d @@", oldStart, oldCount, newStart, newCount)
}

// isText reports whether s can be shown as text: valid UTF-8 without NUL bytes (git's test for
// binary content is the NUL byte; invalid UTF-8 could not be shown faithfully either).
func isText(s string) bool {
	return !strings.ContainsRune(s, 0) && utf8.ValidString(s)
}

// endsWithNewline reports whether s is empty or ends with a line terminator.
func endsWithNewline(s string) bool { return s == "" || strings.HasSuffix(s, "\n") }

// withNewline returns s ending with "\n" unless it is empty.
func withNewline(s string) string {
	if endsWithNewline(s) {
		return s
	}
	return s + "\n"
}

// countLines counts the lines of s, a last line without "\n" included.
func countLines(s string) int {
	n := strings.Count(s, "\n")
	if !endsWithNewline(s) {
		n++
	}
	return n
}

// size formats a byte count for a note: "812 bytes", "3.4 KiB", "1.0 MiB".
func size(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}
