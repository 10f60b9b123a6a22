package redisrate

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore"
)

// BenchmarkTokenBucketVsRedisRate runs go-redis/redis_rate (GCRA in
// floating point, the baseline) and redisstore's token bucket (GCRA in
// exact integers) side by side on one redis-server, with the same rate and
// burst, at 1 and 64 concurrent callers whose contexts never end (as
// redis_rate is called), in two scenarios:
//
//   - admit: 1,000 keys at 1,000,000 per second with a burst of 1,000, so
//     nearly every decision admits (and writes);
//   - deny: one key at 10 per second with a burst of 10, so nearly every
//     decision is refused (and computes the wait).
//
// Each sub-benchmark reports, besides sec/op, decisions/s and
// script-µs/decision (EVALSHA and EVAL usec over their calls, from INFO
// commandstats, reset before each sub-benchmark), and checks that the two
// agree on the scenario (an admit scenario that denies, or the reverse,
// fails). Ratios against redis_rate in the same run:
//
//	cd bench/peers
//	for i in 1 2 3 4 5 6; do go test -run '^$' -bench TokenBucketVsRedisRate -count 1 ./redisrate/; done | tee tb.txt
//	go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da -col /impl tb.txt
func BenchmarkTokenBucketVsRedisRate(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: startRedis(b), PoolSize: 128})
	defer c.Close()
	rr := redis_rate.NewLimiter(c)
	for _, sc := range []struct {
		name        string
		keys        int
		rate, burst int64
		admit       bool
	}{
		{"admit", 1000, 1_000_000, 1000, true},
		{"deny", 1, 10, 10, false},
	} {
		names := make([]string, sc.keys)
		for i := range names {
			names[i] = fmt.Sprintf("tenant-%d", i)
		}
		l, err := redisstore.New(c, engine.Config{Algorithm: engine.TokenBucket, Limit: sc.rate, Burst: sc.burst, Window: time.Second}, redisstore.WithPrefix(sc.name+":"))
		if err != nil {
			b.Fatal(err)
		}
		lim := redis_rate.Limit{Rate: int(sc.rate), Burst: int(sc.burst), Period: time.Second}
		impls := []struct {
			name string
			do   func(key string) (bool, error)
		}{
			{"redis_rate", func(key string) (bool, error) {
				r, err := rr.Allow(ctx, key, lim)
				if err != nil {
					return false, err
				}
				return r.Allowed > 0, nil
			}},
			{"redisstore-tokenbucket", func(key string) (bool, error) {
				d, err := l.AllowN(ctx, key, 1)
				return d.Allowed, err
			}},
		}
		for _, callers := range []int{1, 64} {
			for _, im := range impls {
				b.Run(fmt.Sprintf("scenario=%s/callers=%d/impl=%s", sc.name, callers, im.name), func(b *testing.B) {
					if err := c.ConfigResetStat(ctx).Err(); err != nil {
						b.Fatal(err)
					}
					var agree, disagree atomic.Int64
					do := func(key string) error {
						ok, err := im.do(key)
						if ok == sc.admit {
							agree.Add(1)
						} else {
							disagree.Add(1)
						}
						return err
					}
					start := time.Now()
					if callers == 1 {
						for i := 0; b.Loop(); i++ {
							if err := do(names[i%sc.keys]); err != nil {
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
								if err := do(names[i%sc.keys]); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					el := time.Since(start)
					// The bucket's first units (deny) and the refill of the
					// slow rate are the exceptions; a scenario that is mostly
					// the other path measures the wrong thing.
					if disagree.Load() > agree.Load()/10+int64(sc.burst)+20 {
						b.Fatalf("%s: %d decisions went the scenario's way, %d the other", im.name, agree.Load(), disagree.Load())
					}
					b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
					if calls, usec := scriptStats(b, c); calls > 0 {
						b.ReportMetric(usec/float64(b.N), "script-µs/decision")
					}
				})
			}
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
