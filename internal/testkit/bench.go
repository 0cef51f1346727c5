// Package testkit builds what Countersign's benchmarks run on (issue 9): a Runner over a real
// SQLite file, the faux model replaying scripts generated in code with no chunk delay, the peer
// benchmark's tools (echo, run_checks, failing_tests, review_diff; see ../shared/peers), a gated
// tool that needs a person's approval, and one allowing tool_call handler. It is used by the Go
// benchmarks in internal/agent and by the load program bench/cmd/load (which adds the real HTTP
// server); nothing in the product imports it.
package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/models"
	"countersign/internal/store/sqlite"
	"countersign/internal/tool"
)

// Bench is one benchmark environment: a store in Dir, a Runner with the benchmark tools, and
// its Broker. Close releases it.
type Bench struct {
	Dir    string
	DB     *sqlite.DB
	Broker *agent.Broker
	Runner *agent.Runner
	Tools  *tool.Registry
	Models *Scripts
	// Gate counts the calls the tool_call handler saw: model-issued and nested.
	GateDirect, GateNested atomic.Int64
	// Echo records the start time of every echo execution (the peers' turn stamps).
	Echo Stamps
	// Gated records, per tool call id, when the gated tool started executing.
	Gated sync.Map // toolCallId → time.Time
	// Stored records, per approval id, when a pending approval's insert had committed (the
	// store's CreateApproval returned): the "approval stored" of the round-trip case.
	Stored sync.Map // approval id → time.Time
}

// stampedStore is the store, stamping when each pending approval is stored.
type stampedStore struct {
	*sqlite.DB
	e *Bench
}

func (s stampedStore) CreateApproval(ctx context.Context, a gate.Approval) error {
	err := s.DB.CreateApproval(ctx, a)
	if err == nil && a.Status == gate.Pending {
		s.e.Stored.Store(a.ID, time.Now())
	}
	return err
}

// Stamps is a goroutine-safe list of times.
type Stamps struct {
	mu sync.Mutex
	ts []time.Time
}

// Add appends t.
func (s *Stamps) Add(t time.Time) {
	s.mu.Lock()
	s.ts = append(s.ts, t)
	s.mu.Unlock()
}

// Reset empties the list.
func (s *Stamps) Reset() {
	s.mu.Lock()
	s.ts = s.ts[:0]
	s.mu.Unlock()
}

// Times returns a copy of the list.
func (s *Stamps) Times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.ts...)
}

// TurnSpread is the peers' turn_us_first50 / turn_us_last50: the mean gap, in µs, between
// consecutive stamps over the first and the last 50 gaps.
func TurnSpread(ts []time.Time) (first50, last50 int64) {
	mean := func(xs []time.Time) int64 {
		if len(xs) < 2 {
			return 0
		}
		return xs[len(xs)-1].Sub(xs[0]).Microseconds() / int64(len(xs)-1)
	}
	n := min(len(ts), 51)
	return mean(ts[:n]), mean(ts[len(ts)-n:])
}

// BenchOptions configure NewBench.
type BenchOptions struct {
	// ApprovalTimeout for the gated tool; default 15 minutes.
	ApprovalTimeout time.Duration
	// Logger; default discards everything.
	Logger *slog.Logger
	// Rules are policy-file rules the runner evaluates on every call, compiled by CompileRules
	// (nil: gate.ExactCompiler) — the "rules" case (issue 17, acceptance 7).
	Rules        []gate.Rule
	CompileRules gate.RuleCompiler
	// Tools are registered beside the benchmark tools (the exec_checks case: run_command).
	Tools []*tool.Tool
}

// RulesOn returns n server rules of which ten are on tool (scoped to a session that does not
// exist, so they match no call and the call goes on to the annotation default: the cost of
// looking at them is measured, not a decision), and the rest on other tools.
func RulesOn(tool string, n int) []gate.Rule {
	rules := make([]gate.Rule, 0, n)
	for i := range n {
		r := gate.Rule{ID: fmt.Sprintf("policy:%d", i), Effect: gate.Ask, Tool: fmt.Sprintf("other_%d", i),
			Scope: gate.ScopeServer, Source: gate.SourcePolicyFile, CreatedBy: "bench"}
		if i < 10 {
			r.Tool, r.Scope, r.SessionID = tool, gate.ScopeSession, "no-such-session"
		}
		rules = append(rules, r)
	}
	return rules
}

