// Package share is Countersign's share links (SPEC §7): a link /r/<token> lets a reviewer watch
// one session live (viewer) and, with the approver role, decide its approvals. The store keeps
// only a hash of each token; the token itself is derived from a server key kept outside the
// store, so the owner can see a link's URL again but a leaked database reveals none.
package share

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// Role is what a share link allows.
type Role string

// The roles.
const (
	Viewer   Role = "viewer"   // read-only, live
	Approver Role = "approver" // may also decide approvals; never send messages or stop runs
)

// Link is a share link as stored: no token, only its hash. CanEdit and CanRemember are an
// approver link's rights besides deciding once (SPEC §7, §14): edit a call's arguments before
// approving, approve a tool for the session. Both are false unless the link was created with them.
type Link struct {
	ID          string     `json:"id"`
	SessionID   string     `json:"sessionId"`
	Role        Role       `json:"role"`
	Label       string     `json:"label"`
	CanEdit     bool       `json:"canEdit"`
	CanRemember bool       `json:"canRemember"`
	TokenHash   string     `json:"-"`
	CreatedAt   time.Time  `json:"createdAt"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`
	RevokedAt   *time.Time `json:"revokedAt,omitempty"`
	LastUsedAt  *time.Time `json:"lastUsedAt,omitempty"`
	// For is the person an approver link was created for (SPEC §15): their name, fixed by the
	// owner, shown and never asked; "" for a link whose holder gives a name.
	For string `json:"for,omitempty"`
}

// Active reports whether the link still opens the session at now: not revoked, not expired.
func (l Link) Active(now time.Time) bool {
	return l.RevokedAt == nil && (l.ExpiresAt == nil || now.Before(*l.ExpiresAt))
}

// Store keeps share links. ShareByHash and Share answer apperr.NotFound for unknown links.
type Store interface {
	CreateShare(ctx context.Context, l Link) error
	Share(ctx context.Context, id string) (Link, error)
	ShareByHash(ctx context.Context, tokenHash string) (Link, error)
	Shares(ctx context.Context, sessionID string) ([]Link, error)
	RevokeShare(ctx context.Context, id string, at time.Time) (Link, error)
	TouchShare(ctx context.Context, id string, at time.Time) error
}

// Service creates, resolves and revokes share links.
type Service struct {
	store Store
	key   []byte
	now   func() time.Time
}

// NewService returns a service over store; key (at least 32 bytes) derives the tokens.
func NewService(store Store, key []byte) *Service {
	return &Service{store: store, key: key, now: time.Now}
}

// LoadKey reads the server's share key from path, creating it (32 random bytes, mode 0600)
// when it does not exist. Keep it beside the database, never in it.
func LoadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) < 32 {
			return nil, fmt.Errorf("share key %s is too short", path)
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return b, WriteNewKeyFile(path, b)
}

// WriteNewKeyFile writes a new secret file: its folder made owner-only (0700) when missing, the
// file created owner-only (0600) and only if it does not exist yet (O_EXCL: a second writer gets
// an error rather than replacing a key in use). The share key and the webhook key are kept so.
func WriteNewKeyFile(path string, contents []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(contents); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// DeriveToken is the token of id for a purpose ("countersign share link v1"): 160 bits of
// HMAC-SHA256(key, purpose NUL id), base32, lower case (32 characters). Share links and
// decision links (internal/notify) derive theirs so: the store keeps only Hash of it.
func DeriveToken(key []byte, purpose, id string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(purpose + "\x00" + id))
	return strings.ToLower(b32.EncodeToString(mac.Sum(nil)[:20]))
}

// Fingerprint identifies a share-link key without revealing it (an HMAC of a fixed text under
// it): the replicas of one database compare it (SPEC §16).
func Fingerprint(key []byte) string {
	return DeriveToken(key, "countersign key fingerprint v1", "share")
}

// Token is the secret of link id: DeriveToken for "countersign share link v1".
func (s *Service) Token(id string) string { return DeriveToken(s.key, "countersign share link v1", id) }

// Hash is what the store keeps of a token: hex SHA-256.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// MaxLabel is the longest label, in characters (runes, not bytes).
const MaxLabel = 200

// Create makes a link for sessionID. expiresIn "" means no expiry; otherwise a positive Go
// duration ("24h", "90m"). rights are what an approver link may do besides deciding once
// (the zero Rights: nothing more). Errors: apperr.Invalid for a bad role, label or duration, or
// rights on a viewer link. It is CreateFor with no person.
func (s *Service) Create(ctx context.Context, sessionID string, role Role, label, expiresIn string, rights gate.Rights) (l Link, token string, err error) {
	return s.CreateFor(ctx, sessionID, role, label, expiresIn, rights, "")
}

