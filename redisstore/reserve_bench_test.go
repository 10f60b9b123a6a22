package redisstore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
	"github.com/ringlimit/ringlimit/redisstore/redistest"
)

// BenchmarkHeld is what reserving, settling and charging cost over a real
// redis-server on loopback, beside a plain AllowN in the same run: one
// caller, 1,000 keys whose limit (10^6 a minute) admits every request.
// Besides sec/op it reports server-µs/op, Redis's script time (EVALSHA
// and EVAL usec, INFO commandstats) per operation, and trips/op, the
// script calls per operation:
//
//	go test -run '^$' -bench '^BenchmarkHeld$' -benchmem -count 6 ./ | tee held.txt
//	go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da -col /op held.txt
func BenchmarkHeld(b *testing.B) {
	s := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	l, err := New(c, engine.Config{Limit: 1_000_000, Window: time.Minute, SubWindows: 12, Algorithm: engine.SlidingWindowStrict})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
	}
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	reserve := func(key string, n int64) Reservation {
		r, err := l.Reserve(ctx, key, n)
		must(err)
		if r.Units() != n {
			b.Fatalf("Reserve(%q, %d) held %d", key, n, r.Units())
		}
		return r
	}
	for _, op := range []struct {
		name string
		do   func(key string)
	}{
		{"allow", func(key string) {
			d, err := l.AllowN(ctx, key, 1)
			must(err)
			if !d.Allowed {
				b.Fatal(d)
			}
		}},
		{"reserve", func(key string) { reserve(key, 1) }},
		{"reserve+cancel", func(key string) { // in flight
			r := reserve(key, 1)
			_, err := r.Cancel(ctx)
			must(err)
		}},
		{"reserve+settle-less", func(key string) {
			r := reserve(key, 2)
			_, err := r.Settle(ctx, 1)
			must(err)
		}},
		{"reserve+settle-more", func(key string) {
			r := reserve(key, 1)
			_, err := r.Settle(ctx, 2)
			must(err)
		}},
		{"charge", func(key string) {
			_, err := l.ChargeN(ctx, key, 1)
			must(err)
		}},
	} {
		b.Run("op="+op.name, func(b *testing.B) {
			must(c.FlushAll(ctx).Err())
			for _, k := range keys { // every key exists: the common case
				op.do(k)
			}
			must(c.ConfigResetStat(ctx).Err())
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				op.do(keys[i%len(keys)])
			}
			b.StopTimer()
			calls, usec := scriptStats(b, c)
			b.ReportMetric(usec/float64(b.N), "server-µs/op")
			b.ReportMetric(calls/float64(b.N), "trips/op")
		})
	}
}

// scriptStats returns the EVALSHA and EVAL calls and their total µs since
// the last CONFIG RESETSTAT.
func scriptStats(tb testing.TB, c *redis.Client) (calls, usec float64) {
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
			var x float64
			if _, err := fmt.Sscan(v, &x); err == nil {
				switch k {
				case "calls":
					calls += x
				case "usec":
					usec += x
				}
			}
		}
	}
	return calls, usec
}
