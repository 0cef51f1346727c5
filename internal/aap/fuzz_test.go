package aap

import (
	"encoding/json"
	"testing"
)

// FuzzParseCreate: whatever body an agent sends to POST /aap/v1/requests, ParseCreate never
// panics; what it accepts has a tool, an object of arguments and a positive timeout; and the
// request re-encoded (another spelling of the same values) parses to the same digest, so a
// replay of it is the same request and never an idempotency conflict.
func FuzzParseCreate(f *testing.F) {
	for _, seed := range []string{
		`{"tool":"issue_refund","arguments":{"payment_id":"p","amount":4900},"timeout":"30m"}`,
		`{"tool":"t","arguments":{"a":[1,2.0,{"b":null}]},"timeout":"24h","agent_reasoning":"r","context":{"session_id":"s"}}`,
		`{"tool":"t","arguments":{"n":9007199254740993,"m":1e400},"timeout":"1s"}`,
		`{"tool":"t","arguments":{},"timeout":"30m","x":1}`,
		`{"tool":"","arguments":{},"timeout":"0s"}`,
		`{"tool":"t","arguments":[],"timeout":"30m"}`,
		`{"tool":"t","arguments":{"a":1,"a":2},"timeout":"30m"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, d, digest, e := ParseCreate(body)
		if e != nil {
			return
		}
		if c.Tool == "" || !isObject(c.Arguments) || d <= 0 || digest == "" {
			t.Fatalf("accepted %q as tool %q, arguments %s, timeout %v", body, c.Tool, c.Arguments, d)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("re-encoding %q: %v", body, err)
		}
		_, d2, digest2, e2 := ParseCreate(again)
		if e2 != nil || d2 != d || digest2 != digest {
			t.Fatalf("%q re-encoded as %s: %v, timeout %v vs %v, digest %s vs %s", body, again, e2, d2, d, digest2, digest)
		}
	})
}
