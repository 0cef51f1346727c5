package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/interpreter"

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
//	session      map(string, dyn)   {id, workspace, mode, agent, connection}: agent and
//	                                connection are an agent session's agent kind ("claude-code",
//	                                "codex") and connection id (SPEC §18), "" for Countersign's own
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
	if whenBounded(env, ast) {
		// It can never exceed the limit: run it without the runtime cost tracker (about half of
		// a simple when's time per call).
		return env.Program(ast)
	}
	return env.Program(ast, cel.CostLimit(WhenCostLimit), cel.InterruptCheckFrequency(100))
}

// whenBounded reports whether CEL's static cost estimate of ast, with every size unknown (so
// the largest), stays within WhenCostLimit: then no call's arguments can make it cost more at
// run time, which measures cost by the same model. Comprehensions over args and functions
// whose cost grows with a string's length are unbounded.
func whenBounded(env *cel.Env, ast *cel.Ast) bool {
	est, err := env.EstimateCost(ast, unknownSizes{})
	return err == nil && est.Max <= WhenCostLimit
}

// unknownSizes is a cost estimator that knows no sizes: CEL then assumes the largest.
type unknownSizes struct{}

func (unknownSizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}
func (unknownSizes) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }

// whenVars are the `when` variables of one call, as a CEL activation that builds args,
// annotations and session only when an expression reads them, once per call (the Set evaluates
// all of a call's `when` conditions against one whenVars), so a `when` over parent or tool
// decodes no arguments and nothing is allocated for the variables no expression reads.
type whenVars struct {
	call gate.RuleCall // a copy: the evaluation's call stays on its stack
	args map[string]any
	ann  map[string]bool
	sess map[string]any
}

// ResolveName implements interpreter.Activation.
func (v *whenVars) ResolveName(name string) (any, bool) {
	c := &v.call
	switch name {
	case "args":
		if v.args == nil {
			v.args = whenArgs(c.Arguments)
		}
		return v.args, true
	case "tool":
		return c.Tool, true
	case "annotations":
		if v.ann == nil {
			v.ann = whenAnnotations(c.Annotations)
		}
		return v.ann, true
	case "parent":
		if c.Parent == "" {
			return nil, true // null
		}
		return c.Parent, true
	case "session":
		if v.sess == nil {
			v.sess = map[string]any{"id": c.SessionID, "workspace": c.Workspace, "mode": string(c.Mode),
				"agent": c.Agent, "connection": c.Connection}
		}
		return v.sess, true
	}
	return nil, false
}

// Parent implements interpreter.Activation: there is none.
func (v *whenVars) Parent() interpreter.Activation { return nil }

// whenArgs is the `args` variable: the arguments as JSON values, whole numbers as int64; an
// empty map when they are not a JSON object.
func whenArgs(raw json.RawMessage) map[string]any {
	var args map[string]any
	if t := bytes.TrimSpace(raw); len(t) == 2 && t[0] == '{' && t[1] == '}' {
		return map[string]any{} // no arguments: nothing to decode
	}
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
