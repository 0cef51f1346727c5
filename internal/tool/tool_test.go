package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"countersign/internal/tool"
)

func noop(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
	return tool.Result{}, nil
}

func mustRegister(t *testing.T, tl *tool.Tool) *tool.Tool {
	t.Helper()
	if err := tool.NewRegistry().Register(tl); err != nil {
		t.Fatal(err)
	}
	return tl
}

const countSchema = `{"type":"object","properties":{"count":{"type":"integer","minimum":0},"label":{"type":"string"}},"required":["count"],"additionalProperties":false}`

func TestFinalizeResultRules(t *testing.T) {
	withSchema := mustRegister(t, &tool.Tool{Name: "counter", InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(countSchema), Execute: noop})
	noSchema := mustRegister(t, &tool.Tool{Name: "plain", InputSchema: json.RawMessage(`{"type":"object"}`), Execute: noop})

	tests := []struct {
		name          string
		tool          *tool.Tool
		res           tool.Result
		err           error
		wantError     bool
		wantText      []string // substrings of the text the model reads
		wantData      bool     // structuredContent kept on the result
		wantViolation bool
	}{
		{
			name: "rule 1: an isError result keeps its data",
			tool: withSchema,
			res: tool.Result{IsError: true, Content: []tool.Content{tool.Text("disk full")},
				StructuredContent: json.RawMessage(`{"count":-1,"why":"disk"}`)},
			wantError: true, wantText: []string{"disk full"}, wantData: true,
		},
		{
			name: "rule 2: a Go error becomes one text block without data", tool: withSchema,
			res: tool.Result{StructuredContent: json.RawMessage(`{"count":1}`)}, err: errors.New("cannot start"),
			wantError: true, wantText: []string{"cannot start"},
		},
		{
			name: "rule 3: a valid structuredContent passes", tool: withSchema,
			res:      tool.Result{Content: []tool.Content{tool.Text("1 thing")}, StructuredContent: json.RawMessage(`{"count":1}`)},
			wantText: []string{"1 thing"}, wantData: true,
		},
		{
			name: "rule 3: a mismatch names the tool and every violation", tool: withSchema,
			res: tool.Result{Content: []tool.Content{tool.Text("original")},
				StructuredContent: json.RawMessage(`{"count":"many","label":3,"extra":true}`)},
			wantError: true, wantViolation: true,
			wantText: []string{`Tool "counter"`, "/count:", "/label:", "(root):"},
		},
		{
			name: "rule 3: no structuredContent although outputSchema is declared", tool: withSchema,
			res:       tool.Result{Content: []tool.Content{tool.Text("forgot")}},
			wantError: true, wantViolation: true, wantText: []string{"no structuredContent"},
		},
		{
			name: "rule 3: structuredContent must be an object", tool: noSchema,
			res:       tool.Result{StructuredContent: json.RawMessage(`[1,2]`)},
			wantError: true, wantViolation: true, wantText: []string{"must be a JSON object"},
		},
		{
			name: "rule 4: isError results are never validated", tool: withSchema,
			res:       tool.Result{IsError: true, StructuredContent: json.RawMessage(`{"count":"not a number"}`), Content: []tool.Content{tool.Text("server says no")}},
			wantError: true, wantText: []string{"server says no"}, wantData: true,
		},
		{
			name: "rule 5: structuredContent alone reaches the model as JSON text", tool: withSchema,
			res:      tool.Result{StructuredContent: json.RawMessage(`{"count":2}`)},
			wantText: []string{`{"count":2}`}, wantData: true,
		},
		{
			name: "no schema, no data: kept as is", tool: noSchema,
			res:      tool.Result{Content: []tool.Content{tool.Text("hi")}},
			wantText: []string{"hi"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.tool.Finalize(tt.res, tt.err)
			if got.IsError != tt.wantError {
				t.Errorf("isError = %v, want %v", got.IsError, tt.wantError)
			}
			text := tool.Result{Content: got.ModelContent()}.TextOf()
			for _, s := range tt.wantText {
				if !strings.Contains(text, s) {
					t.Errorf("model text %q does not contain %q", text, s)
				}
			}
			if has := len(got.StructuredContent) > 0; has != tt.wantData {
				t.Errorf("structuredContent kept = %v, want %v", has, tt.wantData)
			}
			if has := got.ContractViolation != nil; has != tt.wantViolation {
				t.Fatalf("contract violation = %v, want %v", has, tt.wantViolation)
			}
			if tt.wantViolation {
				cv := got.ContractViolation
				if len(cv.Violations) == 0 {
					t.Error("a violation lists no violations")
				}
				// The tool's own content stays for the UI.
				if want := (tool.Result{Content: tt.res.Content}).TextOf(); (tool.Result{Content: cv.Content}).TextOf() != want {
					t.Errorf("original content %+v, want %q", cv.Content, want)
				}
				if string(cv.StructuredContent) != string(tt.res.StructuredContent) {
					t.Errorf("original structuredContent %s, want %s", cv.StructuredContent, tt.res.StructuredContent)
				}
			}
		})
	}
	t.Run("rule 3 lists all three violations", func(t *testing.T) {
		got := withSchema.Finalize(tool.Result{StructuredContent: json.RawMessage(`{"count":"many","label":3,"extra":true}`)}, nil)
		if n := len(got.ContractViolation.Violations); n != 3 {
			t.Errorf("%d violations %v, want 3", n, got.ContractViolation.Violations)
		}
	})
}

