package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// Callers with mixed deadlines behind a slow network: those whose deadline
// passes get the policy's answer; a call whose caller gave up before it
// was sent is never sent, so Redis holds at most the units of the real
// admissions plus those of calls given up after they were sent.
func TestMixedDeadlines(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 1_000_000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := l.AllowN(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(15 * time.Millisecond))
	var real, abandonedSent, notSent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Go(func() {
			for j := range 6 {
				cctx, cancel := ctx, context.CancelFunc(func() {})
				if (i+j)%2 == 0 {
					cctx, cancel = context.WithTimeout(ctx, time.Duration(1+(i+j)%7)*time.Millisecond)
				}
				d, err := l.AllowN(cctx, "k", 1)
				cancel()
				switch {
				case err == nil && d.Allowed:
					real.Add(1)
				case errors.Is(err, errAbandoned):
					notSent.Add(1)
				case errors.Is(err, errNotAnswered):
					abandonedSent.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					// the deadline passed before the call: nothing asked
				default:
					errs <- fmt.Errorf("caller %d: %+v %v", i, d, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p.delay.Store(0)
	l.batch.wait() // every round trip is back
	got := storedUnits(t, c, l, "k")
	t.Logf("admitted %d, given up before sending %d, after %d; Redis holds %d", real.Load(), notSent.Load(), abandonedSent.Load(), got)
	if got < real.Load() || got > real.Load()+abandonedSent.Load() {
		t.Fatalf("Redis holds %d units: want between %d (admitted) and %d (+ calls given up after they were sent)", got, real.Load(), real.Load()+abandonedSent.Load())
	}
	// Half the callers have no deadline, so some are admitted whatever the
	// machine's speed; whether a deadline passes before or after its call
	// is sent depends on the scheduler (a loaded machine fires the timers
	// late), so the case of a call never sent is pinned by the next test.
	if real.Load() == 0 {
		t.Fatalf("no call admitted: %d given up before sending, %d after", notSent.Load(), abandonedSent.Load())
	}
}

// A call whose deadline passes while it waits behind both senders is never
// sent: its caller gets errAbandoned, and Redis counts nothing for it.
// Both senders are held on a path that answers nothing (blackhole), so the
// call is still queued when its deadline passes, on any machine.
func TestCallGivenUpInQueueIsNeverSent(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, ReadTimeout: time.Minute})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 1000, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithBreaker(0, 0))
	if _, err := l.AllowN(ctx, "k", 0); err != nil { // the script loaded, the pool dialled
		t.Fatal(err)
	}
	heal := p.blackhole()
	defer heal()
	busy := func() (n int) {
		for i := range l.batch.inflight {
			if l.batch.inflight[i].Load() != 0 {
				n++
			}
		}
		return n
	}
	held := make(chan error, maxSenders)
	for i := range maxSenders {
		go func() {
			d, err := l.AllowN(ctx, "k", 1)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("refused: %+v", d)
			}
			held <- err
		}()
		for busy() <= i { // wait until this call's round trip is in flight
			runtime.Gosched()
		}
	}
	dctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if _, err := l.AllowN(dctx, "k", 100); !errors.Is(err, errAbandoned) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call whose deadline passed in the queue: err %v, want errAbandoned wrapping DeadlineExceeded", err)
	}
	heal()
	for range maxSenders {
		if err := <-held; err != nil {
			t.Fatalf("a held call: %v", err)
		}
	}
	l.batch.wait()
	if got := storedUnits(t, c, l, "k"); got != maxSenders {
		t.Fatalf("Redis holds %d units, want %d: the abandoned call's 100 were sent", got, maxSenders)
	}
}
