package redisstore

import (
	"context"
	"errors"
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

// keysByNode returns n user keys whose slots the master at addr owns, and
// n whose slots other masters own.
func keysByNode(t *testing.T, cc *redis.ClusterClient, l *Limiter, addr string, n int) (on, off []string) {
	t.Helper()
	for i := 0; len(on) < n || len(off) < n; i++ {
		k := fmt.Sprint("key", i)
		m, err := cc.MasterForKey(ctx, l.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == addr {
			if len(on) < n {
				on = append(on, k)
			}
		} else if len(off) < n {
			off = append(off, k)
		}
	}
	return on, off
}

// detectBound is how long TestClusterStoppedNodeDetectedPerNode waits for
// the detection: less than the Cluster's node timeout (5 s), after which
// every node answers CLUSTERDOWN, which the limiter takes for a proof.
const detectBound = 4 * time.Second

// A stopped Cluster master (SIGSTOP) is detected per node, in the plain
// and the hybrid mode: its keys get the failure policy's answers within
// the documented time, and the keys on the other masters, which answer,
// never do. Before, the hybrid mode counted any node's reply as Redis's:
// the confirmation of the stopped node's silence always ended "Redis up",
// and its keys were never served by the policy.
func TestClusterStoppedNodeDetectedPerNode(t *testing.T) {
	t.Parallel() // waits mostly on cluster set-up
	for _, hybrid := range []bool{false, true} {
		t.Run(fmt.Sprint("hybrid=", hybrid), func(t *testing.T) {
			t.Parallel()
			nodes := redistest.StartCluster(t, 3)
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Addrs(nodes), MaxRetries: -1, PoolSize: 64,
				DialTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
			defer cc.Close()
			opts := []Option{WithFailurePolicy(FailClosed)}
			if hybrid {
				opts = append(opts, WithHybrid(5*time.Millisecond, 2))
			}
			l := mustNew(t, cc, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict}, opts...)
			stopped := nodes[0]
			onStopped, onOthers := keysByNode(t, cc, l, stopped.Addr(), 3)
			for _, k := range append(append([]string{}, onStopped...), onOthers...) {
				if _, err := l.AllowN(ctx, k, 1); err != nil {
					t.Fatal(err)
				}
			}
			var stoppedPolicy, othersPolicy atomic.Int64
			var sample atomic.Value
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for i := range 12 {
				k, mine := onOthers[i%3], false
				if i%2 == 0 {
					k, mine = onStopped[i%3], true
				}
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						cx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
						_, err := l.AllowN(cx, k, 1)
						cancel()
						// CLUSTERDOWN is the Cluster's own verdict (after its
						// node timeout, 5 s), which every node then answers.
						if errors.Is(err, ErrUnavailable) && !strings.Contains(err.Error(), "CLUSTERDOWN") {
							if mine {
								stoppedPolicy.Add(1)
							} else {
								othersPolicy.Add(1)
								sample.Store(err.Error())
							}
						}
						time.Sleep(time.Millisecond)
					}
				})
			}
			time.Sleep(200 * time.Millisecond)
			began := time.Now()
			resume := stall(t, stopped)
			pt := startProcessTime()
			for stoppedPolicy.Load() == 0 && time.Since(began) < detectBound {
				time.Sleep(time.Millisecond)
			}
			detected := time.Since(began)
			had := pt.end()
			if stoppedPolicy.Load() > 0 {
				time.Sleep(300 * time.Millisecond) // the other nodes' keys meanwhile
			}
			resume()
			close(stop)
			wg.Wait()
			switch {
			case stoppedPolicy.Load() > 0:
				t.Logf("the stopped node's keys served by the policy %v after SIGSTOP; %+v", detected.Round(time.Millisecond), l.Stats())
			case had >= 2*time.Second:
				t.Errorf("the stopped node not detected in %v, of which this process had %v of its own time: %+v", detectBound, had, l.Stats())
			default:
				t.Logf("not detected in %v, but this process had only %v of its own time: no verdict", detectBound, had)
			}
			if n := othersPolicy.Load(); n != 0 {
				t.Errorf("%d policy answers for keys on masters that answer, e.g. %v", n, sample.Load())
			}
		})
	}
}
