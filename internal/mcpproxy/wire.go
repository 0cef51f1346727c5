// Package mcpproxy is `countersign mcp-proxy` (SPEC §18 Door 2): it wraps one stdio MCP server
// for clients that only launch stdio servers. It starts the server as a child process, offers its
// tools to the client over stdio under their own names, and asks the Countersign server about
// every tools/call (POST /mcp/decide, with a connection's token) before running it on the child;
// the child's result goes back through Countersign (POST /mcp/outcome), which validates it
// against the tool's outputSchema (SPEC §1) and records it on the call's card.
package mcpproxy

import "encoding/json"

// DecideRequest is POST /mcp/decide's body: one tools/call a proxy's client made.
type DecideRequest struct {
	// SessionID is the proxy's id for its client's session (one per proxy process): the agent
	// session the call lands in, with the connection.
	SessionID string `json:"sessionId"`
	// ClientInfo is the client's clientInfo from its initialize (MCP 2025-11-25 §lifecycle).
	ClientInfo ClientInfo `json:"clientInfo"`
	// Server names the wrapped server (--name): the call's tool is "<server>__<tool>".
	Server string `json:"server"`
	// Tool is the wrapped server's tool as its tools/list gave it (name, title, description,
	// inputSchema, outputSchema, annotations); its annotations are never believed.
	Tool json.RawMessage `json:"tool"`
	// Arguments are the call's arguments, a JSON object.
	Arguments json.RawMessage `json:"arguments"`
}

// ClientInfo is an MCP clientInfo.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// The decisions of a Decision.
const (
	Allow = "allow" // run the call with Decision.Arguments
	Deny  = "deny"  // answer with an isError result: Decision.Reason
	Wait  = "wait"  // nobody decided before the deadline: answer Decision.Reason (isError)
)

// Decision is POST /mcp/decide's answer.
type Decision struct {
	Decision string `json:"decision"`
	// Reason is, for deny, why; for wait, the text to answer ("Waiting for approval at <url>;
	// call again once it is approved"); for allow, the rule or person that allowed it.
	Reason string `json:"reason,omitempty"`
	// Arguments are, for allow, the arguments to run: the call's, or a person's edit of them.
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	ApprovalID string          `json:"approvalId,omitempty"`
	URL        string          `json:"url,omitempty"`
}

// OutcomeRequest is POST /mcp/outcome's body: what the wrapped server answered to an allowed
// call.
type OutcomeRequest struct {
	SessionID  string          `json:"sessionId"`
	ApprovalID string          `json:"approvalId"`
	Result     json.RawMessage `json:"result"` // the MCP CallToolResult
	// Error is, when the call failed without a result (the server crashed, a JSON-RPC error),
	// why.
	Error string `json:"error,omitempty"`
}

// Outcome is POST /mcp/outcome's answer: the result to give the client (an isError result when
// the upstream's structuredContent breaks its outputSchema).
type Outcome struct {
	Result json.RawMessage `json:"result"`
}
