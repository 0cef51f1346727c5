package render

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"countersign/internal/invisible"
)

// Segment is a piece of text as a view shows it: Text as it is, or, when Hidden, one character
// that would not show (or would reorder what follows) and that the view marks instead, e.g.
// "<U+202E>".
type Segment struct {
	Text   string
	Hidden bool
}

// Reveal splits s into segments, making every hidden character one Hidden segment whose Text is
// its code point ("<U+202E>"), and reports whether there was any. Hidden are characters that
// draw nothing or change how the text around them draws, so that what a person reads is not
// what runs (Trojan Source, CVE-2021-42574): format characters (Unicode category Cf: zero-width
// spaces and joiners U+200B–U+200D, marks U+200E–U+200F, bidi embeddings and overrides
// U+202A–U+202E, isolates U+2066–U+2069, U+FEFF, tag characters…), other default-ignorable
// code points (U+034F, U+115F, U+3164…), blank glyphs (U+2800 BRAILLE PATTERN BLANK), variation selectors, control characters other than
// tab and newline (a carriage return hides what comes before it in a terminal), and spaces other
// than U+0020 (a no-break space looks like a space but does not separate shell words).
func Reveal(s string) (segs []Segment, hidden bool) {
	start := 0
	for i, r := range s {
		if !isHidden(r) {
			continue
		}
		if start < i {
			segs = append(segs, Segment{Text: s[start:i]})
		}
		segs = append(segs, Segment{Text: fmt.Sprintf("<U+%04X>", r), Hidden: true})
		hidden = true
		start = i + len(string(r))
	}
	if start < len(s) {
		segs = append(segs, Segment{Text: s[start:]})
	}
	return segs, hidden
}

// isHidden is invisible.Is: the prompts mark exactly what the rules refuse.
func isHidden(r rune) bool { return invisible.Is(r) }

// EscapeHiddenJSON returns JSON text with every hidden character (see Reveal) written as a JSON
// escape ("\u202e"; a pair of surrogate escapes above U+FFFF), so that a JSON view or an
// arguments editor shows it and the text still parses to the same value. Hidden characters can
// stand only inside strings in JSON that json.Indent wrote, where an escape means the same.
func EscapeHiddenJSON(s string) string {
	var b strings.Builder
	start := 0
	for i, r := range s {
		if !isHidden(r) {
			continue
		}
		b.WriteString(s[start:i])
		if r1, r2 := utf16.EncodeRune(r); r1 != unicode.ReplacementChar {
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		} else {
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		start = i + utf8.RuneLen(r)
	}
	if b.Len() == 0 {
		return s // nothing hidden
	}
	b.WriteString(s[start:])
	return b.String()
}
