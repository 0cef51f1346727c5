package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"countersign/internal/tool"
)

// fuzzOutputSchema is the outputSchema of the fuzzed tool when the input brings none that
// compiles.
const fuzzOutputSchema = `{"type":"object","properties":{"count":{"type":"integer","minimum":0},"name":{"type":"string"}},"required":["count"]}`

// FuzzToolResult feeds arbitrary bytes to Countersign as an MCP server's tools/call result
// (MCP 2025-11-25 §tools, CallToolResult), decoded as the SDK decodes it, converted by toResult
// and finalized against an outputSchema (the input's, when it compiles; else fuzzOutputSchema;
// none when noSchema) — SPEC §1 result rules, §13. Properties:
//
//   - no panic; a conversion error has a message, and Finalize turns it into one text block;
//   - an isError result is kept whole (rule 1, 4);
//   - a successful result that stays successful has structuredContent that is a JSON object and
//     valid against the outputSchema (or none at all when the tool has no outputSchema);
//   - a result turned into an error names the tool and every violation (each with a message) and
//     keeps the server's own content and structuredContent for the UI (rule 3);
//   - the model receives text whenever there is structuredContent (rule 5);
//   - the final result round-trips through JSON, as the store keeps it.
func FuzzToolResult(f *testing.F) {
	f.Fuzz(func(t *testing.T, data, outputSchema []byte, noSchema bool) {
		var res sdk.CallToolResult
		if err := json.Unmarshal(data, &res); err != nil {
			return // the SDK refuses it; the call fails with the SDK's error
		}
		tl := fuzzTool(t, outputSchema, noSchema)
		r, err := toResult(&res)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("conversion error without a message")
			}
			if fin := tl.Finalize(r, err); !fin.IsError || len(fin.Content) != 1 || fin.Content[0].Text != err.Error() || fin.StructuredContent != nil {
				t.Fatalf("Finalize of the error %v = %+v, want one text block", err, fin)
			}
			return
		}
		if len(r.Content) != len(res.Content) || r.IsError != res.IsError {
			t.Fatalf("toResult kept %d of %d blocks, isError %v of %v", len(r.Content), len(res.Content), r.IsError, res.IsError)
		}
		for _, c := range r.Content {
			if c.Type != "text" && c.Type != "image" {
				t.Fatalf("content block of type %q", c.Type)
			}
		}
		fin := tl.Finalize(r, nil)
		if fin.Content == nil {
			t.Fatal("Finalize left content nil")
		}
		want := r
		if want.Content == nil {
			want.Content = []tool.Content{}
		}
		switch {
		case r.IsError:
			if !reflect.DeepEqual(fin, want) {
				t.Fatalf("an isError result was changed:\n%+v\n%+v", want, fin)
			}
		case !fin.IsError:
			if !reflect.DeepEqual(fin, want) {
				t.Fatalf("a valid result was changed:\n%+v\n%+v", want, fin)
			}
			if tl.HasOutputSchema() || len(fin.StructuredContent) > 0 {
				if !isJSONObject(fin.StructuredContent) {
					t.Fatalf("accepted structuredContent %s that is not an object", fin.StructuredContent)
				}
				if vs := tl.ValidateOutput(fin.StructuredContent); vs != nil {
					t.Fatalf("accepted structuredContent %s with violations %v", fin.StructuredContent, vs)
				}
			}
		default:
			cv := fin.ContractViolation
			if cv == nil || len(cv.Violations) == 0 {
				t.Fatalf("turned into an error without violations: %+v", fin)
			}
			text := fin.TextOf()
			if !strings.HasPrefix(text, `Tool "fuzz__tool" returned a result that violates its outputSchema:`) {
				t.Fatalf("violation text %q does not name the tool", text)
			}
			for _, v := range cv.Violations {
				if v.Message == "" || !strings.Contains(text, v.String()) {
					t.Fatalf("violation %+v missing from %q", v, text)
				}
			}
			if !reflect.DeepEqual(cv.Content, want.Content) || !bytes.Equal(cv.StructuredContent, r.StructuredContent) {
				t.Fatalf("the server's content was not kept: %+v", cv)
			}
		}
		if mc := fin.ModelContent(); len(fin.StructuredContent) > 0 && !hasText(mc) {
			t.Fatalf("structuredContent %s, but the model gets no text: %+v", fin.StructuredContent, mc)
		}
		stored, err := json.Marshal(fin)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var back tool.Result
		if err := json.Unmarshal(stored, &back); err != nil {
			t.Fatalf("unmarshal %s: %v", stored, err)
		}
		if !reflect.DeepEqual(back, fin) {
			t.Fatalf("round trip changed the result:\n%+v\n%+v", fin, back)
		}
	})
}

// fuzzTool is a registered MCP tool with outputSchema raw (fuzzOutputSchema when raw does not
// compile), or none when noSchema.
func fuzzTool(t *testing.T, raw []byte, noSchema bool) *tool.Tool {
	t.Helper()
	mk := func(schema json.RawMessage) *tool.Tool {
		return &tool.Tool{Name: "fuzz__tool", InputSchema: json.RawMessage(`{"type":"object"}`), OutputSchema: schema,
			Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
				return tool.Result{}, nil
			}}
	}
	if noSchema {
		tl := mk(nil)
		if err := tool.NewRegistry().Register(tl); err != nil {
			t.Fatal(err)
		}
		return tl
	}
	if tl := mk(raw); len(bytes.TrimSpace(raw)) > 0 && tool.NewRegistry().Register(tl) == nil {
		return tl
	}
	tl := mk(json.RawMessage(fuzzOutputSchema))
	if err := tool.NewRegistry().Register(tl); err != nil {
		t.Fatal(err)
	}
	return tl
}

func isJSONObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

func hasText(cs []tool.Content) bool {
	for _, c := range cs {
		if c.Type == "text" {
			return true
		}
	}
	return false
}
