package gate

import (
	"strings"
	"unicode"

	"github.com/mtibben/confusables"
	"golang.org/x/text/unicode/norm"
)

// PersonKey is what identifies a person by name wherever a name counts (SPEC §15: the person a
// link is made `for`, a rule's reviewers, the votes of an approval that needs several approvers):
// two names with one key are one person. The key is the name NFKC-normalised, with accents
// removed (NFD without combining marks), what shows nothing removed (format characters such as
// zero-width spaces and bidi controls, other default-ignorables, variation selectors, controls),
// runs of white space as one space, trimmed, and Latin small capitals as plain letters, then its
// Unicode TR39 confusables skeleton (github.com/mtibben/confusables), in lower case: "alice",
// "Alice", "аlice" (Cyrillic а), "ALİCE" and "ᴀlice" share one key. It is for comparing only,
// never shown: the names people gave are what pages and the audit show.
func PersonKey(name string) string {
	s := strings.Map(func(r rune) rune {
		switch {
		case unicode.Is(unicode.Mn, r), unicode.Is(unicode.Cf, r), unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r),
			unicode.Is(unicode.Variation_Selector, r), unicode.IsControl(r) && !unicode.IsSpace(r):
			return -1 // accents, and what shows nothing (zero-width spaces and joiners, bidi controls)
		}
		if plain, ok := smallCapitals[r]; ok {
			return plain
		}
		return unicode.ToLower(r)
	}, norm.NFD.String(norm.NFKC.String(name)))
	return strings.ToLower(confusables.Skeleton(strings.Join(strings.Fields(s), " ")))
}

// SamePerson reports whether names a and b are one person (PersonKey). A name whose key is
// empty (nothing visible: "", "\u200b") is no one, never the same person as another.
func SamePerson(a, b string) bool {
	ka := PersonKey(a)
	return ka != "" && ka == PersonKey(b)
}

// smallCapitals maps the Latin small capital letters (IPA and Phonetic Extensions, Latin
// Extended-D), which the TR39 confusables data leaves alone, to the plain letters they look like.
var smallCapitals = map[rune]rune{
	'ᴀ': 'a', 'ʙ': 'b', 'ᴄ': 'c', 'ᴅ': 'd', 'ᴇ': 'e', 'ꜰ': 'f', 'ɢ': 'g', 'ʜ': 'h', 'ɪ': 'i',
	'ᴊ': 'j', 'ᴋ': 'k', 'ʟ': 'l', 'ᴍ': 'm', 'ɴ': 'n', 'ᴏ': 'o', 'ᴘ': 'p', 'ꞯ': 'q', 'ʀ': 'r',
	'ꜱ': 's', 'ᴛ': 't', 'ᴜ': 'u', 'ᴠ': 'v', 'ᴡ': 'w', 'ʏ': 'y', 'ᴢ': 'z',
}
