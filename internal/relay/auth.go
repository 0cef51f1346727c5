package relay

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"sync"
	"time"
)

// Authentication of the relay (issue 33, SPEC §16 "Trust between replicas"): only the replicas
// speak on Channel. Every notification is
//
//	v1.<MAC>.<JSON message>
//
// where MAC is HMAC-SHA256 under the relay key of the JSON message's exact bytes, base64url
// without padding (43 characters). The relay key is HMAC-SHA256(shared key, "countersign relay
// v1"): the shared key is the share-link key file's, which every replica must have the same of
// (CheckKey refuses a server whose file differs), so no key is added and none is stored in the
// database. A receiver checks the MAC before it reads anything else; then the message's signing
// time (W, Unix ms), which must be within maxAge of its own clock, and that it has not seen the
// same MAC within that time (a copy a role that may LISTEN heard and NOTIFYs again). What fails
// is dropped and counted (Relay.OnReject) with one of the Reject* reasons.

// Reasons a notification is dropped (Relay.OnReject's reason; the /metrics label).
const (
	// RejectUnsigned: not of the v1.<MAC>.<JSON> form (no MAC at all).
	RejectUnsigned = "unsigned"
	// RejectBadMAC: a MAC that is not the relay key's over the message.
	RejectBadMAC = "bad_mac"
	// RejectStale: signed more than maxAge before (or after) this replica's now.
	RejectStale = "stale"
	// RejectReplay: a MAC already heard within maxAge (an authentic message sent again).
	RejectReplay = "replay"
	// RejectMalformed: an authentic MAC over something that is not a message (never from a
	// replica of this version).
	RejectMalformed = "malformed"
	// RejectNotStored: a control message whose stored row is missing or says otherwise (a Stop
	// nobody requested).
	RejectNotStored = "not_stored"
)

// maxAge bounds how far a message's signing time may be from the receiver's clock, and how long
// MACs are remembered against replays. Replicas' clocks must agree within it.
const maxAge = 2 * time.Minute

// maxPayload is the longest notification the relay sends: PostgreSQL refuses payloads of 8,000
// bytes or more.
const maxPayload = 7999

const sigPrefix = "v1."

var b64 = base64.RawURLEncoding

// deriveKey is the relay key of shared key key: HMAC-SHA256(key, "countersign relay v1").
func deriveKey(key []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("countersign relay v1"))
	return m.Sum(nil)
}

// sign returns body's notification: "v1." + MAC + "." + body.
func sign(key []byte, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return sigPrefix + b64.EncodeToString(m.Sum(nil)) + "." + string(body)
}

// verify returns the message of payload and its MAC if payload is signed under key, else the
// reason it is not (RejectUnsigned, RejectBadMAC).
func verify(key []byte, payload string) (body []byte, mac string, reason string) {
	rest, ok := strings.CutPrefix(payload, sigPrefix)
	if !ok {
		return nil, "", RejectUnsigned
	}
	mac, msg, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, "", RejectUnsigned
	}
	got, err := b64.DecodeString(mac)
	if err != nil || len(got) != sha256.Size {
		return nil, "", RejectBadMAC
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	if !hmac.Equal(got, m.Sum(nil)) {
		return nil, "", RejectBadMAC
	}
	return []byte(msg), mac, ""
}

// seenMACs remembers the MACs heard within maxAge, so an authentic notification sent again (by a
// role that heard it on LISTEN) is dropped. Only the listener's goroutine uses it; the lock is for
// tests' sake only.
type seenMACs struct {
	mu     sync.Mutex
	at     map[string]time.Time
	pruned time.Time
}

// add records mac heard at now and reports whether it was new.
func (s *seenMACs) add(mac string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	if now.Sub(s.pruned) > maxAge/4 {
		for k, t := range s.at {
			if now.Sub(t) > 2*maxAge {
				delete(s.at, k)
			}
		}
		s.pruned = now
	}
	if _, ok := s.at[mac]; ok {
		return false
	}
	s.at[mac] = now
	return true
}
