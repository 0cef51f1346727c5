// Package aap is Countersign's side of the Agent Approval Protocol v1 (AAP, specification of
// 2026-09-16, agentapprovalprotocol/agentapprovalprotocol: docs/specification/ and openapi.yaml):
// Door 3 of SPEC §18. An AAP instance is a connection of kind api; each approval request it
// creates becomes an outside call in its agent session, decided by the gate (rules, modes, a
// person through the inbox, decision links, several approvers), and read back by the instance
// (GET with a long poll) or delivered to its receiver.
//
// This file holds the wire types (the OpenAPI schema's components, snake_case), their parsing
// (unknown fields refused, AAP v1 §5 "Conventions") and the protocol's errors (ErrorResponse).
// service.go holds the requests' lifecycle.
package aap

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"countersign/internal/tool"
)

// MaxBodyBytes bounds a request body (1 MiB): larger is 413 (SPEC §9), never a decision.
const MaxBodyBytes = 1 << 20

// MaxWait is the longest a GET may hold a response (AAP v1 §5 "Retrieve a Request": larger
// waits are capped at 30 seconds).
const MaxWait = 30 * time.Second

// MaxTimeout is the longest approval window Countersign grants (AAP v1 §4 "Deadlines and
// Cancellation": the provider may shorten the requested window, never lengthen it):
// deadline_at is created_at + min(timeout, MaxTimeout).
const MaxTimeout = 24 * time.Hour

// ApprovalValidity is how long an approval permits the call to start: decision.expires_at is
// decided_at + ApprovalValidity (AAP v1 §4 "Decision": the validity is up to the provider).
const ApprovalValidity = 5 * time.Minute

// Status is an approval request's state (AAP v1 §4 "States"): pending, then one of four
// terminal states.
type Status string

// The states of AAP v1 §4.
const (
	Pending   Status = "pending"
	Approved  Status = "approved"
	Denied    Status = "denied"
	Expired   Status = "expired"
	Cancelled Status = "cancelled"
)

// CreateApprovalRequest is the body of POST /v1/requests (OpenAPI CreateApprovalRequest): tool,
// arguments and timeout are required; agent_reasoning and context are optional. Arguments and
// Context are JSON objects kept as sent.
type CreateApprovalRequest struct {
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	Timeout        string          `json:"timeout"`
	AgentReasoning *string         `json:"agent_reasoning,omitempty"`
	Context        json.RawMessage `json:"context,omitempty"`
}

// Decision is a terminal request's outcome (OpenAPI Decision): ExpiresAt is set exactly when
// Status is approved.
type Decision struct {
	Status    Status  `json:"status"`
	Note      string  `json:"note,omitempty"`
	DecidedAt string  `json:"decided_at"`
	ExpiresAt *string `json:"expires_at,omitempty"`
}

// ApprovalRequest is the request resource (OpenAPI ApprovalRequest): the submitted call, its id
// (a UUID), state, created_at and deadline_at (RFC 3339 UTC), and once terminal its decision.
type ApprovalRequest struct {
	ID             string          `json:"id"`
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	Timeout        string          `json:"timeout"`
	AgentReasoning *string         `json:"agent_reasoning,omitempty"`
	Context        json.RawMessage `json:"context,omitempty"`
	Status         Status          `json:"status"`
	CreatedAt      string          `json:"created_at"`
	DeadlineAt     string          `json:"deadline_at"`
	Decision       *Decision       `json:"decision,omitempty"`
}

