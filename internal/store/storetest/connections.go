package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/connections"
)

// testConnectionsAreStoredListedRevokedAndTouched pins the connections table (SPEC §18): a
// connection round-trips by id and by token hash, the list is newest first, revoking keeps the
// first time, a use is recorded, and bad rows get the codes the API maps to 400/404/409.
func testConnectionsAreStoredListedRevokedAndTouched(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	conns := []connections.Connection{
		{ID: "c1", Label: "alice's laptop", Kind: connections.ClaudeCode, TokenHash: "h1", CreatedAt: t0},
		{ID: "c2", Label: "ci <runner>", Kind: connections.Codex, TokenHash: "h2", CreatedAt: t0.Add(time.Second)},
		{ID: "c3", Label: "gateway", Kind: connections.MCP, TokenHash: "h3", CreatedAt: t0.Add(time.Second)},
		{ID: "c4", Label: "sdk bot", Kind: connections.API, TokenHash: "h4", CreatedAt: t0.Add(-time.Hour)},
	}
	if list, err := db.Connections(ctx); err != nil || len(list) != 0 {
		t.Fatalf("Connections on an empty store = %v, %v; want none", list, err)
	}
	for _, c := range conns {
		if err := db.CreateConnection(ctx, c); err != nil {
			t.Fatalf("CreateConnection(%s): %v", c.ID, err)
		}
	}
	for _, want := range conns {
		got, err := db.Connection(ctx, want.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "Connection "+want.ID, got, want)
		got, err = db.ConnectionByTokenHash(ctx, want.TokenHash)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "ConnectionByTokenHash "+want.TokenHash, got, want)
	}
	list, err := db.Connections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Connections (newest first; equal times, last stored first)", list,
		[]connections.Connection{conns[2], conns[1], conns[0], conns[3]})

	revoked := t0.Add(time.Hour)
	got, err := db.RevokeConnection(ctx, "c2", revoked)
	if err != nil {
		t.Fatal(err)
	}
	want := conns[1]
	want.RevokedAt = &revoked
	assertEqual(t, "RevokeConnection", got, want)
	if got, err = db.RevokeConnection(ctx, "c2", revoked.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "RevokeConnection again keeps the first time", got, want)
	if got, _ := db.ConnectionByTokenHash(ctx, "h2"); got.RevokedAt == nil || !got.RevokedAt.Equal(revoked) {
		t.Errorf("a revoked connection by its hash: revoked at %v, want %v", got.RevokedAt, revoked)
	}

	used := t0.Add(2 * time.Hour)
	if err := db.TouchConnection(ctx, "c1", used); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.Connection(ctx, "c1"); got.LastUsedAt == nil || !got.LastUsedAt.Equal(used) {
		t.Errorf("touched connection's last use %v, want %v", got.LastUsedAt, used)
	}
	if got, _ := db.Connection(ctx, "c3"); got.LastUsedAt != nil {
		t.Errorf("an untouched connection's last use %v, want none", got.LastUsedAt)
	}

	dupID, dupHash := conns[0], conns[0]
	dupID.TokenHash = "h9"
	dupHash.ID = "c9"
	badKind, noLabel, blankLabel := conns[0], conns[0], conns[0]
	badKind.ID, badKind.TokenHash, badKind.Kind = "c8", "h8", "vim"
	noLabel.ID, noLabel.TokenHash, noLabel.Label = "c7", "h7", ""
	blankLabel.ID, blankLabel.TokenHash, blankLabel.Label = "c6", "h6", "  "
	for _, tt := range []struct {
		name string
		err  error
		code apperr.Code
		msg  string
	}{
		{"unknown id", func() error { _, err := db.Connection(ctx, "nope"); return err }(), apperr.NotFound, "connection not found"},
		{"unknown hash", func() error { _, err := db.ConnectionByTokenHash(ctx, "nope"); return err }(), apperr.NotFound, "connection not found"},
		{"revoke unknown", func() error { _, err := db.RevokeConnection(ctx, "nope", revoked); return err }(), apperr.NotFound, "connection nope not found"},
		{"touch unknown", db.TouchConnection(ctx, "nope", used), apperr.NotFound, "connection nope not found"},
		{"duplicate id", db.CreateConnection(ctx, dupID), apperr.Conflict, "connection already exists"},
		{"duplicate hash", db.CreateConnection(ctx, dupHash), apperr.Conflict, "connection already exists"},
		{"unknown kind", db.CreateConnection(ctx, badKind), apperr.Invalid, `Unknown kind "vim": use one of claude-code, codex, gemini, cursor, copilot, mcp, api.`},
		{"empty label", db.CreateConnection(ctx, noLabel), apperr.Invalid, `Give the connection a label (for example "alice's laptop").`},
		{"blank label", db.CreateConnection(ctx, blankLabel), apperr.Invalid, `Give the connection a label (for example "alice's laptop").`},
	} {
		t.Run(tt.name, func(t *testing.T) { assertErr(t, tt.err, tt.code, tt.msg) })
	}
	if list, _ := db.Connections(ctx); len(list) != len(conns) {
		t.Errorf("after refused rows, %d connections, want %d", len(list), len(conns))
	}
}

// testConnectionsSurviveAReopen: a connection, its revocation and its last use are on disk.
func testConnectionsSurviveAReopen(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.Open(t, clock())
	c := connections.Connection{ID: "c1", Label: "laptop", Kind: connections.Gemini, TokenHash: "h1", CreatedAt: t0}
	if err := db.CreateConnection(ctx, c); err != nil {
		t.Fatal(err)
	}
	used, revoked := t0.Add(time.Minute), t0.Add(time.Hour)
	if err := db.TouchConnection(ctx, "c1", used); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RevokeConnection(ctx, "c1", revoked); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = h.Reopen(t, db, clock())
	t.Cleanup(func() { db.Close() })
	got, err := db.ConnectionByTokenHash(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	c.LastUsedAt, c.RevokedAt = &used, &revoked
	assertEqual(t, "after a reopen", got, c)
}

// testConnectionRevokesRacingKeepOneTime: revocations racing each other (two owners' windows,
// two replicas) all answer the one revocation time that was stored first.
func testConnectionRevokesRacingKeepOneTime(t *testing.T, h Harness) {
	ctx := context.Background()
	db := h.open(t)
	if err := db.CreateConnection(ctx, connections.Connection{ID: "c1", Label: "x", Kind: connections.API, TokenHash: "h1", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var (
		wg   sync.WaitGroup
		got  [n]connections.Connection
		errs [n]error
	)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = db.RevokeConnection(ctx, "c1", t0.Add(time.Duration(i+1)*time.Minute)) })
	}
	wg.Wait()
	stored, err := db.Connection(ctx, "c1")
	if err != nil || stored.RevokedAt == nil {
		t.Fatalf("after the race: %+v, %v", stored, err)
	}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("revoke %d: %v", i, errs[i])
		}
		if !got[i].RevokedAt.Equal(*stored.RevokedAt) {
			// The first revoke to commit answers its own time, which is stored; every later one
			// answers the stored time (COALESCE), never its own.
			t.Errorf("revoke %d answered %v, stored %v", i, got[i].RevokedAt, stored.RevokedAt)
		}
	}
}
