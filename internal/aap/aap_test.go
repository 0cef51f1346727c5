package aap

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"countersign/internal/aap/aaptest"
	"countersign/internal/gate"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "30m": 30 * time.Minute, "24h": 24 * time.Hour,
		"99999999999999999999h": 100000 * time.Hour} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("%s = %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0s", "-1s", "1d", "1.5h", "30", "01m", "30 m", "1h30m", "PT30M"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("%q parses", in)
		}
	}
}

// A replay is the same request when its parsed values are: whitespace, key order and number
// spelling do not count; any value does.
func TestDigestComparesParsedValues(t *testing.T) {
	parse := func(s string) string {
		t.Helper()
		_, _, d, e := ParseCreate([]byte(s))
		if e != nil {
			t.Fatalf("%s: %v", s, e)
		}
		return d
	}
	a := parse(`{"tool":"t","arguments":{"a":1,"b":[1,2]},"timeout":"30m","context":{"x":"y"}}`)
	if b := parse(` { "context" : {"x":"y"}, "timeout":"30m", "arguments":{"b":[1,2.0],"a":1.0}, "tool":"t" } `); a != b {
		t.Error("another spelling of the same values has another digest")
	}
	for _, other := range []string{
		`{"tool":"t","arguments":{"a":2,"b":[1,2]},"timeout":"30m","context":{"x":"y"}}`,
		`{"tool":"t","arguments":{"a":1,"b":[2,1]},"timeout":"30m","context":{"x":"y"}}`,
		`{"tool":"t","arguments":{"a":1,"b":[1,2]},"timeout":"31m","context":{"x":"y"}}`,
		`{"tool":"t","arguments":{"a":1,"b":[1,2]},"timeout":"30m"}`,
		`{"tool":"t","arguments":{"a":1,"b":[1,2]},"timeout":"30m","context":{"x":"y"},"agent_reasoning":""}`,
		`{"tool":"u","arguments":{"a":1,"b":[1,2]},"timeout":"30m","context":{"x":"y"}}`,
		`{"tool":"t","arguments":{"a":1,"b":[1,2]},"timeout":"30m","context":{"x":"y","n":1}}`,
	} {
		if parse(other) == a {
			t.Errorf("%s has the same digest", other)
		}
	}
}

// Numbers compare by their exact value: two integers a float64 cannot tell apart are two
// requests (a replay with the other is idempotency_conflict), 1, 1.0 and 1e0 one.
func TestDigestComparesNumbersExactly(t *testing.T) {
	digest := func(args string) string {
		t.Helper()
		_, _, d, e := ParseCreate([]byte(`{"tool":"t","arguments":` + args + `,"timeout":"30m"}`))
		if e != nil {
			t.Fatalf("%s: %v", args, e)
		}
		return d
	}
	if digest(`{"n":9007199254740993}`) == digest(`{"n":9007199254740992}`) {
		t.Error("9007199254740993 and 9007199254740992 have one digest")
	}
	if digest(`{"n":0.1}`) == digest(`{"n":0.10000000000000001}`) {
		t.Error("0.1 and 0.10000000000000001 have one digest")
	}
	if a, b, c := digest(`{"n":1}`), digest(`{"n":1.0}`), digest(`{"n":1e0}`); a != b || a != c {
		t.Error("1, 1.0 and 1e0 have different digests")
	}
	// A number is never the string that spells its digest: {"n":"n:1"} is another request than
	// {"n":1}, whose replay with it would give its decision to other arguments.
	if digest(`{"n":1}`) == digest(`{"n":"n:1"}`) || digest(`{"n":1e999999999}`) == digest(`{"n":"n:1e999999999"}`) {
		t.Error("a number and a string have one digest")
	}
	// A huge exponent is compared as written, never expanded.
	if digest(`{"n":1e999999999}`) == digest(`{"n":2e999999999}`) {
		t.Error("1e999999999 and 2e999999999 have one digest")
	}
}

