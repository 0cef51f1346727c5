package relay

import (
	"context"

	"countersign/internal/agent"
)

// Single is the link of a server alone on its database (a SQLite file): the relay that does
// nothing. Its leases are agent.SingleServer's (always this server's; nothing is orphaned, no
// call is run twice), it relays nothing, hears nothing, and has no key to compare. Its zero value
// is ready: cmd/web uses it where the PostgreSQL store has a Relay, so the wiring reads the same.
type Single struct {
	agent.SingleServer
}

// Compile-time check: Single stands in for the relay on the agent's side.
var _ agent.Replicas = (*Single)(nil)

// Start starts nothing (there is nothing to relay); stop does nothing.
func (*Single) Start(context.Context, Target) (stop func(), err error) { return func() {}, nil }

// CheckKey is nil: no other server's key to differ from.
func (*Single) CheckKey(context.Context, string, string, string) error { return nil }

// Send tells nobody.
func (*Single) Send(string, string) {}

// Subscribe hears nothing.
func (*Single) Subscribe(string, func(key string)) {}
