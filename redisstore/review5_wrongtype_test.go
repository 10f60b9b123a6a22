package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// "WRONGTYPE does not open it: another client's value at one key fails that
// key alone", also when that key's calls share pipelines with others.
func TestReview5WrongTypeInBatches(t *testing.T) {
	s := redistest.Start(t)
	p := startProxy(t, s.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64})
	defer c.Close()
	var hook hookCounter
	l := mustNew(t, c, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, hook.opt())
	if err := c.Set(ctx, l.Key("bad"), "not a state", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "good0", 0); err != nil {
		t.Fatal(err)
	}
	p.delay.Store(int64(3 * time.Millisecond))
	var goodFail, badOK atomic.Int64
	var sample atomic.Value
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			key := fmt.Sprint("good", i%4)
			if i%4 == 0 {
				key = "bad"
			}
			for j := range 60 {
				var cx context.Context = context.Background()
				cancel := func() {}
				if (i+j)%2 == 0 {
					cx, cancel = context.WithTimeout(cx, time.Second)
				}
				_, err := l.AllowN(cx, key, 1)
				cancel()
				if key == "bad" {
					if err == nil {
						badOK.Add(1)
					}
				} else if err != nil {
					goodFail.Add(1)
					sample.Store(err.Error())
				}
			}
		})
	}
	wg.Wait()
	st := l.Stats()
	t.Logf("good keys failed %d (e.g. %v); bad key answered without error %d; %+v", goodFail.Load(), sample.Load(), badOK.Load(), st)
	if goodFail.Load() > 0 || st.BreakerOpens > 0 {
		if s, _ := sample.Load().(string); strings.Contains(s, "breaker") || st.BreakerOpens > 0 {
			t.Errorf("WRONGTYPE on one key opened the breaker (%d) / failed other keys %d times", st.BreakerOpens, goodFail.Load())
		} else {
			t.Errorf("WRONGTYPE on one key failed other keys %d times", goodFail.Load())
		}
	}
	if badOK.Load() > 0 {
		t.Errorf("the WRONGTYPE key was decided %d times", badOK.Load())
	}
}
