package render

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	ctx := func(old, new int, text string) Line {
		return Line{Kind: LineContext, Text: text, OldNo: old, NewNo: new}
	}
	add := func(new int, text string) Line { return Line{Kind: LineAdd, Text: text, NewNo: new} }
	del := func(old int, text string) Line { return Line{Kind: LineDel, Text: text, OldNo: old} }

	for _, tt := range []struct {
		name     string
		old, new string
		exists   bool
		want     FileDiff
	}{
		{
			name: "one line of three modified", old: "a\nb\nc\n", new: "a\nB\nc\n", exists: true,
			want: FileDiff{Path: "f.txt", Added: 1, Removed: 1, Hunks: []Hunk{{
				Header: "@@ -1,3 +1,3 @@",
				Lines:  []Line{ctx(1, 1, "a"), del(2, "b"), add(2, "B"), ctx(3, 3, "c")},
			}}},
		},
		{
			name: "new file is all added lines", new: "x\ny\n", exists: false,
			want: FileDiff{Path: "f.txt", New: true, Added: 2, Hunks: []Hunk{{
				Header: "@@ -0,0 +1,2 @@",
				Lines:  []Line{add(1, "x"), add(2, "y")},
			}}},
		},
		{
			name: "new file ignores the old content", old: "stale\n", new: "x\n", exists: false,
			want: FileDiff{Path: "f.txt", New: true, Added: 1, Hunks: []Hunk{{
				Header: "@@ -0,0 +1,1 @@", Lines: []Line{add(1, "x")},
			}}},
		},
		{
			name: "new empty file", new: "", exists: false,
			want: FileDiff{Path: "f.txt", New: true, Notes: []string{"Creates an empty file."}},
		},
		{
			name: "identical content", old: "same\n", new: "same\n", exists: true,
			want: FileDiff{Path: "f.txt", Identical: true,
				Notes: []string{"No changes: the new content is identical to the current file."}},
		},
		{
			name: "existing empty file filled", old: "", new: "x\n", exists: true,
			want: FileDiff{Path: "f.txt", Added: 1, Hunks: []Hunk{{
				Header: "@@ -0,0 +1,1 @@", Lines: []Line{add(1, "x")},
			}}},
		},
		{
			name: "file emptied", old: "x\ny\n", new: "", exists: true,
			want: FileDiff{Path: "f.txt", Removed: 2, Hunks: []Hunk{{
				Header: "@@ -1,2 +0,0 @@", Lines: []Line{del(1, "x"), del(2, "y")},
			}}},
		},
		{
			name: "binary: NUL byte in the new content", old: "text\n", new: "PK\x03\x04\x00\x00", exists: true,
			want: FileDiff{Path: "f.txt", Binary: true,
				Notes: []string{"Binary content (5 bytes now, 6 bytes after); not shown."}},
		},
		{
			name: "binary: invalid UTF-8 in the current content", old: "caf\xe9\n", new: "café\n", exists: true,
			want: FileDiff{Path: "f.txt", Binary: true,
				Notes: []string{"Binary content (5 bytes now, 6 bytes after); not shown."}},
		},
		{
			name: "binary new file", new: "\x89PNG\r\n\x1a\n\x00", exists: false,
			want: FileDiff{Path: "f.txt", New: true, Binary: true,
				Notes: []string{"Binary content (9 bytes); not shown."}},
		},
		{
			name: "no trailing newline on either side: the last line is context", old: "a\nb\nc", new: "A\nb\nc", exists: true,
			want: FileDiff{Path: "f.txt", Added: 1, Removed: 1, Hunks: []Hunk{{
				Header: "@@ -1,3 +1,3 @@",
				Lines:  []Line{del(1, "a"), add(1, "A"), ctx(2, 2, "b"), ctx(3, 3, "c")},
			}}},
		},
		{
			name: "trailing newline dropped along with a change: a note, not a changed last line", old: "a\nb\nc\n", new: "A\nb\nc", exists: true,
			want: FileDiff{Path: "f.txt", Added: 1, Removed: 1,
				Notes: []string{"Removes the newline at the end of the file."},
				Hunks: []Hunk{{
					Header: "@@ -1,3 +1,3 @@",
					Lines:  []Line{del(1, "a"), add(1, "A"), ctx(2, 2, "b"), ctx(3, 3, "c")},
				}}},
		},
		{
			name: "only the trailing newline added", old: "a\nb", new: "a\nb\n", exists: true,
			want: FileDiff{Path: "f.txt", Notes: []string{"Adds a newline at the end of the file."}},
		},
		{
			name: "appending after a last line without newline", old: "a\nb", new: "a\nb\nc\n", exists: true,
			want: FileDiff{Path: "f.txt", Added: 1,
				Notes: []string{"Adds a newline at the end of the file."},
				Hunks: []Hunk{{
					Header: "@@ -1,2 +1,3 @@",
					Lines:  []Line{ctx(1, 1, "a"), ctx(2, 2, "b"), add(3, "c")},
				}}},
		},
		{
			name: "two distant changes make two hunks",
			old:  "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", new: "one\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n", exists: true,
			want: FileDiff{Path: "f.txt", Added: 2, Removed: 1, Hunks: []Hunk{
				{Header: "@@ -1,4 +1,4 @@", Lines: []Line{del(1, "1"), add(1, "one"), ctx(2, 2, "2"), ctx(3, 3, "3"), ctx(4, 4, "4")}},
				{Header: "@@ -10,3 +10,4 @@", Lines: []Line{ctx(10, 10, "10"), ctx(11, 11, "11"), ctx(12, 12, "12"), add(13, "13")}},
			}},
		},
		{
			name: "CRLF lines keep their carriage return in the text", old: "a\r\nb\r\n", new: "a\r\nc\r\n", exists: true,
			want: FileDiff{Path: "f.txt", Added: 1, Removed: 1, Hunks: []Hunk{{
				Header: "@@ -1,2 +1,2 @@", Lines: []Line{ctx(1, 1, "a\r"), del(2, "b\r"), add(2, "c\r")},
			}}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Diff("f.txt", tt.old, tt.new, tt.exists)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Diff(%q, %q, %v) =\n%s\nwant\n%s", tt.old, tt.new, tt.exists, dump(got), dump(tt.want))
			}
		})
	}
}

