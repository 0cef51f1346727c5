package notify

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"countersign/internal/share"
)

// Key is the webhook signing secret (Standard Webhooks v1: "whsec_" and the base64 of 32 random
// bytes), kept in a file beside the database. It signs the events and nothing else: every
// receiver holds it, so nothing secret is derived from it (decision links' tokens are random,
// LinkTokens).
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

// HashToken is what the store keeps of a decision link's token: its hex SHA-256 (share.Hash, as
// for share links).
func HashToken(token string) string { return share.Hash(token) }

// LinkTokens makes decision links' tokens (SPEC §15: at least 128 random bits, stored hashed) and
// keeps each for the worker, which puts it in its approval.requested payload on every attempt.
//
// A token is random: nothing derives it, neither the webhook secret (which every receiver holds)
// nor anything in the database. The database keeps its SHA-256 (decision_links.token_hash) and,
// until the row that carries it is delivered or given up, the token sealed (AES-256-GCM, bound to
// the link's id) under a key derived from the server's share key (share.LoadKey: a file beside
// the database that only the replicas hold, never a receiver). So the secret plus the database
// gives no token, and once its event is delivered the database holds nothing but the hash.
//
// Before issue 33 a token was HMAC(webhook secret, link id), which any receiver could compute
// from a copy of the database; the migration that added the sealed column deleted the unused
// links made that way (their pending approvals are decided on the session page or the inbox).
type LinkTokens struct {
	aead cipher.AEAD
}

// NewLinkTokens returns the decision-link tokens sealed under serverKey (the share key, at least
// 32 bytes). Errors: a shorter key.
func NewLinkTokens(serverKey []byte) (LinkTokens, error) {
	if len(serverKey) < 32 {
		return LinkTokens{}, errors.New("decision links: the server key must be at least 32 bytes")
	}
	m := hmac.New(sha256.New, serverKey)
	m.Write([]byte("countersign decision link seal v1"))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		return LinkTokens{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return LinkTokens{}, err
	}
	return LinkTokens{aead: aead}, nil
}

// NewLink is a new decision link's secret: Token goes in the payload, Hash (HashToken(Token))
// and Sealed in the database.
type NewLink struct {
	// Token is 160 random bits, base32, lower case (32 characters).
	Token string
	Hash  string
	// Sealed is Token sealed for link id (nonce and AES-GCM ciphertext, base64url): only
	// LinkTokens.Open with the same server key and link id gives it back.
	Sealed string
}

// New makes the secret of decision link linkID. Errors: from the system's random source, or a
// zero LinkTokens.
func (t LinkTokens) New(linkID string) (NewLink, error) {
	if t.aead == nil {
		return NewLink{}, errors.New("decision links: no server key (NewLinkTokens)")
	}
	raw := make([]byte, 20)
	if _, err := rand.Read(raw); err != nil {
		return NewLink{}, err
	}
	token := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(raw))
	nonce := make([]byte, t.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return NewLink{}, err
	}
	sealed := t.aead.Seal(nonce, nonce, []byte(token), []byte(linkID))
	return NewLink{Token: token, Hash: HashToken(token), Sealed: base64.RawURLEncoding.EncodeToString(sealed)}, nil
}

// Open returns the token sealed for link linkID. Errors: a value that was not sealed by New
// under this server key for this link id (another key, another link's row, tampered or empty).
func (t LinkTokens) Open(linkID, sealed string) (string, error) {
	bad := errors.New("decision link " + linkID + ": its token cannot be opened with this server's key")
	b, err := base64.RawURLEncoding.DecodeString(sealed)
	if t.aead == nil || err != nil || len(b) < t.aead.NonceSize() {
		return "", bad
	}
	n := t.aead.NonceSize()
	token, err := t.aead.Open(nil, b[:n], b[n:], []byte(linkID))
	if err != nil {
		return "", bad
	}
	return string(token), nil
}

// TokenOf is the token of delivery d's decision link: Open(d.LinkID, d.SealedToken).
func (t LinkTokens) TokenOf(d Delivery) (string, error) { return t.Open(d.LinkID, d.SealedToken) }
