package connections_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/connections"
)

// memStore is connections.Store in memory, counting TouchConnection calls.
type memStore struct {
	mu      sync.Mutex
	byID    map[string]connections.Connection
	touches int
	lookups int    // ConnectionByTokenHash calls
	during  func() // called in ConnectionByTokenHash after the row is read, unlocked
}

func newMemStore() *memStore { return &memStore{byID: map[string]connections.Connection{}} }

func (m *memStore) CreateConnection(_ context.Context, c connections.Connection) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byID[c.ID] = c
	return nil
}

func (m *memStore) Connection(_ context.Context, id string) (connections.Connection, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.byID[id]
	if !ok {
		return c, apperr.Errorf(apperr.NotFound, "connection not found")
	}
	return c, nil
}

func (m *memStore) ConnectionByTokenHash(_ context.Context, hash string) (connections.Connection, error) {
	m.mu.Lock()
	m.lookups++
	during := m.during
	var found *connections.Connection
	for _, c := range m.byID {
		if c.TokenHash == hash {
			found = &c
		}
	}
	m.mu.Unlock()
	if during != nil {
		during()
	}
	if found == nil {
		return connections.Connection{}, apperr.Errorf(apperr.NotFound, "connection not found")
	}
	return *found, nil
}

func (m *memStore) Connections(context.Context) ([]connections.Connection, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []connections.Connection
	for _, c := range m.byID {
		out = append(out, c)
	}
	return out, nil
}

func (m *memStore) RevokeConnection(_ context.Context, id string, at time.Time) (connections.Connection, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.byID[id]
	if !ok {
		return c, apperr.Errorf(apperr.NotFound, "connection %s not found", id)
	}
	if c.RevokedAt == nil {
		c.RevokedAt = &at
	}
	m.byID[id] = c
	return c, nil
}

func (m *memStore) TouchConnection(_ context.Context, id string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.byID[id]
	c.LastUsedAt = &at
	m.byID[id] = c
	m.touches++
	return nil
}

var t0 = time.Date(2026, 12, 5, 1, 30, 0, 123456789, time.UTC)

// service returns a service over a fresh memStore with a clock the test moves.
func service(t *testing.T) (*connections.Service, *memStore, *time.Time) {
	t.Helper()
	st := newMemStore()
	s := connections.NewService(st)
	now := t0
	s.SetClock(func() time.Time { return now })
	return s, st, &now
}

func TestATokenHasAPrefixAndAtLeast128RandomBitsInURLAndShellSafeCharacters(t *testing.T) {
	shape := regexp.MustCompile(`^cs_agent_[a-z2-7]{32}$`) // 32 base32 characters: 160 bits
	seen := map[string]bool{}
	for range 1000 {
		tok := connections.NewToken()
		if !shape.MatchString(tok) {
			t.Fatalf("token %q does not have the shape %s", tok, shape)
		}
		if strings.ContainsAny(tok, "+/=") {
			t.Fatalf("token %q holds +, / or =", tok)
		}
		if seen[tok] {
			t.Fatalf("token %q made twice", tok)
		}
		seen[tok] = true
	}
}

func TestHashIsHexSHA256OfTheToken(t *testing.T) {
	sum := sha256.Sum256([]byte("cs_agent_abc"))
	if got, want := connections.Hash("cs_agent_abc"), hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("Hash = %s, want %s", got, want)
	}
}

func TestCreateStoresTheHashAndNeverTheToken(t *testing.T) {
	s, st, _ := service(t)
	c, tok, err := s.Create(context.Background(), "  alice's laptop ", connections.ClaudeCode)
	if err != nil {
		t.Fatal(err)
	}
	stored := st.byID[c.ID]
	if stored.TokenHash != connections.Hash(tok) || stored.Label != "alice's laptop" || stored.Kind != connections.ClaudeCode ||
		!stored.CreatedAt.Equal(t0) || stored.LastUsedAt != nil || stored.RevokedAt != nil {
		t.Fatalf("stored %+v", stored)
	}
	if strings.Contains(stored.TokenHash, tok) || stored.ID == tok {
		t.Fatal("the token is stored")
	}
}

