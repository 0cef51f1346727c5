package testkit

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
)

// Step is one model request's answer: it may stream deltas through onDelta and returns the
// message, or an error as a provider would.
type Step func(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error)

// Steps is a one-script model written in Go: it answers its n-th request (from 0) with the n-th
// step and records every request; a request past the last step gets the error
// "test model: no step left". It implements agent.Model and is safe for concurrent use.
type Steps struct {
	steps []Step
	mu    sync.Mutex
	reqs  []agent.Request
}

// Model returns a Steps answering with steps, in order.
func Model(steps ...Step) *Steps { return &Steps{steps: steps} }

// Stream implements agent.Model.
func (m *Steps) Stream(ctx context.Context, req agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, req)
	n := len(m.reqs) - 1
	m.mu.Unlock()
	if n >= len(m.steps) {
		return agent.Message{}, errors.New("test model: no step left")
	}
	return m.steps[n](ctx, req, onDelta)
}

// Requests returns a copy of the requests received so far, in order.
func (m *Steps) Requests() []agent.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]agent.Request(nil), m.reqs...)
}

// Say answers with text, streamed in one delta, stop reason stop, and usage (nil: none).
func Say(text string, usage *agent.Usage) Step {
	return func(_ context.Context, _ agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
		onDelta(agent.Delta{Text: text})
		return agent.Message{Content: []agent.Block{{Type: "text", Text: text}}, StopReason: agent.Stop, Usage: usage}, nil
	}
}

// CallTool answers with one call (toolCallId id) of tool name with args (JSON), streamed as one
// tool call delta, stop reason toolUse.
func CallTool(id, name, args string) Step {
	return func(_ context.Context, _ agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
		b := agent.Block{Type: "toolCall", ID: id, Name: name, Arguments: json.RawMessage(args)}
		onDelta(agent.Delta{ToolCall: &b})
		return agent.Message{Content: []agent.Block{b}, StopReason: agent.ToolUse}, nil
	}
}

// Fail answers with err and no message.
func Fail(err error) Step {
	return func(context.Context, agent.Request, func(agent.Delta)) (agent.Message, error) {
		return agent.Message{}, err
	}
}

// DefaultWithin is how long Await waits when told 0.
const DefaultWithin = 10 * time.Second

// Await reads sub until an event of type typ and returns it; every event read on the way,
// that one included, is appended to seen when seen is not nil. It fails the test when within
// (0: DefaultWithin) passes first or when the broker drops the subscription (a slow reader).
func Await(tb testing.TB, sub *agent.Subscription, typ agent.EventType, within time.Duration, seen *[]agent.Event) agent.Event {
	tb.Helper()
	if within == 0 {
		within = DefaultWithin
	}
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				tb.Fatalf("the subscription was dropped before a %s event", typ)
			}
			if seen != nil {
				*seen = append(*seen, *ev)
			}
			if ev.Type == typ {
				return *ev
			}
		case <-timeout.C:
			tb.Fatalf("no %s event within %v", typ, within)
		}
	}
}
