package aap

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"countersign/internal/apperr"
)

// Instances (AAP v1 §3 and §5 "Provision an Instance", §7 "Asynchronous Mode"): an instance is a
// connection of kind api (SPEC §18) with a UUID, a name and, optionally, a verified webhook
// receiver that is told (request.resolved, signed by Standard Webhooks) when one of its requests
// becomes terminal. The provisioner token is the owner's token.

// Instance is an AAP instance as stored. SealedToken and SealedSecret are the instance
// credential and the receiver's signing secret sealed (Sealer): the database alone reveals
// neither. A deleted instance keeps its row (DeletedAt) for replays and repeated deletion.
type Instance struct {
	ID              string // a UUID
	ConnectionID    string
	Name            string
	URL             string // "" without delivery
	RegistrationID  string
	SealedSecret    string
	DeliverySince   *time.Time // events are made for requests decided from then on
	ProvisionKey    string
	ProvisionDigest string
	SealedToken     string
	CreatedAt       time.Time
	DeletedAt       *time.Time
}

// Event is a request.resolved notification in the outbox (OpenAPI RequestResolvedEvent): made
// once per request that became terminal while its instance had delivery, retried until a 2xx,
// seven days after CreatedAt (the decision), or the instance's deletion.
type Event struct {
	ID          string // a UUID, the webhook-id
	InstanceID  string
	RequestID   string
	CreatedAt   time.Time // decision.decided_at
	Attempts    int
	NextAt      time.Time
	DeliveredAt *time.Time
	EndedAt     *time.Time
}

// InstanceStore keeps instances and their events (internal/store).
type InstanceStore interface {
	// CreateAAPInstance stores in; apperr.Conflict when its provision key was used.
	CreateAAPInstance(ctx context.Context, in Instance) error
	AAPInstance(ctx context.Context, id string) (Instance, error)
	AAPInstanceByKey(ctx context.Context, key string) (Instance, error)
	AAPInstanceByConnection(ctx context.Context, connectionID string) (Instance, error)
	// DeleteAAPInstance marks instance id deleted at at (once) and ends its events' delivery.
	DeleteAAPInstance(ctx context.Context, id string, at time.Time) error
	// AAPEventsToMake lists, for instances with delivery, their terminal requests decided since
	// delivery began that have no event yet: request id, instance id, decided_at.
	AAPEventsToMake(ctx context.Context) ([]Event, error)
	// CreateAAPEvent stores e unless its request has one (then nothing changes).
	CreateAAPEvent(ctx context.Context, e Event) error
	// DueAAPEvents lists up to limit events neither delivered nor ended whose NextAt is at or
	// before now, of live instances.
	DueAAPEvents(ctx context.Context, now time.Time, limit int) ([]Event, error)
	// RecordAAPAttempt stores an attempt's outcome: delivered, or the next attempt's time, or
	// ended (next nil and not delivered).
	RecordAAPAttempt(ctx context.Context, id string, at time.Time, delivered bool, next *time.Time) error
	// ClaimAAPEvent moves event id's next attempt from next to until, for one sender; false when
	// another sender claimed it first.
	ClaimAAPEvent(ctx context.Context, id string, next, until time.Time) (bool, error)
	// AAPInstanceUpdate is an update's digest and original response by instance and key;
	// apperr.NotFound.
	AAPInstanceUpdate(ctx context.Context, instanceID, key string) (digest string, response []byte, err error)
	// UpdateAAPInstance stores in's name and delivery with the update's key, digest and
	// response, at once; delivery removed ends its outstanding events. apperr.NotFound for a
	// deleted instance, apperr.Conflict for a used key.
	UpdateAAPInstance(ctx context.Context, in Instance, key, digest string, response []byte, at time.Time) error
}

// Sealer seals and opens secrets with a key of the server's (AES-256-GCM).
type Sealer struct{ aead cipher.AEAD }

// NewSealer derives a Sealer from secret (the owner token: the provisioner token).
func NewSealer(secret string) Sealer {
	k := sha256.Sum256([]byte("countersign aap sealing key\x00" + secret))
	b, _ := aes.NewCipher(k[:])
	g, _ := cipher.NewGCM(b)
	return Sealer{g}
}

