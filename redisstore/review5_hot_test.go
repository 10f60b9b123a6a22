package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// One strict key, a small limit, callers of all three context kinds behind
// a slow link that is sometimes cut: the admitted units must stay within
// Limit, and every admitted reply must be its own: the unit ranges
// [L-Remaining-n, L-Remaining) of admitted decisions never overlap.
func TestReview5HotKeyMixedContexts(t *testing.T) {
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			s := redistest.Start(t)
			p := startProxy(t, s.Addr())
			c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1, PoolSize: 64,
				DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
			defer c.Close()
			const L = 400
			l := mustNew(t, c, engine.Config{Limit: L, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, WithBreaker(0, 0))
			if _, err := l.AllowN(ctx, "hot", 0); err != nil {
				t.Fatal(err)
			}
			p.delay.Store(int64(time.Millisecond))
			type adm struct{ lo, hi int64 }
			var mu sync.Mutex
			var adms []adm
			var admitted, may atomic.Int64
			var wg sync.WaitGroup
			stopCuts := make(chan struct{})
			go func() {
				for {
					select {
					case <-stopCuts:
						return
					case <-time.After(15 * time.Millisecond):
						p.cut.Store(1)
					}
				}
			}()
			for g := range 24 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), uint64(run)))
					for range 80 {
						n := int64(1 + r.IntN(4))
						var cx context.Context = context.Background()
						cancel := func() {}
						switch r.IntN(3) {
						case 1:
							var cf context.CancelFunc
							cx, cf = context.WithCancel(cx)
							tm := time.AfterFunc(time.Duration(r.IntN(3000))*time.Microsecond, cf)
							cancel = func() { tm.Stop(); cf() }
						case 2:
							var cf context.CancelFunc
							cx, cf = context.WithTimeout(cx, time.Duration(200+r.IntN(4000))*time.Microsecond)
							cancel = cf
						}
						d, err := l.AllowN(cx, "hot", n)
						cancel()
						switch {
						case err == nil && d.Allowed:
							admitted.Add(n)
							if d.Limit != L {
								t.Errorf("admitted with Limit %d", d.Limit)
							}
							mu.Lock()
							adms = append(adms, adm{L - d.Remaining - n, L - d.Remaining})
							mu.Unlock()
						case err != nil: // the policy's answer, or the caller's context ended
							if !errors.Is(err, errAbandoned) && err != cx.Err() { // a bare ctx error: asked nothing
								may.Add(n)
							}
						}
					}
				})
			}
			wg.Wait()
			close(stopCuts)
			p.cut.Store(0)
			p.delay.Store(0)
			l.batch.wait()
			time.Sleep(50 * time.Millisecond)
			got := storedUnits(t, c, l, "hot")
			t.Logf("admitted %d units, may-have-counted %d, Redis holds %d, cuts %d", admitted.Load(), may.Load(), got, p.cuts.Load())
			if admitted.Load() > L {
				t.Errorf("admitted %d > Limit %d", admitted.Load(), L)
			}
			if got < admitted.Load() || got > admitted.Load()+may.Load() {
				t.Errorf("Redis holds %d, want in [%d, %d]", got, admitted.Load(), admitted.Load()+may.Load())
			}
			sort.Slice(adms, func(i, j int) bool { return adms[i].lo < adms[j].lo })
			for i := 1; i < len(adms); i++ {
				if adms[i].lo < adms[i-1].hi {
					t.Errorf("admitted replies overlap: %v and %v (a reply reached the wrong caller)", adms[i-1], adms[i])
				}
			}
		})
	}
}
