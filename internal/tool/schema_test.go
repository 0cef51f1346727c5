package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestSchemaMemo: documents a schema accepted are answered from the memo, rejected ones are
// validated every time (with their violations), the memo stays bounded, and documents too large
// to remember are still validated.
func TestSchemaMemo(t *testing.T) {
	tl := &Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","maximum":1000}},"required":["n"]}`),
		Execute: func(context.Context, json.RawMessage, func(Update), Context) (Result, error) { return Result{}, nil }}
	if err := tl.compile(); err != nil {
		t.Fatal(err)
	}
	s := tl.input
	memo := func(doc string) bool {
		s.mu.RLock()
		defer s.mu.RUnlock()
		_, ok := s.valid[doc]
		return ok
	}
	for range 2 {
		if vs := tl.ValidateInput(json.RawMessage(`{"n":1}`)); vs != nil {
			t.Fatalf(`{"n":1}: %v`, vs)
		}
	}
	if !memo(`{"n":1}`) {
		t.Error(`a valid document was not remembered`)
	}
	for range 2 {
		vs := tl.ValidateInput(json.RawMessage(`{"n":"x"}`))
		if len(vs) != 1 || vs[0].Pointer != "/n" {
			t.Fatalf(`{"n":"x"}: %v, want one violation at /n`, vs)
		}
	}
	if memo(`{"n":"x"}`) {
		t.Error("a rejected document was remembered")
	}
	for i := range memoEntries + 10 {
		if vs := tl.ValidateInput(json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))); vs != nil {
			t.Fatal(vs)
		}
	}
	if n := len(s.valid); n > memoEntries {
		t.Errorf("memo holds %d documents, want at most %d", n, memoEntries)
	}
	big := fmt.Sprintf(`{"n":2000,"pad":%q}`, strings.Repeat("a", memoDocBytes))
	for range 2 {
		if vs := tl.ValidateInput(json.RawMessage(big)); len(vs) != 1 {
			t.Fatalf("large invalid document: %v, want one violation", vs)
		}
	}
	okBig := fmt.Sprintf(`{"n":5,"pad":%q}`, strings.Repeat("a", memoDocBytes))
	if vs := tl.ValidateInput(json.RawMessage(okBig)); vs != nil || memo(okBig) {
		t.Errorf("large valid document: %v, remembered %v; want valid and not remembered", vs, memo(okBig))
	}
}

