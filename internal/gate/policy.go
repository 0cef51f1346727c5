// Package gate decides whether a tool call may run: tool_call handlers that can block it, the
// annotation policy that says whether a person must approve it, and approvals that wait for that
// person's decision (SPEC §3).
package gate

import (
	"context"
	"encoding/json"
	"fmt"

	"countersign/internal/tool"
)

// NeedsApproval is the default approval rule of SPEC §3, from MCP annotations, exactly:
//
//	destructiveHint == true || (!readOnlyHint && ((destructiveHint ?? true) || (openWorldHint ?? true)))
//
// where an absent readOnlyHint counts as false. A tool with no annotations needs approval;
// readOnlyHint true alone does not; an explicit destructiveHint true always does.
func NeedsApproval(a tool.Annotations) bool {
	isTrue := func(p *bool) bool { return p != nil && *p }
	or := func(p *bool, def bool) bool {
		if p == nil {
			return def
		}
		return *p
	}
	return isTrue(a.DestructiveHint) ||
		(!isTrue(a.ReadOnlyHint) && (or(a.DestructiveHint, true) || or(a.OpenWorldHint, true)))
}

// AskReason says why a call of t waits for a person, as a prompt shows it after "asks because";
// "" when the policy lets it run without one (SPEC §3, §13). A tool that always asks (an
// untrusted MCP server's) gives its own reason; otherwise the annotation that makes
// NeedsApproval true is named, and whether it was defaulted:
//
//	destructiveHint is true
//	it is not marked read-only, and destructiveHint defaults to true
//	it is not marked read-only, and openWorldHint is true
func AskReason(t *tool.Tool) string {
	if t.AlwaysAsk {
		if t.AskReason != "" {
			return t.AskReason
		}
		return "the tool always asks"
	}
	a := t.Annotations
	if !NeedsApproval(a) {
		return ""
	}
	switch {
	case a.DestructiveHint != nil && *a.DestructiveHint:
		return "destructiveHint is true"
	case a.DestructiveHint == nil:
		return "it is not marked read-only, and destructiveHint defaults to true"
	case a.OpenWorldHint == nil:
		return "it is not marked read-only, and openWorldHint defaults to true"
	}
	return "it is not marked read-only, and openWorldHint is true"
}

// CallEvent is what a tool_call handler sees (SPEC §3, step 3; pi's tool_call event).
type CallEvent struct {
	SessionID        string           `json:"sessionId"`
	ToolName         string           `json:"toolName"`
	ToolCallID       string           `json:"toolCallId"`
	ParentToolCallID string           `json:"parentToolCallId,omitempty"`
	Input            json.RawMessage  `json:"input"`
	Annotations      tool.Annotations `json:"annotations"`
}

// Verdict is a handler's answer: Block stops the call, with Reason as the model's error text.
type Verdict struct {
	Block  bool   `json:"block"`
	Reason string `json:"reason,omitempty"`
}

// DefaultBlockReason is the model's error text when a handler blocks without a reason.
const DefaultBlockReason = "Tool execution was blocked"

// Handler is a tool_call handler. It may return a blocking Verdict; an error or a panic blocks
// the call too (fail closed).
type Handler func(ctx context.Context, ev CallEvent) (Verdict, error)

// Handlers runs tool_call handlers in registration order.
type Handlers []Handler

// Check runs the handlers in order and returns the first blocking verdict, with its reason
// defaulted to DefaultBlockReason. A handler that returns an error or panics blocks the call with
// the error text (fail closed). A zero Verdict means every handler let the call through.
func (hs Handlers) Check(ctx context.Context, ev CallEvent) Verdict {
	for _, h := range hs {
		v := runHandler(ctx, h, ev)
		if v.Block {
			if v.Reason == "" {
				v.Reason = DefaultBlockReason
			}
			return v
		}
	}
	return Verdict{}
}

func runHandler(ctx context.Context, h Handler, ev CallEvent) (v Verdict) {
	defer func() {
		if p := recover(); p != nil {
			v = Verdict{Block: true, Reason: fmt.Sprintf("tool_call handler panicked: %v", p)}
		}
	}()
	v, err := h(ctx, ev)
	if err != nil {
		return Verdict{Block: true, Reason: fmt.Sprintf("tool_call handler failed: %v", err)}
	}
	return v
}
