package rules

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Arguments as the rules see them. A tool may decode its arguments with Go's encoding/json,
// which matches keys case-insensitively and lets the last duplicate win, or with a
// case-sensitive decoder: so the rules never trust a key that is ambiguous. A key is ambiguous
// when the object holds it more than once or also under another case ("path" and "Path",
// "p\u0061th" counts as "path"). An ambiguous argument never matches an allow rule; deny and
// ask rules look at every one of its values.

// field is one top-level member of the arguments object.
type field struct {
	key     string
	raw     json.RawMessage
	str     string // argString(raw), once strDone
	strDone bool
}

// value is the field as key=glob sees it (argString), decoded once.
func (f *field) value() string {
	if !f.strDone {
		f.strDone = true
		f.str = argString(f.raw)
	}
	return f.str
}

// topLevel splits a JSON object into its members in order (nil when it is not an object).
func topLevel(raw json.RawMessage) []field {
	if !json.Valid(raw) {
		return nil
	}
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil
	}
	var out []field
	i++
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == '}' {
			return out
		}
		if raw[i] == ',' {
			i++
			continue
		}
		end := skipValue(raw, i)
		key := decodeJSONString(raw[i:end])
		i = skipSpace(raw, end)
		i++ // ':'
		i = skipSpace(raw, i)
		vend := skipValue(raw, i)
		out = append(out, field{key: key, raw: raw[i:vend]})
		i = vend
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the (valid) JSON value starting at i.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return len(b)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipValue(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	default:
		j := i
		for j < len(b) && !strings.ContainsRune(" \t\r\n,}]", rune(b[j])) {
			j++
		}
		return j
	}
}

// decodeJSONString decodes a JSON string token as encoding/json does (invalid UTF-8 becomes
// U+FFFD); "" when it is not a string.
func decodeJSONString(raw []byte) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	inner := raw[1 : len(raw)-1]
	if !strings.ContainsRune(string(inner), '\\') && utf8.Valid(inner) {
		return string(inner)
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}
