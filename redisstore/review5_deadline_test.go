package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// "A decision returns by its caller's context deadline, plus scheduling
// delay, whatever the client's options": deadline callers mixed with
// no-deadline callers behind a slow link (40 ms), then a stall.
func TestReview5DeadlineKeptMixed(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64, ReadTimeout: 2 * time.Second})
	defer c.Close()
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	if _, err := l.AllowN(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(40 * time.Millisecond))
	var worst, phase atomic.Int64
	var what atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if i%3 == 0 {
					cx, cancel := context.WithCancel(context.Background())
					_, _ = l.AllowN(cx, "k", 1)
					cancel()
					time.Sleep(time.Millisecond)
					continue
				}
				dl := time.Duration(1+i%5) * time.Millisecond
				cx, cancel := context.WithTimeout(context.Background(), dl)
				t0 := time.Now()
				_, err := l.AllowN(cx, "k", 1)
				over := int64(time.Since(t0) - dl)
				cancel()
				for {
					o := worst.Load()
					if over <= o || worst.CompareAndSwap(o, over) {
						if over > o {
							what.Store(fmt.Sprintf("phase %d: %v", phase.Load(), err))
						}
						break
					}
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(time.Second)
	phase.Store(1)
	s.Signal(syscall.SIGSTOP)
	time.Sleep(800 * time.Millisecond)
	s.Signal(syscall.SIGCONT)
	phase.Store(2)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("worst overrun past the deadline: %v (%v); %+v", time.Duration(worst.Load()), what.Load(), l.Stats())
	if time.Duration(worst.Load()) > 20*time.Millisecond {
		t.Errorf("a deadline caller returned %v after its deadline", time.Duration(worst.Load()))
	}
}
