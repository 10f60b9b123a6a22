package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// One Cluster node stalls (SIGSTOP); callers with 20 ms deadlines use keys
// on every node. Promise: "one node down leaves the other nodes' keys to
// Redis" (one breaker per master node). Observed: keys on healthy nodes.
func TestReview5ClusterStallOtherNodes(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr()}, MaxRetries: -1, PoolSize: 64,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	defer cc.Close()
	l := mustNew(t, cc, engine.Config{Limit: 1 << 20, Window: time.Minute, Algorithm: engine.SlidingWindowStrict})
	stalledAddr := nodes[0].Addr()
	var onStalled, onHealthy []string
	for i := 0; len(onStalled) < 4 || len(onHealthy) < 4; i++ {
		k := fmt.Sprint("key", i)
		m, err := cc.MasterForKey(ctx, l.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == stalledAddr {
			if len(onStalled) < 4 {
				onStalled = append(onStalled, k)
			}
		} else if len(onHealthy) < 4 {
			onHealthy = append(onHealthy, k)
		}
	}
	for _, k := range append(append([]string{}, onStalled...), onHealthy...) {
		if _, err := l.AllowN(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	var stalled atomic.Bool
	var healthyReal, healthyPolicy, healthyBreaker atomic.Int64
	var sample atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		k := onStalled[i%4]
		healthy := i >= 4
		if healthy {
			k = onHealthy[i%4]
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
				if healthy && stalled.Load() {
					if err == nil {
						healthyReal.Add(1)
					} else {
						healthyPolicy.Add(1)
						if strings.Contains(err.Error(), "breaker is open") {
							healthyBreaker.Add(1)
						}
						sample.Store(err.Error())
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	nodes[0].Signal(syscall.SIGSTOP)
	time.Sleep(100 * time.Millisecond)
	stalled.Store(true)
	time.Sleep(1500 * time.Millisecond)
	stalled.Store(false)
	close(stop)
	wg.Wait()
	nodes[0].Signal(syscall.SIGCONT)
	t.Logf("healthy-node keys during the stall: %d Redis answers, %d policy answers (%d by an open breaker); e.g. %v; stats %+v",
		healthyReal.Load(), healthyPolicy.Load(), healthyBreaker.Load(), sample.Load(), l.Stats())
	// That the healthy nodes' keys wait behind the stalled node's round
	// trips (both senders held until the client's ReadTimeout) is the
	// documented limit (WithBreaker); opening their breakers is not.
	if healthyBreaker.Load() > 0 || l.Stats().BreakerOpens > 1 {
		t.Errorf("healthy nodes' breakers opened while one other node stalled: %d answers by an open breaker, %d openings", healthyBreaker.Load(), l.Stats().BreakerOpens)
	}
}
