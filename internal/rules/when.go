package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"

	"countersign/internal/gate"
	"countersign/internal/tool"
)

// `when` conditions (SPEC §14) are CEL expressions (cel.dev/cel-go) over:
//
//	args         map(string, dyn)   the call's validated arguments (JSON; whole numbers are int)
//	tool         string             the tool's name
//	annotations  map(string, bool)  the effective hints: readOnlyHint, destructiveHint,
//	                                idempotentHint, openWorldHint (MCP defaults filled in)
//	parent       string or null     the parent tool's name for a nested call
//	session      map(string, dyn)   {id, workspace, mode}
//
// The expression must be boolean (or dyn, checked when it runs). It is compiled once, and run
// with a cost limit of WhenCostLimit: a `when` that fails or exceeds it makes the call ask.

// WhenCostLimit is the CEL runtime cost a `when` may spend on one call (cel.CostLimit).
const WhenCostLimit = 100_000

var (
	envOnce sync.Once
	envVal  *cel.Env
	envErr  error
)

func whenEnv() (*cel.Env, error) {
	envOnce.Do(func() {
		envVal, envErr = cel.NewEnv(
			cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
			cel.Variable("tool", cel.StringType),
			cel.Variable("annotations", cel.MapType(cel.StringType, cel.BoolType)),
			cel.Variable("parent", cel.DynType),
			cel.Variable("session", cel.MapType(cel.StringType, cel.DynType)),
			cel.CrossTypeNumericComparisons(true),
		)
	})
	return envVal, envErr
}

// compileWhen compiles a `when` into a program with the cost limit; the error is the CEL
// compiler's message.
func compileWhen(expr string) (cel.Program, error) {
	env, err := whenEnv()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("when: %s", iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("when: the expression is %s, not a bool", t)
	}
	return env.Program(ast, cel.CostLimit(WhenCostLimit), cel.InterruptCheckFrequency(100))
}

// activation builds the `when` variables of a call. args, annotations and session are built
// only when an expression reads them (cel-go resolves a func() any binding on first use and
// keeps the value), so a `when` over parent or tool decodes no arguments: the Set evaluates a
// call's `when` conditions against one activation.
func activation(c *gate.RuleCall) map[string]any {
	var parent any
	if c.Parent != "" {
		parent = c.Parent
	}
	return map[string]any{
		"args":        func() any { return whenArgs(c.Arguments) },
		"tool":        c.Tool,
		"annotations": func() any { return whenAnnotations(c.Annotations) },
		"parent":      parent,
		"session": func() any {
			return map[string]any{"id": c.SessionID, "workspace": c.Workspace, "mode": string(c.Mode)}
		},
	}
}

// whenArgs is the `args` variable: the arguments as JSON values, whole numbers as int64; an
// empty map when they are not a JSON object.
func whenArgs(raw json.RawMessage) map[string]any {
	var args map[string]any
	if len(raw) > 0 {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if d.Decode(&args) == nil && args != nil {
			args = numbers(args).(map[string]any)
		}
	}
	if args == nil {
		args = map[string]any{}
	}
	return args
}

// whenAnnotations is the `annotations` variable: the effective hints, MCP defaults filled in.
func whenAnnotations(a tool.Annotations) map[string]bool {
	ann := map[string]bool{}
	for _, h := range a.Effective() {
		ann[h.Name] = h.Value
	}
	return ann
}

// numbers turns json.Number into int64 (whole numbers) or float64.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
		return x
	}
	return v
}
