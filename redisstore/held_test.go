package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Calls queued behind the round trips that open the breaker (both of the
// batcher's sender slots hung on a stalled server) are held: their callers
// get the policy's answer as soon as the breaker opens, and they are never
// sent, so Redis counts nothing for them once it resumes. Before this, the
// sender that took the slot sent them into the outage: with go-redis's
// default options each waited another full round-trip timeout.
func TestQueuedCallsHeldWhenBreakerOpens(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s) // ReadTimeout 300 ms, no retries
	var hook hookCounter
	l := mustNew(t, c, engine.Config{Limit: 100, Window: time.Minute}, withManual(), hook.opt())
	if _, err := l.AllowN(ctx, "warm", 1); err != nil { // loads the script
		t.Fatal(err)
	}
	s.Signal(syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			s.Signal(syscall.SIGCONT)
		}
	}()

	// Two callers whose contexts never end make their own round trips,
	// holding both sender slots until the client's ReadTimeout.
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			if d, err := l.AllowN(context.Background(), fmt.Sprint("inline", i), 1); !errors.Is(err, ErrUnavailable) || d.Allowed {
				t.Errorf("inline caller %d: %+v %v", i, d, err)
			}
		})
	}
	for l.batch.rounds.Load() < 3 { // the warm-up's round trip, and these two
		time.Sleep(time.Millisecond)
	}
	// Six callers with a far deadline queue behind them.
	far, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const queuedCallers = 6
	for i := range queuedCallers {
		wg.Go(func() {
			d, err := l.AllowN(far, fmt.Sprint("queued", i), 1)
			if !errors.Is(err, ErrUnavailable) || d.Allowed {
				t.Errorf("queued caller %d: %+v %v", i, d, err)
			}
		})
	}
	wg.Wait()

	st := l.Stats()
	if st.Failures != 2 || hook.n.Load() != 2 || st.BreakerOpens != 1 {
		t.Fatalf("want the two inline round trips to be the only failures, and the breaker open: %+v, hook %d", st, hook.n.Load())
	}
	if st.FallbackDecisions != 2+queuedCallers {
		t.Fatalf("want every caller answered by the policy: %+v", st)
	}
	if r := l.batch.rounds.Load(); r != 3 {
		t.Fatalf("%d round trips, want 3: the queued calls were sent into the outage", r)
	}

	s.Signal(syscall.SIGCONT)
	resumed = true
	for i := range queuedCallers {
		if got := storedUnits(t, c, l, fmt.Sprint("queued", i)); got != 0 {
			t.Fatalf("Redis counted %d units for queued%d, a call that was never sent", got, i)
		}
	}
}
