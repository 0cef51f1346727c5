package mcp

import (
	"context"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// HoldProgress sends the client of req a notifications/progress with message every interval
// while a call of req is held (waiting for a person, SPEC §18 Door 2), when the client gave a
// progressToken (MCP 2025-11-25, utilities "Progress"): progress 1, 2, … with no total. It stops
// when ctx ends or stop is called; stop waits for the last notification and may be called more
// than once. The gateway (/mcp) and `countersign mcp-proxy` both hold calls with it.
func HoldProgress(ctx context.Context, req *sdk.CallToolRequest, every time.Duration, message string) (stop func()) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: message})
		}
	})
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}
