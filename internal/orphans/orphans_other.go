//go:build !linux

package orphans

import (
	"context"

	"countersign/internal/procenv"
)

// Find finds nothing here: only Linux lets a process read the environment of others (/proc).
func Find(call procenv.Call) ([]int, error) { return nil, nil }

// Kill does nothing here (see Find): a call's processes die with their process group when the
// call ends, but nothing marks what outlived a crash as the call's.
func Kill(ctx context.Context, call procenv.Call) ([]int, error) { return nil, nil }