// Seal returns plain sealed, as base64 text.
func (s Sealer) Seal(plain string) string {
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.StdEncoding.EncodeToString(s.aead.Seal(nonce, nonce, []byte(plain), nil))
}

// Open is Seal's inverse; an error for text another key sealed.
func (s Sealer) Open(sealed string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(b) < s.aead.NonceSize() {
		return "", errors.New("not sealed")
	}
	p, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], nil)
	return string(p), err
}

// WebhookDeliveryInput is OpenAPI WebhookDeliveryInput.
type WebhookDeliveryInput struct {
	Type           string `json:"type"`
	URL            string `json:"url"`
	RegistrationID string `json:"registration_id"`
	SigningSecret  string `json:"signing_secret"`
}

// ProvisionInstanceRequest is OpenAPI ProvisionInstanceRequest.
type ProvisionInstanceRequest struct {
	InstanceName *string               `json:"instance_name,omitempty"`
	Delivery     *WebhookDeliveryInput `json:"delivery,omitempty"`
}

// WebhookDelivery is OpenAPI WebhookDelivery (never the secret).
type WebhookDelivery struct {
	Type           string `json:"type"`
	URL            string `json:"url"`
	RegistrationID string `json:"registration_id"`
}

// InstanceView is OpenAPI Instance.
type InstanceView struct {
	ID       string           `json:"id"`
	Name     string           `json:"name"`
	Delivery *WebhookDelivery `json:"delivery,omitempty"`
}

// ProvisionInstanceResponse is OpenAPI ProvisionInstanceResponse.
type ProvisionInstanceResponse struct {
	Instance   InstanceView `json:"instance"`
	Credential struct {
		Token string `json:"token"`
	} `json:"credential"`
}

// ViewInstance is in as the protocol shows it.
func ViewInstance(in Instance) InstanceView {
	v := InstanceView{ID: in.ID, Name: in.Name}
	if in.URL != "" {
		v.Delivery = &WebhookDelivery{Type: "webhook", URL: in.URL, RegistrationID: in.RegistrationID}
	}
	return v
}

var secretRE = regexp.MustCompile(`^whsec_[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$`)

// ParseProvision reads a POST /v1/instances body (unknown fields refused) and checks its
// delivery: type webhook (else 400 unsupported_delivery_type), a receiver URL (checkURL: 400
// invalid_webhook_url), a UUID registration_id and a whsec_ secret of 32 bytes. It returns the
// request and the digest of its parsed values.
func ParseProvision(body []byte, insecure bool) (ProvisionInstanceRequest, string, *Error) {
	var p ProvisionInstanceRequest
	if e := DecodeStrict(body, &p); e != nil {
		return p, "", e
	}
	if e := exactFields(body, "instance_name", "delivery"); e != nil {
		return p, "", e
	}
	if p.InstanceName != nil && (*p.InstanceName == "" || len(*p.InstanceName) > 100) {
		return p, "", invalid("instance_name", "instance_name must be 1 to 100 characters.")
	}
	if d := p.Delivery; d != nil {
		var raw struct {
			Delivery json.RawMessage `json:"delivery"`
		}
		_ = json.Unmarshal(body, &raw)
		if e := exactFields(raw.Delivery, "type", "url", "registration_id", "signing_secret"); e != nil {
			e.Param = "delivery"
			return p, "", e
		}
		if d.Type != "webhook" {
			e := Errorf(http.StatusBadRequest, "unsupported_delivery_type", "Only webhook delivery is supported.")
			e.Param = "delivery.type"
			return p, "", e
		}
		if err := checkURL(d.URL, insecure); err != nil {
			e := Errorf(http.StatusBadRequest, "invalid_webhook_url", "The receiver URL is not allowed: %v.", err)
			e.Param = "delivery.url"
			return p, "", e
		}
		if !IsUUID(d.RegistrationID) {
			return p, "", invalid("delivery.registration_id", "registration_id must be a UUID.")
		}
		if !secretRE.MatchString(d.SigningSecret) {
			return p, "", invalid("delivery.signing_secret", "signing_secret must be whsec_ and the base64 of 32 bytes.")
		}
	}
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return p, fmt.Sprintf("%x", sum), nil
}

