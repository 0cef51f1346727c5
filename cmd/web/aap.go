package main

import (
	"context"

	"countersign/internal/connections"
)

// aapConnections makes and revokes the api connections AAP instances are (SPEC §18 Door 3).
type aapConnections struct{ s *connections.Service }

func (c aapConnections) Create(ctx context.Context, label string) (string, string, error) {
	conn, token, err := c.s.Create(ctx, label, connections.Kind("api"))
	return conn.ID, token, err
}

func (c aapConnections) Revoke(ctx context.Context, id string) error {
	_, err := c.s.Revoke(ctx, id)
	return err
}