func TestDiffTruncatesLongDiffs(t *testing.T) {
	var b strings.Builder
	for i := range MaxDiffLines + 500 {
		fmt.Fprintf(&b, "line %d\n", i+1)
	}
	got := Diff("big.txt", "", b.String(), false)
	if !got.Truncated {
		t.Errorf("Truncated = false, want true")
	}
	if got.Added != MaxDiffLines+500 {
		t.Errorf("Added = %d, want %d (the whole diff)", got.Added, MaxDiffLines+500)
	}
	if n := shownLines(got); n != MaxDiffLines {
		t.Errorf("shown lines = %d, want %d", n, MaxDiffLines)
	}
	if want := fmt.Sprintf("@@ -0,0 +1,%d @@", MaxDiffLines); got.Hunks[0].Header != want {
		t.Errorf("header = %q, want %q (counts of the lines shown)", got.Hunks[0].Header, want)
	}
	if want := []string{"Diff truncated: showing the first 5000 of 5500 lines."}; !reflect.DeepEqual(got.Notes, want) {
		t.Errorf("Notes = %q, want %q", got.Notes, want)
	}
}

func TestDiffTruncatesAcrossHunks(t *testing.T) {
	// Every 10th line changes: many hunks of 1 del + 1 add + 6 context lines.
	var old, new strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&old, "line %d\n", i)
		if i%10 == 5 {
			fmt.Fprintf(&new, "LINE %d\n", i)
		} else {
			fmt.Fprintf(&new, "line %d\n", i)
		}
	}
	got := Diff("f", old.String(), new.String(), true)
	if !got.Truncated {
		t.Errorf("Truncated = false, want true")
	}
	if n := shownLines(got); n != MaxDiffLines {
		t.Errorf("shown lines = %d, want %d", n, MaxDiffLines)
	}
	if got.Added != got.Removed || got.Added < 2000 {
		t.Errorf("Added, Removed = %d, %d, want equal counts of the whole diff", got.Added, got.Removed)
	}
	for _, h := range got.Hunks {
		if want := headerFrom(firstNo(h, true), firstNo(h, false), h.Lines); h.Header != want {
			t.Errorf("header %q does not match its lines (want %q)", h.Header, want)
		}
	}
}