// Bad bodies are 400 invalid_request (413 over the limit), never a request.
func TestParseCreateRefuses(t *testing.T) {
	for _, body := range []string{``, `[]`, `null`, `{`, `{"tool":"t","arguments":{},"timeout":"30m","x":1}`,
		`{"tool":"t","arguments":{},"timeout":"30m","TOOL":"t"}`, `{"tool":"t","arguments":{},"timeout":"30m"}x`,
		`{"arguments":{},"timeout":"30m"}`, `{"tool":"t","timeout":"30m"}`, `{"tool":"t","arguments":null,"timeout":"30m"}`,
		`{"tool":"t","arguments":"x","timeout":"30m"}`, `{"tool":"t","arguments":{}}`, `{"tool":1,"arguments":{},"timeout":"30m"}`,
		`{"tool":"t","arguments":{},"timeout":"30m","context":[]}`,
		// A key twice (or in two cases), at any depth: a rule's `when args.amount < 100` reads the
		// last, a decoder that keeps the first pays the other (SPEC §14: refused at validation).
		`{"tool":"pay","arguments":{"amount":5000,"amount":5},"timeout":"30m"}`,
		`{"tool":"pay","arguments":{"p":{"amount":5000,"amount":5}},"timeout":"30m"}`,
		`{"tool":"pay","arguments":{"amount":5000,"Amount":5},"timeout":"30m"}`,
		`{"tool":"pay","tool":"read","arguments":{},"timeout":"30m"}`,
		`{"tool":"t","arguments":{},"timeout":"30m","context":{"session_id":"a","session_id":"b"}}`} {
		_, _, _, e := ParseCreate([]byte(body))
		if e == nil || e.Status != http.StatusBadRequest || aaptest.Validate("ErrorResponse", ErrorBody(e, NewUUID())) != nil {
			t.Errorf("%s: %v", body, e)
		}
	}
	big := `{"tool":"t","timeout":"30m","arguments":{"x":"` + strings.Repeat("a", MaxBodyBytes) + `"}}`
	if _, _, _, e := ParseCreate([]byte(big)); e == nil || e.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized: %v", e)
	}
}

// Each approval state is shown as the protocol's: approved with expires_at after decided_at,
// timed out as expired, the others without expires_at; every view valid against the schema.
func TestViewMatchesTheSchema(t *testing.T) {
	now := time.Date(2026, 9, 16, 12, 0, 0, 123, time.UTC)
	r := Request{ID: NewUUID(), Tool: "issue_refund", Arguments: []byte(`{"a":1}`), Timeout: "30m", CreatedAt: now, DeadlineAt: now.Add(30 * time.Minute)}
	decided := now.Add(2 * time.Minute)
	for st, want := range map[gate.Status]Status{gate.Pending: Pending, gate.Approved: Approved, gate.Denied: Denied, gate.TimedOut: Expired, gate.Cancelled: Cancelled} {
		a := gate.Approval{Status: st, Reason: "because", CreatedAt: now}
		if st != gate.Pending {
			a.DecidedAt = &decided
		}
		v := View(r, a)
		if v.Status != want {
			t.Errorf("%s → %s, want %s", st, v.Status, want)
		}
		b, _ := marshal(v)
		if err := aaptest.Validate("ApprovalRequest", b); err != nil {
			t.Errorf("%s: %v", st, err)
		}
		if st == gate.Approved && (v.Decision.ExpiresAt == nil || *v.Decision.ExpiresAt != "2026-09-16T12:07:00Z") {
			t.Errorf("approved: expires_at %v", v.Decision.ExpiresAt)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for _, u := range []string{"https://harness.example.com/aap/events", "https://8.8.8.8/x?y=1"} {
		if err := checkURL(u, false); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, u := range []string{"http://harness.example.com/", "https://user:pw@example.com/", "https://example.com/#f",
		"https://127.0.0.1/", "https://10.0.0.1/", "https://169.254.169.254/", "https://[::1]/", "https://localhost/", "ftp://x/", "x"} {
		if err := checkURL(u, false); err == nil {
			t.Errorf("%s is allowed", u)
		}
	}
	if err := checkURL("http://127.0.0.1:8080/", true); err != nil {
		t.Errorf("insecure: %v", err)
	}
}

func TestSealer(t *testing.T) {
	s := NewSealer("owner-token")
	sealed := s.Seal("cs_agent_secret")
	if strings.Contains(sealed, "secret") {
		t.Fatal("not sealed")
	}
	if got, err := s.Open(sealed); err != nil || got != "cs_agent_secret" {
		t.Errorf("open: %q %v", got, err)
	}
	if _, err := NewSealer("another").Open(sealed); err == nil {
		t.Error("another key opens it")
	}
}

func marshal(v any) ([]byte, error) { return json.Marshal(v) }