// plantSecret writes a JSON schema file whose only content is a secret string, in a fresh
// folder, and returns its path and the secret. A validator that loaded it would put the secret
// in a violation message ("value must be …").
func plantSecret(tb testing.TB) (path, secret string) {
	tb.Helper()
	secret = "s3cr3t-" + strings.Repeat("x", 8) + "-planted"
	path = filepath.Join(tb.TempDir(), "secret.json")
	if err := os.WriteFile(path, []byte(`{"const": "`+secret+`", "$defs": {"x": {"const": "`+secret+`"}}}`), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path, secret
}

// TestSchemasLoadNothing (issue 15, item 5): a schema with a reference to anything outside itself
// — a file:// or http:// URL, a path relative to the schema or to its own file:// $id, a remote
// $schema — is refused at registration with an error naming the reference, and nothing is read:
// the planted secret never appears, and the HTTP server is never asked.
func TestSchemasLoadNothing(t *testing.T) {
	path, secret := plantSecret(t)
	fileURL := (&url.URL{Scheme: "file", Path: path}).String()
	dirURL := (&url.URL{Scheme: "file", Path: filepath.Dir(path) + "/"}).String()
	var hits atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/schema+json")
		fmt.Fprintf(w, `{"const": %q}`, secret)
	}))
	defer hs.Close()

	tests := []struct {
		name, field, schema string
		wantRef             string // what the error must name
	}{
		{"file ref", "inputSchema", `{"type":"object","properties":{"x":{"$ref":"` + fileURL + `"}}}`, fileURL},
		{"file ref to a fragment", "inputSchema", `{"type":"object","properties":{"x":{"$ref":"` + fileURL + `#/$defs/x"}}}`, fileURL},
		{"http ref", "inputSchema", `{"type":"object","properties":{"x":{"$ref":"` + hs.URL + `/schema.json"}}}`, hs.URL + "/schema.json"},
		{"https ref", "outputSchema", `{"type":"object","properties":{"x":{"$ref":"https://example.com/s.json"}}}`, "https://example.com/s.json"},
		{"relative ref to a sibling file", "inputSchema", `{"type":"object","properties":{"x":{"$ref":"secret.json"}}}`, `"secret.json" (relative to the schema)`},
		{"relative ref against a file $id", "inputSchema", `{"$id":"` + dirURL + `schema.json","type":"object","properties":{"x":{"$ref":"secret.json"}}}`, fileURL},
		{"$dynamicRef to a file", "inputSchema", `{"type":"object","properties":{"x":{"$dynamicRef":"` + fileURL + `"}}}`, fileURL},
		{"remote $schema", "inputSchema", `{"$schema":"` + hs.URL + `/meta.json","type":"object"}`, hs.URL + "/meta.json"},
		{"file $schema", "outputSchema", `{"$schema":"` + fileURL + `","type":"object"}`, fileURL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := &Tool{Name: "evil", InputSchema: json.RawMessage(`{"type":"object"}`), Execute: noopExecute}
			if tt.field == "inputSchema" {
				tl.InputSchema = json.RawMessage(tt.schema)
			} else {
				tl.OutputSchema = json.RawMessage(tt.schema)
			}
			err := NewRegistry().Register(tl)
			if err == nil {
				// Show what a validator built on it would say: the leak this test guards against.
				t.Fatalf("Register accepted the schema; validating {\"x\":1} says %v", tl.ValidateInput(json.RawMessage(`{"x":1}`)))
			}
			msg := err.Error()
			for _, want := range []string{"tool evil: " + tt.field + " refers to", tt.wantRef, "loads no external schema"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if strings.Contains(msg, secret) {
				t.Errorf("error %q contains the planted secret", msg)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the HTTP server was asked %d times, want never", n)
	}
}

// TestSchemasKeepInternalReferences: refusing every loader keeps what a schema may do within
// itself: "#/$defs/x" references, anchors, references to its own $id, the 2020-12 metaschema
// (and older drafts') named in $schema, which the library embeds.
func TestSchemasKeepInternalReferences(t *testing.T) {
	tests := []struct {
		name, schema string
		good, bad    string
	}{
		{"$defs", `{"type":"object","properties":{"n":{"$ref":"#/$defs/pos"}},"$defs":{"pos":{"type":"integer","minimum":1}}}`, `{"n":2}`, `{"n":0}`},
		{"anchor", `{"type":"object","properties":{"n":{"$ref":"#pos"}},"$defs":{"p":{"$anchor":"pos","type":"integer"}}}`, `{"n":2}`, `{"n":"x"}`},
		{"own $id", `{"$id":"https://example.com/tool.json","type":"object","properties":{"n":{"$ref":"https://example.com/tool.json#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`, `{"n":"a"}`, `{"n":1}`},
		{"relative to own $id", `{"$id":"https://example.com/t/tool.json","type":"object","properties":{"n":{"$ref":"tool.json#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`, `{"n":"a"}`, `{"n":1}`},
		{"embedded sub-resource", `{"type":"object","properties":{"n":{"$ref":"item.json"}},"$defs":{"i":{"$id":"item.json","type":"boolean"}}}`, `{"n":true}`, `{"n":1}`},
		{"recursive", `{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#"}}},"additionalProperties":false}`, `{"kids":[{"kids":[]}]}`, `{"kids":[{"x":1}]}`},
		{"2020-12 metaschema", `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","required":["a"]}`, `{"a":1}`, `{}`},
		{"draft-07 metaschema", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","required":["a"]}`, `{"a":1}`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := &Tool{Name: "t", InputSchema: json.RawMessage(tt.schema), Execute: noopExecute}
			if err := NewRegistry().Register(tl); err != nil {
				t.Fatalf("Register: %v", err)
			}
			if vs := tl.ValidateInput(json.RawMessage(tt.good)); vs != nil {
				t.Errorf("%s: %v, want valid", tt.good, vs)
			}
			if vs := tl.ValidateInput(json.RawMessage(tt.bad)); len(vs) == 0 {
				t.Errorf("%s: valid, want a violation", tt.bad)
			}
		})
	}
	t.Run("a schema that breaks the metaschema is refused", func(t *testing.T) {
		tl := &Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","minProperties":"two"}`), Execute: noopExecute}
		err := NewRegistry().Register(tl)
		if err == nil || !strings.Contains(err.Error(), "inputSchema does not compile") {
			t.Errorf("err = %v, want the metaschema's refusal", err)
		}
	})
}

func noopExecute(context.Context, json.RawMessage, func(Update), Context) (Result, error) {
	return Result{}, nil
}
