package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"countersign/internal/tool"
)

// transcript helpers: a user message, an assistant message calling ids, and a tool result of n
// bytes of text.
func userMsg(text string) Message {
	return Message{Role: User, Content: []Block{{Type: "text", Text: text}}}
}

func callMsg(ids ...string) Message {
	m := Message{Role: Assistant, StopReason: ToolUse}
	for _, id := range ids {
		m.Content = append(m.Content, Block{Type: "toolCall", ID: id, Name: "read", Arguments: []byte(`{}`)})
	}
	return m
}

func resultMsg(id string, n int, isError bool) Message {
	res := tool.Result{Content: []tool.Content{tool.Text(strings.Repeat("x", n))}, IsError: isError}
	return Message{Role: ToolResult, ToolCallID: id, ToolName: "read", Result: &res}
}

// stubbed reports which messages of sent are a shortened stub.
func stubbed(sent []Message) []int {
	var out []int
	for i, m := range sent {
		if m.Role == ToolResult && strings.HasPrefix(m.Result.TextOf(), "[result shortened for the model: ") {
			out = append(out, i)
		}
	}
	return out
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFitContextShortensTheOldestToolResultsFirstAndKeepsTheNewestTurnWhole(t *testing.T) {
	// Four turns of 4,000-byte results (1,000 tokens each by the byte estimate).
	msgs := []Message{
		userMsg("go"),
		callMsg("a"), resultMsg("a", 4000, false), // 1, 2
		callMsg("b"), resultMsg("b", 4000, true), // 3, 4
		callMsg("c"), resultMsg("c", 4000, false), // 5, 6
		callMsg("d", "e"), resultMsg("d", 4000, false), resultMsg("e", 4000, false), // 7, 8, 9
	}
	whole, err := fitContext("", nil, msgs, 0, 0)
	if err != nil || whole.Shortened != 0 {
		t.Fatalf("no budget: shortened %d, err %v; want nothing shortened", whole.Shortened, err)
	}
	tests := []struct {
		name      string
		budget    int
		atLeast   int
		wantStubs []int
		wantErr   bool
	}{
		{name: "a budget it fits leaves everything whole", budget: whole.Estimate},
		{name: "one result over: the oldest goes", budget: whole.Estimate - 100, wantStubs: []int{2}},
		{name: "more over: the oldest ones, in order", budget: whole.Estimate - 1500, wantStubs: []int{2, 4}},
		{name: "the newest turn's results are never shortened", budget: whole.Estimate - 3500, wantStubs: []int{2, 4, 6}, wantErr: true},
		{name: "at least is honoured whatever the estimate", budget: whole.Estimate, atLeast: 2, wantStubs: []int{2, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := fitContext("", nil, msgs, tt.budget, tt.atLeast)
			var ce *ContextError
			if tt.wantErr != errors.As(err, &ce) {
				t.Fatalf("err %v, want a ContextError: %v", err, tt.wantErr)
			}
			if got := stubbed(f.Messages); !sameInts(got, tt.wantStubs) {
				t.Fatalf("stubs at %v, want %v", got, tt.wantStubs)
			}
			if f.Shortened != len(tt.wantStubs) {
				t.Errorf("Shortened = %d, want %d", f.Shortened, len(tt.wantStubs))
			}
			if !tt.wantErr && f.Estimate > tt.budget {
				t.Errorf("estimate %d over the budget %d", f.Estimate, tt.budget)
			}
			if tt.wantErr && (ce.Estimate <= tt.budget || ce.Budget != tt.budget || ce.Shortened != 3) {
				t.Errorf("ContextError %+v, want the estimate over the budget %d with 3 shortened", *ce, tt.budget)
			}
			// What is stored is never shortened.
			for i, m := range msgs {
				if m.Role == ToolResult && len(m.Result.TextOf()) != 4000 {
					t.Fatalf("message %d of the transcript was changed", i)
				}
			}
		})
	}
}

func TestAShortenedResultKeepsItsPairingAndSaysHowBigItWas(t *testing.T) {
	structured := tool.Result{Content: []tool.Content{tool.Text(strings.Repeat("y", 12_697))},
		StructuredContent: []byte(`{"k":"v"}`), Details: []byte(`{"d":1}`), IsError: true}
	msgs := []Message{userMsg("go"), callMsg("a"),
		{Role: ToolResult, ToolCallID: "a", ToolName: "read", Result: &structured},
		callMsg("b"), resultMsg("b", 10, false)}
	f, err := fitContext("", nil, msgs, 50, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := f.Messages[2]
	if got.ToolCallID != "a" || got.ToolName != "read" || got.Role != ToolResult || !got.Result.IsError {
		t.Errorf("stub %+v lost its pairing or isError", got)
	}
	if want := "[result shortened for the model: 12.4 KB, see the transcript]"; got.Result.TextOf() != want {
		t.Errorf("stub text %q, want %q", got.Result.TextOf(), want)
	}
	if got.Result.StructuredContent != nil || got.Result.Details != nil || len(got.Result.Content) != 1 {
		t.Errorf("stub result %+v carries more than its text", got.Result)
	}
	if msgs[2].Result != &structured || len(structured.Content[0].Text) != 12_697 {
		t.Error("the transcript's result was changed")
	}
}

func TestSmallToolResultsAreNeverShortened(t *testing.T) {
	msgs := []Message{userMsg("go"), callMsg("a"), resultMsg("a", minShortenBytes-1, false), callMsg("b"), resultMsg("b", 10, false)}
	f, err := fitContext("", nil, msgs, 1, 0)
	var ce *ContextError
	if !errors.As(err, &ce) || f.Shortened != 0 {
		t.Fatalf("shortened %d, err %v; want none shortened and a ContextError", f.Shortened, err)
	}
}

func TestTheEstimateStartsFromTheProviderReportedUsage(t *testing.T) {
	anchored := callMsg("b")
	anchored.Usage = &Usage{Input: 9000, CacheRead: 100, Output: 20}
	msgs := []Message{userMsg("go"), callMsg("a"), resultMsg("a", 4000, false), anchored, resultMsg("b", 400, false)}
	f, err := fitContext(strings.Repeat("s", 10_000), []ToolSpec{{Name: "read"}}, msgs, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// 9,120 reported (prompt and output) plus the result after it, by bytes; the instructions
	// and the older messages are in the reported count already.
	after := messageOverhead + len("b") + len("read") + 400
	want := 9120 + ceilDiv(after, bytesPerToken)
	if f.Estimate != want {
		t.Errorf("estimate %d, want %d", f.Estimate, want)
	}
	// The anchor's own request had its oldest result shortened: with it whole again, it counts.
	msgs[3].ShortenedResults = 1
	g, _ := fitContext("", nil, msgs, 0, 0)
	saved := 4000 - len(ShortenedStub(4000))
	if wantWhole := 9120 + ceilDiv(after+saved, bytesPerToken); g.Estimate != wantWhole {
		t.Errorf("estimate with the anchor's result shortened then, whole now: %d, want %d", g.Estimate, wantWhole)
	}
	// Shortened again now, it is back to the first estimate.
	h, _ := fitContext("", nil, msgs, want, 0)
	if h.Shortened != 1 || h.Estimate != want {
		t.Errorf("shortened %d, estimate %d; want the old result shortened and %d", h.Shortened, h.Estimate, want)
	}
}

func TestUsageReportedTooLowDoesNotLetAnOversizedRequestThrough(t *testing.T) {
	for _, u := range []Usage{{}, {Input: 10, Output: 5}} {
		anchored := callMsg("b")
		anchored.Usage = &u
		msgs := []Message{userMsg("go"), callMsg("a"), resultMsg("a", 8000, false), anchored, resultMsg("b", 400, false)}
		f, _ := fitContext("", nil, msgs, 0, 0)
		if f.Estimate < 8000/bytesPerToken {
			t.Errorf("with usage %+v reported: estimate %d, want at least the bytes of the request (%d)", u, f.Estimate, 8000/bytesPerToken)
		}
	}
}

func TestAnImageCountsAsAFixedNumberOfTokens(t *testing.T) {
	img := tool.Result{Content: []tool.Content{{Type: "image", MimeType: "image/png", Data: strings.Repeat("A", 1<<20)}}}
	msgs := []Message{userMsg("look"), callMsg("a"), {Role: ToolResult, ToolCallID: "a", ToolName: "read", Result: &img}}
	f, err := fitContext("", nil, msgs, 2000, 0)
	if err != nil || f.Estimate > 2000 || f.Estimate < imageBytes/bytesPerToken {
		t.Errorf("a 1 MB image: estimate %d, %v; want about %d tokens, within a 2,000 budget", f.Estimate, err, imageBytes/bytesPerToken)
	}
	// Shortened, its stub says how big it was.
	msgs = append(msgs, callMsg("b"), resultMsg("b", 10, false))
	g, _ := fitContext("", nil, msgs, 100, 0)
	if got := g.Messages[2].Result.TextOf(); got != "[result shortened for the model: 1024 KB, see the transcript]" {
		t.Errorf("the image's stub %q", got)
	}
}

func TestWithoutUsageTheWholeRequestIsCounted(t *testing.T) {
	tools := []ToolSpec{{Name: "read", Description: strings.Repeat("d", 1000), InputSchema: []byte(`{"type":"object"}`)}}
	small, _ := fitContext("", nil, []Message{userMsg("go")}, 0, 0)
	big, _ := fitContext(strings.Repeat("s", 4000), tools, []Message{userMsg("go")}, 0, 0)
	if big.Estimate-small.Estimate < 1250 {
		t.Errorf("instructions of 4,000 bytes and a tool of 1,000 add %d tokens, want at least 1,250", big.Estimate-small.Estimate)
	}
}

func TestFormatKB(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want string
	}{{300, "0.3 KB"}, {1024, "1 KB"}, {12_697, "12.4 KB"}, {64 << 10, "64 KB"}} {
		if got := formatKB(tt.n); got != tt.want {
			t.Errorf("formatKB(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestContextErrorSaysWhatDoesNotFit(t *testing.T) {
	e := &ContextError{Estimate: 5210, Budget: 1750, Window: 2000, Reserve: 250, Shortened: 3}
	want := "Not sent to the model: the conversation does not fit the model's context window: about 5,210 tokens, budget 1,750 (2,000 minus 250 kept for the answer), with 3 older tool results shortened and the newest turn whole."
	if !strings.HasPrefix(e.Error(), want) {
		t.Errorf("error %q, want it to start %q", e.Error(), want)
	}
	refused := &ContextError{Estimate: 900, Shortened: 2, Refused: errors.New("openai: 400 Bad Request: maximum context length")}
	if !strings.HasPrefix(refused.Error(), "openai: 400 Bad Request: maximum context length — ") || !errors.Is(refused, refused.Refused) {
		t.Errorf("refused error %q does not start with the provider's", refused.Error())
	}
}

// TestARunMeasuresEachMessageOnceAndEstimatesAsAFreshMeasure grows a transcript turn by turn, as
// a run does, and fits every request with one contextIndex (each message measured once) and with
// referenceFit (every message measured again, the estimate as the package doc says it): the two
// agree on every request, budget
// and shortened set, whether or not the turn carries usage (issue 19: the run no longer
// re-measures its transcript at every turn).
func TestARunMeasuresEachMessageOnceAndEstimatesAsAFreshMeasure(t *testing.T) {
	var x contextIndex
	msgs := []Message{userMsg("go")}
	for turn := range 40 {
		id := fmt.Sprintf("c%d", turn)
		call := callMsg(id)
		if turn%3 == 1 {
			call.Usage = &Usage{Input: int64(5000 + 2000*turn), Output: 30} // above the byte count: the anchor decides
			call.ShortenedResults = turn % 4
		}
		msgs = append(msgs, call, resultMsg(id, 100+(turn*977)%5000, turn%5 == 0))
		for _, budget := range []int{0, 400, 2000, 8000} {
			got, gotErr := x.fit("sys", []ToolSpec{{Name: "read"}}, msgs, budget, turn%2)
			want, wantErr := referenceFit("sys", []ToolSpec{{Name: "read"}}, msgs, budget, turn%2)
			if got.Estimate != want.Estimate || got.Shortened != want.Shortened || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("turn %d budget %d: incremental %d tokens, %d shortened, %v; fresh %d, %d, %v",
					turn, budget, got.Estimate, got.Shortened, gotErr, want.Estimate, want.Shortened, wantErr)
			}
			if !slices.Equal(stubbed(got.Messages), stubbed(want.Messages)) {
				t.Fatalf("turn %d budget %d: stubs at %v, fresh %v", turn, budget, stubbed(got.Messages), stubbed(want.Messages))
			}
		}
	}
	if x.n != len(msgs) {
		t.Errorf("measured %d messages, want %d", x.n, len(msgs))
	}
	// A shorter transcript (another run's) starts over rather than reading past its end.
	short := msgs[:3]
	got, _ := x.fit("", nil, short, 0, 0)
	want, _ := referenceFit("", nil, short, 0, 0)
	if got.Estimate != want.Estimate {
		t.Errorf("after starting over: %d, want %d", got.Estimate, want.Estimate)
	}
}

// referenceFit is fitContext written from the package doc, measuring the whole transcript for
// every request: the oracle of TestARunMeasuresEachMessageOnceAndEstimatesAsAFreshMeasure.
func referenceFit(system string, tools []ToolSpec, msgs []Message, budget, atLeast int) (fitted, error) {
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
	anchor := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == Assistant && msgs[i].Usage != nil {
			anchor = i
			break
		}
	}
	var cands []int
	cost := func(i int) int {
		_, c := resultSize(msgs[i].Result)
		return c
	}
	for i, m := range msgs {
		if m.Role == ToolResult && i < newest {
			size, c := resultSize(m.Result)
			if size >= minShortenBytes && c > len(ShortenedStub(size)) {
				cands = append(cands, i)
			}
		}
	}
	estimate := func(k int) int {
		short := map[int]bool{}
		for _, i := range cands[:k] {
			short[i] = true
		}
		bytes := func(i int, shortened bool) int {
			if msgs[i].Role != ToolResult {
				return messageBytes(msgs[i], 0)
			}
			if shortened {
				size, _ := resultSize(msgs[i].Result)
				return messageBytes(msgs[i], len(ShortenedStub(size)))
			}
			return messageBytes(msgs[i], cost(i))
		}
		whole := len(system) + toolsBytes(tools)
		for i := range msgs {
			whole += bytes(i, short[i])
		}
		wholeTokens := ceilDiv(whole, bytesPerToken)
		if anchor < 0 {
			return wholeTokens
		}
		// Past the anchor: the messages after it, and the results before it sent otherwise now
		// than in the anchor's request (which had its first ShortenedResults candidates short).
		past := 0
		for i := anchor + 1; i < len(msgs); i++ {
			past += bytes(i, short[i])
		}
		for j, i := range cands {
			if i >= anchor {
				break
			}
			then, now := j < msgs[anchor].ShortenedResults, short[i]
			if then != now {
				d := bytes(i, false) - bytes(i, true)
				if then {
					past += d
				} else {
					past -= d
				}
			}
		}
		u := msgs[anchor].Usage
		return max(int(u.Prompt()+u.Output)+ceilDiv(past, bytesPerToken), wholeTokens)
	}
	k := min(atLeast, len(cands))
	for k < len(cands) && budget > 0 && estimate(k) > budget {
		k++
	}
	f := fitted{Messages: slices.Clone(msgs), Shortened: k, Estimate: estimate(k)}
	for _, i := range cands[:k] {
		size, _ := resultSize(msgs[i].Result)
		f.Messages[i] = shortened(msgs[i], size)
	}
	if budget > 0 && f.Estimate > budget {
		return f, &ContextError{Estimate: f.Estimate, Budget: budget, Shortened: k}
	}
	return f, nil
}