// CreateFor is Create for an approver link made for a named person (SPEC §15): forName, after
// NormalizeName, is the name every decision through the link is recorded with; the holder is
// never asked for one and cannot give another. "" makes a link whose holder gives a name.
// Errors: Create's, and apperr.Invalid for a name NormalizeName refuses ("For: …") or a viewer
// link with a name.
func (s *Service) CreateFor(ctx context.Context, sessionID string, role Role, label, expiresIn string, rights gate.Rights, forName string) (l Link, token string, err error) {
	defer apperr.Wrap(&err, "share.Create")
	if role != Viewer && role != Approver {
		return Link{}, "", apperr.Errorf(apperr.Invalid, "Role must be viewer or approver.")
	}
	if role != Approver && (rights.Edit || rights.Remember) {
		return Link{}, "", apperr.Errorf(apperr.Invalid, "Only an approver link can edit arguments or remember (approve for the session).")
	}
	if strings.TrimSpace(forName) != "" {
		if role != Approver {
			return Link{}, "", apperr.Errorf(apperr.Invalid, "Only an approver link is made for a person (For).")
		}
		if forName, err = NormalizeName(forName); err != nil {
			return Link{}, "", apperr.Errorf(apperr.Invalid, "For: %s", apperr.MessageOf(err))
		}
	} else {
		forName = ""
	}
	label = strings.TrimSpace(label)
	if utf8.RuneCountInString(label) > MaxLabel {
		return Link{}, "", apperr.Errorf(apperr.Invalid, "Label is too long (at most %d characters).", MaxLabel)
	}
	now := s.now().UTC()
	l = Link{ID: strings.ToLower(rand.Text()[:16]), SessionID: sessionID, Role: role, Label: label,
		CanEdit: rights.Edit, CanRemember: rights.Remember, For: forName, CreatedAt: now}
	if expiresIn = strings.TrimSpace(expiresIn); expiresIn != "" {
		d, err := time.ParseDuration(expiresIn)
		if err != nil || d <= 0 {
			return Link{}, "", apperr.Errorf(apperr.Invalid, "Expires in %q: use a duration such as 30m, 24h or 168h.", expiresIn)
		}
		t := now.Add(d)
		l.ExpiresAt = &t
	}
	token = s.Token(l.ID)
	l.TokenHash = Hash(token)
	if err := s.store.CreateShare(ctx, l); err != nil {
		return Link{}, "", err
	}
	return l, token, nil
}

// Resolve returns the active link for token; an unknown, revoked or expired link is
// apperr.NotFound with no detail. A use is recorded (at most once a minute per link).
func (s *Service) Resolve(ctx context.Context, token string) (Link, error) {
	notFound := apperr.Errorf(apperr.NotFound, "Not found")
	if token == "" || len(token) > 64 {
		return Link{}, notFound
	}
	l, err := s.store.ShareByHash(ctx, Hash(token))
	if err != nil {
		if apperr.CodeOf(err) == apperr.NotFound {
			return Link{}, notFound
		}
		return Link{}, err
	}
	now := s.now().UTC()
	if !l.Active(now) || !hmac.Equal([]byte(s.Token(l.ID)), []byte(token)) {
		return Link{}, notFound
	}
	if l.LastUsedAt == nil || now.Sub(*l.LastUsedAt) > time.Minute {
		if err := s.store.TouchShare(ctx, l.ID, now); err == nil {
			l.LastUsedAt = &now
		}
	}
	return l, nil
}

// Revoke revokes link id of sessionID (apperr.NotFound for a link of another session).
func (s *Service) Revoke(ctx context.Context, sessionID, id string) (Link, error) {
	l, err := s.store.Share(ctx, id)
	if err != nil {
		return Link{}, err
	}
	if sessionID != "" && l.SessionID != sessionID {
		return Link{}, apperr.Errorf(apperr.NotFound, "share link %s not found", id)
	}
	if l.RevokedAt != nil {
		return l, nil
	}
	return s.store.RevokeShare(ctx, id, s.now().UTC())
}

// Link returns link id as stored; apperr.NotFound for an unknown id.
func (s *Service) Link(ctx context.Context, id string) (Link, error) { return s.store.Share(ctx, id) }

// Links lists a session's links, newest first.
func (s *Service) Links(ctx context.Context, sessionID string) ([]Link, error) {
	return s.store.Shares(ctx, sessionID)
}

// Now is the service's clock.
func (s *Service) Now() time.Time { return s.now() }

