// Package notify reaches people outside the browser (SPEC §15): the webhook receivers named by
// -notify-webhook, the events POSTed to them (signed by the Standard Webhooks v1 scheme), the
// delivery worker that retries them from the store's outbox, and the single-use decision links
// the approval.requested events carry.
//
// What happens where: the store writes one outbox row per receiver and event in the same
// transaction as the approval (or its resolution), and a decision link per receiver with the
// pending approval — only for the receivers that may decide it: a call whose rule names
// reviewers is not announced at all to a receiver whose recipient is not among them (by
// gate.PersonKey), so no arguments or diff reach it; the Worker, on its own goroutine, builds
// each payload when it sends it, so the gate never waits for a receiver and nothing but the
// outbox row waits across a restart. Decision links' tokens are random (LinkTokens).
package notify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"countersign/internal/gate"
	"countersign/internal/share"
)

// Event is the type of a webhook event (the payload's "type").
type Event string

// The events of SPEC §15.
const (
	Requested Event = "approval.requested" // a call waits for a person; carries the decision link
	Resolved  Event = "approval.resolved"  // approved, denied or cancelled, by anyone
	TimedOut  Event = "approval.timed_out" // nobody decided within the approval timeout
)

// EventOf is the event that announces an approval's resolution to status s: TimedOut for
// gate.TimedOut, Resolved otherwise.
func EventOf(s gate.Status) Event {
	if s == gate.TimedOut {
		return TimedOut
	}
	return Resolved
}

// Format is the body shape a receiver takes.
type Format string

// The formats: the Standard Webhooks JSON envelope, or Slack's incoming-webhook message.
const (
	FormatJSON  Format = "json"
	FormatSlack Format = "slack" // {text, blocks}: selected by ?format=slack on the URL
)

// Receiver is one -notify-webhook entry.
type Receiver struct {
	// ID names the receiver in the outbox and in the decisions made through its links
	// ("webhook:<ID>"): "wh-" and 12 hex digits of the SHA-256 of the entry as given, so the same
	// entry keeps its id across restarts.
	ID string
	// Name is the recipient: who a decision through this receiver's links is recorded as. The
	// entry's "name=" prefix, else the URL's host, else "webhook".
	Name string
	// URL is where events are POSTed: the entry's URL without its format parameter.
	URL    string
	Format Format
}

// ParseReceivers parses -notify-webhook entries ([name=]URL). Errors name the entry and what is
// wrong with it (SPEC §9): not http(s), no host, a name a reviewer could not take (reserved:
// "owner", "policy", …; or characters outside share.NormalizeName's), an unknown format, or
// the same receiver twice.
func ParseReceivers(entries []string) ([]Receiver, error) {
	var out []Receiver
	seen := map[string]bool{}
	for _, e := range entries {
		r, err := ParseReceiver(e)
		if err != nil {
			return nil, err
		}
		if seen[r.ID] {
			return nil, fmt.Errorf("-notify-webhook %q is given twice", shownEntry(e))
		}
		seen[r.ID] = true
		out = append(out, r)
	}
	return out, nil
}

// shownEntry is a -notify-webhook entry as an error message may show it: the recipient's name
// and the URL's scheme and host, its path and query cut ("/…"), since a webhook URL's path is
// often its secret (Slack's /services/T…/B…/<secret>); the host stays, to say which entry.
func shownEntry(entry string) string {
	raw := strings.TrimSpace(entry)
	name := ""
	if i := strings.Index(raw, "="); i >= 0 && !strings.Contains(raw[:i], "://") && !strings.ContainsAny(raw[:i], "/?") {
		name, raw = raw[:i]+"=", raw[i+1:]
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		// Not a URL with a host: what comes before a path or a query, which may be secret.
		if i := strings.IndexAny(raw, "/?@"); i >= 0 && !strings.HasPrefix(raw[i:], "//") {
			return name + raw[:i] + "/…"
		} else if i >= 0 {
			return name + raw[:i] + "//…"
		}
		return name + raw
	}
	shown := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		shown += "/…"
	}
	return name + shown
}

