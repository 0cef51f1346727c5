package tool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Ambiguous keys (SPEC §14 "Rules judge the action"; issue 28). An object that holds a key twice,
// or two keys that differ only in case, reads differently to different decoders: Go's
// encoding/json matches struct fields case-insensitively and lets the last member win, other
// decoders keep the first, or are case-sensitive. A rule (`when args.amount < 100`) judges one
// reading and the tool may act on another, so such arguments are refused at validation (SPEC §3
// step 2), before any handler or rule sees them, at any depth.

// AmbiguousKey scans doc, one JSON value, and returns the first object member whose key repeats
// a key of the same object: equal once decoded (escapes, and invalid UTF-8 as encoding/json
// decodes it) and case-folded (foldRune). The violation's pointer names the repeating member; its
// message names both keys. A doc that is not valid JSON (RFC 8259, as encoding/json reads it) is
// an error saying where; a duplicate found before the syntax error is still reported.
func AmbiguousKey(doc []byte) (*Violation, error) {
	s := scanners.Get().(*keyScanner)
	s.doc, s.i = doc, 0
	v, err := s.scan()
	// A scanner that grew for a large document is left to the collector rather than kept.
	if cap(s.frames) <= 64 && cap(s.keys) <= 256 && cap(s.folds) <= 4096 {
		clear(s.frames[:cap(s.frames)]) // the maps of large objects
		s.doc, s.frames, s.keys, s.folds = nil, s.frames[:0], s.keys[:0], s.folds[:0]
		scanners.Put(s)
	}
	return v, err
}

// scanners keeps keyScanners and their buffers between calls: the scan is on every call's path
// and allocates nothing for a typical argument object.
var scanners = sync.Pool{New: func() any { return new(keyScanner) }}

// keyScanner is one scan of AmbiguousKey: an iterative JSON reader (no recursion, so no depth
// limit of its own) that keeps, per open object, the folded keys seen so far.
type keyScanner struct {
	doc    []byte
	i      int
	frames []keyFrame // the open objects and arrays, innermost last
	keys   []seenKey  // the keys of the open objects, innermost object's last
	folds  []byte     // the folded forms of keys, in the same order
}

// keyFrame is one open object or array.
type keyFrame struct {
	object bool
	first  int            // objects: index in keys of the object's first key
	key    seenKey        // objects: the current member's key
	index  int            // arrays: index of the current element
	set    map[string]int // objects past setAfter keys: folded key → index in keys
}

// seenKey is one key: its string token in doc (quotes included) and its folded form in folds.
type seenKey struct {
	start, end    int
	fold, foldEnd int
}

// maxNesting is encoding/json's limit on nested objects and arrays: a deeper document is not
// valid JSON to it, nor to the scan (which would otherwise hold a frame per level).
const maxNesting = 10000

// setAfter is the number of keys an object is searched linearly for; past it, by a map.
const setAfter = 16

func (s *keyScanner) scan() (*Violation, error) {
	for {
		// A value is expected.
		s.skipSpace()
		if s.i >= len(s.doc) {
			return nil, s.syntax("unexpected end of JSON input")
		}
		switch c := s.doc[s.i]; {
		case c == '{':
			s.i++
			s.frames = append(s.frames, keyFrame{object: true, first: len(s.keys)})
			if len(s.frames) > maxNesting {
				return nil, s.syntax("exceeded max depth")
			}
			s.skipSpace()
			if s.i < len(s.doc) && s.doc[s.i] == '}' {
				s.i++
				s.pop()
				break
			}
			if v, err := s.member(); v != nil || err != nil {
				return v, err
			}
			continue
		case c == '[':
			s.i++
			s.frames = append(s.frames, keyFrame{})
			if len(s.frames) > maxNesting {
				return nil, s.syntax("exceeded max depth")
			}
			s.skipSpace()
			if s.i < len(s.doc) && s.doc[s.i] == ']' {
				s.i++
				s.pop()
				break
			}
			continue
		case c == '"':
			if _, _, err := s.str(); err != nil {
				return nil, err
			}
		case c == '-' || (c >= '0' && c <= '9'):
			if err := s.number(); err != nil {
				return nil, err
			}
		case c == 't':
			if err := s.literal("true"); err != nil {
				return nil, err
			}
		case c == 'f':
			if err := s.literal("false"); err != nil {
				return nil, err
			}
		case c == 'n':
			if err := s.literal("null"); err != nil {
				return nil, err
			}
		default:
			return nil, s.syntax(fmt.Sprintf("invalid character %q looking for a value", c))
		}
		// A value ended: close every container it completes, then find the next value.
		for {
			s.skipSpace()
			if len(s.frames) == 0 {
				if s.i < len(s.doc) {
					return nil, s.syntax("invalid character after the top-level value")
				}
				return nil, nil
			}
			if s.i >= len(s.doc) {
				return nil, s.syntax("unexpected end of JSON input")
			}
			f, c := &s.frames[len(s.frames)-1], s.doc[s.i]
			s.i++
			switch {
			case c == ',' && f.object:
				if v, err := s.member(); v != nil || err != nil {
					return v, err
				}
			case c == ',':
				f.index++
			case (c == '}' && f.object) || (c == ']' && !f.object):
				s.pop()
				continue
			default:
				s.i--
				return nil, s.syntax(fmt.Sprintf("invalid character %q after a value", c))
			}
			break
		}
	}
}

