package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// A Cluster with one slow master: DEBUG SLEEP 0.2 on it, again and again
// (each silence shorter than the 250 ms budget, 20 ms of answers between),
// while 64 callers (0–3 ms deadlines) flood full keys on every master
// beside 8 spinners, under FailOpen. "A pause of Redis shorter than the
// budget ends before the budget is spent, on any machine" (docs/design.md
// §10), per node: nothing admitted past the limit, on any node; no
// breaker opens; no policy decision.
func TestClusterSlowMasterIsNoOutage(t *testing.T) {
	t.Parallel() // waits mostly on cluster set-up
	for _, hybrid := range []bool{false, true} {
		t.Run(fmt.Sprint("hybrid=", hybrid), func(t *testing.T) {
			t.Parallel()
			nodes := redistest.StartCluster(t, 3)
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes), MaxRetries: -1})
			defer cc.Close()
			opts := []Option{WithFailurePolicy(FailOpen)}
			if hybrid {
				opts = append(opts, WithHybrid(5*time.Millisecond, 2))
			}
			l := mustNew(t, cc, fullKey, opts...)
			slow := nodes[0]
			onSlow, onOthers := keysByNode(t, cc, l, slow.Addr(), 3)
			keys := append(append([]string{}, onSlow...), onOthers...)
			for _, k := range keys {
				if d, err := l.AllowN(ctx, k, fullKey.Limit); err != nil || !d.Allowed {
					t.Fatalf("filling %q: %+v %v", k, d, err)
				}
			}
			direct := client(t, slow)
			stop := make(chan struct{})
			var sleeps, admitted, policy, calls atomic.Int64
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
					if direct.Do(context.Background(), "DEBUG", "SLEEP", "0.2").Err() == nil {
						sleeps.Add(1)
					}
				}
			})
			for range 8 {
				wg.Go(func() {
					x := uint64(1)
					for {
						select {
						case <-stop:
							return
						default:
						}
						for range 1 << 12 {
							x = x*6364136223846793005 + 1442695040888963407
						}
					}
				})
			}
			for i := range 64 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(i), 29))
					for {
						select {
						case <-stop:
							return
						default:
						}
						cx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.Int64N(int64(3*time.Millisecond))))
						d, err := l.AllowN(cx, keys[i%len(keys)], 1)
						cancel()
						calls.Add(1)
						if d.Allowed {
							admitted.Add(1)
						}
						if err != nil && isUnavailable(err) {
							policy.Add(1)
						}
					}
				})
			}
			time.Sleep(2 * time.Second)
			close(stop)
			wg.Wait()
			st := l.Stats()
			t.Logf("%d DEBUG SLEEPs; %d calls, %d admitted, %d policy answers; %+v", sleeps.Load(), calls.Load(), admitted.Load(), policy.Load(), st)
			if sleeps.Load() == 0 {
				t.Fatal("no DEBUG SLEEP ran")
			}
			if admitted.Load() != 0 || st.BreakerOpens != 0 || st.FallbackDecisions != 0 {
				t.Errorf("every node answered within 200 ms, yet: %d admitted past the limit, BreakerOpens %d, FallbackDecisions %d", admitted.Load(), st.BreakerOpens, st.FallbackDecisions)
			}
		})
	}
}

func isUnavailable(err error) bool { return err != nil && errors.Is(err, ErrUnavailable) }