// RealRulesOn returns n policy-file rules for the real compiler (rules.Compiler) of which ten
// are on tool and every kind of them is looked at on each call of it — the "rules" case of
// `make bench` (issue 17, acceptance 7): a deny and an ask whose key=glob specifier does not
// match the call's arguments, a deny whose CEL `when` is false, an ask for another session, an
// allow for another workspace, an expired deny, an ask on a path and a deny on a command that
// cannot match, an ask that applies only under another parent, and one server allow for the
// whole tool, which decides the call (a rule decision, a hit, an audit row naming the rule). Of
// the rest, five are glob tool patterns (matched against every call's tool name) and the others
// are on other tools. The calls of tool must take no arguments ({}).
func RealRulesOn(tool string, n int) []gate.Rule {
	expired := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	rules := []gate.Rule{
		{Effect: gate.Deny, Tool: tool, Specifier: "target=prod*"},
		{Effect: gate.Ask, Tool: tool, Specifier: "suite=release/*"},
		{Effect: gate.Deny, Tool: tool, When: `size(args) > 8`},
		{Effect: gate.Ask, Tool: tool, Scope: gate.ScopeSession, SessionID: "no-such-session"},
		{Effect: gate.Allow, Tool: tool, Scope: gate.ScopeWorkspace, Workspace: "/no/such/workspace"},
		{Effect: gate.Deny, Tool: tool, ExpiresAt: &expired},
		{Effect: gate.Ask, Tool: tool, Specifier: "config=ci/**"},
		{Effect: gate.Deny, Tool: tool, Specifier: "flags=--force*"},
		{Effect: gate.Ask, Tool: tool, When: `parent == "codemode"`},
		{Effect: gate.Allow, Tool: tool},
	}
	for i := 0; len(rules) < n; i++ {
		r := gate.Rule{Effect: gate.Allow, Tool: fmt.Sprintf("other_%d", i)}
		if i < 5 {
			r.Tool = fmt.Sprintf("mcp%d__*", i)
		}
		rules = append(rules, r)
	}
	rules = rules[:n]
	for i := range rules {
		rules[i].ID = fmt.Sprintf("policy:%d", i)
		rules[i].Source, rules[i].CreatedBy = gate.SourcePolicyFile, "bench"
		if rules[i].Scope == "" {
			rules[i].Scope = gate.ScopeServer
		}
	}
	return rules
}

// NewBench opens a store at dir/bench.db and wires a Runner with the benchmark tools.
func NewBench(ctx context.Context, dir string, opt BenchOptions) (*Bench, error) {
	db, err := sqlite.Open(ctx, filepath.Join(dir, "bench.db"))
	if err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Bench{Dir: dir, DB: db, Broker: agent.NewBroker(), Tools: tool.NewRegistry(), Models: NewScripts()}
	for _, t := range append(e.tools(), opt.Tools...) {
		if err := e.Tools.Register(t); err != nil {
			db.Close()
			return nil, err
		}
	}
	handler := func(_ context.Context, ev gate.CallEvent) (gate.Verdict, error) {
		// As the peers' gate: look at the annotations (the event carries them), allow.
		if ev.ParentToolCallID != "" {
			e.GateNested.Add(1)
		} else {
			e.GateDirect.Add(1)
		}
		_ = ev.Annotations.ReadOnlyHint != nil && *ev.Annotations.ReadOnlyHint
		return gate.Verdict{}, nil
	}
	e.Runner = agent.New(agent.Config{Store: stampedStore{db, e}, Models: e.Models, Tools: e.Tools, Broker: e.Broker,
		CallHandlers: gate.Handlers{handler}, ApprovalTimeout: opt.ApprovalTimeout, Logger: opt.Logger,
		PolicyRules: opt.Rules, CompileRules: opt.CompileRules})
	return e, nil
}

// Close stops every run and closes the store.
func (e *Bench) Close() error {
	e.Runner.Shutdown("benchmark end")
	e.Runner.Wait()
	return e.DB.Close()
}

// NewSession creates a session whose model replays script (registered under name).
func (e *Bench) NewSession(ctx context.Context, name string, script *models.Script) (agent.Session, error) {
	e.Models.Add(name, script)
	return e.Runner.CreateSession(ctx, name, "faux:"+name, e.Dir)
}

var (
	readOnly    = tool.Annotations{ReadOnlyHint: tool.Bool(true), OpenWorldHint: tool.Bool(false)}
	emptySchema = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)
)

// NestedDetails is review_diff's details: how many nested calls came back as expected, and the
// loop's wall time measured inside the tool, around the loop only (as pi-bench.mjs does).
type NestedDetails struct {
	OK     int   `json:"ok"`
	LoopNs int64 `json:"loopNs"`
	// LoopCPUNs is the process's CPU time (user + system, every thread) during the loop.
	LoopCPUNs int64 `json:"loopCpuNs"`
}

