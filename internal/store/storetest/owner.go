package storetest

import (
	"context"
	"testing"
	"time"

	"countersign/internal/apperr"
)

func testOwnerSessionsExpireAndEnd(t *testing.T, h Harness) {
	db := h.open(t)
	ctx := context.Background()
	if err := db.CreateOwnerSession(ctx, "hash-a", t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := db.OwnerSessionExpiry(ctx, "hash-a")
	if err != nil || !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("OwnerSessionExpiry = %v, %v; want %v", got, err, t0.Add(time.Hour))
	}
	if err := db.CreateOwnerSession(ctx, "hash-a", t0, t0.Add(time.Hour)); apperr.CodeOf(err) != apperr.Conflict {
		t.Errorf("a second session with one hash: %v, want conflict", err)
	}
	// A login after the first expired deletes it.
	if err := db.CreateOwnerSession(ctx, "hash-b", t0.Add(2*time.Hour), t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.OwnerSessionExpiry(ctx, "hash-a"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("expired session after a later login: %v, want not found", err)
	}
	if err := db.DeleteOwnerSession(ctx, "hash-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.OwnerSessionExpiry(ctx, "hash-b"); apperr.CodeOf(err) != apperr.NotFound {
		t.Errorf("deleted session: %v, want not found", err)
	}
	if err := db.DeleteOwnerSession(ctx, "hash-b"); err != nil {
		t.Errorf("deleting twice: %v", err)
	}
}
