package tool

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Violation is one way a JSON value breaks a schema: where (a JSON pointer into the value, RFC
// 6901, "" for the root) and what.
type Violation struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// String renders the violation as "/pointer: message" ("(root)" for the whole value).
func (v Violation) String() string {
	p := v.Pointer
	if p == "" {
		p = "(root)"
	}
	return p + ": " + v.Message
}

var printer = message.NewPrinter(language.English)

// compileSchema compiles one schema of a tool as JSON Schema 2020-12. The root must be an object
// schema ("type": "object"), as MCP 2025-11-25 §tools requires of inputSchema and outputSchema.
// An empty raw means "no schema" (nil, nil).
func compileSchema(toolName, field string, raw json.RawMessage) (*schema, error) {
	s, _, err := compileSchemaRefused(toolName, field, raw)
	return s, err
}

// compileSchemaRefused is compileSchema that also returns the URLs the compiler asked to load and
// was refused (for the fuzz test: any refusal must fail the compilation). A panic of the
// compiler, on a schema from a stranger, is an error, not a crash of the server.
func compileSchemaRefused(toolName, field string, raw json.RawMessage) (s *schema, refused []string, err error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil, nil
	}
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("tool %s: %s does not compile: the schema compiler failed: %v", toolName, field, p)
		}
	}()
	loader := &refusingLoader{}
	s, err = compileWith(loader, toolName, field, raw)
	return s, loader.refused, err
}

// compileWith compiles raw with a compiler whose only loader is loader.
func compileWith(loader *refusingLoader, toolName, field string, raw json.RawMessage) (*schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("tool %s: %s is not JSON: %v", toolName, field, err)
	}
	root, ok := doc.(map[string]any)
	if !ok || root["type"] != "object" {
		return nil, fmt.Errorf("tool %s: %s must be a JSON Schema with root \"type\": \"object\"", toolName, field)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Without AssertVocabs, unknown vocabularies would be silently ignored (TOOLCHAIN.md).
	c.AssertVocabs()
	// The library's default loader reads file:// URLs; a schema comes from a stranger (an MCP
	// server), so it loads nothing. The metaschemas of every draft are embedded in the library
	// and found before any loader is asked.
	c.UseLoader(loader)
	base := schemaBase + toolName + "/"
	url := base + field + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("tool %s: %s: %v", toolName, field, err)
	}
	sch, err := c.Compile(url)
	if len(loader.refused) > 0 {
		// Fail closed even if the library were to swallow the loader's error.
		return nil, fmt.Errorf("tool %s: %s refers to %s outside the schema; Countersign loads no "+
			"external schema (file, http or any other URL): keep every definition in the schema "+
			"and refer to it with \"#/$defs/…\"", toolName, field, quoteRefs(loader.refused, base))
	}
	if err != nil {
		return nil, fmt.Errorf("tool %s: %s does not compile: %v", toolName, field, err)
	}
	return &schema{sch: sch}, nil
}

// schemaBase is the base URL a tool's schemas are compiled under: countersign:///tools/<name>/
// <field>.json. References that resolve inside the document itself ("#/$defs/x", "#anchor", or
// its own "$id") never reach a loader.
const schemaBase = "countersign:///tools/"

// refusingLoader is the jsonschema.URLLoader of every schema compiler: it refuses every URL
// (file, http, https, relative ones resolved against the schema's base, anything) without
// touching it, and remembers what it refused. One per compilation, so it is not shared.
type refusingLoader struct{ refused []string }

// errExternalRef is what the loader answers for every URL.
var errExternalRef = errors.New("external schema references are not loaded")

func (l *refusingLoader) Load(url string) (any, error) {
	l.refused = append(l.refused, url)
	return nil, errExternalRef
}

// quoteRefs names the refused URLs for a person: quoted, those relative to the schema's own base
// shown as written relative to it.
func quoteRefs(urls []string, base string) string {
	parts := make([]string, 0, len(urls))
	for _, u := range urls {
		if rel, ok := strings.CutPrefix(u, base); ok {
			parts = append(parts, fmt.Sprintf("%q (relative to the schema)", rel))
		} else {
			parts = append(parts, fmt.Sprintf("%q", u))
		}
	}
	return strings.Join(parts, ", ")
}

