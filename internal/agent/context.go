package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"countersign/internal/tool"
)

// The context budget (SPEC §17). Before each model request the agent estimates how many tokens
// the request will take and, when that is over the budget, shortens the oldest tool results in
// what it sends — never in the store or the page — until it fits. A request that cannot fit is
// never sent: the run ends with a clear error instead of a provider's 400.
//
// The window is Config.ContextTokens, or else the model's own ContextWindow(), or else there is
// no limit. The budget is the window minus answerReserve(window), kept free for the answer.
//
// The estimate: the input and output tokens the provider reported for the last assistant message
// that carries usage (its request's prompt plus the message itself, which the next request sends
// back), plus bytes/bytesPerToken of what was added after it — and of what is sent differently
// now (results shortened since). Without any usage, bytes/bytesPerToken of the whole request:
// instructions, declared tools and messages. With usage too, the estimate is never below that
// byte count of the whole request: a server that reports too few tokens (some OpenAI-compatible
// servers report none, or zeros) must not let an oversized request through. An image counts as
// imageBytes, whatever its size: the vendors count images by their pixels, not their bytes.

// bytesPerToken is how many bytes the byte-based estimate counts as one token. English prose runs
// about 4 bytes per token with the vendors' tokenizers, code and JSON nearer 3; 4 is the usual
// rule of thumb, and the provider-reported count, once there is one, corrects the estimate at
// every turn. A request the estimate let through that the provider still refuses is shortened
// harder once (see run.request).
const bytesPerToken = 4

// messageOverhead is the bytes counted per message besides its content: role, ids, the JSON or
// chat-template framing the vendors add.
const messageOverhead = 16

// minShortenBytes is the smallest tool result that is ever shortened, in bytes of the text the
// model gets: a smaller one saves too little against its stub.
const minShortenBytes = 256

// imageBytes is what an image counts for in the byte estimate: 1,600 tokens, about what the
// vendors charge for a large image (Anthropic: about 1,600 tokens for 1092×1092 pixels).
const imageBytes = 1600 * bytesPerToken

// maxAnswerReserve bounds the tokens kept free for the answer (the vendors' usual max_tokens:
// Anthropic's DefaultAnthropicMaxTokens is 4,096).
const maxAnswerReserve = 4096

// answerReserve is the part of a context window of window tokens kept free for the model's
// answer: an eighth of it, at most maxAnswerReserve (a 2,000-token window keeps 250, a 128k one
// 4,096).
func answerReserve(window int) int { return min(window/8, maxAnswerReserve) }

// harderFactor is how much of its estimate a request the provider refused for its length
// (ErrContextLength) may take when it is tried once more; the rest of the run's requests are
// fitted to that too (run.ceiling).
const harderFactor = 0.7

// ShortenedStub is the text a shortened tool result is sent as: "[result shortened for the
// model: 12.4 KB, see the transcript]", with the size of the text the model would have got
// (formatKB).
func ShortenedStub(size int) string {
	return "[result shortened for the model: " + formatKB(size) + ", see the transcript]"
}

