package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
