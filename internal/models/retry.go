package models

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"countersign/internal/agent"
)

// Retries (SPEC §17 "Streaming and retries"). The SDKs retry a request that failed before
// streaming began in their own loop (option.WithMaxRetries): they replay the body, wait, and end
// the wait when the request's context is cancelled (Stop). What they do not do is say that they
// are waiting, nor for how long: their backoff has random jitter. So every vendor request carries
// a middleware (option.WithMiddleware, retryNotice.middleware) that sees each attempt's response
// first, decides with the rules below whether it is retried and after what wait, tells the SDK
// through the response headers the SDK itself reads (x-should-retry, Retry-After-Ms), and
// reports the retry as agent.Delta{Retry} before the SDK starts waiting. The wait shown is thus
// the wait the SDK takes (to the millisecond), except after a connection error (below).
//
// The rules, the SDKs' own (openai-go and anthropic-sdk-go internal/requestconfig):
//   - only while retries remain (MaxRetries) and the request's context is live;
//   - a connection error (no response) is retried; its wait is the SDK's backoff, which has
//     jitter, so the wait reported is its upper bound (0.5 s·2ⁿ, at most 8 s): the SDK waits
//     between three quarters of it and all of it;
//   - a response is retried when its x-should-retry header says "true", never when it says
//     "false", otherwise when its status is 408, 409, 429 or 5xx (529 "overloaded" included);
//   - the wait is the response's Retry-After-Ms (milliseconds) or Retry-After (seconds or an
//     HTTP date) header; one longer than MaxRetryWait is not waited for: the request fails at
//     once with the provider's message; without either header, 0.5 s·2ⁿ (n = retries so far),
//     at most 8 s, less a random share of up to a quarter.

// MaxRetryWait is the longest wait a provider may ask for (Retry-After) that a vendor model
// waits before retrying; a longer one ends the request with the provider's error at once. It is
// the OpenAI SDK's own limit (2 minutes).
const MaxRetryWait = 2 * time.Minute

// maxBackoff caps the wait of a retry the provider named no wait for (the Anthropic SDK's cap).
const maxBackoff = 8 * time.Second

// retryNotice reports, and settles, the SDK's retries of one request. It is used by one Stream
// call, from the goroutine that calls the SDK (the SDKs run middlewares synchronously), so it
// needs no lock.
type retryNotice struct {
	maxRetries int
	attempts   int
	watch      *watchdog // kicked on every response; paused while a retry waits
	onDelta    func(agent.Delta)
}

// middleware is an option.Middleware for both SDKs (their Middleware types are the same
// function type).
func (n *retryNotice) middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	res, err := next(req)
	attempt := n.attempts
	n.attempts++
	if n.watch != nil {
		n.watch.kick()
	}
	if attempt >= n.maxRetries || req.Context().Err() != nil {
		return res, err
	}
	var r agent.Retry
	switch {
	case err != nil:
		if res != nil {
			return res, err
		}
		r = agent.Retry{Wait: nominalBackoff(attempt), Reason: err.Error()}
	case res != nil:
		if res.Header == nil {
			res.Header = http.Header{}
		}
		wait, ok := retryWait(res, attempt)
		if !ok {
			res.Header.Set("X-Should-Retry", "false")
			return res, err
		}
		res.Header.Set("X-Should-Retry", "true")
		res.Header.Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds(), 10))
		r = agent.Retry{Status: res.StatusCode, Wait: wait, Reason: responseReason(res)}
	default:
		return res, err
	}
	r.Attempt = attempt + 1
	if n.watch != nil {
		n.watch.pause(r.Wait)
	}
	n.onDelta(agent.Delta{Retry: &r})
	return res, err
}

// retryWait says whether res is retried (the rules above) and after how long, rounded to the
// millisecond (the unit of the Retry-After-Ms header the SDK is given).
func retryWait(res *http.Response, attempt int) (time.Duration, bool) {
	switch res.Header.Get("X-Should-Retry") {
	case "false":
		return 0, false
	case "true":
	default:
		if s := res.StatusCode; s != http.StatusRequestTimeout && s != http.StatusConflict &&
			s != http.StatusTooManyRequests && s < http.StatusInternalServerError {
			return 0, false
		}
	}
	if wait, ok := askedWait(res.Header); ok {
		if wait > MaxRetryWait {
			return 0, false
		}
		return wait.Round(time.Millisecond), true
	}
	wait := nominalBackoff(attempt)
	wait -= time.Duration(rand.Int64N(int64(wait/4) + 1))
	return wait.Round(time.Millisecond), true
}

// askedWait is the wait the provider asked for: Retry-After-Ms (milliseconds), else Retry-After
// (seconds, or an HTTP date); a negative or past one is no wait.
func askedWait(h http.Header) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(ms) {
			return clampWait(ms * float64(time.Millisecond)), true
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(s) {
			return clampWait(s * float64(time.Second)), true
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(time.Until(t), 0), true
		}
	}
	return 0, false
}

// clampWait converts a float wait in nanoseconds to a Duration: negative is 0, and anything past
// MaxRetryWait is MaxRetryWait+1 (too long, whatever its size).
func clampWait(ns float64) time.Duration {
	switch {
	case ns <= 0:
		return 0
	case ns > float64(MaxRetryWait):
		return MaxRetryWait + 1
	}
	return time.Duration(ns)
}

// nominalBackoff is the backoff before retry attempt+1 without jitter: 0.5 s·2^attempt, at most
// maxBackoff.
func nominalBackoff(attempt int) time.Duration {
	if attempt >= 5 {
		return maxBackoff
	}
	return min(500*time.Millisecond<<attempt, maxBackoff)
}

// maxReasonBody is how much of an error response's body is read for its message.
const maxReasonBody = 64 << 10

// responseReason is the provider's message in an error response: error.message of its JSON body
// (OpenAI {"error": {"message"}}, Anthropic {"type": "error", "error": {"type", "message"}}), else
// its text, else the status. The body is read and put back, so the SDK still finds it.
func responseReason(res *http.Response) string {
	var body []byte
	if res.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(res.Body, maxReasonBody))
		res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(body))
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	if text := strings.TrimSpace(string(body)); text != "" {
		return short(text)
	}
	return statusLine(res.StatusCode)
}
