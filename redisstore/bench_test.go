package redisstore

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// The benchmarks run one redis-server and, on it, redisstore and redis_rate
// (GCRA) side by side (and redisstore's hybrid mode, on 9 hot keys), at 1 and 64 concurrent callers, over 1,000 keys whose
// limit is high enough that nearly every decision admits.
//
//	go test -run '^$' -bench . -benchtime 2s ./
func BenchmarkDecisions(b *testing.B) {
	s := startRedis(b)
	c := redis.NewClient(&redis.Options{Addr: s.addr(), PoolSize: 128})
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
	hl, err := New(c, engine.Config{Limit: 1_000_000, Window: time.Second}, WithPrefix("hybrid:"), WithHybrid(5*time.Millisecond, 10_000))
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
		{"redisstore", func(key string) error {
			_, err := l.AllowN(ctx, key, 1)
			if l.failures.Load() != 0 {
				return fmt.Errorf("redisstore failed")
			}
			return err
		}},
		{"redisstore-hybrid-hot9", func(key string) error {
			// The hybrid mode is for hot keys: these calls go to 9 keys
			// ("tenant-1" … "tenant-9"), not 1,000.
			_, err := hl.AllowN(ctx, key[:len("tenant-")+1], 1)
			if hl.failures.Load() != 0 {
				return fmt.Errorf("redisstore hybrid failed")
			}
			return err
		}},
		{"redis_rate", func(key string) error {
			_, err := rr.Allow(ctx, key, lim)
			return err
		}},
	}
	for _, callers := range []int{1, 64} {
		for _, im := range impls {
			b.Run(fmt.Sprintf("callers=%d/impl=%s", callers, im.name), func(b *testing.B) {
				if callers == 1 {
					for i := 0; b.Loop(); i++ {
						if err := im.do(names[i%keys]); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
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
			})
		}
	}
}
