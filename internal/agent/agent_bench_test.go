package agent_test

// Benchmarks of the agent loop and the call pipeline on the real code paths: SQLite on disk, the
// faux model with no chunk delay, one allowing tool_call handler (issue 9). They only run with
// -bench (make bench, or go test -run '^$' -bench . ./internal/agent); the load program
// bench/cmd/load measures the same cases through the HTTP server and WebSockets, side by side
// with the peers. Profile with -cpuprofile / -memprofile.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/gate/gatetest"
	"countersign/internal/rules"
	"countersign/internal/testkit"
	"countersign/internal/tool"
)

func newBenchEnv(b *testing.B) *testkit.Bench {
	b.Helper()
	return newBenchEnvWith(b, testkit.BenchOptions{})
}

func newBenchEnvWith(b *testing.B, opt testkit.BenchOptions) *testkit.Bench {
	b.Helper()
	e, err := testkit.NewBench(context.Background(), b.TempDir(), opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// drain reads a session's events until agent_end, as a connected viewer would, then waits for
// the run to end (a viewer that falls behind is dropped by the broker before agent_end).
func drain(r *agent.Runner, sub *agent.Subscription) <-chan int {
	done := make(chan int, 1)
	go func() {
		n := 0
		for ev := range sub.C {
			n++
			if ev.Type == agent.AgentEnd {
				break
			}
		}
		r.Wait()
		done <- n
	}()
	return done
}

// BenchmarkNested: one model call to review_diff, which runs run_checks and failing_tests through
// ExecuteTool b.N/2 times each, with no viewer; ns/op is the whole run divided by the nested
// calls (so it includes writing their audit records), loop-µs/call the time measured inside
// review_diff around its loop (pi-bench.mjs's us_per_call), loop-cpu-µs/call the process's CPU
// time during the loop (every thread) per call.
func BenchmarkNested(b *testing.B) { benchNested(b, newBenchEnv(b)) }

// BenchmarkNestedRules: BenchmarkNested with no rules and with 1,000 policy rules loaded, ten of
// them on run_checks (issue 17, acceptance 7), compiled by the gatetest stand-in (indexed by exact
// tool name, as internal/rules indexes them); the difference of loop-µs/call is what the rules
// add per call (the goal: under 2 µs).
func BenchmarkNestedRules(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			benchNested(b, newBenchEnvWith(b, testkit.BenchOptions{Rules: testkit.RulesOn("run_checks", n), CompileRules: gatetest.Compile}))
		})
	}
	// The real compiler (internal/rules) with testkit.RealRulesOn: ten rules of every kind on
	// run_checks, one of which allows it (the `make bench` rules case measures the same).
	b.Run("real-rules=1000", func(b *testing.B) {
		benchNested(b, newBenchEnvWith(b, testkit.BenchOptions{Rules: testkit.RealRulesOn("run_checks", 1000), CompileRules: rules.Compiler}))
	})
}

func benchNested(b *testing.B, e *testkit.Bench) {
	ctx := context.Background()
	n := max(b.N/2, 1)
	sess, err := e.NewSession(ctx, "nested", testkit.NestedScript(n))
	if err != nil {
		b.Fatal(err)
	}
	// No viewer, as in pi-bench.mjs: the pipeline alone.
	b.ResetTimer()
	if err := e.Runner.Send(ctx, sess.ID, "go"); err != nil {
		b.Fatal(err)
	}
	e.Runner.Wait()
	b.StopTimer()
	entries, err := e.DB.Entries(ctx, sess.ID)
	if err != nil {
		b.Fatal(err)
	}
	var d testkit.NestedDetails
	for _, en := range entries {
		if en.Message.Role == agent.ToolResult {
			_ = json.Unmarshal(en.Message.Result.Details, &d)
		}
	}
	if d.OK != 2*n || e.GateNested.Load() != int64(2*n) {
		b.Fatalf("nested calls ok %d, gate saw %d, want %d", d.OK, e.GateNested.Load(), 2*n)
	}
	b.ReportMetric(float64(d.LoopNs)/1e3/float64(2*n), "loop-µs/call")
	b.ReportMetric(float64(d.LoopCPUNs)/1e3/float64(2*n), "loop-cpu-µs/call")
}