func TestCreateRefusesABadLabelOrKind(t *testing.T) {
	s, st, _ := service(t)
	for _, tt := range []struct {
		label string
		kind  connections.Kind
		msg   string
	}{
		{"", connections.Codex, `Give the connection a label (for example "alice's laptop").`},
		{"   ", connections.Codex, `Give the connection a label (for example "alice's laptop").`},
		{strings.Repeat("é", connections.MaxLabel+1), connections.Codex, "The label is too long (at most 200 characters)."},
		{"a\nb", connections.Codex, "The label holds a control character."},
		{"ok", "vim", `Unknown kind "vim": use one of claude-code, codex, gemini, cursor, copilot, mcp, api.`},
		{"ok", "", `Unknown kind "": use one of claude-code, codex, gemini, cursor, copilot, mcp, api.`},
	} {
		_, _, err := s.Create(context.Background(), tt.label, tt.kind)
		if apperr.CodeOf(err) != apperr.Invalid || apperr.MessageOf(err) != tt.msg {
			t.Errorf("Create(%q, %q) = %v, want invalid %q", tt.label, tt.kind, err, tt.msg)
		}
	}
	if len(st.byID) != 0 {
		t.Errorf("refused connections were stored: %v", st.byID)
	}
}

func TestAuthenticateAcceptsOnlyALiveTokenOfTheKindAndSaysWhyNot(t *testing.T) {
	ctx := context.Background()
	s, _, _ := service(t)
	c, tok, err := s.Create(ctx, "laptop", connections.Codex)
	if err != nil {
		t.Fatal(err)
	}
	other, otherTok, _ := s.Create(ctx, "ci", connections.ClaudeCode)
	if got, err := s.Authenticate(ctx, tok, connections.Codex); err != nil || got.ID != c.ID {
		t.Fatalf("Authenticate(live token) = %+v, %v", got, err)
	}
	if _, err := s.Revoke(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, token string
		kind        connections.Kind
		msg         string
	}{
		{"no token", "", connections.Codex, "No connection token: send Authorization: Bearer <token> (COUNTERSIGN_AGENT_TOKEN)."},
		{"not ours", "sk-abcdef", connections.Codex, "Not a connection token (they start with cs_agent_)."},
		{"too long", "cs_agent_" + strings.Repeat("a", 200), connections.Codex, "Not a connection token (they start with cs_agent_)."},
		{"unknown", connections.NewToken(), connections.Codex, "Unknown connection token."},
		{"revoked", otherTok, connections.ClaudeCode, "Connection " + other.ID + " (ci) was revoked."},
		{"wrong kind", tok, connections.ClaudeCode, "Connection " + c.ID + " is for codex, not claude-code."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Authenticate(ctx, tt.token, tt.kind)
			if apperr.CodeOf(err) != apperr.Unauthorized || apperr.MessageOf(err) != tt.msg {
				t.Fatalf("err = %v, want unauthorized %q", err, tt.msg)
			}
			if tt.token != "" && strings.Contains(err.Error(), tt.token) {
				t.Fatalf("the error %q holds the token", err)
			}
		})
	}
}

func TestAuthenticateRecordsAUseAtMostOnceAMinute(t *testing.T) {
	ctx := context.Background()
	s, st, now := service(t)
	c, tok, _ := s.Create(ctx, "laptop", connections.API)
	use := func(at time.Time) connections.Connection {
		t.Helper()
		*now = at
		got, err := s.Authenticate(ctx, tok, connections.API)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := use(t0.Add(time.Second)); got.LastUsedAt == nil || !got.LastUsedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("first use: last use %v", got.LastUsedAt)
	}
	use(t0.Add(10 * time.Second))
	use(t0.Add(60 * time.Second))
	if st.touches != 1 {
		t.Fatalf("%d writes within a minute, want 1", st.touches)
	}
	use(t0.Add(61 * time.Second))
	if st.touches != 2 {
		t.Fatalf("%d writes after a minute, want 2", st.touches)
	}
	if got := st.byID[c.ID].LastUsedAt; got == nil || !got.Equal(t0.Add(61*time.Second)) {
		t.Fatalf("stored last use %v", got)
	}
	// A second service (another replica, a restart) reads the stored last use: no write within
	// the minute either.
	s2 := connections.NewService(st)
	s2.SetClock(func() time.Time { return t0.Add(90 * time.Second) })
	if _, err := s2.Authenticate(ctx, tok, connections.API); err != nil {
		t.Fatal(err)
	}
	if st.touches != 2 {
		t.Fatalf("%d writes after a restart within the minute, want 2", st.touches)
	}
}

func TestRevokeKeepsTheFirstTimeAndUnknownIsNotFound(t *testing.T) {
	ctx := context.Background()
	s, _, now := service(t)
	c, _, _ := s.Create(ctx, "laptop", connections.MCP)
	*now = t0.Add(time.Hour)
	first, err := s.Revoke(ctx, c.ID)
	if err != nil || first.RevokedAt == nil || !first.RevokedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Revoke = %+v, %v", first, err)
	}
	*now = t0.Add(2 * time.Hour)
	again, err := s.Revoke(ctx, c.ID)
	if err != nil || !again.RevokedAt.Equal(*first.RevokedAt) {
		t.Fatalf("Revoke again = %+v, %v; want the first time", again, err)
	}
	if _, err := s.Revoke(ctx, "nope"); apperr.CodeOf(err) != apperr.NotFound {
		t.Fatalf("Revoke(unknown) = %v, want not found", err)
	}
}

