package relay

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"sync"
	"time"
)

// Authentication of the relay (issue 33, SPEC §16 "Trust between replicas"): only the replicas
// speak on Channel, and what they say there is theirs to read. Every notification is
//
//	v1.<base64url without padding of IV ‖ ciphertext ‖ MAC>
//
// where the ciphertext is the JSON message under AES-256-CTR with a random 16-byte IV, and MAC is
// HMAC-SHA256 of "v1." ‖ IV ‖ ciphertext (encrypt-then-MAC). Both keys are derived from the key
// every replica shares (the share-link key file's: CheckKey refuses a server whose file differs),
// HMAC-SHA256(key, "countersign relay v1 mac") and (…, "countersign relay v1 enc"), so no key is
// added and none is in the database. A role that may LISTEN hears when and how much the replicas
// say, never what: not the sessions, not the events. A receiver checks the MAC before it
// decrypts or reads anything; then the message's signing time (W, Unix ms), which must be within
// maxAge of its own clock, and that it has not heard the same MAC within that time (a copy a role
// that may LISTEN heard and NOTIFYs again). What fails is dropped and counted (Relay.OnReject)
// with one of the Reject* reasons.

// Reasons a notification is dropped (Relay.OnReject's reason; the /metrics label).
const (
	// RejectUnsigned: not of the v1.<…> form (no MAC at all).
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
// bytes or more. A message is at most maxMessage bytes of JSON before it is sealed (IV, MAC,
// base64: 4/3).
const (
	maxPayload = 7999
	maxMessage = (maxPayload-len(sigPrefix))*3/4 - aes.BlockSize - sha256.Size
)

const sigPrefix = "v1."

var b64 = base64.RawURLEncoding

// keys are the relay's two keys, derived from the shared key.
type keys struct{ mac, enc []byte }

// deriveKeys are the relay keys of shared key key.
func deriveKeys(key []byte) keys {
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	return keys{mac: derive("countersign relay v1 mac"), enc: derive("countersign relay v1 enc")}
}

func (k keys) tag(ivct []byte) []byte {
	m := hmac.New(sha256.New, k.mac)
	m.Write([]byte(sigPrefix))
	m.Write(ivct)
	return m.Sum(nil)
}

// seal returns body's notification (see above); "" when it is longer than maxMessage.
func (k keys) seal(body []byte) string {
	if len(body) > maxMessage {
		return ""
	}
	out := make([]byte, aes.BlockSize+len(body), aes.BlockSize+len(body)+sha256.Size)
	_, _ = rand.Read(out[:aes.BlockSize])
	block, _ := aes.NewCipher(k.enc) // a 32-byte key: never an error
	cipher.NewCTR(block, out[:aes.BlockSize]).XORKeyStream(out[aes.BlockSize:], body)
	out = append(out, k.tag(out)...)
	return sigPrefix + b64.EncodeToString(out)
}

// open returns the message of payload and its MAC if payload was sealed under k, else the
// reason it was not (RejectUnsigned, RejectBadMAC).
func (k keys) open(payload string) (body []byte, mac string, reason string) {
	rest, ok := strings.CutPrefix(payload, sigPrefix)
	if !ok {
		return nil, "", RejectUnsigned
	}
	raw, err := b64.DecodeString(rest)
	if err != nil || len(raw) < aes.BlockSize+sha256.Size {
		return nil, "", RejectBadMAC
	}
	ivct, got := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	if !hmac.Equal(got, k.tag(ivct)) {
		return nil, "", RejectBadMAC
	}
	block, _ := aes.NewCipher(k.enc)
	body = make([]byte, len(ivct)-aes.BlockSize)
	cipher.NewCTR(block, ivct[:aes.BlockSize]).XORKeyStream(body, ivct[aes.BlockSize:])
	return body, string(got), ""
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