// checkURL refuses a receiver URL that is not https (http too when insecure: local development
// and tests), has userinfo or a fragment, or names a host that is not public (a literal address
// here; every address a name resolves to is checked again when connecting, publicOnly).
func checkURL(raw string, insecure bool) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "":
		return errors.New("not an absolute URL")
	case u.Scheme != "https" && !(insecure && u.Scheme == "http"):
		return errors.New("not https")
	case u.User != nil || strings.Contains(raw, "@"):
		return errors.New("userinfo is forbidden")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return errors.New("a fragment is forbidden")
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && !insecure && !public(ip) {
		return errors.New("not a public address")
	}
	if !insecure && (u.Hostname() == "localhost" || strings.HasSuffix(u.Hostname(), ".localhost")) {
		return errors.New("not a public address")
	}
	return nil
}

func public(ip net.IP) bool {
	return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() ||
		ip.Equal(net.ParseIP("169.254.169.254")) || (ip.To4() != nil && ip.To4()[0] == 100 && ip.To4()[1]&0xc0 == 64))
}

// ReceiverClient is the HTTP client for receivers: no redirects followed, 10 s per attempt
// (AAP v1 §7), and — unless insecure — connections only to public addresses, checked at connect
// time so a DNS change cannot reach a private one.
func ReceiverClient(insecure bool) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if !insecure {
		d.Control = func(network, address string, _ syscall.RawConn) error {
			host, _, _ := net.SplitHostPort(address)
			if ip := net.ParseIP(host); ip == nil || !public(ip) {
				return fmt.Errorf("receiver address %s is not public", host)
			}
			return nil
		}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// signedPost POSTs body to rawURL signed with secret (Standard Webhooks v1; webhook-id id) and
// returns the status, the Retry-After and up to 64 KiB of the answer.
func signedPost(ctx context.Context, c *http.Client, rawURL, secret, id string, body []byte) (int, string, []byte, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return 0, "", nil, err
	}
	now := time.Now()
	sig, err := wh.Sign(id, now, body)
	if err != nil {
		return 0, "", nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Countersign-AAP/1")
	req.Header.Set(standardwebhooks.HeaderWebhookID, id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	res, err := c.Do(req)
	if err != nil {
		return 0, "", nil, errors.New("the receiver could not be reached")
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return res.StatusCode, res.Header.Get("Retry-After"), b, nil
}

// Verify sends the signed WebhookVerification for instance instanceID to d's URL and requires a
// 200 whose body echoes its fresh challenge (AAP v1 §7 "Receiver Verification"): one attempt,
// 10 s. Errors say why, without the secret.
func Verify(ctx context.Context, c *http.Client, d WebhookDeliveryInput, instanceID string) error {
	challenge := NewUUID()
	id := NewUUID()
	body, _ := json.Marshal(map[string]string{"id": id, "type": "webhook.verification", "registration_id": d.RegistrationID,
		"instance_id": instanceID, "created_at": Timestamp(time.Now()), "challenge": challenge})
	st, _, ans, err := signedPost(ctx, c, d.URL, d.SigningSecret, id, body)
	if err != nil {
		return err
	}
	if st != http.StatusOK {
		return fmt.Errorf("the receiver answered %d", st)
	}
	var got struct {
		Challenge string `json:"challenge"`
	}
	if json.Unmarshal(ans, &got) != nil || got.Challenge != challenge {
		return errors.New("the receiver did not echo the challenge")
	}
	return nil
}

// errOf maps a store error to the protocol (apperr.NotFound → 404).
func errOf(err error) error {
	if apperr.CodeOf(err) == apperr.NotFound {
		return Errorf(http.StatusNotFound, "not_found", "No such instance.")
	}
	return err
}
