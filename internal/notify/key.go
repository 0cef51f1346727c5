package notify

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"countersign/internal/share"
)

// Key is the webhook signing secret (Standard Webhooks v1: "whsec_" and the base64 of 32 random
// bytes), kept in a file beside the database. It also derives the decision links' tokens, so
// the database never holds a token, only its hash.
type Key struct {
	secret string
	raw    []byte
}

// NewKey returns the key of a "whsec_…" secret. Errors: not "whsec_" and base64 of at least 24
// bytes.
func NewKey(secret string) (Key, error) {
	secret = strings.TrimSpace(secret)
	b64, ok := strings.CutPrefix(secret, "whsec_")
	raw, err := base64.StdEncoding.DecodeString(b64)
	if !ok || err != nil || len(raw) < 24 {
		return Key{}, errors.New(`a webhook secret is "whsec_" and the base64 of at least 24 random bytes`)
	}
	return Key{secret: secret, raw: raw}, nil
}

// LoadKey reads the key from path, creating the file (mode 0600, 32 random bytes) when it does
// not exist; created reports whether it did, so the caller can print the new secret once.
// Errors: unreadable, or a file that does not hold a secret (NewKey), naming the file.
func LoadKey(path string) (k Key, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		k, err := NewKey(string(b))
		if err != nil {
			return Key{}, false, fmt.Errorf("webhook key %s: %v", path, err)
		}
		return k, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return Key{}, false, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return Key{}, false, err
	}
	k = Key{secret: "whsec_" + base64.StdEncoding.EncodeToString(raw), raw: raw}
	if err := share.WriteNewKeyFile(path, []byte(k.secret+"\n")); err != nil {
		return Key{}, false, err
	}
	return k, true, nil
}

// Secret is the signing secret as receivers configure it: "whsec_…".
func (k Key) Secret() string { return k.secret }

// Fingerprint identifies the key without revealing it (an HMAC of a fixed text under it): the
// replicas of one database compare it (SPEC §16).
func (k Key) Fingerprint() string {
	return share.DeriveToken(k.raw, "countersign key fingerprint v1", "notify")
}

// LinkToken is the token of decision link id: 160 bits of HMAC-SHA256(key, id), base32, lower
// case (32 characters). The link id itself is 128 random bits, so the token cannot be guessed
// without the key, and the worker can put it in a payload again on every retry without the
// database holding it.
func (k Key) LinkToken(linkID string) string {
	return share.DeriveToken(k.raw, "countersign decision link v1", linkID)
}

// HashToken is what the store keeps of a decision link's token: its hex SHA-256 (share.Hash, as
// for share links).
func HashToken(token string) string { return share.Hash(token) }

// LinkHash is HashToken(k.LinkToken(linkID)): the stored hash of a new link's token.
func (k Key) LinkHash(linkID string) string { return HashToken(k.LinkToken(linkID)) }