// schema is a compiled schema with a memo of documents it has accepted.
//
// Validating a document against a compiled schema is a pure function of the two (no remote
// references, no clock), and decoding the document for the validator is most of a small call's
// cost. Tools are often called with the same arguments — `{}` for a tool without parameters, the
// same query in a codemode loop — and return the same small structuredContent, so the schema
// remembers up to memoEntries documents of at most memoDocBytes that it accepted, by their exact
// bytes, and answers those without decoding. Rejected documents are never remembered: their
// violations are computed again, so error texts are always fresh. The memo is cleared when full.
type schema struct {
	sch *jsonschema.Schema
	// strictKeys refuses a document with an ambiguous key (AmbiguousKey) before the schema is
	// applied: set for inputSchema. The memo holds only documents that passed the scan.
	strictKeys bool

	mu    sync.RWMutex
	valid map[string]struct{}
}

// The bounds of a schema's memo: at most memoEntries × memoDocBytes (128 KiB) per schema.
const (
	memoEntries  = 256
	memoDocBytes = 512
)

// validate returns doc's violations of the schema (nil: valid).
func (s *schema) validate(doc []byte) []Violation {
	if len(doc) <= memoDocBytes {
		s.mu.RLock()
		_, ok := s.valid[string(doc)]
		s.mu.RUnlock()
		if ok {
			return nil
		}
	}
	var syntax error
	if s.strictKeys {
		var v *Violation
		if v, syntax = AmbiguousKey(doc); v != nil {
			return []Violation{*v}
		}
	}
	vs := validate(s.sch, doc)
	if vs == nil && syntax != nil {
		// The validator names a syntax error in its own words; should its decoder ever accept
		// what the scan could not read, the document is still refused.
		return []Violation{{Message: syntax.Error()}}
	}
	if vs == nil && len(doc) <= memoDocBytes {
		s.mu.Lock()
		if s.valid == nil || len(s.valid) >= memoEntries {
			s.valid = make(map[string]struct{}, memoEntries)
		}
		s.valid[string(doc)] = struct{}{}
		s.mu.Unlock()
	}
	return vs
}

// validate checks a JSON document against sch and returns every violation (leaf causes of the
// validation error), sorted by pointer. A document that is not JSON is one root violation.
func validate(sch *jsonschema.Schema, doc []byte) []Violation {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return []Violation{{Message: "not valid JSON: " + err.Error()}}
	}
	return validateValue(sch, v)
}

func validateValue(sch *jsonschema.Schema, v any) []Violation {
	err := sch.Validate(v)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []Violation{{Message: err.Error()}}
	}
	var out []Violation
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			// The validator lists additional properties in map order: sorted, a violation
			// reads the same every time (found by FuzzCompileSchema).
			if k, ok := e.ErrorKind.(*kind.AdditionalProperties); ok {
				slices.Sort(k.Properties)
			}
			out = append(out, Violation{Pointer: pointer(e.InstanceLocation), Message: e.ErrorKind.LocalizedString(printer)})
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	// Causes under an object's properties come in map order: sorted by pointer, then message.
	slices.SortFunc(out, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Pointer, b.Pointer), strings.Compare(a.Message, b.Message))
	})
	return out
}

// pointer builds an RFC 6901 JSON pointer from path tokens.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}

// ValidateInput checks arguments against the tool's inputSchema (SPEC §1 "Arguments") and returns
// every violation; nil means valid. Arguments with an ambiguous key (AmbiguousKey: a key twice in
// an object, or two that differ only in case, at any depth) are refused with that one violation
// before the schema is applied (SPEC §14 "Rules judge the action").
func (t *Tool) ValidateInput(arguments json.RawMessage) []Violation {
	if len(bytes.TrimSpace(arguments)) == 0 {
		arguments = json.RawMessage("{}")
	}
	return t.input.validate(arguments)
}

// CheckInput runs the tool's InputCheck on arguments that passed ValidateInput, with the
// session's workspace (an absolute path), and returns its violations; nil when the tool has no
// check or the check finds nothing. A check that panics is one root violation naming the panic:
// the call stops (fail closed, as a failing tool_call handler blocks).
func (t *Tool) CheckInput(arguments json.RawMessage, workspace string) (violations []Violation) {
	if t.InputCheck == nil {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			violations = []Violation{{Message: fmt.Sprintf("the argument check of tool %s panicked: %v", t.Name, p)}}
		}
	}()
	return t.InputCheck(arguments, workspace)
}

// ValidateOutput checks structuredContent against the tool's outputSchema (SPEC §1 results, rule
// 3). A tool without an outputSchema accepts anything.
func (t *Tool) ValidateOutput(structuredContent json.RawMessage) []Violation {
	if t.output == nil {
		return nil
	}
	return t.output.validate(structuredContent)
}