// Timestamp is t as AAP writes times: RFC 3339 in UTC, ending in Z, whole seconds
// (OpenAPI Timestamp).
func Timestamp(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

var durationRE = regexp.MustCompile(`^[1-9][0-9]*(s|m|h)$`)

// ParseDuration reads an AAP duration (OpenAPI Duration: a positive whole number with the unit
// s, m or h: "30s", "30m", "24h"). A value too large to hold is capped at 100000h. Errors:
// a value of another form.
func ParseDuration(s string) (time.Duration, error) {
	if !durationRE.MatchString(s) {
		return 0, fmt.Errorf("%q is not a duration like 30s, 30m or 24h", s)
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour}[s[len(s)-1]]
	const most = 100000 * time.Hour
	if err != nil || n > int64(most/unit) {
		return most, nil
	}
	return time.Duration(n) * unit, nil
}

// Error is an AAP error (OpenAPI Error inside ErrorResponse, AAP v1 §5 "Errors"): an HTTP status,
// a type from the table of §5, a machine-readable code (idempotency_conflict, already_terminal,
// …), a message safe to show (never a credential) and the invalid field, when there is one.
type Error struct {
	Status  int
	Type    string
	Code    string
	Message string
	Param   string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf is an *Error of status with code, whose type is the status's (AAP v1 §5's table).
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Type: errorType(status), Code: code, Message: fmt.Sprintf(format, args...)}
}

func errorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed:
		return "invalid_request"
	case http.StatusUnauthorized:
		return "authentication"
	case http.StatusForbidden:
		return "authorization"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "conflict"
	case http.StatusTooManyRequests:
		return "rate_limit"
	case http.StatusServiceUnavailable:
		return "dependency"
	}
	return "internal"
}

// invalid is a 400 invalid_request naming param.
func invalid(param, format string, args ...any) *Error {
	e := Errorf(http.StatusBadRequest, "invalid_request", format, args...)
	e.Param = param
	return e
}

// ErrorBody is e as an ErrorResponse with requestID (the exchange's X-Request-ID).
func ErrorBody(e *Error, requestID string) []byte {
	type errObj struct {
		Type      string `json:"type"`
		Code      string `json:"code"`
		Message   string `json:"message"`
		Param     string `json:"param,omitempty"`
		RequestID string `json:"request_id"`
	}
	msg := e.Message
	if msg == "" {
		msg = e.Code
	}
	b, _ := json.Marshal(struct {
		Error errObj `json:"error"`
	}{errObj{e.Type, e.Code, msg, e.Param, requestID}})
	return b
}

// NewUUID returns a random (version 4) UUID.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// IsUUID reports whether s is a UUID in its textual form.
func IsUUID(s string) bool { return uuidRE.MatchString(s) }

// DecodeStrict decodes one JSON object from r into v, refusing unknown fields, trailing data and
// a body over MaxBodyBytes (413 request_too_large); other failures are 400 invalid_request.
func DecodeStrict(body []byte, v any) *Error {
	if len(body) > MaxBodyBytes {
		return Errorf(http.StatusRequestEntityTooLarge, "request_too_large", "The body is over the limit of %d bytes.", MaxBodyBytes)
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return invalid("", "The body must be a JSON object.")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		switch {
		case errors.As(err, &ute):
			return invalid(ute.Field, "The field %s has the wrong type.", ute.Field)
		case bytes.Contains([]byte(err.Error()), []byte("unknown field")):
			return invalid("", "The body has a field this protocol does not define: %s.", stripPrefix(err.Error()))
		}
		return invalid("", "The body is not valid JSON.")
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("", "The body must hold one JSON object.")
	}
	return nil
}

// exactFields refuses a body with a member whose name is not exactly one of names
// (encoding/json matches names without regard to case: "Tool" would be read as tool).
func exactFields(body []byte, names ...string) *Error {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return invalid("", "The body must be a JSON object.")
	}
	for k := range m {
		if !slices.Contains(names, k) {
			return invalid("", "The body has a field this protocol does not define: %q.", k)
		}
	}
	return nil
}

