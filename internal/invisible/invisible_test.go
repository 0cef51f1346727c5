package invisible

import (
	"testing"
	"unicode/utf8"
)

func TestIsMarksInvisibleBidiAndControlCharacters(t *testing.T) {
	for _, r := range []rune{'\u202e', '\u2066', '\u2069', '\u200b', '\u200d', '\ufeff', '\r', '\x00', '\x7f',
		'\u0085', '\u00a0', '\u3164', '\u2800', '\U000E0041', '\ufe0f', '\u034f'} {
		if !Is(r) {
			t.Errorf("Is(%U) = false, want true", r)
		}
	}
	for _, r := range []rune{'a', ' ', '\t', '\n', 'é', '日', '✓', '-', '('} {
		if Is(r) {
			t.Errorf("Is(%U) = true, want false", r)
		}
	}
}

func TestFindGivesTheByteOffsetOfTheFirstHiddenCharacter(t *testing.T) {
	for _, tc := range []struct {
		in    string
		off   int
		r     rune
		found bool
	}{
		{"run_command(git log:*)", 0, 0, false},
		{"run_command(git l\u202eog:*)", 17, '\u202e', true},
		{"wr\u200bite_file", 2, '\u200b', true},
		{"é\u2066", 2, '\u2066', true},
		{"ok\xffok", 2, utf8.RuneError, true},
		{"ok\uFFFDok", 0, 0, false}, // a real U+FFFD draws as itself
	} {
		off, r, found := Find(tc.in)
		if off != tc.off || r != tc.r || found != tc.found {
			t.Errorf("Find(%q) = %d, %U, %v; want %d, %U, %v", tc.in, off, r, found, tc.off, tc.r, tc.found)
		}
	}
}
