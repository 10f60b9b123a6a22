package peers

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The fast-path configuration: 1e11 per hour (about 2.8e7 per second of
// sustained refill for the rate-based peers, and a burst no benchmark can
// use up), so that every request is admitted. The window is an hour, not a
// second, because sethvargo/go-limiter refills only interval/limit tokens
// per tick when limit² exceeds the interval in ns (its issue #29): with
// 1e9 per second it would refuse nearly everything after the first second.
// No peer's window rolls over during a benchmark at this setting.
const (
	fastLimit  = 100_000_000_000
	fastWindow = time.Hour
)

// BenchmarkFast: every request is admitted; this measures each limiter's
// admit path.
func BenchmarkFast(b *testing.B) { runTable(b, false) }

// BenchmarkHalfDenied: each peer gets the limit (per scenario) at which it
// admits about half of the requests the harness sends it; see calibrate.
// The metric allowed/op reports the share it actually admitted.
func BenchmarkHalfDenied(b *testing.B) { runTable(b, true) }

func runTable(b *testing.B, half bool) {
	for _, p := range Peers {
		b.Run("peer="+p.Name, func(b *testing.B) {
			for _, sc := range Scenarios {
				if sc.Keys >= 1_000_000 && testing.Short() {
					continue
				}
				limit, window, note := int64(fastLimit), fastWindow, ""
				if half {
					window = sc.HalfWindow
					limit, note = calibrate(p, sc)
				}
				var lim Limiter       // kept across the rounds of one sub-benchmark
				var lastEnd time.Time // when the previous round stopped
				b.Run("scenario="+sc.Name, func(b *testing.B) {
					b.ReportAllocs()
					keys := KeySet(sc.Keys)
					switch {
					case lim == nil:
						if note != "" {
							b.Log(note)
						}
						lim = p.New(limit, window)
						prefill(lim, keys)
						if half { // reach the steady state: the window is full
							hammer(lim, keys, sc.Workers(), window*3/2)
						}
					case half:
						// Between rounds the limiter refilled a little; use it
						// up again so that a short round starts saturated.
						hammer(lim, keys, sc.Workers(), min(time.Since(lastEnd)*3/2, window))
					}
					b.ResetTimer()
					var allowed int64
					if sc.Parallel {
						allowed = measureParallel(b, lim, keys)
					} else {
						allowed = measureSerial(b, lim, keys)
					}
					b.StopTimer()
					lastEnd = time.Now()
					b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
				})
				if lim != nil {
					lim.Close()
				}
			}
		})
	}
}

func measureSerial(b *testing.B, lim Limiter, keys []string) int64 {
	var allowed int64
	if len(keys) == 1 {
		k := keys[0]
		for range b.N {
			if lim.Allow(k) {
				allowed++
			}
		}
		return allowed
	}
	r := newRNG(seeds.Add(1))
	n := uint32(len(keys))
	for range b.N {
		if lim.Allow(keys[r.intn(n)]) {
			allowed++
		}
	}
	return allowed
}

func measureParallel(b *testing.B, lim Limiter, keys []string) int64 {
	var total atomic.Int64
	if len(keys) == 1 {
		k := keys[0]
		b.RunParallel(func(pb *testing.PB) {
			var allowed int64
			for pb.Next() {
				if lim.Allow(k) {
					allowed++
				}
			}
			total.Add(allowed)
		})
		return total.Load()
	}
	n := uint32(len(keys))
	b.RunParallel(func(pb *testing.PB) {
		r := newRNG(seeds.Add(1))
		var allowed int64
		for pb.Next() {
			if lim.Allow(keys[r.intn(n)]) {
				allowed++
			}
		}
		total.Add(allowed)
	})
	return total.Load()
}

// prefill makes every key known to the limiter before timing starts.
func prefill(lim Limiter, keys []string) {
	for _, k := range keys {
		lim.Allow(k)
	}
}

// hammer drives lim from workers goroutines with uniformly random keys for
// about d, and returns how many requests it sent and how many were
// admitted, and for how long.
func hammer(lim Limiter, keys []string, workers int, d time.Duration) (ops, allowed int64, elapsed time.Duration) {
	var stop atomic.Bool
	var totalOps, totalAllowed atomic.Int64
	var wg sync.WaitGroup
	n := uint32(len(keys))
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func(r rng) {
			defer wg.Done()
			var o, a int64
			for !stop.Load() {
				for range 64 {
					if lim.Allow(keys[r.intn(n)]) {
						a++
					}
				}
				o += 64
			}
			totalOps.Add(o)
			totalAllowed.Add(a)
		}(newRNG(seeds.Add(1)))
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return totalOps.Load(), totalAllowed.Load(), time.Since(start)
}

// calibrate finds, once per peer and scenario, the per-key limit at which
// the peer admits about half of what the harness sends it in the
// scenario's half-window. It measures the peer's request rate under the
// fast-path configuration and starts from half of what one key receives
// per window; then, since a denial may cost more or less than an
// admission (and the machine is noisy), it runs up to four trials, each
// time scaling the limit by 0.5/share or, once two trials bracket one
// half, taking their geometric mean. It keeps the tried limit whose share
// came closest to one half, and returns it with a note that the
// sub-benchmark logs (run.sh copies these "calibrated" lines into
// RESULTS.md).
func calibrate(p Peer, sc Scenario) (int64, string) {
	key := p.Name + "/" + sc.Name
	calMu.Lock()
	defer calMu.Unlock()
	if c, ok := calibrated[key]; ok {
		return c.limit, c.note
	}
	keys := KeySet(sc.Keys)
	w := sc.HalfWindow

	lim := p.New(fastLimit, fastWindow)
	prefill(lim, keys)
	hammer(lim, keys, sc.Workers(), 50*time.Millisecond)
	ops, _, el := hammer(lim, keys, sc.Workers(), 300*time.Millisecond)
	lim.Close()
	rate := float64(ops) / el.Seconds() // requests per second, all keys
	perWindow := rate * w.Seconds() / float64(sc.Keys)
	limit := max(1, int64(math.Round(perWindow/2)))
	note := fmt.Sprintf("calibrated peer=%s scenario=%s window=%v fast-rate=%.3g/s trials:", p.Name, sc.Name, w, rate)

	type trial struct {
		limit int64
		share float64
	}
	var trials []trial
	best := func() trial {
		bt := trials[0]
		for _, t := range trials[1:] {
			if math.Abs(t.share-0.5) < math.Abs(bt.share-0.5) {
				bt = t
			}
		}
		return bt
	}
	for range 4 {
		lim = p.New(limit, w)
		prefill(lim, keys)
		hammer(lim, keys, sc.Workers(), w*3/2)
		ops, allowed, _ := hammer(lim, keys, sc.Workers(), max(2*w, 300*time.Millisecond))
		lim.Close()
		share := float64(allowed) / float64(max(ops, 1))
		trials = append(trials, trial{limit, share})
		note += fmt.Sprintf(" %d→%.2f", limit, share)
		if share >= 0.4 && share <= 0.6 {
			break
		}
		if share < 0.01 { // no limit helps (sethvargo's refill at high limits)
			break
		}
		// The nearest tried limits on either side of one half, if any.
		var lo, hi trial // lo admitted too little, hi too much
		for _, t := range trials {
			if t.share < 0.5 && (lo.limit == 0 || t.limit > lo.limit) {
				lo = t
			}
			if t.share > 0.5 && (hi.limit == 0 || t.limit < hi.limit) {
				hi = t
			}
		}
		next := limit
		if lo.limit != 0 && hi.limit != 0 && lo.limit < hi.limit {
			next = int64(math.Round(math.Sqrt(float64(lo.limit) * float64(hi.limit))))
		} else {
			next = int64(math.Round(float64(limit) * min(max(0.5/share, 0.25), 4)))
		}
		next = max(1, next)
		if next == limit {
			break
		}
		limit = next
	}
	limit = best().limit
	note += fmt.Sprintf(" → limit=%d", limit)
	calibrated[key] = calibration{limit, note}
	return limit, note
}

type calibration struct {
	limit int64
	note  string
}

var (
	calMu      sync.Mutex
	calibrated = map[string]calibration{}
)
