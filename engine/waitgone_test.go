package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringlimit/ringlimit/engine"
)

// Wait and a caller who has gone: its context is done, or its deadline has
// passed although the context's timer has not fired yet (ctx.Err() still
// nil). The judgement is internal/callergone's, the one redisstore and the
// adapters make.

// movingDeadline is a context whose deadline the test moves, and whose
// timer never fires: Done is nil and Err is nil, as for a real context in
// the moment after its deadline, before its timer has fired.
type movingDeadline struct {
	context.Context
	dl atomic.Int64 // Unix ns
}

func (c *movingDeadline) Deadline() (time.Time, bool) { return time.Unix(0, c.dl.Load()), true }

// A caller whose deadline has passed has gone, even while ctx.Err() is
// still nil: Wait asks nothing and records nothing for it, at its first
// attempt and at every attempt after a sleep, and returns
// context.DeadlineExceeded. Before, Wait checked ctx.Err() alone, and
// admitted (and charged) such a caller.
func TestWaitAfterTheDeadlineRecordsNothing(t *testing.T) {
	clk := engine.NewManualClock(t0)
	e := newEngine(t, engine.Config{Limit: 2, Window: time.Second, Clock: clk, DisableEviction: true})
	ctx := &movingDeadline{Context: context.Background()}
	ctx.dl.Store(time.Now().Add(-time.Millisecond).UnixNano())
	d, err := e.Wait(ctx, "k", 1)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a passed deadline is checked first")
	require.False(t, d.Allowed)
	require.Equal(t, int64(2), e.AllowN("k", 0).Remaining, "nothing recorded")

	require.True(t, e.AllowN("k", 2).Allowed)
	ctx.dl.Store(time.Now().Add(time.Hour).UnixNano())
	ch := goWait(ctx, e, "k", 1)
	untilWaits(t, clk, 1)
	ctx.dl.Store(time.Now().Add(-time.Millisecond).UnixNano()) // passes while the waiter sleeps
	clk.Advance(2 * time.Second)                               // the room is back, and the waiter wakes
	r := recv(t, ch)
	require.ErrorIs(t, r.err, context.DeadlineExceeded, "a deadline passed during the sleep")
	require.False(t, r.d.Allowed)
	require.Equal(t, int64(2), e.AllowN("k", 0).Remaining, "nothing recorded after the sleep")
}
