package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// BenchmarkVsRedisRate runs one redis-server and, on it, go-redis/redis_rate
// (GCRA, the baseline) and redisstore side by side (with a context that
// never ends, as redis_rate's calls here; with a cancellable context
// without a deadline, as an HTTP request's; with a 1 s deadline, which takes
// the sender handoff; and the hybrid mode on 9 hot keys), at 1 and 64
// concurrent callers, over 1,000 keys
// whose limit is high enough that nearly every decision admits. Each
// sub-benchmark reports, besides sec/op:
//
//   - decisions/s: b.N over the elapsed time;
//   - script-µs/decision: the server's script time per decision, from INFO
//     commandstats (EVALSHA and EVAL usec over their calls), reset before
//     each sub-benchmark. A pipelined EVALSHA counts as one call.
//
// The three targets are ratios against redis_rate in the same run:
//
//	go test -run '^$' -bench VsRedisRate -count 6 -timeout 30m ./ | tee bench.txt
//	go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da -col /impl bench.txt
func BenchmarkVsRedisRate(b *testing.B) {
	s := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 128})
	defer c.Close()
	const keys = 1000
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%d", i)
	}
	l, err := New(c, engine.Config{Limit: 1_000_000, Window: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var hybridErr atomic.Pointer[error]
	hl, err := New(c, engine.Config{Limit: 1_000_000, Window: time.Second}, WithPrefix("hybrid:"), WithHybrid(5*time.Millisecond, 10_000),
		WithOnError(func(err error) { hybridErr.CompareAndSwap(nil, &err) }))
	if err != nil {
		b.Fatal(err)
	}
	defer hl.Close()
	rr := redis_rate.NewLimiter(c)
	lim := redis_rate.PerSecond(1_000_000)

	impls := []struct {
		name string
		do   func(key string) error
	}{
		{"redis_rate", func(key string) error {
			_, err := rr.Allow(ctx, key, lim)
			return err
		}},
		{"redisstore", func(key string) error {
			d, err := l.AllowN(ctx, key, 1)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("redisstore denied %q: %+v", key, d)
			}
			return err
		}},
		{"redisstore-cancellable", func(key string) error {
			// A caller whose context can be cancelled but has no
			// deadline (an HTTP request's) makes its own round trip.
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			d, err := l.AllowN(cctx, key, 1)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("redisstore denied %q: %+v", key, d)
			}
			return err
		}},
		{"redisstore-deadline", func(key string) error {
			// A caller whose context has a deadline hands its call to a
			// sender goroutine and waits on its own channel, so that it
			// returns by the deadline: the cost of that handoff.
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			d, err := l.AllowN(dctx, key, 1)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("redisstore denied %q: %+v", key, d)
			}
			return err
		}},
		{"redisstore-hybrid-hot9", func(key string) error {
			// The hybrid mode is for hot keys: these calls go to 9 keys
			// ("tenant-1" … "tenant-9"), not 1,000.
			// A flush that misses its deadline (64 spinning callers on 2
			// cores can starve the flusher) puts the limiter briefly in
			// its failure state: counted, not fatal (see the failures
			// metric and the log).
			_, err := hl.AllowN(ctx, key[:len("tenant-")+1], 1)
			if errors.Is(err, ErrUnavailable) {
				err = nil
			}
			return err
		}},
	}
	for _, callers := range []int{1, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("callers=%d/impl=%s", callers, im.name), func(b *testing.B) {
				if err := c.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if callers == 1 {
					for i := 0; b.Loop(); i++ {
						if err := im.do(names[i%keys]); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
					var next atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						i := int(next.Add(7919))
						for pb.Next() {
							i++
							if err := im.do(names[i%keys]); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				el := time.Since(start)
				b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
				if im.name == "redisstore-hybrid-hot9" {
					b.ReportMetric(float64(hl.Stats().FallbackDecisions), "fallbacks")
					if e := hybridErr.Load(); e != nil {
						b.Logf("the hybrid limiter failed (its failure state answered meanwhile): %v", *e)
					}
				}
				calls, usec := scriptStats(b, c)
				if calls > 0 && im.name != "redisstore-hybrid-hot9" {
					b.ReportMetric(usec/float64(b.N), "script-µs/decision")
				}
			})
		}
	}
}

// scriptStats returns the EVALSHA and EVAL calls and their total µs since
// the last CONFIG RESETSTAT.
func scriptStats(tb testing.TB, c *redis.Client) (calls, usec float64) {
	tb.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, kv, _ := strings.Cut(line, ":")
		for _, f := range strings.Split(kv, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += x
			case "usec":
				usec += x
			}
		}
	}
	return calls, usec
}