func TestDiffTooLarge(t *testing.T) {
	big := strings.Repeat("0123456789abcde\n", MaxDiffBytes/16+1) // just over 1 MiB
	for _, tt := range []struct {
		name     string
		old, new string
		exists   bool
		want     FileDiff
	}{
		{
			name: "existing file", old: "small\n", new: big, exists: true,
			want: FileDiff{Path: "f", Truncated: true, Notes: []string{"Too large to show: 1.0 MiB (the limit is 1.0 MiB)."}},
		},
		{
			name: "new file counts its lines", new: big, exists: false,
			want: FileDiff{Path: "f", New: true, Truncated: true, Added: MaxDiffBytes/16 + 1,
				Notes: []string{"Too large to show: 1.0 MiB (the limit is 1.0 MiB)."}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Diff("f", tt.old, tt.new, tt.exists)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Diff(…) =\n%s\nwant\n%s", dump(got), dump(tt.want))
			}
		})
	}
}

func TestLineKind(t *testing.T) {
	for _, tt := range []struct {
		kind        LineKind
		class, sign string
	}{
		{LineContext, "diff-ctx", " "},
		{LineAdd, "diff-add", "+"},
		{LineDel, "diff-del", "-"},
	} {
		if got := tt.kind.Class(); got != tt.class {
			t.Errorf("%s.Class() = %q, want %q", tt.kind, got, tt.class)
		}
		if got := tt.kind.Sign(); got != tt.sign {
			t.Errorf("%s.Sign() = %q, want %q", tt.kind, got, tt.sign)
		}
	}
}

func BenchmarkDiff(b *testing.B) {
	var old, new strings.Builder
	for i := range 30000 {
		fmt.Fprintf(&old, "line %d of the file\n", i)
		if i%7 == 0 {
			fmt.Fprintf(&new, "LINE %d changed\n", i)
		} else {
			fmt.Fprintf(&new, "line %d of the file\n", i)
		}
	}
	for b.Loop() {
		Diff("f", old.String(), new.String(), true)
	}
}

func shownLines(d FileDiff) int {
	n := 0
	for _, h := range d.Hunks {
		n += len(h.Lines)
	}
	return n
}

// firstNo returns the hunk's first old (or new) line number, or the one after an empty side.
func firstNo(h Hunk, old bool) int {
	for _, l := range h.Lines {
		if old && l.Kind != LineAdd {
			return l.OldNo
		}
		if !old && l.Kind != LineDel {
			return l.NewNo
		}
	}
	return 1
}

func dump(d FileDiff) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  Path=%q New=%v Binary=%v Identical=%v Truncated=%v Added=%d Removed=%d Notes=%q\n",
		d.Path, d.New, d.Binary, d.Identical, d.Truncated, d.Added, d.Removed, d.Notes)
	for _, h := range d.Hunks {
		fmt.Fprintf(&b, "  %s\n", h.Header)
		for _, l := range h.Lines {
			fmt.Fprintf(&b, "    %s%-4d %-4d %q\n", l.Kind.Sign(), l.OldNo, l.NewNo, l.Text)
		}
	}
	return b.String()
}
