package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
	c := stallClient(t, s)  // ReadTimeout 300 ms, no retries
	patient := client(t, s) // for the checks after the stall: a resumed server may take its time
	var hook hookCounter
	l := mustNew(t, c, engine.Config{Limit: 100, Window: time.Minute}, withManual(), hook.opt())
	if _, err := l.AllowN(ctx, "warm", 1); err != nil { // loads the script
		t.Fatal(err)
	}
	resume := stall(t, s)

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
	// The two inline round trips, and the confirmation that found the
	// server silent (Stats.Failures).
	if st.Failures != 3 || hook.n.Load() != 3 || st.BreakerOpens != 1 {
		t.Fatalf("want the two inline round trips and the confirmation to be the only failures, and the breaker open: %+v, hook %d", st, hook.n.Load())
	}
	if st.FallbackDecisions != 2+queuedCallers {
		t.Fatalf("want every caller answered by the policy: %+v", st)
	}
	if r := l.batch.rounds.Load(); r != 3 {
		t.Fatalf("%d round trips, want 3: the queued calls were sent into the outage", r)
	}

	resume()
	for i := range queuedCallers {
		if got := storedUnits(t, patient, l, fmt.Sprint("queued", i)); got != 0 {
			t.Fatalf("Redis counted %d units for queued%d, a call that was never sent", got, i)
		}
	}
}

// Held calls never reach Redis: callers of all kinds, each on its own key,
// keep arriving during a stall (ReadTimeout 300 ms); every caller answered
// "breaker is open" or "counted nothing" must find its key empty once the
// server resumes.
func TestHeldCallsNeverSent(t *testing.T) {
	s := redistest.Start(t)
	c := stallClient(t, s)
	patient := client(t, s) // for the checks after the stall: a resumed server may take its time
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := l.AllowN(ctx, "warm", 1); err != nil {
		t.Fatal(err)
	}
	resume := stall(t, s)
	var mu sync.Mutex
	nothing := map[string]string{}
	var all []string
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			for j := range 40 {
				key := fmt.Sprintf("h%d-%d", g, j)
				var cx context.Context = context.Background()
				cancel := func() {}
				switch (g + j) % 3 {
				case 1:
					cx, cancel = context.WithTimeout(cx, time.Minute)
				case 2:
					var cf context.CancelFunc
					cx, cf = context.WithCancel(cx)
					tm := time.AfterFunc(100*time.Millisecond, cf)
					cancel = func() { tm.Stop(); cf() }
				}
				_, err := l.AllowN(cx, key, 1)
				cancel()
				mu.Lock()
				all = append(all, key)
				if err != nil && !errors.Is(err, ErrUnavailable) && !errors.Is(err, context.Canceled) { // the 100 ms cancels: the caller's, not Redis's
					t.Errorf("%s: %v", key, err)
				}
				if err != nil && (strings.Contains(err.Error(), "breaker is open") || strings.Contains(err.Error(), "counted nothing")) {
					nothing[key] = err.Error()
				}
				mu.Unlock()
				time.Sleep(time.Duration(j%5) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	resume()
	l.batch.wait()
	time.Sleep(100 * time.Millisecond)
	bad := 0
	for k, e := range nothing {
		if got := storedUnits(t, patient, l, k); got != 0 {
			bad++
			if bad < 4 {
				t.Errorf("%s answered %q but Redis holds %d", k, e, got)
			}
		}
	}
	t.Logf("%d calls, %d answered held/counted-nothing, %d of those counted; %+v", len(all), len(nothing), bad, l.Stats())
}
