package tool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestAmbiguousKeysAreFoundAtAnyDepth: a key repeated in one object, as written, escaped or in
// another case, is found in nested objects and in arrays of objects, and named by the pointer of
// the repeating member with both keys as decoded; equal keys in different objects are not.
func TestAmbiguousKeysAreFoundAtAnyDepth(t *testing.T) {
	var many strings.Builder
	many.WriteString("{")
	for i := range 20 {
		fmt.Fprintf(&many, `"k%d":%d,`, i, i)
	}
	for _, tc := range []struct {
		name, doc string
		pointer   string // "" with msg "": no violation
		msg       string
	}{
		{"case", `{"amount": 50, "Amount": 5000}`, "/Amount", `the keys "amount" and "Amount" differ only in case`},
		{"twice", `{"amount": 50, "amount": 5000}`, "/amount", `the key "amount" appears twice in this object`},
		{"not adjacent", `{"amount":1,"to":"x","memo":"","AMOUNT":2}`, "/AMOUNT", `"amount" and "AMOUNT"`},
		{"nested", `{"a":{"b":1,"B":2}}`, "/a/B", `"b" and "B"`},
		{"deeper", `{"a":[1,{"c":{"d":[{},{"e":0,"x":1,"e":2}]}}]}`, "/a/1/c/d/1/e", `the key "e" appears twice`},
		{"array of objects", `{"items":[{"x":1},{"x":1,"X":2}]}`, "/items/1/X", `"x" and "X"`},
		{"top-level array", `[{"x":1},{"y":1,"Y":2}]`, "/1/Y", `"y" and "Y"`},
		{"escaped upper", `{"\u0041mount":1,"amount":2}`, "/amount", `"Amount" and "amount"`},
		{"escaped same", `{"\u0061mount":1,"amount":2}`, "/amount", `the key "amount" appears twice`},
		{"escaped slash", `{"a\/b":1,"a/b":2}`, "/a~1b", `the key "a/b" appears twice`},
		{"pointer escapes", `{"a/b":{"~x":1,"~X":2}}`, "/a~1b/~0X", `"~x" and "~X"`},
		{"kelvin sign", `{"k":1,"\u212a":2}`, "/\u212a", `"k" and "\u212a"`},
		{"long s", `{"s":1,"\u017f":2}`, "/\u017f", `"s" and "\u017f"`},
		{"dotless i, as encoding/json reads it", `{"id":1,"ıd":2}`, "/ıd", `"id" and "\u0131d"`},
		{"dotted I, as encoding/json reads it", `{"id":1,"İD":2}`, "/İD", `"id" and "\u0130D"`},
		{"greek sigma", `{"σ":1,"ς":2}`, "/ς", `"\u03c3" and "\u03c2"`},
		{"invalid UTF-8 decodes to U+FFFD", "{\"\xff\":1,\"\xfe\":2}", "/\ufffd", `the key "\ufffd" appears twice`},
		{"lone surrogates decode to U+FFFD", `{"\ud800":1,"\udc00":2}`, "/\ufffd", `the key "\ufffd" appears twice`},
		{"past the linear search", many.String() + `"K17":0}`, "/K17", `"k17" and "K17"`},
		{"found before a later syntax error", `{"a":1,"A":2,`, "/A", `"a" and "A"`},

		{"different objects", `{"a":{"x":1},"b":{"x":1},"x":{"x":{"X":[{"x":1},{"x":2}]}}}`, "", ""},
		{"keys of a closed object are forgotten", `{"a":{"b":1},"b":2,"c":[{"d":1}],"d":2}`, "", ""},
		{"full case folding is not simple folding", `{"ß":1,"ss":2,"SS":3}`, "/SS", `"ss" and "SS"`},
		{"distinct", many.String() + `"k20":0}`, "", ""},
		{"not an object", `[1,"a",true,null,{}]`, "", ""},
		{"scalar", `"amount"`, "", ""},
		{"empty", `{}`, "", ""},
		{"a key in a string value", `{"a":"{\"a\":1,\"A\":2}"}`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := AmbiguousKey([]byte(tc.doc))
			if tc.msg == "" {
				if v != nil || err != nil {
					t.Fatalf("AmbiguousKey(%s) = %v, %v; want nothing", tc.doc, v, err)
				}
				return
			}
			if v == nil {
				t.Fatalf("AmbiguousKey(%s) = nil, %v; want a violation at %s", tc.doc, err, tc.pointer)
			}
			if v.Pointer != tc.pointer || !strings.Contains(v.Message, tc.msg) {
				t.Errorf("AmbiguousKey(%s) = %q; want pointer %q and a message with %s", tc.doc, v, tc.pointer, tc.msg)
			}
		})
	}
}