// BenchmarkDirect: K model turns of one echo call each, then text, with one in-process
// subscriber draining the events; ns/op is one whole run.
func BenchmarkDirect(b *testing.B) {
	for _, k := range benchDirectKs {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			e := newBenchEnv(b)
			ctx := context.Background()
			var first, last int64
			for i := 0; b.Loop(); i++ {
				sess, err := e.NewSession(ctx, fmt.Sprintf("direct-%d", i), testkit.DirectScript(k))
				if err != nil {
					b.Fatal(err)
				}
				sub := e.Broker.Subscribe(sess.ID)
				done := drain(e.Runner, sub)
				e.Echo.Reset()
				if err := e.Runner.Send(ctx, sess.ID, "go"); err != nil {
					b.Fatal(err)
				}
				<-done
				e.Broker.Unsubscribe(sub)
				ts := e.Echo.Times()
				if len(ts) != k {
					b.Fatalf("echo ran %d times, want %d", len(ts), k)
				}
				f, l := testkit.TurnSpread(ts)
				first, last = first+f, last+l
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*k), "µs/call")
			b.ReportMetric(float64(first)/float64(b.N), "turn-µs-first50")
			b.ReportMetric(float64(last)/float64(b.N), "turn-µs-last50")
		})
	}
}

// BenchmarkApproval: one session parked on a pending approval, decided in process as soon as it
// is shown; ns/op is one whole run (two model turns, the approval and the call), stored-to-start-µs
// the time from the approval's creation (set just before it is stored) to the tool's start.
func BenchmarkApproval(b *testing.B) {
	e := newBenchEnv(b)
	ctx := context.Background()
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		sess, err := e.NewSession(ctx, fmt.Sprintf("gated-%d", i), testkit.GatedScript())
		if err != nil {
			b.Fatal(err)
		}
		sub := e.Broker.Subscribe(sess.ID)
		if err := e.Runner.Send(ctx, sess.ID, "go"); err != nil {
			b.Fatal(err)
		}
		var asked *agent.Event
		for ev := range sub.C {
			if ev.Type == agent.ApprovalRequested {
				asked = ev
				if _, err := e.Runner.Gate().Decide(ctx, sess.ID, ev.Approval.ID, gate.Answer{Decision: "approve", By: gate.Owner()}); err != nil {
					b.Fatal(err)
				}
			}
			if ev.Type == agent.AgentEnd {
				break
			}
		}
		e.Broker.Unsubscribe(sub)
		started, ok := e.Gated.Load(asked.ToolCallID)
		if !ok {
			b.Fatal("the gated tool did not run")
		}
		total += started.(time.Time).Sub(asked.Approval.CreatedAt)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "stored-to-start-µs")
}

// BenchmarkCheckRealRules: gate.Checker.Check alone for the nested loop's two tools, with no rules
// and with testkit.RealRulesOn's 1,000 rules compiled by internal/rules in a Rulebook — where
// the rules case of `make bench` spends its added time (run_checks has ten rules, failing_tests
// none; both pass the glob patterns).
func BenchmarkCheckRealRules(b *testing.B) {
	ro := tool.Annotations{ReadOnlyHint: tool.Bool(true)}
	for _, n := range []int{0, 1000} {
		for _, name := range []string{"run_checks", "failing_tests"} {
			b.Run(fmt.Sprintf("rules=%d/%s", n, name), func(b *testing.B) {
				ck := gate.Checker{Rules: gate.NewRulebook(rules.Compiler, nil, testkit.RealRulesOn("run_checks", n))}
				c := gate.CheckCall{SessionID: "s", ToolCallID: "rd/1", ParentToolCallID: "rd", Parent: "review_diff",
					Tool: &tool.Tool{Name: name, Annotations: ro}, Arguments: json.RawMessage(`{}`), Workspace: "/w"}
				b.ReportAllocs()
				for b.Loop() {
					if d := ck.Check(context.Background(), c); d.Outcome != gate.Allowed {
						b.Fatal(d)
					}
				}
			})
		}
	}
}

var benchDirectKs = []int{200, 1000}
