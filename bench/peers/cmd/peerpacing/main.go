// Command peerpacing releases 30 concurrent Waits on x/time/rate's
// rate.NewLimiter(10, 5), on a TokenBucket engine of 10 per second with a
// Burst of 5, and on the sliding-window mapping Limit 5 per 500 ms, and
// prints when they were released (docs/migrating.md quotes it). It is a
// measurement on the real clock, not a test: run it on an idle machine.
//
//	go run ./bench/peers/cmd/peerpacing
package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/engine"
	"golang.org/x/time/rate"
)

func run(name string, wait func() error) {
	start := time.Now()
	var mu sync.Mutex
	var at []time.Duration
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := wait(); err != nil {
				panic(err)
			}
			mu.Lock()
			at = append(at, time.Since(start))
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	var gaps []string
	for i := 5; i < len(at); i += 5 {
		gaps = append(gaps, fmt.Sprintf("%.0f", float64(at[i]-at[i-1])/1e6))
	}
	fmt.Printf("%-28s first5 by %6.1fms, last %7.1fms, gap 5→6..: %v ms, median gap %.1fms\n", name, float64(at[4])/1e6, float64(at[29])/1e6, gaps, float64(at[17]-at[16])/1e6)
}

func main() {
	ctx := context.Background()
	l := rate.NewLimiter(10, 5)
	run("x/time/rate (10/s, b 5)", func() error { return l.Wait(ctx) })
	tb, _ := engine.New(engine.Config{Algorithm: engine.TokenBucket, Limit: 10, Window: time.Second, Burst: 5})
	run("TokenBucket 10/s Burst 5", func() error { _, err := tb.Wait(ctx, "k", 1); return err })
	sw, _ := engine.New(engine.Config{Limit: 5, Window: 500 * time.Millisecond})
	run("SlidingWindow 5 per 500ms", func() error { _, err := sw.Wait(ctx, "k", 1); return err })
}