// TestAmbiguousKeyReadsJSONAsEncodingJSONDoes: the scanner refuses what encoding/json refuses, at
// the byte where it fails, and accepts the rest.
func TestAmbiguousKeyReadsJSONAsEncodingJSONDoes(t *testing.T) {
	for _, doc := range []string{
		``, ` `, `{`, `}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{"a":1,}`, `{,"a":1}`, `{"a":1 "b":2}`, `{a:1}`, `{'a':1}`,
		`[1,]`, `[,1]`, `[1 2]`, `{"a":1]`, `[1}`, `{"a":1}}`, `{"a":1} {"a":1}`, `{"a":1}x`,
		`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x10`, `NaN`, `Infinity`, `tru`, `nul`, `True`,
		`"a`, `"\x"`, `"\u12"`, `"\u12g4"`, "\"a\tb\"", "\"a\nb\"", "\"\x00\"", `{"\q":1}`,
		"\ufeff{}", "{}\x00", strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		`{"a":` + strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10001),
	} {
		v, err := AmbiguousKey([]byte(doc))
		if json.Valid([]byte(doc)) {
			t.Errorf("json.Valid(%.40q) = true; the case is wrong", doc)
		}
		if err == nil || v != nil {
			t.Errorf("AmbiguousKey(%.40q) = %v, %v; want a syntax error", doc, v, err)
		}
	}
	for _, doc := range []string{
		` {} `, "\t\r\n[]\n", `0`, `-0`, `-0.0e-0`, `1E+2`, `123.456e789`, `"\"\\\/\b\f\n\r\t\u00e9\uD834\uDD1E"`,
		`{"a":[true,false,null,{"b":{}}],"c":""}`, "\"\xff\xfe\"", `"</script>"`, strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	} {
		if !json.Valid([]byte(doc)) {
			t.Errorf("json.Valid(%.40q) = false; the case is wrong", doc)
		}
		if v, err := AmbiguousKey([]byte(doc)); v != nil || err != nil {
			t.Errorf("AmbiguousKey(%.40q) = %v, %v; want nothing", doc, v, err)
		}
	}
	_, err := AmbiguousKey([]byte(`{"a":1,"b":tru}`))
	if want := "not valid JSON: invalid literal at byte 11"; err == nil || err.Error() != want {
		t.Errorf("the error = %v, want %q", err, want)
	}
}

// TestFoldRuneJoinsEveryCaseOfARune: over every rune, foldRune gives one representative to runes
// that simple case folding (strings.EqualFold) or encoding/json's field matching
// (ToUpper(ToLower(r))) hold equal, so neither can read as one key what the scan holds as two.
func TestFoldRuneJoinsEveryCaseOfARune(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		f := foldRune(r)
		for _, o := range []rune{unicode.SimpleFold(r), unicode.ToLower(r), unicode.ToUpper(r), unicode.ToTitle(r),
			unicode.ToUpper(unicode.ToLower(r))} {
			if g := foldRune(o); g != f {
				t.Fatalf("foldRune(%U) = %U but foldRune(%U) = %U", r, f, o, g)
			}
		}
	}
	if foldRune('a') != 'A' || foldRune('b') == foldRune('B'+1) || foldRune('ß') == foldRune('s') {
		t.Error("foldRune joins runes that are not cases of each other")
	}
}

// TestValidateInputRefusesAmbiguousKeys: ValidateInput refuses arguments with an ambiguous key
// that the inputSchema alone accepts, with one violation; invalid JSON keeps the validator's
// words.
func TestValidateInputRefusesAmbiguousKeys(t *testing.T) {
	tl := &Tool{Name: "pay", InputSchema: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"}}}`),
		Execute: noopExecute}
	if err := tl.compile(); err != nil {
		t.Fatal(err)
	}
	for doc, want := range map[string]string{
		`{"amount": 50, "Amount": 5000}`: `/Amount: the keys "amount" and "Amount" differ only in case: a tool could read either value, ` +
			`so arguments may not repeat a key in any case`,
		`{"amount": 50, "amount": 5000}`: `/amount: the key "amount" appears twice in this object: a tool could read either value, ` +
			`so arguments may not repeat a key in any case`,
	} {
		for range 2 { // the second time, past the memo
			if vs := tl.ValidateInput(json.RawMessage(doc)); len(vs) != 1 || vs[0].String() != want {
				t.Fatalf("ValidateInput(%s) = %v, want [%s]", doc, vs, want)
			}
		}
	}
	if vs := tl.ValidateInput(json.RawMessage(`{"amount": 50, "memo": {"Amount": 5000}}`)); vs != nil {
		t.Errorf("keys in different objects: %v", vs)
	}
	vs := tl.ValidateInput(json.RawMessage(`{"amount": 5`))
	if len(vs) != 1 || !strings.HasPrefix(vs[0].Message, "not valid JSON: ") {
		t.Errorf("invalid JSON: %v", vs)
	}
}

