package main

import (
	"context"
	"log/slog"
	"path/filepath"

	"countersign/internal/orphans"
	"countersign/internal/procenv"
	"countersign/internal/store"
	"countersign/internal/store/pg"
)

// storeIdentity names the store the server records its calls in, for the marker of the
// processes its tools start (tools.Config.StoreID, procenv.Call.Store): "sqlite:" and the
// database file's real path (symlinks resolved, so every name of the file gives the same), or
// the PostgreSQL database's identity (pg.DB.Identity), which every replica of it shares. Errors:
// the path's resolution, the database's.
func storeIdentity(ctx context.Context, db store.Backend, dsn string) (string, error) {
	if p, ok := db.(*pg.DB); ok {
		return p.Identity(ctx)
	}
	abs, err := filepath.Abs(dsn)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	return "sqlite:" + real, nil
}

// killOrphans is agent.Config.KillOrphans for the store storeID (SPEC §8, issue 28): it kills
// what the call left running (orphans.Kill) and logs the pids it killed.
func killOrphans(storeID string, log *slog.Logger) func(ctx context.Context, sessionID, toolCallID string) error {
	return func(ctx context.Context, sessionID, toolCallID string) error {
		killed, err := orphans.Kill(ctx, procenv.Call{Store: storeID, SessionID: sessionID, ToolCallID: toolCallID})
		if len(killed) > 0 {
			log.Info("killed what an interrupted call left running", "session", sessionID, "toolCallId", toolCallID, "pids", killed)
		}
		return err
	}
}
