package tool

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

// FuzzCompileSchema compiles arbitrary inputSchema and outputSchema JSON through the registry's
// compiler, then validates an arbitrary document against what compiled (issue 15, item 5 and
// acceptance 5: tool schemas are input strangers control). In the inputs, SECRET_URL becomes
// the file:// URL of a planted file holding a secret, SECRET_DIR the file:// URL of its folder and
// HTTP_URL the address of a local HTTP server that serves the secret. Properties:
//
//   - no panic, and no panic of the compiler turned into an error either;
//   - an error names the tool and the field and has a reason;
//   - every load the compiler asks for is refused, and a refusal fails the compilation;
//   - the secret appears in no error and no violation; the HTTP server is never asked;
//   - a compiled schema's root is "type": "object"; violations have a message and a JSON
//     pointer; validating the same document twice (the second from the memo) gives the same
//     answer.
func FuzzCompileSchema(f *testing.F) {
	dir := f.TempDir()
	secret := "s3cr3t-fuzz-planted"
	path := filepath.Join(dir, "secret.json")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`{"const": %q, "$defs": {"x": {"const": %q}}}`, secret, secret)), 0o600); err != nil {
		f.Fatal(err)
	}
	var hits atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, `{"const": %q}`, secret)
	}))
	f.Cleanup(hs.Close)
	expand := strings.NewReplacer(
		"SECRET_URL", (&url.URL{Scheme: "file", Path: path}).String(),
		"SECRET_DIR", (&url.URL{Scheme: "file", Path: dir + "/"}).String(),
		"HTTP_URL", hs.URL,
	)

	f.Fuzz(func(t *testing.T, rawSchema, doc []byte, output bool) {
		field := "inputSchema"
		if output {
			field = "outputSchema"
		}
		raw := []byte(expand.Replace(string(rawSchema)))
		s, refused, err := compileSchemaRefused("fuzz", field, raw)
		if n := hits.Load(); n != 0 {
			t.Fatalf("the HTTP server was asked %d times", n)
		}
		if len(refused) > 0 && err == nil {
			t.Fatalf("refused %q, yet the schema compiled", refused)
		}
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "tool fuzz: "+field+" ") || len(msg) <= len("tool fuzz: "+field+" ") {
				t.Fatalf("error %q does not name the tool and field with a reason", msg)
			}
			if strings.Contains(msg, "the schema compiler failed") {
				t.Fatalf("the compiler panicked: %s", msg)
			}
			if strings.Contains(msg, secret) {
				t.Fatalf("error %q contains the planted secret", msg)
			}
			if len(refused) > 0 && !strings.Contains(msg, "refers to") {
				t.Fatalf("refused %q, but the error does not say so: %q", refused, msg)
			}
			return
		}
		if s == nil {
			if len(strings.TrimSpace(string(raw))) != 0 {
				t.Fatal("no schema and no error for a non-empty schema")
			}
			return
		}
		var root map[string]any
		if json.Unmarshal(raw, &root) != nil || root["type"] != "object" {
			t.Fatalf("compiled a schema whose root is not \"type\": \"object\": %s", raw)
		}
		first := s.validate(doc)
		for _, v := range first {
			if v.Message == "" {
				t.Fatalf("violation without a message: %+v", v)
			}
			if v.Pointer != "" && !strings.HasPrefix(v.Pointer, "/") {
				t.Fatalf("violation pointer %q is not a JSON pointer", v.Pointer)
			}
			if strings.Contains(v.Message, secret) {
				t.Fatalf("violation %q contains the planted secret", v)
			}
		}
		if again := s.validate(doc); !reflect.DeepEqual(again, first) {
			t.Fatalf("validating twice: %v, then %v", first, again)
		}
	})
}
