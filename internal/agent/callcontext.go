package agent

import (
	"context"
	"sync"
	"sync/atomic"
)

// callContext is a nested call's context when the tool passes in its own (the usual case): it
// ends when the parent's does, and when the call returns (end), so nothing the call left running
// outlives it — a context.WithCancelCause of the parent's, made lazily (issue 35). Until
// something asks for Done, it is the parent's context and a flag, and it costs no allocation and
// no entry among the parent's children: most nested calls never wait on their context, and a
// tool may make thousands of them. The first Done (or context.AfterFunc, or a context derived
// from it with a cancel) makes the real context and answers from it from then on.
//
// Why that is the same context to its users: before end, its Err and context.Cause are the
// parent's (which alone can end it then), and Value finds the parent's values; once made, every
// method is the made context's. After end, Err is what the made context's would have been: the
// parent's error if the parent had already ended, else context.Canceled; a context made after
// end is made ended, with the same error and cause.
//
// The zero value is not ready: set Context. It is kept in the call's invocation, so it must not
// be copied once in use.
type callContext struct {
	context.Context // the parent's

	made atomic.Pointer[madeContext] // set once, under mu

	mu sync.Mutex
	// ended is set by end; endErr and parentDone are written before it and read after it.
	ended      atomic.Bool
	endErr     error
	parentDone bool // the parent had ended when the call did
}

// madeContext is a callContext's real context and its cancel.
type madeContext struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// real returns the made context, making it on first need.
func (c *callContext) real() context.Context {
	if m := c.made.Load(); m != nil {
		return m.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.made.Load(); m != nil {
		return m.ctx
	}
	parent := c.Context
	ended := c.ended.Load()
	if ended && !c.parentDone {
		// Ended by the call's return, not the parent: a parent that ended since must not lend
		// it its error or cause.
		parent = context.WithoutCancel(parent)
	}
	ctx, cancel := context.WithCancelCause(parent)
	if ended {
		cancel(nil)
	}
	c.made.Store(&madeContext{ctx: ctx, cancel: cancel})
	return ctx
}

// Done makes the real context and returns its channel.
func (c *callContext) Done() <-chan struct{} { return c.real().Done() }

// Err is the parent's error before end, the made context's once there is one.
func (c *callContext) Err() error {
	if m := c.made.Load(); m != nil {
		return m.ctx.Err()
	}
	if c.ended.Load() {
		return c.endErr
	}
	return c.Context.Err()
}

// Value is the parent's value before end, the made context's once there is one (context.Cause
// and the cancel contexts derived from this one find the made context so).
func (c *callContext) Value(key any) any {
	if m := c.made.Load(); m != nil {
		return m.ctx.Value(key)
	}
	if c.ended.Load() {
		return c.real().Value(key)
	}
	return c.Context.Value(key)
}

// end ends the context: the call returned.
func (c *callContext) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended.Load() {
		return
	}
	c.endErr = c.Context.Err()
	c.parentDone = c.endErr != nil
	if c.endErr == nil {
		c.endErr = context.Canceled
	}
	c.ended.Store(true)
	if m := c.made.Load(); m != nil {
		m.cancel(nil)
	}
}