// CPU returns the process's CPU time so far (user + system, every thread: GC and the background
// audit writer included), like Node's process.cpuUsage.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (e *Bench) tools() []*tool.Tool {
	return []*tool.Tool{
		{
			Name: "echo", Title: "Echo", Description: "Echo the input back",
			InputSchema:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"echoed":{"type":"string"},"len":{"type":"number"}},"required":["echoed","len"]}`),
			Annotations:  readOnly,
			Execute: func(_ context.Context, args json.RawMessage, _ func(tool.Update), _ tool.Context) (tool.Result, error) {
				e.Echo.Add(time.Now())
				var in struct{ Text string }
				if err := json.Unmarshal(args, &in); err != nil {
					return tool.Result{}, err
				}
				sc := tool.Structured(struct {
					Echoed string `json:"echoed"`
					Len    int    `json:"len"`
				}{in.Text, len(in.Text)})
				return tool.Result{Content: []tool.Content{tool.Text(in.Text)}, StructuredContent: sc, Details: sc}, nil
			},
		},
		{
			Name: "run_checks", Title: "Run checks", Description: "Run checks (benchmark stand-in)",
			InputSchema:  emptySchema,
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"passed":{"type":"number"},"failed":{"type":"number"}},"required":["passed","failed"]}`),
			Annotations:  readOnly,
			Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
				sc := json.RawMessage(`{"passed":12,"failed":1}`)
				return tool.Result{Content: []tool.Content{tool.Text("12 passed, 1 failed")}, StructuredContent: sc, Details: sc}, nil
			},
		},
		{
			Name: "failing_tests", Title: "Failing tests", Description: "List failing tests (benchmark stand-in)",
			InputSchema:  emptySchema,
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"tests":{"type":"array","items":{"type":"string"}}},"required":["tests"]}`),
			Annotations:  readOnly,
			Execute: func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
				sc := json.RawMessage(`{"tests":["TestFoo"]}`)
				return tool.Result{Content: []tool.Content{tool.Text("TestFoo")}, StructuredContent: sc, Details: sc}, nil
			},
		},
		{
			Name: "review_diff", Title: "Review diff", Description: "Review a diff by calling other tools n times each",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":0}},"required":["n"]}`),
			Annotations: readOnly,
			Execute: func(ctx context.Context, args json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
				var in struct{ N int }
				if err := json.Unmarshal(args, &in); err != nil {
					return tool.Result{}, err
				}
				empty := json.RawMessage(`{}`)
				ok := 0
				c0, t0 := CPU(), time.Now()
				for range in.N {
					a := tc.ExecuteTool(ctx, "run_checks", empty)
					b := tc.ExecuteTool(ctx, "failing_tests", empty)
					// Check the answers, as pi-bench.mjs does inside its loop.
					var checks struct{ Failed int }
					var tests struct{ Tests []string }
					if !a.IsError && !b.IsError &&
						json.Unmarshal(a.Result.StructuredContent, &checks) == nil && checks.Failed == 1 &&
						json.Unmarshal(b.Result.StructuredContent, &tests) == nil && len(tests.Tests) == 1 {
						ok += 2
					}
				}
				d := NestedDetails{OK: ok, LoopNs: time.Since(t0).Nanoseconds(), LoopCPUNs: int64(CPU() - c0)}
				return tool.Result{Content: []tool.Content{tool.Text(fmt.Sprintf("ok=%d", ok))}, Details: tool.Structured(d)}, nil
			},
		},
		{
			// No annotations: it needs a person's approval (SPEC §3 default rule).
			Name: "gated", Title: "Gated", Description: "A call that needs approval",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
			Execute: func(_ context.Context, _ json.RawMessage, _ func(tool.Update), tc tool.Context) (tool.Result, error) {
				e.Gated.Store(tc.ToolCallID(), time.Now())
				return tool.Result{Content: []tool.Content{tool.Text("ran")}}, nil
			},
		},
	}
}

// Scripts offers "faux:<name>" models replaying scripts (generated in code or parsed from JSON),
// with no chunk delay unless ChunkDelay says, and any other model put under a name of its own
// (Put). It implements agent.Models; an unknown name is an apperr.Invalid error
// `unknown model "<name>"`. The zero value is not ready: use NewScripts (New and NewBench do).
type Scripts struct {
	// OnText, when set before the runs start, is called as the model hands each text delta to
	// the loop, just before the loop publishes it as message_update: the session, the model
	// request's number in the session (1 for the first), the length of the message's text with
	// this delta, and the time. The fan-out case uses it as each delta's publish time.
	OnText func(sessionID string, turn, textLen int, at time.Time)
	// ChunkDelay is the faux model's pause between text chunks (zero: none).
	ChunkDelay time.Duration

	mu     sync.RWMutex
	m      map[string]*models.Script // by name, without "faux:"
	others map[string]agent.Model    // by the whole name
}

