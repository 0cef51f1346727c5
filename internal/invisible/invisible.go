// Package invisible says which characters a person cannot see as written: the one definition
// that the prompts (internal/render's Reveal), the rules' text checks (internal/rules) and any
// other check share, so that what is marked on a page and what is refused in a rule are the
// same characters (SPEC §14 "What the person sees is not what is written"; Trojan Source,
// CVE-2021-42574). It has no dependencies beyond the standard library.
package invisible

import (
	"unicode"
	"unicode/utf8"
)

// Is reports whether r is a character that draws nothing or changes how the text around it
// draws: format characters (Unicode category Cf: zero-width spaces and joiners U+200B–U+200D,
// marks U+200E–U+200F, bidi embeddings and overrides U+202A–U+202E, isolates U+2066–U+2069,
// U+FEFF, tag characters…), other default-ignorable code points (U+034F, U+115F, U+3164…),
// blank glyphs (U+2800 BRAILLE PATTERN BLANK, the Hangul fillers), variation selectors, control
// characters other than tab and newline (a carriage return hides what comes before it in a
// terminal), and spaces other than U+0020 (a no-break space looks like a space but does not
// separate shell words). Tab, newline and U+0020 are not.
func Is(r rune) bool {
	switch {
	case r == '\n' || r == '\t' || r == ' ':
		return false
	case unicode.IsControl(r), unicode.Is(unicode.Cf, r), unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r),
		unicode.Is(unicode.Variation_Selector, r), unicode.IsSpace(r), unicode.Is(unicode.Zs, r):
		return true
	case blankGlyphs[r]:
		return true
	}
	return false
}

// blankGlyphs are characters that are none of the above but draw as blank space: the braille
// pattern blank (found by a new-user review) and the Hangul fillers that are not default
// ignorable.
var blankGlyphs = map[rune]bool{'\u2800': true, '\u3164': true, '\uFFA0': true, '\u115F': true, '\u1160': true}

// Find returns the byte offset and the character of the first rune in s for which Is holds,
// and whether there is one. A byte that is not valid UTF-8 counts as hidden too (it is read as
// U+FFFD, which draws as a box the person cannot read back): Find reports it as
// utf8.RuneError at its offset.
func Find(s string) (offset int, r rune, found bool) {
	for i, c := range s {
		if c == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i, c, true
			}
		}
		if Is(c) {
			return i, c, true
		}
	}
	return 0, 0, false
}