// member reads an object member's key and colon, checks the key against the object's others,
// and leaves s at the member's value.
func (s *keyScanner) member() (*Violation, error) {
	s.skipSpace()
	if s.i >= len(s.doc) || s.doc[s.i] != '"' {
		return nil, s.syntax("expected a string key")
	}
	start := s.i
	escaped, nonASCII, err := s.str()
	if err != nil {
		return nil, err
	}
	f := &s.frames[len(s.frames)-1]
	k := seenKey{start: start, end: s.i, fold: len(s.folds)}
	s.folds = appendFold(s.folds, decodeKey(s.doc[start:s.i], escaped, nonASCII))
	k.foldEnd = len(s.folds)
	f.key = k
	folded := s.folds[k.fold:k.foldEnd]
	if f.set != nil {
		if j, ok := f.set[string(folded)]; ok {
			return s.repeated(s.keys[j]), nil
		}
		f.set[string(folded)] = len(s.keys)
	} else {
		for j := f.first; j < len(s.keys); j++ {
			if bytes.Equal(s.folds[s.keys[j].fold:s.keys[j].foldEnd], folded) {
				return s.repeated(s.keys[j]), nil
			}
		}
		if len(s.keys)-f.first == setAfter {
			f.set = make(map[string]int, 2*setAfter)
			for j := f.first; j < len(s.keys); j++ {
				f.set[string(s.folds[s.keys[j].fold:s.keys[j].foldEnd])] = j
			}
			f.set[string(folded)] = len(s.keys)
		}
	}
	s.keys = append(s.keys, k)
	s.skipSpace()
	if s.i >= len(s.doc) || s.doc[s.i] != ':' {
		return nil, s.syntax("expected ':' after an object key")
	}
	s.i++
	return nil, nil
}

// pop closes the innermost object or array, forgetting its keys.
func (s *keyScanner) pop() {
	f := s.frames[len(s.frames)-1]
	s.frames = s.frames[:len(s.frames)-1]
	if f.object && f.first < len(s.keys) {
		s.folds = s.folds[:s.keys[f.first].fold]
		s.keys = s.keys[:f.first]
	}
}

// repeated is the violation of the current member, whose key repeats first.
func (s *keyScanner) repeated(first seenKey) *Violation {
	tokens := make([]string, 0, len(s.frames))
	for _, f := range s.frames {
		if f.object {
			tokens = append(tokens, string(decodeKey(s.doc[f.key.start:f.key.end], true, true)))
		} else {
			tokens = append(tokens, strconv.Itoa(f.index))
		}
	}
	a := string(decodeKey(s.doc[first.start:first.end], true, true))
	b := tokens[len(tokens)-1]
	// Quoted in ASCII: "K" and U+212A KELVIN SIGN must not look alike in the message.
	msg := fmt.Sprintf("the key %+q appears twice in this object: a tool could read either value", b)
	if a != b {
		msg = fmt.Sprintf("the keys %+q and %+q differ only in case: a tool could read either value", a, b)
	}
	return &Violation{Pointer: pointer(tokens), Message: msg + ", so arguments may not repeat a key in any case"}
}