func TestValidateInputListsEveryViolation(t *testing.T) {
	tl := mustRegister(t, &tool.Tool{Name: "counter", InputSchema: json.RawMessage(countSchema), Execute: noop})
	tests := []struct {
		name string
		args string
		want []string // pointers
	}{
		{"valid", `{"count": 3}`, nil},
		{"missing required", `{}`, []string{""}},
		{"wrong types", `{"count": -1, "label": 5}`, []string{"/count", "/label"}},
		{"not JSON", `{"count": `, []string{""}},
		{"empty means {}", ``, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := tl.ValidateInput(json.RawMessage(tt.args))
			var got []string
			for _, v := range vs {
				got = append(got, v.Pointer)
				if v.Message == "" {
					t.Errorf("violation at %q has no message", v.Pointer)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("pointers %q, want %q (violations %v)", got, tt.want, vs)
			}
		})
	}
	res := tool.InvalidArguments("counter", tl.ValidateInput(json.RawMessage(`{"count":-1}`)), json.RawMessage(`{"count":-1}`))
	if !res.IsError || !strings.Contains(res.TextOf(), "/count:") || !strings.Contains(res.TextOf(), `Received arguments: {"count":-1}`) {
		t.Errorf("InvalidArguments text %q", res.TextOf())
	}
}

func TestRegisterRefusals(t *testing.T) {
	ok := json.RawMessage(`{"type":"object"}`)
	tests := []struct {
		name string
		tool *tool.Tool
		want string
	}{
		{"empty name", &tool.Tool{Name: "", InputSchema: ok, Execute: noop}, "must be 1 to 128"},
		{"space in name", &tool.Tool{Name: "read file", InputSchema: ok, Execute: noop}, "must be 1 to 128"},
		{"name too long", &tool.Tool{Name: strings.Repeat("a", 129), InputSchema: ok, Execute: noop}, "must be 1 to 128"},
		{"no inputSchema", &tool.Tool{Name: "x", Execute: noop}, "inputSchema is required"},
		{"root not object", &tool.Tool{Name: "x", InputSchema: json.RawMessage(`{"type":"string"}`), Execute: noop}, `root "type": "object"`},
		{"schema not JSON", &tool.Tool{Name: "x", InputSchema: json.RawMessage(`{"type":`), Execute: noop}, "not JSON"},
		{"schema does not compile", &tool.Tool{Name: "x", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"nonsense"}}}`), Execute: noop}, "does not compile"},
		{"bad outputSchema", &tool.Tool{Name: "x", InputSchema: ok, OutputSchema: json.RawMessage(`{"type":"array"}`), Execute: noop}, "outputSchema must be"},
		{"unknown exposure", &tool.Tool{Name: "x", InputSchema: ok, Exposure: "public", Execute: noop}, "unknown exposure"},
		{"no execute", &tool.Tool{Name: "x", InputSchema: ok}, "no execute function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tool.NewRegistry().Register(tt.tool)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Register error %v, want one containing %q", err, tt.want)
			}
		})
	}
	t.Run("duplicate", func(t *testing.T) {
		r := tool.NewRegistry()
		if err := r.Register(&tool.Tool{Name: "x", InputSchema: ok, Execute: noop}); err != nil {
			t.Fatal(err)
		}
		if err := r.Register(&tool.Tool{Name: "x", InputSchema: ok, Execute: noop}); err == nil || !strings.Contains(err.Error(), "already registered") {
			t.Errorf("duplicate: %v", err)
		}
	})
	t.Run("every allowed character", func(t *testing.T) {
		if err := tool.NewRegistry().Register(&tool.Tool{Name: "A-z_0.9", InputSchema: ok, Execute: noop}); err != nil {
			t.Error(err)
		}
	})
}

func TestExposureTable(t *testing.T) {
	tests := []struct {
		exposure                 tool.Exposure
		activeByDefault          bool
		declaredActive           bool // declared to the model / callable by it while active
		nestedActive, nestedIdle bool // callable through ExecuteTool while active / inactive
		activatable              bool
	}{
		{tool.Direct, true, true, true, false, true},
		{tool.ModelOnly, true, true, false, false, true},
		{tool.Codemode, false, true, true, true, true},
		{tool.Deferred, false, true, true, true, true},
		{tool.Hidden, false, false, false, false, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.exposure), func(t *testing.T) {
			tl := mustRegister(t, &tool.Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object"}`), Exposure: tt.exposure, Execute: noop})
			if got := tl.ActiveByDefault(); got != tt.activeByDefault {
				t.Errorf("ActiveByDefault = %v, want %v", got, tt.activeByDefault)
			}
			if got := tool.Declared(tl, true); got != tt.declaredActive {
				t.Errorf("Declared(active) = %v, want %v", got, tt.declaredActive)
			}
			if tool.Declared(tl, false) || tool.CallableByModel(tl, false) {
				t.Error("an inactive tool is declared or callable by the model")
			}
			if got := tool.CallableByModel(tl, true); got != tt.declaredActive {
				t.Errorf("CallableByModel(active) = %v, want %v", got, tt.declaredActive)
			}
			if got := tool.CallableNested(tl, true); got != tt.nestedActive {
				t.Errorf("CallableNested(active) = %v, want %v", got, tt.nestedActive)
			}
			if got := tool.CallableNested(tl, false); got != tt.nestedIdle {
				t.Errorf("CallableNested(inactive) = %v, want %v", got, tt.nestedIdle)
			}
			if got := tool.Activatable(tl); got != tt.activatable {
				t.Errorf("Activatable = %v, want %v", got, tt.activatable)
			}
		})
	}
	t.Run("defaultActive false", func(t *testing.T) {
		tl := mustRegister(t, &tool.Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object"}`), DefaultActive: tool.Bool(false), Execute: noop})
		if tl.ActiveByDefault() {
			t.Error("defaultActive false is active by default")
		}
	})
}