func stripPrefix(s string) string {
	const p = "json: unknown field "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// ParseCreate reads a POST /v1/requests body (AAP v1 §4 "Request"; OpenAPI
// CreateApprovalRequest): unknown fields, a key repeated in any object (as written, escaped or in
// another case: tool.AmbiguousKey), a missing tool, arguments that are not an object, a
// timeout that is not a Duration, or a context that is not an object are 400 invalid_request
// naming the field. It returns the request, its timeout, and the digest of its parsed values
// (Digest), which decides whether a replay is the same submission.
func ParseCreate(body []byte) (CreateApprovalRequest, time.Duration, string, *Error) {
	var c CreateApprovalRequest
	if e := DecodeStrict(body, &c); e != nil {
		return c, 0, "", e
	}
	// A key repeated, or in two cases, in any object at any depth reads differently to different
	// decoders: the rules judge one reading, the tool may run the other (SPEC §14).
	if v, err := tool.AmbiguousKey(body); err != nil || v != nil {
		msg := "The body is not valid JSON."
		if v != nil {
			msg = fmt.Sprintf("The body at %s: %s.", v.Pointer, strings.TrimSuffix(v.Message, "."))
		}
		return c, 0, "", invalid("", "%s", msg)
	}
	if e := exactFields(body, "tool", "arguments", "timeout", "agent_reasoning", "context"); e != nil {
		return c, 0, "", e
	}
	if c.Tool == "" {
		return c, 0, "", invalid("tool", "tool is required: the name of the intercepted tool.")
	}
	if !isObject(c.Arguments) {
		return c, 0, "", invalid("arguments", "arguments is required and must be a JSON object.")
	}
	if c.Timeout == "" {
		return c, 0, "", invalid("timeout", "timeout is required: a duration like 30m.")
	}
	d, err := ParseDuration(c.Timeout)
	if err != nil {
		return c, 0, "", invalid("timeout", "timeout: %v.", err)
	}
	if c.Context != nil && !isObject(c.Context) {
		return c, 0, "", invalid("context", "context must be a JSON object.")
	}
	c.Arguments = compact(c.Arguments)
	if c.Context != nil {
		c.Context = compact(c.Context)
	}
	return c, d, Digest(c), nil
}

// Digest is the hex SHA-256 of c's parsed values (objects by member, not by spelling or order;
// AAP v1 §5 "Idempotency and Retries": whitespace and key order do not change the request).
func Digest(c CreateApprovalRequest) string {
	// Parsed values (AAP v1 §5 "Idempotency and Retries"): objects compare by member, not by
	// order, and numbers by their exact value — 1 and 1.0 are one value, 9007199254740993 and
	// 9007199254740992 two (a float64 would make them one).
	var args, ctx any
	_ = decodeNumbers(c.Arguments, &args)
	if c.Context != nil {
		_ = decodeNumbers(c.Context, &ctx)
	}
	args, ctx = exactNumbers(args), exactNumbers(ctx)
	b, _ := json.Marshal([]any{c.Tool, args, c.Timeout, c.AgentReasoning, ctx, c.Context != nil})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// decodeNumbers decodes b into v with its numbers as json.Number.
func decodeNumbers(b json.RawMessage, v *any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// maxExactNumber bounds the numbers exactNumbers reads as exact values (their text's length): a
// longer one (or one with a larger exponent) is compared as written, never expanded.
const maxExactNumber = 400

// exactNumbers is v with each json.Number replaced by its exact value as a string ("n:" and
// big.Rat's form: "1", "1.0" and "1e0" are all "n:1"), and each string s by "s:" and s, so that
// no string reads as a number (1 and "n:1" are two values), for comparing parsed values.
func exactNumbers(v any) any {
	switch x := v.(type) {
	case string:
		return "s:" + x
	case json.Number:
		str := string(x)
		if len(str) <= maxExactNumber {
			if i := strings.IndexAny(str, "eE"); i < 0 || len(str)-i <= 4 {
				if r, ok := new(big.Rat).SetString(str); ok {
					return "n:" + r.RatString()
				}
			}
		}
		return "n:" + str
	case map[string]any:
		for k, e := range x {
			x[k] = exactNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = exactNumbers(e)
		}
	}
	return v
}

func isObject(b json.RawMessage) bool {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return false
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(t, &m) == nil
}

func compact(b json.RawMessage) json.RawMessage {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}
