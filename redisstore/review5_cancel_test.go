package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A stalled server and callers whose contexts have no deadline but are
// cancelled after 50 ms (HTTP requests whose clients give up). Documented:
// the cancellation returns with the round trip (bounded by ReadTimeout,
// 300 ms here), and a timeout of the client's own opens the breaker. A
// queued no-deadline caller returns at its cancellation, "counted nothing".
func TestReview5CancelledNoDeadlineDuringStall(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s) // ReadTimeout 300 ms, no retries
	var hook hookCounter
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, hook.opt())
	if _, err := l.AllowN(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	s.Signal(syscall.SIGSTOP)
	resumed := false
	defer func() {
		if !resumed {
			s.Signal(syscall.SIGCONT)
		}
	}()
	var slowest atomic.Int64
	var notCounted, other atomic.Int64
	var wg sync.WaitGroup
	stallAt := time.Now()
	var firstOpen atomic.Int64
	stop := make(chan struct{})
	for range 6 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				cx, cancel := context.WithCancel(context.Background())
				tm := time.AfterFunc(50*time.Millisecond, cancel)
				t0 := time.Now()
				_, err := l.AllowN(cx, "k", 1)
				el := time.Since(t0)
				tm.Stop()
				cancel()
				for {
					old := slowest.Load()
					if int64(el) <= old || slowest.CompareAndSwap(old, int64(el)) {
						break
					}
				}
				if err != nil && strings.Contains(err.Error(), "breaker is open") {
					firstOpen.CompareAndSwap(0, int64(time.Since(stallAt)))
				}
				if errors.Is(err, errAbandoned) {
					notCounted.Add(1)
				} else {
					other.Add(1)
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	st := l.Stats()
	s.Signal(syscall.SIGCONT)
	resumed = true
	t.Logf("first breaker answer %v after the stall", time.Duration(firstOpen.Load()))
	if fo := time.Duration(firstOpen.Load()); fo == 0 || fo > 450*time.Millisecond {
		t.Errorf("breaker first answered %v after the stall began (ReadTimeout 300 ms): the client's own timeouts of cancelled callers did not open it", fo)
	}
	t.Logf("slowest %v, abandoned %d, other %d, stats %+v, hook %d", time.Duration(slowest.Load()), notCounted.Load(), other.Load(), st, hook.n.Load())
	if time.Duration(slowest.Load()) > 450*time.Millisecond {
		t.Errorf("a cancelled no-deadline caller took %v (ReadTimeout 300 ms)", time.Duration(slowest.Load()))
	}
	if st.BreakerOpens == 0 {
		t.Errorf("1.5 s of stall, %d round trips timed out by the client's own ReadTimeout (Failures %d), breaker never opened", st.Failures, st.Failures)
	}
}