func TestEffectiveAnnotationsMarkDefaults(t *testing.T) {
	hs := tool.Annotations{ReadOnlyHint: tool.Bool(false), OpenWorldHint: tool.Bool(false)}.Effective()
	want := []tool.Hint{
		{Name: "readOnlyHint", Value: false, Defaulted: false},
		{Name: "destructiveHint", Value: true, Defaulted: true},
		{Name: "idempotentHint", Value: false, Defaulted: true},
		{Name: "openWorldHint", Value: false, Defaulted: false},
	}
	for i := range want {
		if hs[i] != want[i] {
			t.Errorf("hint %d = %+v, want %+v", i, hs[i], want[i])
		}
	}
	// Absent stays absent through JSON.
	b, _ := json.Marshal(tool.Annotations{ReadOnlyHint: tool.Bool(false)})
	if string(b) != `{"readOnlyHint":false}` {
		t.Errorf("marshalled %s", b)
	}
}

// TestModelTextPrefix: the text a model would read, cut to n bytes at a rune boundary, says
// whether it was cut; structuredContent stands in when there is no text block (SPEC §1 rule 5).
func TestModelTextPrefix(t *testing.T) {
	tests := []struct {
		name    string
		res     tool.Result
		n       int
		want    string
		wantCut bool
	}{
		{"fits", tool.Result{Content: []tool.Content{tool.Text("ab"), tool.Text("cd")}}, 10, "ab\ncd", false},
		{"exactly", tool.Result{Content: []tool.Content{tool.Text("ab"), tool.Text("cd")}}, 5, "ab\ncd", false},
		{"cut inside a block", tool.Result{Content: []tool.Content{tool.Text("abcdef")}}, 4, "abcd", true},
		{"cut at the newline", tool.Result{Content: []tool.Content{tool.Text("ab"), tool.Text("cd")}}, 2, "ab", true},
		{"a rune is not split", tool.Result{Content: []tool.Content{tool.Text("aé")}}, 2, "a", true},
		{"images are skipped", tool.Result{Content: []tool.Content{{Type: "image", Data: "AAAA"}, tool.Text("x")}}, 10, "x", false},
		{"structuredContent without text", tool.Result{StructuredContent: json.RawMessage(`{"k":1}`)}, 100, `{"k":1}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, cut := tt.res.ModelTextPrefix(tt.n)
			if got != tt.want || cut != tt.wantCut {
				t.Errorf("ModelTextPrefix(%d) = %q, %v; want %q, %v", tt.n, got, cut, tt.want, tt.wantCut)
			}
		})
	}
}