// ParseReceiver parses one -notify-webhook entry: "URL" or "name=URL", the URL http or https,
// optionally with ?format=slack (or format=json), which selects the body and is not sent.
func ParseReceiver(entry string) (Receiver, error) {
	raw := strings.TrimSpace(entry)
	bad := func(format string, args ...any) (Receiver, error) {
		return Receiver{}, fmt.Errorf("-notify-webhook %q: %s", shownEntry(entry), fmt.Sprintf(format, args...))
	}
	name, rawURL := "", raw
	if i := strings.Index(raw, "="); i >= 0 && !strings.Contains(raw[:i], "://") && !strings.ContainsAny(raw[:i], "/?") {
		name, rawURL = raw[:i], raw[i+1:]
		n, err := share.NormalizeName(name)
		if err != nil {
			return bad("the recipient's name %q: %s", name, strings.TrimSuffix(err.Error(), "."))
		}
		name = n
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("want http(s)://host/path, optionally as name=URL")
	}
	if u.User != nil {
		return bad("credentials in the URL are not supported; put a secret in the path instead")
	}
	r := Receiver{Name: name, Format: FormatJSON}
	q := u.Query()
	if f, ok := q["format"]; ok {
		switch strings.Join(f, ",") {
		case "slack":
			r.Format = FormatSlack
		case "json":
		default:
			return bad("unknown format %q: want slack or json", strings.Join(f, ","))
		}
		// The parameter selects the body; the receiver never sees it (Slack's URLs take no query).
		q.Del("format")
		u.RawQuery = q.Encode()
	}
	r.URL = u.String()
	if r.Name == "" {
		r.Name = "webhook"
		if n, err := share.NormalizeName(u.Hostname()); err == nil {
			r.Name = n
		}
	}
	sum := sha256.Sum256([]byte(raw))
	r.ID = "wh-" + hex.EncodeToString(sum[:6])
	return r, nil
}

// Link is a decision link (SPEC §15): one per receiver and pending approval, bound to the
// approval and to the SHA-256 of its canonical arguments, single use. Its token is random
// (LinkTokens.New) and only its hash is stored with it.
type Link struct {
	ID         string
	ApprovalID string
	ReceiverID string
	// Recipient is the receiver's name when the link was made: who deciding through it is.
	Recipient string
	// ArgumentsSHA256 is ArgumentsDigest of the approval's arguments when the link was made.
	ArgumentsSHA256 string
	CreatedAt       time.Time
	// UsedAt is when the link decided; nil while unused.
	UsedAt *time.Time
}

// Decider is who decides through the link: the recipient, via "webhook:<receiver id>", with no
// right to edit the arguments or remember the decision.
func (l Link) Decider() gate.Decider {
	return gate.Decider{Name: l.Recipient, Via: &gate.LinkRef{LinkID: "webhook:" + l.ReceiverID, Label: l.Recipient}}
}

// ArgumentsDigest is the hex SHA-256 of args in canonical form: parsed and written again with
// object keys sorted and no insignificant space (numbers keep their text). Invalid JSON is
// hashed as it is.
func ArgumentsDigest(args json.RawMessage) string {
	b := []byte(args)
	var v any
	dec := json.NewDecoder(strings.NewReader(string(args)))
	dec.UseNumber()
	if err := dec.Decode(&v); err == nil {
		if c, err := json.Marshal(v); err == nil {
			b = c
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Attempt is one try at delivering an outbox row.
type Attempt struct {
	N  int       // 1 for the first attempt
	At time.Time // when it started
	// Status is the receiver's HTTP status; 0 when there was no answer (Error says why).
	Status   int
	Error    string
	Duration time.Duration
}

// OK reports whether the receiver took the event (a 2xx answer).
func (a Attempt) OK() bool { return a.Status >= 200 && a.Status < 300 }

// Delivery is one outbox row: an event for one receiver about one approval, with what the
// payload is built from and, for the audit page, its attempts so far.
type Delivery struct {
	// ID is the row's id, "<approval id>/<receiver id>/<event>", also the webhook-id header: the
	// same on every retry, so a receiver can drop duplicates (Standard Webhooks v1).
	ID         string
	Event      Event
	ReceiverID string
	// LinkID is the decision link an approval.requested row carries; "" for other events.
	LinkID string
	// SealedToken is that link's token sealed (LinkTokens.New, Open), while the row is pending;
	// "" once it is delivered or given up, for other events, and for rows written before
	// tokens were random (sent without a decision link). Never marshalled.
	SealedToken string `json:"-"`
	CreatedAt   time.Time
	// Tries is how many attempts were made so far.
	Tries int
	// NextAt is when the next attempt is due; nil once delivered or given up.
	NextAt      *time.Time
	DeliveredAt *time.Time
	// Failed: every attempt failed and the worker gave up.
	Failed       bool
	Approval     gate.Approval
	SessionTitle string
	// Attempts are the attempts so far, oldest first (filled by the audit's listing only).
	Attempts []Attempt
}
