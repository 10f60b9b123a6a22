package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/redisstore"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// The recipe at high QPS (-hybrid 5ms -max-local 10, -replicas at its
// default): two replicas on one redis-server, two callers each, press a
// free tenant (limit 100) and then a pro one (1000) until both replicas say
// the window is full (r=0). Every 429 carries Retry-After; each tier
// admits its limit, and no more than WithHybrid's bound for R replicas,
//
//	Limit + (R − 1) × max(3 × maxLocal, Limit / replicas) + Σ_{i≠j} X_i,
//
// X_i being the units replica i admitted by exact decisions (its first on
// the tenant, one after the tenant idled), at most the exact decisions its
// Stats count. WithHybrid states that form for every admission while
// flushes are quick (Stats().SlowFlushes 0), which a loaded machine does
// not give (every run here has slow flushes under -race). For the total
// at the end of a run of two replicas, the timing does not enter, in this
// sketch (redisstore's proof at the hybrid type gives the facts): take the
// replica j whose last admission used the later observation s. Redis ran
// none of the other's pulls that the other had confirmed by its own last
// admission after s (that reply would be a later observation), so F5
// counts the other's units unrecorded at s or admitted after it at most
// its allowance (c_i = 0), plus its exact units; j's own check, or an
// exact decision's, leaves at most one allowance more. 2 × max(maxLocal,
// ⌊Limit / (3 × replicas)⌋) is within max(3 × maxLocal, Limit / replicas).
// The sketch assumes that a replica's observation only moves forward,
// which an exact decision's can break (F4: an older pull's reply may
// replace it) only while that pull is in flight. The window (an hour)
// outlasts the test; the SlidingWindow estimate still lets go of Limit ×
// elapsed / Window units meanwhile, added to both sides.
func TestTiersAcrossTwoReplicasHybrid(t *testing.T) {
	const (
		R        = 2
		replicas = redisstore.DefaultReplicas // -replicas's default: WithReplicas(n) wants n ≥ R
		interval = 5 * time.Millisecond
		maxLocal = 10
	)
	s := redistest.Start(t)
	l := limits{Free: 100, Pro: 1000, Window: time.Hour, Hybrid: interval, MaxLocal: maxLocal, Replicas: replicas}
	var servers []*httptest.Server
	var rls []*redisstore.Limiter
	for range R {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		h, rl, err := newHandler(rdb, l)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rl.Close() })
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		servers, rls = append(servers, srv), append(rls, rl)
	}
	for _, c := range []struct {
		tenant string
		limit  int64
	}{{"bob", l.Free}, {"acme", l.Pro}} {
		before := make([]redisstore.Stats, R)
		for i, rl := range rls {
			before[i] = rl.Stats()
		}
		start := time.Now()
		admitted, err := press(servers, c.tenant, 100*c.limit)
		if err != nil {
			t.Fatalf("%s: %v", c.tenant, err)
		}
		decay := (c.limit*int64(time.Since(start)) + int64(l.Window) - 1) / int64(l.Window) // ⌈Limit × elapsed / Window⌉
		var slow, maxExact uint64
		for i, rl := range rls {
			st := rl.Stats()
			if st.FallbackDecisions != before[i].FallbackDecisions || st.LostUnits != before[i].LostUnits {
				t.Fatalf("%s: replica %d met a failure: %+v", c.tenant, i, st)
			}
			slow += st.SlowFlushes - before[i].SlowFlushes
			maxExact = max(maxExact, st.RedisDecisions-before[i].RedisDecisions)
		}
		bound := c.limit + (R-1)*max(3*maxLocal, c.limit/replicas) + (R-1)*int64(maxExact)
		t.Logf("%s: admitted %d (limit %d, bound %d, exact decisions ≤ %d per replica, slow flushes %d)", c.tenant, admitted, c.limit, bound, maxExact, slow)
		if admitted < c.limit-decay {
			t.Errorf("%s: admitted %d, want its tier's limit %d", c.tenant, admitted, c.limit)
		}
		if admitted > bound+decay {
			t.Errorf("%s: admitted %d, above the hybrid bound %d", c.tenant, admitted, bound+decay)
		}
	}
}

// press sends a tenant's requests from two callers per replica until each
// caller has seen its replica refuse with the window full (r=0), and
// returns the requests admitted. Every refusal must carry Retry-After; any
// answer but 200 and 429 is an error, and so is a caller that has sent
// maxCalls requests without seeing the window full.
func press(replicas []*httptest.Server, tenant string, maxCalls int64) (int64, error) {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(replicas))
	for _, srv := range replicas {
		for range 2 {
			wg.Go(func() {
				for range maxCalls {
					full, ok, err := call(srv.URL, tenant)
					if err != nil {
						errs <- err
						return
					}
					if ok {
						admitted.Add(1)
					}
					if full {
						return
					}
				}
				errs <- fmt.Errorf("%d requests to %s, and the window never full", maxCalls, srv.URL)
			})
		}
	}
	wg.Wait()
	close(errs)
	return admitted.Load(), <-errs
}

// call makes one request and says whether it was admitted, and whether it
// was refused with the window full.
func call(url, tenant string) (full, ok bool, err error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return false, false, err
	}
	req.Header.Set("X-Tenant", tenant)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, false, err
	}
	res.Body.Close()
	switch res.StatusCode {
	case http.StatusOK:
		return false, true, nil
	case http.StatusTooManyRequests:
		ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
		if err != nil || ra < 1 {
			return false, false, fmt.Errorf("a 429 with Retry-After %q", res.Header.Get("Retry-After"))
		}
		return strings.Contains(res.Header.Get("RateLimit"), ";r=0;"), false, nil
	}
	return false, false, fmt.Errorf("status %d", res.StatusCode)
}
