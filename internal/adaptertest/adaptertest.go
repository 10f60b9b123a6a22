// Package adaptertest holds the fake limiters that httplimit's and
// grpclimit's tests share.
package adaptertest

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/engine"
)

// FailOpenOnCancel is a ContextLimiter whose failure policy admits: it
// answers a call whose context has ended (or ends while it waits, when
// Block is set) with Allowed and an error wrapping the context's error, as
// a fail-open Redis limiter did before it told a caller's cancel from a
// backend failure. It admits a live call with Limit 5, Remaining 4.
type FailOpenOnCancel struct {
	Block   bool
	Entered chan struct{} // when Block is set and Entered not nil: receives once per call, before it waits
}

// AllowN answers as FailOpenOnCancel says.
func (f *FailOpenOnCancel) AllowN(ctx context.Context, _ string, _ int64) (engine.Decision, error) {
	if f.Block {
		if f.Entered != nil {
			f.Entered <- struct{}{}
		}
		<-ctx.Done()
	}
	if err := ctx.Err(); err != nil {
		return engine.Decision{Allowed: true}, fmt.Errorf("redis: %w", err)
	}
	return engine.Decision{Allowed: true, Limit: 5, Remaining: 4}, nil
}

// DoneContext is a context that has ended, and the error it ended with.
type DoneContext struct {
	Name string
	Ctx  context.Context
	Err  error // context.Canceled or context.DeadlineExceeded
}

// DoneContexts returns a cancelled context and one past its deadline.
func DoneContexts() []DoneContext {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
	cancel() // the deadline had passed already: Err stays DeadlineExceeded
	return []DoneContext{{"canceled", canceled, context.Canceled}, {"deadline", expired, context.DeadlineExceeded}}
}
