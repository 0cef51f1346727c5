package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCallContextReadsAsTheCancelContextItStandsFor (issue 35): whatever is done to it and to its
// parent, in any order, a callContext answers Err, context.Cause, Done and Value as the
// context.WithCancelCause of the parent that it is made lazily in place of, ended by the call's
// return (cancel(nil)) — and so do the contexts derived from it.
func TestCallContextReadsAsTheCancelContextItStandsFor(t *testing.T) {
	type key struct{}
	stop := errors.New("stopped by alice")
	// Each step: "done" takes Done, "derive" derives a context with a cancel and an AfterFunc,
	// "parent" cancels the parent with stop, "end" returns from the call.
	for _, steps := range []string{
		"", "done", "derive", "parent", "end",
		"done end", "end done", "derive end", "end derive",
		"parent end", "end parent", "parent done end", "done parent end",
		"end parent done", "end done parent", "parent end done", "done end parent",
		"derive parent end", "end derive parent",
	} {
		t.Run(strings.ReplaceAll(steps, " ", "-"), func(t *testing.T) {
			type side struct {
				parent  context.Context
				cancelP context.CancelCauseFunc
				ctx     context.Context
				end     func()
				derived []context.Context
				after   chan struct{}
			}
			mk := func(lazy bool) *side {
				s := &side{after: make(chan struct{})}
				s.parent, s.cancelP = context.WithCancelCause(context.WithValue(context.Background(), key{}, "v"))
				if lazy {
					c := &callContext{Context: s.parent}
					s.ctx, s.end = c, c.end
				} else {
					ctx, cancel := context.WithCancelCause(s.parent)
					s.ctx, s.end = ctx, func() { cancel(nil) }
				}
				return s
			}
			sides := []*side{mk(false), mk(true)}
			for _, step := range strings.Fields(steps) {
				for _, s := range sides {
					switch step {
					case "done":
						_ = s.ctx.Done()
					case "derive":
						d, cancel := context.WithCancel(s.ctx)
						t.Cleanup(cancel)
						s.derived = append(s.derived, d)
						after := s.after
						context.AfterFunc(s.ctx, func() { close(after) })
					case "parent":
						s.cancelP(stop)
					case "end":
						s.end()
					}
				}
			}
			type view struct {
				err, cause error
				done       bool
				value      any
				derived    []error
			}
			look := func(s *side) view {
				v := view{err: s.ctx.Err(), cause: context.Cause(s.ctx), value: s.ctx.Value(key{})}
				select {
				case <-s.ctx.Done():
					v.done = true
				case <-time.After(10 * time.Millisecond):
				}
				for _, d := range s.derived {
					if !v.done {
						v.derived = append(v.derived, d.Err())
						continue
					}
					// A derived context ends with it, through the made context.
					select {
					case <-d.Done():
					case <-time.After(time.Second):
						t.Fatal("a context derived from the call's did not end with it")
					}
					v.derived = append(v.derived, context.Cause(d))
				}
				return v
			}
			want, got := look(sides[0]), look(sides[1])
			if got.err != want.err || got.cause != want.cause || got.done != want.done || got.value != want.value ||
				len(got.derived) != len(want.derived) {
				t.Fatalf("callContext after %q: err %v, cause %v, done %v, value %v, derived %v; want %v, %v, %v, %v, %v",
					steps, got.err, got.cause, got.done, got.value, got.derived, want.err, want.cause, want.done, want.value, want.derived)
			}
			for i := range got.derived {
				if got.derived[i] != want.derived[i] {
					t.Errorf("derived context %d's cause %v, want %v", i, got.derived[i], want.derived[i])
				}
			}
		})
	}
}

// TestCallContextEndsEveryWaiterUnderConcurrency: goroutines taking Done while the call ends
// (under -race) all see it end.
func TestCallContextEndsEveryWaiterUnderConcurrency(t *testing.T) {
	for range 100 {
		c := &callContext{Context: context.Background()}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				select {
				case <-c.Done():
				case <-time.After(5 * time.Second):
					t.Error("a waiter did not see the call end")
				}
				if c.Err() != context.Canceled {
					t.Errorf("err %v, want context.Canceled", c.Err())
				}
			})
		}
		c.end()
		wg.Wait()
	}
}
