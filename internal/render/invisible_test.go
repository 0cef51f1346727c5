package render

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestRevealMarksInvisibleAndBidiCharacters(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   []Segment
		hidden bool
	}{
		{"ls -la\n\techo ok", []Segment{{Text: "ls -la\n\techo ok"}}, false},
		{"", nil, false},
		{"echo safe \u202e;hs.lave\u202c", []Segment{{Text: "echo safe "}, {Text: "<U+202E>", Hidden: true},
			{Text: ";hs.lave"}, {Text: "<U+202C>", Hidden: true}}, true},
		{"\u200brm", []Segment{{Text: "<U+200B>", Hidden: true}, {Text: "rm"}}, true},
		// Draws as a blank but is a letter-like symbol (found by a new-user review).
		{"rm\u2800-rf", []Segment{{Text: "rm"}, {Text: "<U+2800>", Hidden: true}, {Text: "-rf"}}, true},
		{"a\u2066b\u2069\ufeff", []Segment{{Text: "a"}, {Text: "<U+2066>", Hidden: true}, {Text: "b"},
			{Text: "<U+2069>", Hidden: true}, {Text: "<U+FEFF>", Hidden: true}}, true},
		{"ok\rrm -rf ~", []Segment{{Text: "ok"}, {Text: "<U+000D>", Hidden: true}, {Text: "rm -rf ~"}}, true},
		{"ls\u00a0-la \u3164 x\U000E0041", []Segment{{Text: "ls"}, {Text: "<U+00A0>", Hidden: true}, {Text: "-la "},
			{Text: "<U+3164>", Hidden: true}, {Text: " x"}, {Text: "<U+E0041>", Hidden: true}}, true},
		{"héllo wörld ✓ 日本", []Segment{{Text: "héllo wörld ✓ 日本"}}, false},
	} {
		got, hidden := Reveal(tc.in)
		if !reflect.DeepEqual(got, tc.want) || hidden != tc.hidden {
			t.Errorf("Reveal(%q) = %+v, %v; want %+v, %v", tc.in, got, hidden, tc.want, tc.hidden)
		}
	}
}

func TestEscapeHiddenJSONKeepsTheValue(t *testing.T) {
	in := "{\n  \"command\": \"echo \u202e;x\u200b\U000E0041 ok\u00a0\"\n}"
	got := EscapeHiddenJSON(in)
	want := "{\n  \"command\": \"echo \\u202e;x\\u200b\\udb40\\udc41 ok\\u00a0\"\n}"
	if got != want {
		t.Errorf("EscapeHiddenJSON = %q, want %q", got, want)
	}
	var a, b map[string]string
	if err := json.Unmarshal([]byte(in), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(got), &b); err != nil {
		t.Fatal(err)
	}
	if a["command"] != b["command"] {
		t.Errorf("the escaped JSON reads %q, want %q", b["command"], a["command"])
	}
	if plain := "{\"a\": \"héllo\"}"; EscapeHiddenJSON(plain) != plain {
		t.Errorf("EscapeHiddenJSON changed %q", plain)
	}
}
