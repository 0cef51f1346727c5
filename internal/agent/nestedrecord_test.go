package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"countersign/internal/tool"
)

// TestNestedRecordKeepsBoundedResultText: the nestedCalls record (SPEC §4) keeps each call's
// result or error text cut to 4 KiB and 64 KiB in all, at a UTF-8 boundary; a call with anything
// cut is marked truncated and the record incomplete; calls that fit are kept whole and unmarked.
func TestNestedRecordKeepsBoundedResultText(t *testing.T) {
	t.Run("small calls are kept whole and the record is complete", func(t *testing.T) {
		var l nestedLog
		got, ok := l.add(tool.NestedCall{ID: "p/1", Name: "t", Status: "ok", Result: "fine", Arguments: json.RawMessage(`{"a":1}`)})
		if !ok || got.Result != "fine" || got.Truncated {
			t.Fatalf("add = %+v, %v; want the result whole, not truncated", got, ok)
		}
		got, _ = l.add(tool.NestedCall{ID: "p/2", Name: "t", Status: "error", Error: "Denied by owner: no"})
		if got.Error != "Denied by owner: no" || got.Truncated {
			t.Fatalf("add = %+v; want the error whole", got)
		}
		rec := l.record()
		if !rec.Complete || len(rec.Calls) != 2 || rec.Calls[0].Result != "fine" {
			t.Fatalf("record %+v, want 2 calls, complete", rec)
		}
	})
	t.Run("a long result is cut to 4 KiB at a rune boundary and marked", func(t *testing.T) {
		var l nestedLog
		long := strings.Repeat("é", 3000) // 6000 bytes, two per rune
		got, _ := l.add(tool.NestedCall{ID: "p/1", Name: "t", Status: "ok", Result: long})
		if len(got.Result) > maxNestedTextBytes || len(got.Result) < maxNestedTextBytes-1 {
			t.Errorf("kept %d bytes, want about %d", len(got.Result), maxNestedTextBytes)
		}
		if !utf8.ValidString(got.Result) || !strings.HasPrefix(long, got.Result) {
			t.Error("the kept text is not a valid prefix of the result")
		}
		if !got.Truncated || l.record().Complete {
			t.Errorf("truncated %v, complete %v; want the call marked and the record incomplete", got.Truncated, l.record().Complete)
		}
	})
	t.Run("an error text is bounded like a result", func(t *testing.T) {
		var l nestedLog
		got, _ := l.add(tool.NestedCall{ID: "p/1", Name: "t", Status: "error", Error: strings.Repeat("x", 10_000)})
		if len(got.Error) != maxNestedTextBytes || !got.Truncated {
			t.Errorf("error kept %d bytes (truncated %v), want %d, truncated", len(got.Error), got.Truncated, maxNestedTextBytes)
		}
	})
	t.Run("the total of result text is honoured", func(t *testing.T) {
		var l nestedLog
		text := strings.Repeat("r", 3<<10)
		for i := 1; i <= 40; i++ { // 120 KiB asked, 64 KiB kept
			l.add(tool.NestedCall{ID: fmt.Sprintf("p/%d", i), Name: "t", Status: "ok", Result: text})
		}
		rec := l.record()
		total, whole, cut := 0, 0, 0
		for _, c := range rec.Calls {
			total += len(c.Result) + len(c.Error)
			if c.Result == text && !c.Truncated {
				whole++
			}
			if c.Truncated {
				cut++
			}
		}
		if total != maxNestedAllTextBytes {
			t.Errorf("kept %d bytes of result text, want the bound %d", total, maxNestedAllTextBytes)
		}
		if len(rec.Calls) != 40 || whole != 21 || cut != 19 || rec.Complete {
			t.Errorf("%d calls, %d whole, %d cut, complete %v; want 40, 21, 19 (the 22nd cut to what was left), incomplete",
				len(rec.Calls), whole, cut, rec.Complete)
		}
		if c := rec.Calls[21]; len(c.Result) != maxNestedAllTextBytes-21*len(text) || !c.Truncated {
			t.Errorf("the 22nd call kept %d bytes, want the %d left", len(c.Result), maxNestedAllTextBytes-21*len(text))
		}
	})
	t.Run("arguments keep their bounds: 8 KiB each, 32 KiB in all", func(t *testing.T) {
		var l nestedLog
		big := json.RawMessage(`{"s":"` + strings.Repeat("a", 9<<10) + `"}`)
		got, _ := l.add(tool.NestedCall{ID: "p/1", Name: "t", Status: "ok", Arguments: big})
		if !got.Truncated || !strings.Contains(string(got.Arguments), "arguments cut") {
			t.Errorf("arguments over 8 KiB kept as %.60s (truncated %v), want the placeholder, truncated", got.Arguments, got.Truncated)
		}
		mid := json.RawMessage(`{"s":"` + strings.Repeat("b", 7<<10) + `"}`)
		kept := 0
		for i := 2; i <= 10; i++ {
			c, _ := l.add(tool.NestedCall{ID: fmt.Sprintf("p/%d", i), Name: "t", Status: "ok", Arguments: mid})
			if !c.Truncated {
				kept += len(c.Arguments)
			}
		}
		if kept > maxNestedAllBytes || kept < maxNestedAllBytes-len(mid) {
			t.Errorf("kept %d bytes of arguments, want at most %d and no room for another", kept, maxNestedAllBytes)
		}
		if l.record().Complete {
			t.Error("record complete after arguments were cut")
		}
	})
	t.Run("at most 256 calls; the 257th is left out", func(t *testing.T) {
		var l nestedLog
		for i := 1; i <= maxNestedCalls; i++ {
			if _, ok := l.add(tool.NestedCall{ID: fmt.Sprintf("p/%d", i), Name: "t", Status: "ok"}); !ok {
				t.Fatalf("call %d left out", i)
			}
		}
		if !l.record().Complete {
			t.Fatal("record incomplete at exactly 256 calls")
		}
		if _, ok := l.add(tool.NestedCall{ID: "p/257", Name: "t", Status: "ok"}); ok {
			t.Error("the 257th call was kept")
		}
		if rec := l.record(); len(rec.Calls) != maxNestedCalls || rec.Complete {
			t.Errorf("record has %d calls, complete %v; want 256, incomplete", len(rec.Calls), rec.Complete)
		}
	})
}