func (s *keyScanner) syntax(msg string) error {
	return fmt.Errorf("not valid JSON: %s at byte %d", msg, s.i)
}

func (s *keyScanner) skipSpace() {
	for s.i < len(s.doc) {
		switch s.doc[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// plain marks the bytes a string holds as they are: printable ASCII but '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads the string token at s.i and reports whether it holds an escape or a byte past ASCII.
// Bytes past ASCII are not checked: encoding/json reads invalid UTF-8 as U+FFFD.
func (s *keyScanner) str() (escaped, nonASCII bool, err error) {
	d, i := s.doc, s.i+1
	for {
		for ; i < len(d); i++ {
			if !plain[d[i]] {
				break
			}
		}
		if i >= len(d) {
			s.i = i
			return false, false, s.syntax("unexpected end of JSON input in a string")
		}
		switch c := d[i]; {
		case c == '"':
			s.i = i + 1
			return escaped, nonASCII, nil
		case c >= utf8.RuneSelf:
			nonASCII = true
			i++
		case c == '\\':
			escaped = true
			if i+1 >= len(d) {
				s.i = i
				return false, false, s.syntax("unexpected end of JSON input in a string")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) || !isHex(d[i+5]) {
					s.i = i
					return false, false, s.syntax(`invalid \u escape in a string`)
				}
				i += 6
			default:
				s.i = i
				return false, false, s.syntax("invalid escape in a string")
			}
		default: // a control character
			s.i = i
			return false, false, s.syntax("invalid control character in a string")
		}
	}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number reads a number token: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *keyScanner) number() error {
	d, i := s.doc, s.i
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = digits(d, i)
	default:
		s.i = i
		return s.syntax("invalid number")
	}
	if i < len(d) && d[i] == '.' {
		if i+1 >= len(d) || d[i+1] < '0' || d[i+1] > '9' {
			s.i = i
			return s.syntax("invalid number")
		}
		i = digits(d, i+1)
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			s.i = i
			return s.syntax("invalid number")
		}
		i = digits(d, i)
	}
	s.i = i
	return nil
}

func digits(d []byte, i int) int {
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	return i
}

func (s *keyScanner) literal(word string) error {
	if len(s.doc)-s.i < len(word) || string(s.doc[s.i:s.i+len(word)]) != word {
		return s.syntax("invalid literal")
	}
	s.i += len(word)
	return nil
}

// decodeKey is a key's string token decoded as encoding/json decodes it (invalid UTF-8 and lone
// surrogates become U+FFFD). Without escapes or bytes past ASCII, it is the token's inside.
func decodeKey(tok []byte, escaped, nonASCII bool) []byte {
	inner := tok[1 : len(tok)-1]
	if !escaped && (!nonASCII || utf8.Valid(inner)) {
		return inner
	}
	var k string
	if err := json.Unmarshal(tok, &k); err != nil {
		// str accepted the token, so encoding/json does too; keep the bytes if it ever does not.
		return inner
	}
	return []byte(k)
}

// appendFold appends key with each rune replaced by foldRune's: two keys that differ only in
// case fold to the same bytes.
func appendFold(dst, key []byte) []byte {
	for i := 0; i < len(key); {
		c := key[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(key[i:])
		dst = utf8.AppendRune(dst, foldRune(r))
		i += n
	}
	return dst
}

// foldRune is the representative of r's case class: the smallest rune of the Unicode simple case
// folding orbit (unicode.SimpleFold, as strings.EqualFold compares) of ToUpper(ToLower(r)), the
// mapping encoding/json matches struct fields by. Runes equal under either fold to the same
// rune: "k", "K" and U+212A KELVIN SIGN all give "K"; "ı" (U+0131), which simple folding leaves
// alone but encoding/json reads as "I", gives "I" too. For ASCII it is upper case.
func foldRune(r rune) rune {
	r = unicode.ToUpper(unicode.ToLower(r))
	m := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		m = min(m, f)
	}
	return m
}