// formatKB is a size in bytes as people read it: kilobytes of 1,024 bytes with one decimal
// ("12.4 KB", "64 KB"); under 1 KB too ("0.3 KB").
func formatKB(n int) string {
	s := strconv.FormatFloat(float64(n)/1024, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " KB"
}

// ContextError is the error a run ends with when its next request does not fit the model's
// context window even with every older tool result shortened (SPEC §17): the request is not
// sent. Estimate and Budget are tokens; Window the context window and Reserve what the budget
// keeps free of it for the answer.
//
// Refused is set when the provider refused the request for its length (its error wraps
// ErrContextLength) and it was refused again, or could not be shortened further, when tried
// once more shortened harder: Refused is the provider's last error, and the request was sent.
type ContextError struct {
	Estimate, Budget, Window, Reserve int
	// Shortened counts the older tool results shortened in the last request considered.
	Shortened int
	Refused   error
}

func (e *ContextError) Error() string {
	if e.Refused != nil {
		return fmt.Sprintf("%v — the request was too long for the model's context window even when tried again with %d older tool results shortened (about %s tokens by Countersign's estimate). Start a new session, or set -context-tokens below the model's window.",
			e.Refused, e.Shortened, groupDigits(int64(e.Estimate)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%sthe conversation does not fit the model's context window: about %s tokens, budget %s",
		NotSentPrefix, groupDigits(int64(e.Estimate)), groupDigits(int64(e.Budget)))
	if e.Window > 0 {
		fmt.Fprintf(&b, " (%s minus %s kept for the answer)", groupDigits(int64(e.Window)), groupDigits(int64(e.Reserve)))
	}
	fmt.Fprintf(&b, ", with %d older tool results shortened and the newest turn whole. Start a new session, or raise -context-tokens if the model takes more.", e.Shortened)
	return b.String()
}

// Unwrap is the provider's refusal, if any.
func (e *ContextError) Unwrap() error { return e.Refused }

// NotSentPrefix begins the error message of an assistant message whose request was never sent
// (ContextError): the page shows it as it is, not as a failure of the model.
const NotSentPrefix = "Not sent to the model: "

// groupDigits writes n with thousands separators: 12,345.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fitted is a request's transcript as it is to be sent.
type fitted struct {
	Messages []Message
	// Shortened counts the tool results sent as a stub (the first Shortened candidates).
	Shortened int
	// Estimate is the request's estimated size in tokens, as sent.
	Estimate int
}

// fitContext returns msgs as a request with system and tools may send them within budget tokens
// (budget <= 0: no limit): unchanged when the estimate fits, else with the oldest tool results
// replaced by a stub (ShortenedStub), one at a time, until it does. Only tool results of
// minShortenBytes or more are shortened, and never those of the newest turn (the results after
// the last assistant message, which the model has not seen yet). A stub keeps its result's
// toolCallId, toolName and isError, so every call stays paired with its result. at least is
// how many of them must be shortened whatever the estimate (a retry after ErrContextLength).
// The error is a *ContextError when even shortening every candidate does not fit; the fitted
// request is returned with it, every candidate shortened.
//
// msgs is not changed; the messages returned share what was not shortened. fitContext measures
// every message; a run uses contextIndex.fit, which measures only the messages added since its
// last request.
func fitContext(system string, tools []ToolSpec, msgs []Message, budget, atLeast int) (fitted, error) {
	var x contextIndex
	return x.fit(system, tools, msgs, budget, atLeast)
}

// fit is fitContext with the per-message measures kept in x: msgs must be the messages of x's
// last call with new ones appended (a run's transcript only grows). A shorter msgs starts over.
func (x *contextIndex) fit(system string, tools []ToolSpec, msgs []Message, budget, atLeast int) (fitted, error) {
	x.update(msgs)
	e := x.estimator(system, tools, msgs)
	k := min(max(atLeast, 0), e.candidates)
	for k < e.candidates && budget > 0 && e.estimate(k) > budget {
		k++
	}
	f := fitted{Messages: msgs, Shortened: k, Estimate: e.estimate(k)}
	if k > 0 {
		f.Messages = make([]Message, len(msgs))
		copy(f.Messages, msgs)
		for j, i := range x.eligible[:k] {
			f.Messages[i] = shortened(msgs[i], x.sizes[j])
		}
	}
	if budget > 0 && f.Estimate > budget {
		return f, &ContextError{Estimate: f.Estimate, Budget: budget, Shortened: k}
	}
	return f, nil
}

// shortened is tool result m sent as a stub: one text block saying how big the result was
// (size: bytes of the text the model would have got), its isError, toolCallId and toolName
// kept; structuredContent, details and the nested-call record are not sent.
func shortened(m Message, size int) Message {
	res := tool.Result{Content: []tool.Content{tool.Text(ShortenedStub(size))}}
	if m.Result != nil {
		res.IsError = m.Result.IsError
	}
	m.Result = &res
	return m
}

// contextIndex is what the estimate needs of each message, kept across a run's requests so that
// a request measures only the messages added since the one before (issue 19: measuring the whole
// transcript at every turn made a K-turn run cost K² — 3 ms a turn at turn 5,000). A message is
// measured once: its bytes, and whether it is a tool result big enough to shorten.
type contextIndex struct {
	// n is how many messages are measured; bytes[i] the bytes of the first i (len n+1).
	n     int
	bytes []int
	// eligible are the indexes of the tool results big enough to shorten (minShortenBytes, and
	// costing more than their stub), oldest first; sizes their content's bytes for the model
	// (what the stub says) and saved[j] the bytes the stubs of eligible[:j+1] save.
	eligible, sizes, saved []int
	// anchor is the index of the last assistant message with usage (-1: none); anchorShort how
	// many results its request had shortened; anchorTokens the provider's count for it.
	anchor, anchorShort, anchorTokens int
}

// update measures the messages of msgs past the n already measured.
func (x *contextIndex) update(msgs []Message) {
	if len(msgs) < x.n || x.bytes == nil {
		*x = contextIndex{bytes: []int{0}, anchor: -1}
	}
	for i := x.n; i < len(msgs); i++ {
		m := msgs[i]
		cost := 0
		switch {
		case m.Role == ToolResult:
			size, c := resultSize(m.Result)
			cost = c
			if stub := len(ShortenedStub(size)); size >= minShortenBytes && cost > stub {
				total := cost - stub
				if j := len(x.saved); j > 0 {
					total += x.saved[j-1]
				}
				x.eligible, x.sizes, x.saved = append(x.eligible, i), append(x.sizes, size), append(x.saved, total)
			}
		case m.Role == Assistant && m.Usage != nil:
			x.anchor, x.anchorShort = i, m.ShortenedResults
			x.anchorTokens = int(m.Usage.Prompt() + m.Usage.Output)
		}
		x.bytes = append(x.bytes, x.bytes[i]+messageBytes(m, cost))
	}
	x.n = len(msgs)
}

// estimator computes a request's estimated size for each number of shortened candidates.
type estimator struct {
	x *contextIndex
	// candidates is how many of x.eligible may be shortened: those before the newest turn.
	candidates int
	// whole is the bytes of the whole request with nothing shortened; base the bytes past the
	// anchor (what came after it, and what its request had shortened).
	whole, base int
}

// estimator is the estimate of the request of system, tools and msgs (measured by update).
func (x *contextIndex) estimator(system string, tools []ToolSpec, msgs []Message) estimator {
	// The newest turn: the results after the last assistant message stay whole.
	newest := len(msgs)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == Assistant {
			newest = i + 1
			break
		}
		if msgs[i].Role != ToolResult {
			break
		}
	}
	e := estimator{x: x, candidates: sort.SearchInts(x.eligible, newest)}
	e.whole = len(system) + toolsBytes(tools) + x.bytes[x.n]
	if x.anchor < 0 {
		return e
	}
	// Past the anchor: what came after it, plus what is sent differently before it. The
	// anchor's request had its first anchorShort candidates shortened; with nothing shortened
	// now they count whole again.
	e.base = x.bytes[x.n] - x.bytes[x.anchor+1]
	if m := min(x.anchorShort, e.candidates, sort.SearchInts(x.eligible, x.anchor)); m > 0 {
		e.base += x.saved[m-1]
	}
	return e
}

// estimate is the request's size in tokens with the first k candidates shortened: from the
// anchor, but never below the byte count of the whole request.
func (e estimator) estimate(k int) int {
	saved := 0
	if k > 0 {
		saved = e.x.saved[k-1]
	}
	whole := ceilDiv(e.whole-saved, bytesPerToken)
	if e.x.anchor < 0 {
		return whole
	}
	return max(e.x.anchorTokens+ceilDiv(e.base-saved, bytesPerToken), whole)
}

func ceilDiv(a, b int) int {
	if a <= 0 {
		return -((-a) / b)
	}
	return (a + b - 1) / b
}

// messageBytes is the bytes a message counts for in the byte estimate: its text, thinking,
// tool calls' names and arguments, images (imageBytes each), a tool result's content for the
// model (resultCost, computed by the caller) and messageOverhead.
func messageBytes(m Message, resultCost int) int {
	n := messageOverhead
	if m.Role == ToolResult {
		return n + len(m.ToolCallID) + len(m.ToolName) + resultCost
	}
	for _, b := range m.Content {
		n += len(b.Text) + len(b.Thinking) + len(b.Signature) + len(b.ID) + len(b.Name) + len(b.Arguments)
		if b.Type == "image" {
			n += imageBytes
		} else {
			n += len(b.Data) // a redacted thinking block's data
		}
	}
	return n
}

// toolsBytes is the bytes of the declared tools as JSON (names, descriptions, schemas).
func toolsBytes(tools []ToolSpec) int {
	n := 0
	for _, t := range tools {
		b, err := json.Marshal(t)
		if err != nil {
			n += len(t.Name) + len(t.Description) + len(t.InputSchema)
			continue
		}
		n += len(b)
	}
	return n
}

// resultSize is what a tool result gives the model (SPEC §1 results, rule 5: ModelContent): its
// size, the bytes of its text and images' data, and its cost in the byte estimate, images
// counted as imageBytes.
func resultSize(r *tool.Result) (size, cost int) {
	if r == nil {
		return 0, 0
	}
	for _, c := range r.ModelContent() {
		size += len(c.Text) + len(c.Data)
		cost += len(c.Text)
		if c.Type == "image" {
			cost += imageBytes
		}
	}
	return size, cost
}

// isContextLength reports whether a model's error says the request did not fit its context
// window (the provider's refusal, wrapped around ErrContextLength).
func isContextLength(err error) bool { return errors.Is(err, ErrContextLength) }