func TestKindsAreTheHookKindsAndMCPAndAPI(t *testing.T) {
	var names []string
	for _, k := range connections.Kinds() {
		names = append(names, string(k))
		hk, ok := k.Hook()
		if ok != (k != connections.MCP && k != connections.API) || (ok && string(hk) != string(k)) {
			t.Errorf("%s.Hook() = %q, %v", k, hk, ok)
		}
	}
	if got := strings.Join(names, " "); got != "claude-code codex gemini cursor copilot mcp api" {
		t.Fatalf("Kinds = %s", got)
	}
}

// TestAuthenticateCachesALiveTokenBrieflyAndNeverARevokedOne (issue 35: the token lookup on
// every hook is cached): within CacheTTL a live token is read once; a revocation here is heard at
// once, one on another replica at its Forget or within the TTL; a lookup that a revocation raced
// is not cached; an unknown or revoked token is read every time.
func TestAuthenticateCachesALiveTokenBrieflyAndNeverARevokedOne(t *testing.T) {
	ctx := context.Background()
	s, st, now := service(t)
	c, tok, _ := s.Create(ctx, "laptop", connections.ClaudeCode)
	auth := func() error {
		t.Helper()
		_, err := s.Authenticate(ctx, tok, connections.ClaudeCode)
		return err
	}
	for range 3 {
		if err := auth(); err != nil {
			t.Fatal(err)
		}
	}
	if st.lookups != 1 {
		t.Fatalf("%d lookups for three uses within the TTL, want 1", st.lookups)
	}
	*now = now.Add(connections.CacheTTL)
	if err := auth(); err != nil || st.lookups != 2 {
		t.Fatalf("after the TTL: %v, %d lookups; want read again", err, st.lookups)
	}

	// Another replica revokes it (the same store, another service).
	other := connections.NewService(st)
	other.SetClock(func() time.Time { return *now })
	if _, err := other.Revoke(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := auth(); err != nil {
		t.Fatalf("within the TTL of another replica's revocation: %v (the documented bound)", err)
	}
	s.Forget(c.ID) // its message arrives
	if err := auth(); apperr.CodeOf(err) != apperr.Unauthorized {
		t.Fatalf("after Forget: %v, want unauthorized at once", err)
	}
	n := st.lookups
	_ = auth()
	if st.lookups != n+1 {
		t.Fatalf("a revoked token was served from the cache")
	}

	// Revoked here: at once, with nothing cached, and told (OnRevoke: the other replicas).
	var told []string
	s.OnRevoke(func(id string) { told = append(told, id) })
	c2, tok2, _ := s.Create(ctx, "ci", connections.ClaudeCode)
	if _, err := s.Authenticate(ctx, tok2, connections.ClaudeCode); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Revoke(ctx, c2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, tok2, connections.ClaudeCode); apperr.CodeOf(err) != apperr.Unauthorized {
		t.Fatalf("after Revoke here: %v, want unauthorized at once", err)
	}
	if len(told) != 1 || told[0] != c2.ID {
		t.Fatalf("OnRevoke was told %v, want [%s]", told, c2.ID)
	}

	// Another replica's lost message: the TTL still ends it.
	c3, tok3, _ := s.Create(ctx, "lost", connections.ClaudeCode)
	if _, err := s.Authenticate(ctx, tok3, connections.ClaudeCode); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Revoke(ctx, c3.ID); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(connections.CacheTTL)
	if _, err := s.Authenticate(ctx, tok3, connections.ClaudeCode); apperr.CodeOf(err) != apperr.Unauthorized {
		t.Fatalf("a TTL after another replica's revocation: %v, want unauthorized", err)
	}

	// A lookup during which a revocation is heard is not cached: the next use reads again.
	_, tok4, _ := s.Create(ctx, "race", connections.ClaudeCode)
	st.during = func() { s.Forget("") }
	if _, err := s.Authenticate(ctx, tok4, connections.ClaudeCode); err != nil {
		t.Fatal(err)
	}
	st.during = nil
	n = st.lookups
	if _, err := s.Authenticate(ctx, tok4, connections.ClaudeCode); err != nil || st.lookups != n+1 {
		t.Fatalf("a lookup raced by a revocation was cached (%v, %d lookups after)", err, st.lookups-n)
	}
}