// SignName binds a reviewer's display name to link id, for the reviewer's cookie: the cookie
// cannot be edited to decide under another name.
func (s *Service) SignName(id, name string) string {
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte("countersign reviewer name v1\x00" + id + "\x00" + name))
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// Rights are what the link lets a reviewer do besides deciding an approval once: none for a
// viewer link, the ones it was created with for an approver link.
func (l Link) Rights() gate.Rights {
	if l.Role != Approver {
		return gate.Rights{}
	}
	return gate.Rights{Edit: l.CanEdit, Remember: l.CanRemember}
}

// Decider is the reviewer called name deciding through this link: their decisions are recorded
// with the name, the link's id and label, and limited to the link's rights. A link made for a
// person (For) always decides as that person, whatever name is passed; on any other link the
// name is one the reviewer chose (gate.Decider.ChoseName).
func (l Link) Decider(name string) gate.Decider {
	if l.For != "" {
		return gate.Decider{Name: l.For, Via: &gate.LinkRef{LinkID: l.ID, Label: l.Label}, Rights: l.Rights()}
	}
	return gate.Decider{Name: name, Via: &gate.LinkRef{LinkID: l.ID, Label: l.Label}, Rights: l.Rights(), ChoseName: true}
}

// MaxName is the longest reviewer name, in characters (runes) after NormalizeName.
const MaxName = 60

// NormalizeName returns the display name a reviewer typed as it is recorded (SPEC §7): invalid
// UTF-8 replaced, invisible and bidi control characters removed (Unicode category Cf — zero-width
// spaces and joiners, LRM/RLM, LRE…RLO, LRI…PDI, the BOM, the soft hyphen — other default-ignorable
// code points, variation selectors and control characters), NFKC-normalised (fullwidth and other
// compatibility forms become the plain letters), runs of white space collapsed to one space and
// trimmed. Errors (apperr.Invalid, the message is for the reviewer):
//   - the result is empty or longer than MaxName characters;
//   - it holds a character other than letters, combining marks, digits, spaces and . - ' _ @
//     (so a name cannot carry text the pages use around names, such as "(link: …)");
//   - it is, or looks like, one of the names the audit uses for the owner and for automatic
//     decisions (gate.ReservedNames): compared by reservedKey, so "OWNER", "оwner" (Cyrillic о),
//     "0wner", "öwner", "ᴏᴡɴᴇʀ", "owner." and "o w n e r" are all refused and no reviewer can pass
//     as the owner or a rule ("the owner" and "Owner 2" are names of their own: the audit shows
//     every reviewer with their link).
func NormalizeName(raw string) (string, error) {
	s := stripInvisible(strings.ToValidUTF8(raw, "\uFFFD"))
	// Again after NFKC: a compatibility form may decompose to an ignorable code point (U+3164
	// HANGUL FILLER becomes U+1160).
	s = stripInvisible(norm.NFKC.String(s))
	s = strings.Join(strings.Fields(s), " ")
	if n := len([]rune(s)); n == 0 || n > MaxName {
		return "", apperr.Errorf(apperr.Invalid, "Give a name of 1 to %d characters.", MaxName)
	}
	for _, r := range s {
		if !unicode.In(r, unicode.L, unicode.M, unicode.N) && r != ' ' && !strings.ContainsRune(".-'_@", r) {
			return "", apperr.Errorf(apperr.Invalid, "A name may hold letters, digits, spaces and . - ' _ @ only, not %q.", r)
		}
	}
	key := reservedKey(s)
	for _, reserved := range gate.ReservedNames() {
		if key == reservedKey(reserved) {
			return "", apperr.Errorf(apperr.Invalid, "%q is or looks like %q, a name the audit uses for the owner or for automatic decisions; give your own name.", s, reserved)
		}
	}
	return s, nil
}

// reservedKey is what a name is compared by against the reserved names: its gate.PersonKey with only
// letters and digits kept ("owner.", "o w n e r" and "owner_" are "owner") and l taken for i
// ("pol1cy" and "policy" meet: the skeleton already takes 1 and I for l).
func reservedKey(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == 'l':
			return 'i'
		case unicode.IsLetter(r), unicode.IsDigit(r):
			return r
		}
		return -1
	}, gate.PersonKey(s))
}

// stripInvisible removes the code points a name must not hold because they show nothing (or
// reorder what is shown): format characters (Cf), other default-ignorable code points, variation
// selectors, and control characters other than white space (white space is collapsed later).
func stripInvisible(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case unicode.Is(unicode.Cf, r), unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r),
			unicode.Is(unicode.Variation_Selector, r), unicode.IsControl(r) && !unicode.IsSpace(r):
			return -1
		}
		return r
	}, s)
}

// ValidName reports whether name is a reviewer name as NormalizeName leaves it: already
// normalised and acceptable (a name read back from a reviewer's cookie is checked again).
func ValidName(name string) bool {
	n, err := NormalizeName(name)
	return err == nil && n == name
}