// NewScripts returns an empty registry.
func NewScripts() *Scripts {
	return &Scripts{m: map[string]*models.Script{}, others: map[string]agent.Model{}}
}

// Add registers script under name: the model "faux:<name>" replays it (every session anew).
func (s *Scripts) Add(name string, script *models.Script) {
	script.Name = name
	s.mu.Lock()
	s.m[name] = script
	s.mu.Unlock()
}

// Put offers m as the model named name (the whole name, e.g. "test:model"), ahead of any script.
func (s *Scripts) Put(name string, m agent.Model) {
	s.mu.Lock()
	s.others[name] = m
	s.mu.Unlock()
}

// Model implements agent.Models.
func (s *Scripts) Model(name string) (agent.Model, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if m := s.others[name]; m != nil {
		return m, nil
	}
	if rest, ok := strings.CutPrefix(name, "faux:"); ok {
		if sc := s.m[rest]; sc != nil {
			faux := &models.Faux{Script: sc, ChunkDelay: s.ChunkDelay}
			if s.OnText != nil {
				return stamped{faux, s.OnText}, nil
			}
			return faux, nil
		}
	}
	return nil, apperr.Errorf(apperr.Invalid, "unknown model %q", name)
}

// Names implements agent.Models: the faux scripts' names, then the others', each sorted.
func (s *Scripts) Names() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out, others []string
	for n := range s.m {
		out = append(out, "faux:"+n)
	}
	for n := range s.others {
		others = append(others, n)
	}
	slices.Sort(out)
	slices.Sort(others)
	return append(out, others...)
}

// stamped reports each text delta to onText before passing it on.
type stamped struct {
	model  agent.Model
	onText func(sessionID string, turn, textLen int, at time.Time)
}

func (m stamped) Stream(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
	turn := 1
	for _, msg := range req.Messages {
		if msg.Role == agent.Assistant {
			turn++
		}
	}
	n := 0
	return m.model.Stream(ctx, req, func(d agent.Delta) {
		if d.Text != "" {
			n += len(d.Text)
			m.onText(req.SessionID, turn, n, time.Now())
		}
		onDelta(d)
	})
}

// DirectScript is K turns of one echo call each ({"text": "hello <i>"}), then a text turn.
func DirectScript(k int) *models.Script {
	sc := &models.Script{}
	for i := range k {
		args, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("hello %d", i)})
		sc.Steps = append(sc.Steps, models.Step{StopReason: agent.ToolUse, Content: []agent.Block{
			{Type: "toolCall", ID: fmt.Sprintf("call-%d", i), Name: "echo", Arguments: args}}})
	}
	sc.Steps = append(sc.Steps, TextStep("done"))
	return sc
}

// NestedScript is one review_diff {n} call, then a text turn.
func NestedScript(n int) *models.Script {
	return &models.Script{Steps: []models.Step{
		{StopReason: agent.ToolUse, Content: []agent.Block{{Type: "toolCall", ID: "rd", Name: "review_diff",
			Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}}},
		TextStep("done"),
	}}
}

// GatedScript is one gated call (which waits for a person), then a text turn.
func GatedScript() *models.Script {
	return &models.Script{Steps: []models.Step{
		{StopReason: agent.ToolUse, Content: []agent.Block{{Type: "toolCall", Name: "gated",
			Arguments: json.RawMessage(`{"text":"please"}`)}}},
		TextStep("done"),
	}}
}

// StreamScript is turns model turns, each streaming text of about textBytes bytes (in the faux
// model's word-sized chunks) and then one echo call, then a final text turn of the same size.
func StreamScript(turns, textBytes int) *models.Script {
	text := strings.Repeat("Streaming words to every viewer. ", textBytes/33+1)[:textBytes]
	sc := &models.Script{}
	for i := range turns {
		args, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("hello %d", i)})
		sc.Steps = append(sc.Steps, models.Step{StopReason: agent.ToolUse, Content: []agent.Block{
			{Type: "text", Text: text},
			{Type: "toolCall", ID: fmt.Sprintf("call-%d", i), Name: "echo", Arguments: args}}})
	}
	sc.Steps = append(sc.Steps, TextStep(text))
	return sc
}

// TextStep is a final text turn.
func TextStep(text string) models.Step {
	return models.Step{StopReason: agent.Stop, Content: []agent.Block{{Type: "text", Text: text}}}
}