// FuzzAmbiguousKey compares the scanner with encoding/json: the same documents are valid JSON
// (json.Valid), and the same object member is found to repeat a key, by a reference that reads
// encoding/json's token stream and compares keys with strings.EqualFold and with
// encoding/json's own field folding.
func FuzzAmbiguousKey(f *testing.F) {
	for _, s := range []string{`{"amount":50,"Amount":5000}`, `{"a":[{"b":1},{"b":1,"b":2}]}`, `{"\u0041":1,"a":2}`,
		`{"k":1,"\u212a":2}`, `{"ı":1,"I":2}`, `[1,2.5e3,"x",true,null]`, `{"a":{"b":{}}, "c":[]}`, "{\"\xff\":1}", `{"a":1,}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		v, err := AmbiguousKey(doc)
		ref, refInvalid := referenceAmbiguousKey(doc)
		switch {
		case v != nil:
			if ref == "" || ref != v.Pointer {
				t.Fatalf("AmbiguousKey(%q) = %v; the reference finds %q (invalid: %v)", doc, v, ref, refInvalid)
			}
		case ref != "":
			t.Fatalf("AmbiguousKey(%q) = nil, %v; the reference finds %s", doc, err, ref)
		case (err != nil) == json.Valid(doc):
			t.Fatalf("AmbiguousKey(%q) error = %v; json.Valid = %v", doc, err, json.Valid(doc))
		}
	})
}

// referenceAmbiguousKey is the fuzz test's reference: the pointer of the first member whose key
// repeats one of its object's, read from encoding/json's token stream; "" when there is none
// before the first value ends or the stream fails (then invalid is true).
func referenceAmbiguousKey(doc []byte) (ptr string, invalid bool) {
	type frame struct {
		object   bool
		wantsKey bool     // objects: the next token is a key or '}'
		keys     []string // objects: the keys so far
		index    int      // arrays: the current element
	}
	goFold := func(s string) string {
		return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, s)
	}
	same := func(a, b string) bool {
		ra, rb := []rune(a), []rune(b)
		if len(ra) != len(rb) {
			return false
		}
		for i := range ra {
			x, y := string(ra[i]), string(rb[i])
			if !strings.EqualFold(x, y) && goFold(x) != goFold(y) {
				return false
			}
		}
		return true
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", true
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantsKey && tok != json.Delim('}') {
			top, k := stack[n-1], tok.(string)
			top.wantsKey = false
			for _, prev := range top.keys {
				if same(prev, k) {
					var tokens []string
					for _, f := range stack {
						if f.object {
							tokens = append(tokens, f.keys[len(f.keys)-1])
						} else {
							tokens = append(tokens, strconv.Itoa(f.index))
						}
					}
					return pointer(append(tokens[:len(tokens)-1], k)), false
				}
			}
			top.keys = append(top.keys, k)
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, wantsKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing container moves on, or the document is read.
		if len(stack) == 0 {
			return "", false
		}
		if top := stack[len(stack)-1]; top.object {
			top.wantsKey = true
		} else {
			top.index++
		}
	}
}

// benchArguments is a typical argument object of about 200 bytes: a few top-level keys, a
// nested object, an array, escapes.
const benchArguments = `{"path":"internal/agent/pipeline.go","content":"package agent\n\nfunc decide() bool {\n\treturn true\n}\n",` +
	`"mode":"overwrite","options":{"createDirs":true,"encoding":"utf-8"},"tags":["review","gate"],"amount":50}`

// BenchmarkAmbiguousKey is the scan's cost per call. BenchmarkValidateInput is the whole of
// validation with it: "memo" a repeated document (the memo answers, no scan), "new" a document
// the schema has not seen (scan and schema), "schema" the schema alone (the cost before the scan).
func BenchmarkAmbiguousKey(b *testing.B) {
	doc := []byte(benchArguments)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if v, err := AmbiguousKey(doc); v != nil || err != nil {
			b.Fatal(v, err)
		}
	}
}

func BenchmarkValidateInput(b *testing.B) {
	tl := &Tool{Name: "write", Execute: noopExecute, InputSchema: json.RawMessage(`{"type":"object","properties":{` +
		`"path":{"type":"string"},"content":{"type":"string"},"mode":{"enum":["overwrite","append"]},` +
		`"options":{"type":"object"},"tags":{"type":"array","items":{"type":"string"}},"amount":{"type":"number"}},"required":["path"]}`)}
	if err := tl.compile(); err != nil {
		b.Fatal(err)
	}
	doc := json.RawMessage(benchArguments)
	b.Run("memo", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if vs := tl.ValidateInput(doc); vs != nil {
				b.Fatal(vs)
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			delete(tl.input.valid, string(doc))
			if vs := tl.ValidateInput(doc); vs != nil {
				b.Fatal(vs)
			}
		}
	})
	b.Run("schema", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if vs := validate(tl.input.sch, doc); vs != nil {
				b.Fatal(vs)
			}
		}
	})
}
